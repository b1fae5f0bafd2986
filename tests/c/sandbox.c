/* Tries to read a file by path; prints the errno or the first line. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY);
        if (fd < 0) {
            printf("%s: errno=%d\n", argv[i], errno);
            continue;
        }
        char buf[64] = {0};
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        printf("%s: read %zd: %s\n", argv[i], n, buf);
    }
    return 0;
}
