/* sigaltstack (kernel/signal.c do_sigaltstack, x86 get_sigframe): an SA_ONSTACK
 * handler runs on the alternate stack and sigaltstack() there says SS_ONSTACK (and
 * refuses a change: EPERM); a handler without SA_ONSTACK stays on the normal stack;
 * SS_AUTODISARM disables it inside the handler and sigreturn restores it; a stack
 * overflow is caught on it; bad sizes and modes fail with ENOMEM / EINVAL. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SS_AUTODISARM
#define SS_AUTODISARM (1U << 31)
#endif

static char alt[65536];
static volatile int on_alt, flags_in_handler, eperm, hits, probe_eperm = 1;

static int in_alt(void *p) { return (char *)p >= alt && (char *)p < alt + sizeof alt; }

static void handler(int sig)
{
    int local;
    stack_t cur, again = {alt, 0, sizeof alt};
    hits++;
    on_alt = in_alt(&local);
    sigaltstack(0, &cur);
    flags_in_handler = cur.ss_flags;
    eperm = probe_eperm && sigaltstack(&again, 0) == -1 ? errno : 0;
}

static void install(int sig, int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = flags;
    sigaction(sig, &sa, 0);
}

static void on_segv(int sig)
{
    int local;
    printf("overflow caught on alt=%d\n", in_alt(&local));
    fflush(stdout);
    _exit(0);
}

static int __attribute__((noinline)) recurse(volatile char *p)
{
    volatile char buf[1024];
    buf[0] = *p;
    return recurse(buf) + buf[1];
}

int main(int argc, char **argv)
{
    stack_t ss = {alt, 0, sizeof alt}, old;
    sigaltstack(0, &old);
    printf("initial: flags=%d size=%zu\n", old.ss_flags, old.ss_size);
    ss.ss_size = 1000;
    int r = sigaltstack(&ss, 0);
    printf("small: r=%d errno=%d\n", r, errno);
    ss.ss_size = sizeof alt;
    ss.ss_flags = 5;
    r = sigaltstack(&ss, 0);
    printf("bad flags: r=%d errno=%d\n", r, errno);
    ss.ss_flags = 0;
    sigaltstack(&ss, 0);
    sigaltstack(0, &old);
    printf("set: flags=%d size=%zu sp_ok=%d\n", old.ss_flags, old.ss_size, old.ss_sp == alt);

    install(SIGUSR1, SA_ONSTACK);
    raise(SIGUSR1);
    printf("onstack: on_alt=%d flags=%d eperm=%d\n", on_alt, flags_in_handler, eperm);
    install(SIGUSR2, 0);
    raise(SIGUSR2);
    printf("plain: on_alt=%d flags=%d eperm=%d\n", on_alt, flags_in_handler, eperm);

    ss.ss_flags = SS_AUTODISARM;
    sigaltstack(&ss, 0);
    probe_eperm = 0;
    raise(SIGUSR1);
    sigaltstack(0, &old);
    printf("autodisarm: on_alt=%d flags=%d after=%#x\n", on_alt, flags_in_handler, (unsigned)old.ss_flags);

    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, 0);
    sigaltstack(0, &old);
    printf("disabled: flags=%d\n", old.ss_flags);
    if (argc > 1) {
        ss.ss_flags = 0;
        sigaltstack(&ss, 0);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_segv;
        sa.sa_flags = SA_ONSTACK;
        sigaction(SIGSEGV, &sa, 0);
        fflush(stdout);
        char c = 0;
        return recurse(&c);
    }
    return 0;
}
