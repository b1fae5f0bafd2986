/* FP/SSE state in the signal frame (arch/x86/kernel/fpu/signal.c).  The interrupted
 * code loads xmm3, MXCSR and the x87 control word, then sends itself SIGUSR1 with a raw
 * kill syscall in the same asm block, and reads them back after the handler returned.
 *   layout       - the frame as a handler sees it: uc_flags, the 64-byte aligned fpstate
 *                  under the red zone, the rt_sigframe under it, the sw bytes' magic and
 *                  sizes, FP_XSTATE_MAGIC2 after the image, FP|SSE in XSTATE_BV;
 *   saved        - the frame holds the interrupted values;
 *   clobber      - the handler changes xmm3/MXCSR/FCW: the interrupted code never sees it;
 *   entry        - the handler starts with the initial FPU state;
 *   edit         - the handler edits the saved xmm3 and MXCSR: the code resumes with them;
 *   xfeat_fp     - sw bytes xfeatures = x87 only: SSE comes back in its initial state;
 *   bv_nosse     - XSTATE_BV without SSE: XRSTOR initialises the xmm registers;
 *   nomagic      - magic1 cleared (and XSTATE_BV without SSE): a legacy FXRSTOR frame;
 *   nullfp       - fpstate = NULL: the FPU is reset;
 *   badmxcsr     - a reserved MXCSR bit in the frame: rt_sigreturn fails, SIGSEGV;
 *   initial      - MXCSR and FCW at process start;
 *   minsigstksz  - AT_MINSIGSTKSZ (the CPU's: not compared with the host);
 *   fork         - a forked child keeps its parent's MXCSR;
 *   overflow     - a handler on a 64 KiB alternate stack (SA_NODEFER) moves its stack
 *                  pointer to 256 bytes above the stack's base and sends itself the
 *                  signal again: the nested frame cannot fit, SIGSEGV;
 *   redzone      - the same with the stack pointer 64 bytes above the base: the red
 *                  zone skipped first takes sp below the alternate stack, so get_sigframe
 *                  sees a task not on it and starts the frame at its top again (how
 *                  far nesting goes before either of these depends on the CPU's frame
 *                  size, so the guest goes straight to the bottom);
 *   altstack     - an alternate stack of AT_MINSIGSTKSZ (at least MINSIGSTKSZ) bytes
 *                  holds the whole frame. */
#define _GNU_SOURCE
#include <alloca.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#define MAGIC1 0x46505853u
#define MAGIC2 0x46505845u

static const char *mode;
static const uint64_t pattern[2] = {0x1122334455667788ull, 0x99aabbccddeeff00ull};
static const uint64_t edited[2] = {0x0badc0de0badc0deull, 0x0123456789abcdefull};
static uint64_t entry_xmm3[2];
static unsigned entry_mxcsr;
static unsigned short entry_fcw;
static char line[512];

static int is(const char *m) { return !strcmp(mode, m); }

static void handler(int sig, siginfo_t *si, void *ctx)
{
    __asm__ volatile("movdqu %%xmm3, %0\n\tstmxcsr %1\n\tfnstcw %2"
                     : "=m"(entry_xmm3), "=m"(entry_mxcsr), "=m"(entry_fcw));
    ucontext_t *uc = ctx;
    uint8_t *fp = (uint8_t *)uc->uc_mcontext.fpregs;
    uint32_t *sw = (uint32_t *)(fp + 464);
    uint64_t xfeatures, bv;
    memcpy(&xfeatures, fp + 472, 8);
    memcpy(&bv, fp + 512, 8);
    uint64_t *xmm3 = (uint64_t *)(fp + 160 + 3 * 16);
    if (is("layout")) {
        uintptr_t rsp = uc->uc_mcontext.gregs[REG_RSP], f = (uintptr_t)fp, frame = (uintptr_t)uc - 8;
        int pad = 0;
        for (int i = 5; i < 12; i++)
            pad |= sw[i];
        snprintf(line, sizeof line,
                 "uc_flags=%lx fp_aligned=%d fp_below_redzone=%d frame_below_fp=%d magic1=%d "
                 "ext_is_size+4=%d size_covers_fpsse=%d magic2=%d xfeat_fpsse=%d bv_fpsse=%d pad=%d\n",
                 uc->uc_flags, f % 64 == 0, f == ((rsp - 128 - sw[1]) & ~63ul),
                 frame == ((f - 440) & ~15ul) - 8, sw[0] == MAGIC1, sw[1] == sw[4] + 4, sw[4] >= 576,
                 *(uint32_t *)(fp + sw[4]) == MAGIC2, (xfeatures & 3) == 3, (bv & 3) == 3, pad);
    } else if (is("saved")) {
        snprintf(line, sizeof line, "saved xmm3=%016lx%016lx mxcsr=%x fcw=%x\n", (unsigned long)xmm3[1],
                 (unsigned long)xmm3[0], *(uint32_t *)(fp + 24), *(uint16_t *)fp);
    } else if (is("clobber")) {
        unsigned m = 0x7f80;
        unsigned short cw = 0x37f;
        __asm__ volatile("pcmpeqd %%xmm3, %%xmm3\n\tldmxcsr %0\n\tfldcw %1" ::"m"(m), "m"(cw) : "xmm3");
    } else if (is("edit") || is("xfeat_fp") || is("bv_nosse") || is("nomagic")) {
        memcpy(xmm3, edited, 16);
        *(uint32_t *)(fp + 24) = 0x5f80;
        if (is("xfeat_fp")) {
            xfeatures = 1;
            memcpy(fp + 472, &xfeatures, 8);
        }
        if (is("bv_nosse") || is("nomagic")) {
            bv &= ~2ull;
            memcpy(fp + 512, &bv, 8);
        }
        if (is("nomagic"))
            sw[0] = 0;
    } else if (is("nullfp")) {
        uc->uc_mcontext.fpregs = 0;
    } else if (is("badmxcsr")) {
        *(uint32_t *)(fp + 24) |= 1u << 16;
    } else if (is("overflow") || is("redzone")) {
        static int again;
        stack_t ss;
        sigaltstack(0, &ss);
        uintptr_t base = (uintptr_t)ss.ss_sp, here = (uintptr_t)&ss;
        if (again) {                     /* redzone: the nested frame, at the top again */
            int n = snprintf(line, sizeof line, "nested handler %s\n",
                             here > base + ss.ss_size - 16384 ? "at the top of the altstack" : "lower");
            write(1, line, n);
            _exit(0);                    /* its frame overwrote the outer one's */
        }
        again = 1;
        uintptr_t sp;
        __asm__ volatile("mov %%rsp, %0" : "=r"(sp));
        volatile char *pad = alloca(sp - base - (is("overflow") ? 256 : 64));
        pad[0] = 0;
        long rax = SYS_tgkill;           /* from exactly there: no call below this sp */
        __asm__ volatile("syscall" : "+a"(rax) : "D"(getpid()), "S"(gettid()), "d"(SIGUSR1)
                         : "rcx", "r11", "memory");
    } else if (is("altstack")) {
        stack_t ss;
        sigaltstack(0, &ss);
        uintptr_t lo = (uintptr_t)ss.ss_sp, hi = lo + ss.ss_size, f = (uintptr_t)fp;
        snprintf(line, sizeof line, "altstack onstack=%d frame_inside=%d fp_inside=%d\n",
                 (ss.ss_flags & SS_ONSTACK) != 0, (uintptr_t)uc - 8 >= lo,
                 f + *(uint32_t *)(fp + 468) <= hi);
    }
}

