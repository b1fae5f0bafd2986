/* Red zone: a leaf function keeps data below rsp across a nop5 probe site.
 * Prints how many of the two calls saw their red-zone data intact. */
#include <stdio.h>

extern long leaf(long x);
__asm__(".text\n.globl leaf\nleaf:\n"
        " movq %rdi, -8(%rsp)\n"
        " movq %rdi, -16(%rsp)\n"
        ".globl leaf_site\nleaf_site: .byte 0x0f,0x1f,0x44,0x00,0x00\n"
        " xorl %eax, %eax\n"
        " cmpq %rdi, -8(%rsp)\n"
        " sete %al\n"
        " cmpq %rdi, -16(%rsp)\n"
        " sete %cl\n"
        " andb %cl, %al\n"
        " ret\n");

int main(void)
{
    long intact = 0;
    for (int i = 0; i < 2; i++)
        intact += leaf(0x1122334455667788L + i);
    printf("intact=%ld\n", intact);
    return 0;
}
