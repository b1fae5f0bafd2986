/* rt_sigtimedwait (kernel/signal.c do_sigtimedwait): a pending signal of the set is
 * taken without running its handler, with its siginfo; none pending: EAGAIN after the
 * timeout; a signal sent later by a child (or the child's SIGCHLD) ends the wait. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile int handled;
static void on_sig(int sig) { handled++; }

static sigset_t block(int sig)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_BLOCK, &set, 0);
    return set;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "pending";
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (!strcmp(what, "pending")) {
        signal(SIGUSR1, on_sig);
        sigset_t set = block(SIGUSR1);
        raise(SIGUSR1);
        struct timespec zero = {0, 0};
        int r = sigtimedwait(&set, &si, &zero);
        printf("r=%d signo=%d code=%d pid_ok=%d handled=%d\n", r, si.si_signo, si.si_code,
               si.si_pid == getpid(), handled);
        r = sigtimedwait(&set, &si, &zero);
        printf("again: r=%d errno=%d\n", r, errno);
    } else if (!strcmp(what, "timeout")) {
        sigset_t set = block(SIGUSR1);
        struct timespec t = {0, 200000000};
        int r = sigtimedwait(&set, &si, &t);
        printf("timeout: r=%d errno=%d\n", r, errno);
        struct timespec bad = {0, -1};
        r = sigtimedwait(&set, &si, &bad);
        printf("bad: r=%d errno=%d\n", r, errno);
    } else if (!strcmp(what, "child")) {
        signal(SIGUSR2, on_sig);
        sigset_t set = block(SIGUSR2);
        pid_t pid = fork();
        if (pid == 0) {
            kill(getppid(), SIGUSR2);
            _exit(0);
        }
        int r = sigwaitinfo(&set, &si);
        printf("r=%d code=%d pid_ok=%d handled=%d\n", r, si.si_code, si.si_pid == pid, handled);
        waitpid(pid, 0, 0);
    } else if (!strcmp(what, "sigchld")) {
        sigset_t set = block(SIGCHLD);
        pid_t pid = fork();
        if (pid == 0)
            _exit(5);
        int r = sigwaitinfo(&set, &si);
        printf("r=%d code=%d status=%d pid_ok=%d\n", r, si.si_code, si.si_status, si.si_pid == pid);
        int st;
        printf("reaped=%d\n", waitpid(pid, &st, 0) == pid && WEXITSTATUS(st) == 5);
    }
    return 0;
}
