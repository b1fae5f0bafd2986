/* The raw struct stat fields of fds 0-2 (the parts a model decides). */
#include <stdio.h>
#include <sys/stat.h>

int main(void)
{
    for (int fd = 0; fd < 3; fd++) {
        struct stat st;
        if (fstat(fd, &st) != 0) {
            printf("fd %d: closed\n", fd);
            continue;
        }
        printf("fd %d: mode=%06o dev=%#lx ino=%lu blksize=%ld\n", fd, st.st_mode,
               (unsigned long)st.st_dev, (unsigned long)st.st_ino, (long)st.st_blksize);
    }
    return 0;
}
