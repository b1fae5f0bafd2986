/* Opens argv[1] argv[2] times and classifies what each open gave: the expected
 * contents (argv[3]), anything else that was read, or an errno. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int n = atoi(argv[2]), expected = 0, other = 0, eloop = 0, failed = 0;
    char buf[64];
    for (int i = 0; i < n; i++) {
        int fd = open(argv[1], O_RDONLY);
        if (fd < 0) {
            if (errno == ELOOP)
                eloop++;
            else
                failed++;
            continue;
        }
        ssize_t got = read(fd, buf, sizeof buf - 1);
        close(fd);
        buf[got > 0 ? got : 0] = 0;
        if (strcmp(buf, argv[3]) == 0)
            expected++;
        else {
            other++;
            printf("read: %s\n", buf);
        }
    }
    printf("expected=%d other=%d eloop=%d failed=%d\n", expected, other, eloop, failed);
    return 0;
}
