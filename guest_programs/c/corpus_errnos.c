/* The uprobes syscalls from ordinary code: 336 returns an errno (no signal);
 * 335 kills the caller with SIGILL. argv[1] = "uprobe" or "uretprobe". */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "uprobe";
    long nr = strcmp(which, "uretprobe") == 0 ? 335 : 336;
    errno = 0;
    long r = syscall(nr);
    printf("%s: ret=%ld errno=%d\n", which, r, errno);
    return 0;
}
