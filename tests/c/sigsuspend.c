/* rt_sigsuspend, SIGCHLD and signals to another process (kernel/signal.c):
 *   self    - a blocked pending signal: sigsuspend runs its handler at once, returns -1
 *             EINTR, the handler sees the temporary mask, the old mask is back after;
 *   kill    - a child waits in sigsuspend; the parent's kill() runs the child's handler;
 *   chld    - SIGCHLD with a handler: it runs with si_pid/si_status/si_code of the child;
 *   dflchld - SIGCHLD at its default action is ignored: nothing runs, wait still reaps;
 *   hang    - sigsuspend with nothing to wake it (the emulator must not hang). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int got;
static volatile int usr2_in_handler_mask;
static volatile pid_t chld_pid;
static volatile int chld_status, chld_code;

static void say(const char *s) { write(1, s, strlen(s)); }

static void on_usr1(int sig)
{
    sigset_t cur;
    got++;
    sigprocmask(SIG_BLOCK, 0, &cur);
    usr2_in_handler_mask = sigismember(&cur, SIGUSR2) * 10 + sigismember(&cur, SIGUSR1);
}

static void on_chld(int sig, siginfo_t *si, void *uc)
{
    got++;
    chld_pid = si->si_pid;
    chld_status = si->si_status;
    chld_code = si->si_code;
}

static sigset_t block(int sig)
{
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_BLOCK, &set, &old);
    return old;
}

static int self_test(void)
{
    char buf[128];
    signal(SIGUSR1, on_usr1);
    sigset_t old = block(SIGUSR1), tmp, after;
    raise(SIGUSR1);
    sigemptyset(&tmp);
    sigaddset(&tmp, SIGUSR2);
    int r = sigsuspend(&tmp);
    int e = errno;
    sigprocmask(SIG_BLOCK, 0, &after);
    snprintf(buf, sizeof buf, "r=%d errno=%d got=%d mask_in_handler=%d usr1_blocked_after=%d\n",
             r, e, got, usr2_in_handler_mask, sigismember(&after, SIGUSR1));
    say(buf);
    (void)old;
    return 0;
}

static int kill_test(void)
{
    char buf[128];
    signal(SIGUSR1, on_usr1);
    sigset_t old = block(SIGUSR1);
    pid_t pid = fork();
    if (pid == 0) {
        int r = sigsuspend(&old);
        snprintf(buf, sizeof buf, "child: r=%d errno=%d got=%d\n", r, errno, got);
        say(buf);
        _exit(7);
    }
    kill(pid, SIGUSR1);
    int st;
    pid_t w = waitpid(pid, &st, 0);
    snprintf(buf, sizeof buf, "parent: reaped=%d exit=%d\n", w == pid, WEXITSTATUS(st));
    say(buf);
    return 0;
}

static int chld_test(int with_handler)
{
    char buf[160];
    if (with_handler) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_chld;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGCHLD, &sa, 0);
    }
    sigset_t old = block(SIGCHLD);
    pid_t pid = fork();
    if (pid == 0)
        _exit(3);
    int r = 0;
    if (with_handler) {
        while (!got)
            r = sigsuspend(&old);
    }
    int st;
    pid_t w = waitpid(pid, &st, 0);
    pid_t again = waitpid(-1, &st, WNOHANG);
    snprintf(buf, sizeof buf, "r=%d got=%d pid_ok=%d status=%d code=%d reaped=%d exit=%d again=%d errno=%d\n",
             r, got, chld_pid == pid, chld_status, chld_code, w == pid, WEXITSTATUS(st), again, errno);
    say(buf);
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "self";
    if (!strcmp(what, "self"))
        return self_test();
    if (!strcmp(what, "kill"))
        return kill_test();
    if (!strcmp(what, "chld"))
        return chld_test(1);
    if (!strcmp(what, "dflchld"))
        return chld_test(0);
    if (!strcmp(what, "hang")) {
        sigset_t none;
        sigemptyset(&none);
        sigsuspend(&none);
        return 1;
    }
    return 2;
}
