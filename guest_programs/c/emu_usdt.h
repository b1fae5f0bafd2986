/*
 * emu_usdt.h - minimal USDT probe sites for uprobe-emu guests.
 *
 * Each macro emits a probe site in the code and a .note.stapsdt ELF note describing it
 * (namesz 8, type 3, "stapsdt", then pc, the address of _.stapsdt.base, the semaphore
 * address, provider, name and an argument description), the layout tools read.
 *
 *   EMU_USDT(prov, name)              site: nop                   (classic USDT)
 *   EMU_USDT_NOP5(prov, name)         site: nop; nop5 combo       (libbpf, 6.18-7.1 era)
 *   EMU_USDT_NOP10(prov, name)        site: nop; nop10 combo      (libbpf, 7.2+ era)
 *   EMU_USDT_SEMA(prov, name)         define the semaphore prov_name_semaphore (.probes)
 *   EMU_USDT_S(prov, name)            like EMU_USDT, with that semaphore in the note
 *   EMU_USDT_ENABLED(prov, name)      the semaphore's value (non-zero while attached)
 *
 * Arguments are not described (empty argument string).
 */
#ifndef EMU_USDT_H
#define EMU_USDT_H

#define EMU_USDT_SITE_NOP   "nop\n"
#define EMU_USDT_SITE_NOP5  "nop\n.byte 0x0f,0x1f,0x44,0x00,0x00\n"
#define EMU_USDT_SITE_NOP10 "nop\n.byte 0x66,0x2e,0x0f,0x1f,0x84,0x00,0x00,0x00,0x00,0x00\n"

#define EMU_USDT__NOTE(site, provider, name, sema)                              \
    __asm__ __volatile__(                                                       \
        "990: " site                                                            \
        ".pushsection .note.stapsdt,\"\",@note\n"                               \
        ".balign 4\n"                                                           \
        ".4byte 992f-991f, 994f-993f, 3\n"                                      \
        "991: .asciz \"stapsdt\"\n"                                             \
        "992: .balign 4\n"                                                      \
        "993: .8byte 990b, _.stapsdt.base, " sema "\n"                          \
        ".asciz \"" #provider "\"\n"                                            \
        ".asciz \"" #name "\"\n"                                                \
        ".asciz \"\"\n"                                                         \
        "994: .balign 4\n"                                                      \
        ".popsection\n"                                                         \
        ".ifndef _.stapsdt.base\n"                                              \
        ".pushsection .stapsdt.base,\"aG\",@progbits,.stapsdt.base,comdat\n"    \
        ".weak _.stapsdt.base\n"                                                \
        ".hidden _.stapsdt.base\n"                                              \
        "_.stapsdt.base: .space 1\n"                                            \
        ".size _.stapsdt.base, 1\n"                                             \
        ".popsection\n"                                                         \
        ".endif\n" ::: "memory")

#define EMU_USDT(provider, name)       EMU_USDT__NOTE(EMU_USDT_SITE_NOP, provider, name, "0")
#define EMU_USDT_NOP5(provider, name)  EMU_USDT__NOTE(EMU_USDT_SITE_NOP5, provider, name, "0")
#define EMU_USDT_NOP10(provider, name) EMU_USDT__NOTE(EMU_USDT_SITE_NOP10, provider, name, "0")

#define EMU_USDT_SEMA(provider, name)                                           \
    volatile unsigned short provider##_##name##_semaphore                       \
        __attribute__((section(".probes"), used, aligned(2)))
#define EMU_USDT_S(provider, name)                                              \
    EMU_USDT__NOTE(EMU_USDT_SITE_NOP, provider, name, #provider "_" #name "_semaphore")
#define EMU_USDT_ENABLED(provider, name) (provider##_##name##_semaphore != 0)

#endif
