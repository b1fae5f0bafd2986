/* Signals sent while a uprobe single-steps an instruction out of line
 * (uprobe_deny_signal).
 *
 * restore: a SIGUSR1 handler returns through glibc's __restore_rt, then SIGUSR2 is
 *   raised; its handler counts.  A uprobe on __restore_rt's syscall steps rt_sigreturn
 *   out of line: sigreturn restores EFLAGS without TF, the step never ends, and every
 *   later signal is held back - the SIGUSR2 handler never runs.
 * restore-term: the same, then SIGTERM at its default action: fatal signals are not
 *   held back (the step is aborted, the process dies by SIGTERM).
 * restore-sleep: the same, then a 100 ms nanosleep that a SIGALRM (handled) interrupts
 *   after 20 ms: the sleep restarts (restart_syscall) and the handler never runs.
 * kill: kill_self's syscall sends SIGUSR2 to the process; a uprobe on that syscall
 *   steps it out of line, so the signal waits for the step's end (the instruction
 *   after the syscall): the handler reports where the signal interrupted kill_self.
 * term / quit: kill_self sends SIGTERM / SIGQUIT, at the default action. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static volatile int usr1, usr2, alrm;
static volatile long usr2_rip;

/* kill(pid, sig) by hand: mov $62,%eax (5 bytes); syscall at +5; nop at +7; ret */
__attribute__((naked)) long kill_self(long pid, long sig)
{
    __asm__ volatile("movl $62, %eax\n\tsyscall\n\tnop\n\tret");
}

static void on_usr1(int sig) { usr1++; }
static void on_alrm(int sig) { alrm++; }

static void on_usr2(int sig, siginfo_t *si, void *ucv)
{
    ucontext_t *uc = ucv;
    usr2++;
    usr2_rip = uc->uc_mcontext.gregs[REG_RIP];
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "restore";
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_sigaction = on_usr2;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR2, &sa, NULL);
    if (!strncmp(mode, "restore", 7)) {
        raise(SIGUSR1);
        printf("usr1=%d\n", usr1);
        raise(SIGUSR2);
        printf("usr2=%d\n", usr2);
        fflush(stdout);
        if (!strcmp(mode, "restore-term"))
            raise(SIGTERM);
        if (!strcmp(mode, "restore-sleep")) {
            struct sigaction al;
            memset(&al, 0, sizeof al);
            al.sa_handler = on_alrm;
            sigaction(SIGALRM, &al, NULL);
            struct itimerval it = {{0, 0}, {0, 20000}};
            setitimer(ITIMER_REAL, &it, NULL);
            struct timespec ts = {0, 100000000};
            int rc = nanosleep(&ts, NULL);
            printf("alrm=%d sleep=%d\n", alrm, rc);
        }
        return 0;
    }
    int sig = !strcmp(mode, "kill") ? SIGUSR2 : !strcmp(mode, "term") ? SIGTERM : SIGQUIT;
    kill_self(getpid(), sig);
    printf("usr2=%d at kill_self+%ld\n", usr2, usr2 ? usr2_rip - (long)kill_self : -1L);
    return 0;
}
