/* Page faults as a program sees them: every case prints what it observed, the same
 * natively and under the model.  Usage: paging CASE */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

static sigjmp_buf back;
static volatile uintptr_t fault_addr;
static volatile int fault_code, fault_trapno;
static volatile long fault_err;
static volatile uintptr_t fault_cr2;

static void on_segv(int sig, siginfo_t *si, void *ctx)
{
    ucontext_t *uc = ctx;
    (void)sig;
    fault_addr = (uintptr_t)si->si_addr;
    fault_code = si->si_code;
    fault_trapno = (int)uc->uc_mcontext.gregs[REG_TRAPNO];
    fault_err = uc->uc_mcontext.gregs[REG_ERR];
    fault_cr2 = (uintptr_t)uc->uc_mcontext.gregs[REG_CR2];
    siglongjmp(back, 1);
}

static char altstack[1 << 16];

static void handle_segv(void)
{
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack};
    struct sigaction sa;
    sigaltstack(&ss, NULL);
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
}

static void report(const char *what, char *page)
{
    printf("%s: si_code=%d at_page_offset=%ld trapno=%d err=%ld cr2_ok=%d\n", what, fault_code,
           (long)(fault_addr - (uintptr_t)page), fault_trapno, fault_err, fault_cr2 == fault_addr);
}

static char *map(int prot)
{
    char *p = mmap(NULL, 4096, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    return p;
}

static int depth(int n)
{
    volatile char pad[4096];
    pad[0] = (char)n;
    return n ? depth(n - 1) + pad[0] - (char)n : 0;
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    handle_segv();
    if (!strcmp(c, "write-readonly")) {
        char *p = map(PROT_READ);
        if (!sigsetjmp(back, 1))
            p[8] = 1;
        report("write-readonly", p);
    } else if (!strcmp(c, "read-unmapped")) {
        char *p = map(PROT_READ);
        munmap(p, 4096);
        if (!sigsetjmp(back, 1))
            printf("%d\n", *(volatile char *)(p + 16));
        report("read-unmapped", p);
    } else if (!strcmp(c, "read-protnone")) {
        char *p = map(PROT_READ | PROT_WRITE);
        p[0] = 42;
        mprotect(p, 4096, PROT_NONE);
        if (!sigsetjmp(back, 1))
            printf("%d\n", *(volatile char *)(p + 24));
        report("read-protnone", p);
        mprotect(p, 4096, PROT_READ);
        printf("kept=%d\n", p[0]);
    } else if (!strcmp(c, "exec-data")) {
        char *p = map(PROT_READ | PROT_WRITE);
        p[0] = (char)0xc3;  /* ret */
        if (!sigsetjmp(back, 1))
            ((void (*)(void))p)();
        report("exec-data", p);
    } else if (!strcmp(c, "write-text")) {
        char *p = (char *)(uintptr_t)&main;
        if (!sigsetjmp(back, 1))
            *(volatile char *)p = 0;
        report("write-text", p);
    } else if (!strcmp(c, "noncanonical")) {
        if (!sigsetjmp(back, 1))
            printf("%d\n", *(volatile char *)0x8000000000000010UL);
        printf("noncanonical: si_code=%d si_addr=%#lx trapno=%d\n", fault_code, (long)fault_addr,
               fault_trapno);
    } else if (!strcmp(c, "int-gate")) {
        if (!sigsetjmp(back, 1))
            __asm__ volatile("int $0x81");
        printf("int-gate: si_code=%d si_addr=%#lx trapno=%d\n", fault_code, (long)fault_addr, fault_trapno);
    } else if (!strcmp(c, "cow")) {
        char *p = map(PROT_READ | PROT_WRITE);
        int status;
        p[0] = 'P';
        pid_t pid = fork();
        if (pid == 0) {
            p[0] = 'C';
            printf("child sees %c\n", p[0]);
            fflush(stdout);
            _exit(0);
        }
        waitpid(pid, &status, 0);
        printf("parent sees %c\n", p[0]);
        p[0] = 'Q';
        printf("parent wrote %c\n", p[0]);
    } else if (!strcmp(c, "stack-grows")) {
        printf("depth=%d\n", depth(400) == 0);  /* 1.6 MiB below the initial stack */
    } else if (!strcmp(c, "stack-limit")) {
        struct rlimit rl = {512 << 10, 512 << 10};
        setrlimit(RLIMIT_STACK, &rl);
        if (!sigsetjmp(back, 1))
            printf("depth=%d\n", depth(2000));
        printf("stack-limit: si_code=%d\n", fault_code);
    } else if (!strcmp(c, "smc")) {
        unsigned char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        int (*f)(void) = (int (*)(void))p;
        int i, sum = 0;
        for (i = 0; i < 5; i++) {
            p[0] = 0xb8; /* mov eax, imm32 */
            memcpy(p + 1, &i, 4);
            p[5] = 0xc3;
            sum = sum * 10 + f();
        }
        printf("smc=%d\n", sum);
    } else if (!strcmp(c, "dontneed")) {
        char *p = map(PROT_READ | PROT_WRITE);
        p[100] = 7;
        madvise(p, 4096, MADV_DONTNEED);
        printf("after dontneed=%d\n", p[100]);
    } else if (!strcmp(c, "mremap")) {
        char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        strcpy(p + 4096, "moved");
        char *q = mremap(p, 8192, 1 << 20, MREMAP_MAYMOVE);
        printf("mremap=%s tail=%d\n", q + 4096, q[(1 << 20) - 1]);
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    return 0;
}
