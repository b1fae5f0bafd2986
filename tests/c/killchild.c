/* kill() between processes: the parent kills a child that spins. */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/wait.h>

int main(void)
{
    pid_t pid = fork();
    if (pid == 0)
        for (;;)
            sched_yield();
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    printf("child %s %d\n", WIFSIGNALED(st) ? "killed by" : "exited", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    return kill(pid, 0) == -1 ? 0 : 1;
}
