/* Maps the first page of file argv[1] (r-x, private), grows the mapping in place with
 * mremap to cover argv[2] (a file offset past that page), and prints the byte there:
 * "cc" when a uprobe's int3 was installed in the grown part. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    long off = strtol(argv[2], NULL, 0), len = (off / 4096 + 1) * 4096;
    int fd = open(argv[1], O_RDONLY);
    char *area = mmap(NULL, len + 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fd < 0 || area == MAP_FAILED)
        return 1;
    munmap(area, len + 4096);
    char *p = mmap(area, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, 0);
    char *q = mremap(p, 4096, len, 0);
    if (p == MAP_FAILED || q != p)
        return 3;
    printf("%02x\n", (unsigned char)q[off]);
    return 0;
}
