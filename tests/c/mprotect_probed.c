/* Maps file argv[1] writable (private, so uprobes skips it), then mprotect()s it
 * r-x: all of it (argv[3] "whole") or only the page holding offset argv[2] ("part",
 * which splits the mapping); prints the byte at argv[2] ("cc": an int3 installed). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    long off = strtol(argv[2], NULL, 0), page = off & ~4095L, len = page + 3 * 4096;
    int fd = open(argv[1], O_RDONLY);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE, fd, 0);
    if (fd < 0 || p == MAP_FAILED)
        return 1;
    int whole = strcmp(argv[3], "whole") == 0;
    if (mprotect(whole ? p : p + page, whole ? len : 4096, PROT_READ | PROT_EXEC))
        return 3;
    printf("%02x\n", (unsigned char)p[off]);
    return 0;
}
