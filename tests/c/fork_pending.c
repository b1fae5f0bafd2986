/* fork() inside a function under a return probe: parent and child both return
 * through the trampoline with their own return values. */
#include <stdio.h>
#include <unistd.h>
#include <sys/wait.h>

__attribute__((noipa)) long fork_inside(void)
{
    pid_t p = fork();
    return p == 0 ? 100 : 200;
}

int main(void)
{
    long r = fork_inside();
    if (r == 100) {
        printf("child r=%ld\n", r);
        fflush(stdout);
        _exit(5);
    }
    int st = 0;
    wait(&st);
    printf("parent r=%ld child=%d\n", r, WEXITSTATUS(st));
    return 0;
}
