/* fork, vfork and wait: a probed function runs in parent and children. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>

__attribute__((noipa)) long work(long x)
{
    return x + 1;
}

int main(void)
{
    long r = work(1);
    pid_t pid = fork();
    if (pid == 0) {
        printf("child work=%ld\n", work(10));
        fflush(stdout);
        _exit(7);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    printf("parent saw child exit %d\n", WEXITSTATUS(st));
    pid = vfork();
    if (pid == 0)
        _exit(work(20) == 21 ? 9 : 1);
    waitpid(pid, &st, 0);
    printf("vfork child exit %d, parent work=%ld\n", WEXITSTATUS(st), r + work(0));
    fflush(stdout);
    return 0;
}
