/* A descriptor shared across fork: the child reads from it and closes it; the parent
 * then reads on from the shared offset. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    char buf[8] = {0};
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0)
        return 2;
    pid_t pid = fork();
    if (pid == 0) {
        ssize_t n = read(fd, buf, 4);
        int c = close(fd);
        printf("child: read %zd %s close=%d\n", n, buf, c);
        return 0;
    }
    int status;
    waitpid(pid, &status, 0);
    ssize_t n = read(fd, buf, 4);
    int c1 = close(fd);
    int c2 = close(fd);
    printf("parent: read %zd %s close=%d close again=%d\n", n, buf, c1, c2);
    return 0;
}
