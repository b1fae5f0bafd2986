/* sys_uretprobe's SIGILL paths, seen from a SIGILL handler.
 *   trampoline: jump into the [uprobes] trampoline with no return instance pending
 *               (the area exists: f has a return probe and returned once);
 *   direct:     syscall 335 from ordinary code.
 * Addresses are printed relative to the [uprobes] page, so the line does not depend
 * on the layout. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static unsigned long base;

__attribute__((noinline)) int f(int x) { asm volatile(""); return x + 1; }

static long rel(long v) { return v - (long)base; }

static void on_sigill(int sig, siginfo_t *si, void *ucv) {
    greg_t *g = ((ucontext_t *)ucv)->uc_mcontext.gregs;
    unsigned long *sp = (unsigned long *)g[REG_RSP];
    if (base)
        printf("sig %d rip=base%+ld rax=%#llx rcx=base%+ld stack=[%#lx %#lx base%+ld]\n", sig, rel(g[REG_RIP]),
               (unsigned long long)g[REG_RAX], rel(g[REG_RCX]), sp[0], sp[1], rel(sp[2]));
    else
        printf("sig %d code %d rax=%lld\n", sig, si->si_code, (long long)g[REG_RAX]);
    fflush(stdout);
    _exit(0);
}

int main(int argc, char **argv) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigill;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGILL, &sa, 0);
    if (argc > 1 && !strcmp(argv[1], "direct")) {
        asm volatile("mov $335, %%eax; syscall" ::: "rax", "rcx", "r11", "memory");
        printf("syscall 335 returned\n");
        return 1;
    }
    if (f(1) != 2)
        return 1;
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    while (maps && fgets(line, sizeof line, maps))
        if (strstr(line, "[uprobes]"))
            base = strtoul(line, 0, 16);
    if (!base) {
        printf("no [uprobes] mapping\n");
        return 1;
    }
    asm volatile("mov $0x1111, %%eax; mov $0x2222, %%ecx; mov $0x3333, %%r11d; jmp *%0"
                 :: "r"(base) : "rax", "rcx", "r11", "memory");
    return 1;
}
