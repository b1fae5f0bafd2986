/* /proc/self/maps as a file: read, lseek, pread, write.  With an argument: only read
 * it all and say how much there was. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char all[1 << 21];

#define SHOW(what, expr) do { errno = 0; long r_ = (long)(expr); \
    printf("%s = %ld errno=%d\n", what, r_, r_ < 0 ? errno : 0); } while (0)

int main(int argc, char **argv)
{
    int fd = open("/proc/self/maps", O_RDONLY);
    long n = 0, got;
    while ((got = read(fd, all + n, sizeof all - n)) > 0)
        n += got;
    long lines = 0;
    for (long i = 0; i < n; i++)
        lines += all[i] == '\n';
    if (argc > 1) {                    /* "size": how much was read */
        printf("bytes=%ld lines=%ld\n", n, lines);
        return 0;
    }
    char b[16] = {0};
    SHOW("write", write(fd, "x", 1));
    SHOW("lseek set 10", lseek(fd, 10, SEEK_SET));
    SHOW("read 5", read(fd, b, 5));
    printf("read matches: %d\n", memcmp(b, all + 10, 5) == 0);
    SHOW("lseek cur +4", lseek(fd, 4, SEEK_CUR));
    SHOW("lseek end", lseek(fd, 0, SEEK_END));
    SHOW("lseek set -1", lseek(fd, -1, SEEK_SET));
    SHOW("pread 8 at 3", pread(fd, b, 8, 3));
    printf("pread matches: %d\n", memcmp(b, all + 3, 8) == 0);
    SHOW("pread at -1", pread(fd, b, 8, -1));
    SHOW("pread at end", pread(fd, b, 8, n));
    SHOW("close", close(fd));
    SHOW("close again", close(fd));
    SHOW("read closed", read(fd, b, 1));
    return 0;
}
