/* waitid (kernel/exit.c): WNOHANG before the child exits zeroes the siginfo and
 * returns 0; WNOWAIT peeks without reaping; WEXITED reaps with CLD_EXITED/CLD_KILLED,
 * pid and status; then ECHILD; options without WEXITED... are EINVAL. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    int p[2];
    siginfo_t si;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, 0);
    pid_t a = fork();
    if (a == 0) {               /* waits for the parent's go */
        int sig;
        sigwait(&set, &sig);
        _exit(4);
    }
    memset(&si, 0xff, sizeof si);
    int r = waitid(P_PID, a, &si, WEXITED | WNOHANG);
    printf("nohang: r=%d signo=%d pid=%d\n", r, si.si_signo, si.si_pid);
    kill(a, SIGUSR1);
    r = waitid(P_ALL, 0, &si, WEXITED | WNOWAIT);
    printf("nowait: r=%d code=%d status=%d pid_ok=%d\n", r, si.si_code, si.si_status, si.si_pid == a);
    r = waitid(P_PID, a, &si, WEXITED);
    printf("reaped: r=%d code=%d status=%d pid_ok=%d\n", r, si.si_code, si.si_status, si.si_pid == a);
    pid_t b = fork();
    if (b == 0) {
        kill(getpid(), SIGTERM);
        _exit(0);
    }
    r = waitid(P_ALL, 0, &si, WEXITED);
    printf("killed: r=%d code=%d status=%d pid_ok=%d\n", r, si.si_code, si.si_status, si.si_pid == b);
    r = waitid(P_ALL, 0, &si, WEXITED);
    printf("none: r=%d errno=%d\n", r, errno);
    r = waitid(P_ALL, 0, &si, WNOHANG);
    printf("noflags: r=%d errno=%d\n", r, errno);
    (void)p;
    return 0;
}
