/* USDT sites with described arguments, as <sys/sdt.h> writes them: each argument is
 * "SIZE@OPERAND" (a negative size for a signed type) with the operand printed by the
 * compiler for an "nor" constraint: "$5" for a constant, "%eax" for a register,
 * "-20(%rbp)" for a memory operand.  At -O0 the locals are memory operands, at -O2
 * registers.  Prints how often the semaphore-guarded probe found itself enabled. */
#include <stdio.h>
#include "emu_usdt.h"

#define ARG_SIZE(x) ((((__typeof__(x))-1) < 1) ? -(int)sizeof(x) : (int)sizeof(x))
#define A(x) "n"(ARG_SIZE(x)), "nor"(x)

#define ARGS_PROBE(provider, name, sema, args, ...)                             \
    __asm__ __volatile__(                                                       \
        "990: nop\n"                                                            \
        ".pushsection .note.stapsdt,\"\",@note\n"                               \
        ".balign 4\n"                                                           \
        ".4byte 992f-991f, 994f-993f, 3\n"                                      \
        "991: .asciz \"stapsdt\"\n"                                             \
        "992: .balign 4\n"                                                      \
        "993: .8byte 990b, _.stapsdt.base, " sema "\n"                          \
        ".asciz \"" #provider "\"\n"                                            \
        ".asciz \"" #name "\"\n"                                                \
        ".asciz \"" args "\"\n"                                                 \
        "994: .balign 4\n"                                                      \
        ".popsection\n"                                                         \
        ".ifndef _.stapsdt.base\n"                                              \
        ".pushsection .stapsdt.base,\"aG\",@progbits,.stapsdt.base,comdat\n"    \
        ".weak _.stapsdt.base\n"                                                \
        ".hidden _.stapsdt.base\n"                                              \
        "_.stapsdt.base: .space 1\n"                                            \
        ".size _.stapsdt.base, 1\n"                                             \
        ".popsection\n"                                                         \
        ".endif\n" :: __VA_ARGS__ : "memory")

#define ARGS1 "%c0@%1"
#define ARGS2 ARGS1 " %c2@%3"
#define ARGS3 ARGS2 " %c4@%5"
#define ARGS5 ARGS3 " %c6@%7 %c8@%9"

EMU_USDT_SEMA(demo, guarded);
long counter = 7;

int main(int argc, char **argv)
{
    int n = argc; /* 1: values the compiler cannot fold into constants */
    signed char c = (signed char)(-5 * n);
    unsigned short us = (unsigned short)(65535 * n);
    int i = -100000 * n;
    unsigned int ui = 0xfffffff0u * (unsigned int)n;
    long l = 0x123456789L * n;
    int enabled = 0;

    ARGS_PROBE(demo, consts, "0", ARGS3, A(5), A(-7), A(0x1122334455667788L));
    ARGS_PROBE(demo, vars, "0", ARGS5, A(c), A(us), A(i), A(ui), A(l));
    ARGS_PROBE(demo, dup, "0", ARGS1, A(1));
    ARGS_PROBE(demo, dup, "0", ARGS1, A(1));
    ARGS_PROBE(demo, dup, "0", ARGS1, A(2));
    for (int k = 0; k < 3; k++) {
        unsigned short sema = demo_guarded_semaphore;
        if (sema)
            enabled++;
        ARGS_PROBE(demo, guarded, "demo_guarded_semaphore", ARGS2, A(k), A(sema));
    }
    ARGS_PROBE(demo, global, "0", ARGS1, A(counter));
    printf("enabled=%d\n", enabled);
    return 0;
}
