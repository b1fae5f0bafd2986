/* What a program learns about its stdio: fstat's type and st_rdev, isatty, the
 * terminal's window size.  One line per descriptor 0-2. */
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind(mode_t m)
{
    return S_ISFIFO(m) ? "fifo" : S_ISREG(m) ? "reg" : S_ISCHR(m) ? "chr" : S_ISDIR(m) ? "dir" : "other";
}

int main(void)
{
    char line[3][160];
    for (int fd = 0; fd < 3; fd++) {
        struct stat st;
        struct winsize ws = {0};
        if (fstat(fd, &st) != 0) {
            snprintf(line[fd], sizeof line[fd], "fd %d: closed\n", fd);
            continue;
        }
        int tty = isatty(fd);
        int wsok = ioctl(fd, TIOCGWINSZ, &ws) == 0;
        snprintf(line[fd], sizeof line[fd], "fd %d: %s rdev=%#lx tty=%d winsize=%s%dx%d\n", fd,
                 kind(st.st_mode), (unsigned long)st.st_rdev, tty, wsok ? "" : "none:", ws.ws_row, ws.ws_col);
    }
    for (int fd = 0; fd < 3; fd++)
        fputs(line[fd], stdout);
    return 0;
}