/* Load the state, kill(getpid(), SIGUSR1), read the state back. */
static void interrupted(uint64_t out[2], unsigned *mxcsr_out, unsigned short *fcw_out)
{
    long rax = SYS_kill;
    unsigned mxcsr_in = 0x3f80;          /* round down */
    unsigned short fcw_in = 0x27f;       /* 53-bit precision */
    unsigned dflt = 0x1f80;
    unsigned short dfcw = 0x37f;
    __asm__ volatile("ldmxcsr %[mi]\n\t"
                     "fldcw %[fi]\n\t"
                     "movdqu %[in], %%xmm3\n\t"
                     "syscall\n\t"
                     "movdqu %%xmm3, %[out]\n\t"
                     "stmxcsr %[mo]\n\t"
                     "fnstcw %[fo]\n\t"
                     "ldmxcsr %[d]\n\t"
                     "fldcw %[dc]"
                     : [out] "=m"(*(uint64_t(*)[2])out), [mo] "=m"(*mxcsr_out), [fo] "=m"(*fcw_out), "+a"(rax)
                     : [in] "m"(pattern), [mi] "m"(mxcsr_in), [fi] "m"(fcw_in), [d] "m"(dflt), [dc] "m"(dfcw),
                       "D"((long)getpid()), "S"((long)SIGUSR1)
                     : "rcx", "r11", "xmm3", "memory");
}

int main(int argc, char **argv)
{
    mode = argc > 1 ? argv[1] : "layout";
    if (is("initial")) {
        unsigned m;
        unsigned short cw;
        __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(m), "=m"(cw));
        printf("initial mxcsr=%x fcw=%x\n", m, cw);
        return 0;
    }
    if (is("minsigstksz")) {
        printf("AT_MINSIGSTKSZ=%lu\n", getauxval(AT_MINSIGSTKSZ));
        return 0;
    }
    if (is("fork")) {
        unsigned m = 0x3f80, got;
        __asm__ volatile("ldmxcsr %0" ::"m"(m));
        pid_t pid = fork();
        __asm__ volatile("stmxcsr %0" : "=m"(got));
        if (pid == 0) {
            printf("child mxcsr=%x\n", got);
            return 0;
        }
        waitpid(pid, 0, 0);
        return 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO;
    if (is("overflow") || is("redzone")) {
        stack_t ss = {.ss_sp = malloc(65536), .ss_size = 65536, .ss_flags = 0};
        sigaltstack(&ss, 0);
        sa.sa_flags |= SA_ONSTACK | SA_NODEFER;
        printf("before\n");
        fflush(stdout);
    }
    if (is("altstack")) {
        size_t size = getauxval(AT_MINSIGSTKSZ);
        if (size < MINSIGSTKSZ)
            size = MINSIGSTKSZ;
        stack_t ss = {.ss_sp = malloc(size), .ss_size = size, .ss_flags = 0};
        if (sigaltstack(&ss, 0))
            perror("sigaltstack");
        sa.sa_flags |= SA_ONSTACK;
    }
    sigaction(SIGUSR1, &sa, 0);
    uint64_t out[2];
    unsigned mxcsr;
    unsigned short fcw;
    if (is("badmxcsr")) {
        printf("before\n");
        fflush(stdout);
    }
    interrupted(out, &mxcsr, &fcw);
    fputs(line, stdout);
    if (is("entry"))
        printf("entry xmm3=%016lx%016lx mxcsr=%x fcw=%x\n", (unsigned long)entry_xmm3[1],
               (unsigned long)entry_xmm3[0], entry_mxcsr, entry_fcw);
    printf("after xmm3=%016lx%016lx mxcsr=%x fcw=%x\n", (unsigned long)out[1], (unsigned long)out[0], mxcsr, fcw);
    return 0;
}
