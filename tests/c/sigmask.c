/* Blocked signals pend until unblocked (kernel/signal.c): raise() of a blocked signal
 * does not run the handler; rt_sigpending shows it; unblocking delivers a standard
 * signal once however often it was sent, every instance of a real-time one, the
 * task's own before the process's, the lowest number first (so its frame is the
 * outer one and the higher number's handler runs first). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char order[64];
static volatile int n_order;

static void on_sig(int sig)
{
    order[n_order++] = sig < SIGRTMIN ? 'a' + sig : 'R';
}

static void say(const char *what)
{
    order[n_order] = 0;
    printf("%s: handled=[%s]\n", what, order);
    n_order = 0;
}

static void pending(const char *what)
{
    sigset_t p;
    sigpending(&p);
    printf("%s: pending usr1=%d usr2=%d rt=%d\n", what, sigismember(&p, SIGUSR1),
           sigismember(&p, SIGUSR2), sigismember(&p, SIGRTMIN));
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig;
    sigaction(SIGUSR1, &sa, 0);
    sigaction(SIGUSR2, &sa, 0);
    sigaction(SIGRTMIN, &sa, 0);

    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, &old);
    raise(SIGUSR1);
    raise(SIGUSR1);
    say("raised twice while blocked");
    pending("blocked");
    sigprocmask(SIG_SETMASK, &old, 0);
    say("unblocked");
    pending("after");

    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN);
    sigprocmask(SIG_BLOCK, &set, &old);
    raise(SIGRTMIN);
    raise(SIGRTMIN);
    raise(SIGRTMIN);
    pending("rt blocked");
    sigprocmask(SIG_SETMASK, &old, 0);
    say("rt unblocked");

    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    sigprocmask(SIG_BLOCK, &set, &old);
    kill(getpid(), SIGUSR2);
    raise(SIGUSR1);
    pending("two blocked");
    sigprocmask(SIG_SETMASK, &old, 0);
    say("both unblocked");

    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    sigprocmask(SIG_BLOCK, &set, &old);
    kill(getpid(), SIGUSR2);
    signal(SIGUSR2, SIG_IGN);
    pending("ignored while pending");
    sa.sa_handler = on_sig;
    sigaction(SIGUSR2, &sa, 0);
    sigprocmask(SIG_SETMASK, &old, 0);
    say("unblocked after ignore");
    return 0;
}
