/* Guest signal handlers: a SIGSEGV handler that makes the page writable and returns
 * (the faulting store runs again), raise() with a handler, SIGFPE + siglongjmp,
 * a raw int3 caught as SIGTRAP. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char *page;
static volatile int segv_count, usr1_count, trap_count;
static sigjmp_buf env;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    segv_count++;
    if ((char *)si->si_addr == page)
        mprotect(page, 4096, PROT_READ | PROT_WRITE);
}

static void on_usr1(int sig) { usr1_count++; }
static void on_fpe(int sig) { siglongjmp(env, 1); }
static void on_trap(int sig) { trap_count++; }

__attribute__((noipa)) void store(char *p, int v)
{
    *(volatile int *)p = v;
}

__attribute__((noipa)) int divide(int a, int b)
{
    return a / b;
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    signal(SIGUSR1, on_usr1);
    signal(SIGFPE, on_fpe);
    signal(SIGTRAP, on_trap);

    page = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    store(page, 42);
    raise(SIGUSR1);
    raise(SIGUSR1);
    int r = -1;
    if (sigsetjmp(env, 1) == 0)
        r = divide(1, 0);
    __asm__ volatile("int3");
    printf("value=%d segv=%d usr1=%d fpe_r=%d trap=%d\n", *(int *)page, segv_count, usr1_count, r,
           trap_count);
    return 0;
}
