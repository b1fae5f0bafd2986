/* A probed guest for gdb transparency tests: work() has an emulated entry (push rbp),
   an out-of-line site (the rip-relative add to counter) and a nop5 site the 6.18
   profile optimizes after its first hit; outer() calls it, main() prints the sums. */
#include <stdio.h>

int counter;

__attribute__((noinline)) int work(int x)
{
    counter += x;
    __asm__ volatile(".globl nop5_site\nnop5_site: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00");
    return x * 2 + 1;
}

__attribute__((noinline)) int outer(int x)
{
    return work(x) + 1;
}

int main(void)
{
    int s = 0;
    for (int i = 0; i < 3; i++)
        s += outer(i);
    printf("s=%d counter=%d\n", s, counter);
    return s & 0x7f;
}
