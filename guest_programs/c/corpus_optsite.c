/* Pins optimized-uprobe facts: the bytes of probed nop sites after a few calls, and
 * where the kernel mapped [uprobes] and [uprobes-trampoline] (from /proc/self/maps).
 * Probe site_nop5 / site_66nop4 / site_nop4nop / site_nop10 with p: events. */
#include <stdio.h>
#include <string.h>

extern void site_nop5(void), site_66nop4(void), site_nop4nop(void), site_nop10(void);
__asm__(".text\n"
        ".globl site_nop5\nsite_nop5: .byte 0x0f,0x1f,0x44,0x00,0x00\n ret\n"
        ".globl site_66nop4\nsite_66nop4: .byte 0x66,0x0f,0x1f,0x40,0x00\n ret\n"
        ".globl site_nop4nop\nsite_nop4nop: .byte 0x0f,0x1f,0x40,0x00,0x90\n ret\n"
        ".globl site_nop10\nsite_nop10: .byte 0x66,0x2e,0x0f,0x1f,0x84,0,0,0,0,0\n ret\n");

static void dump(const char *name, void (*f)(void), int len)
{
    const unsigned char *p = (const unsigned char *)f;
    printf("%s:", name);
    for (int i = 0; i < len; i++)
        printf(" %02x", p[i]);
    printf("\n");
}

int main(void)
{
    for (int i = 0; i < 3; i++) {
        site_nop5();
        site_66nop4();
        site_nop4nop();
        site_nop10();
    }
    dump("nop5", site_nop5, 5);
    dump("66nop4", site_66nop4, 5);
    dump("nop4nop", site_nop4nop, 5);
    dump("nop10", site_nop10, 10);
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "[uprobes"))
            fputs(line, stdout);
    return 0;
}
