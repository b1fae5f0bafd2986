/* longjmp out of uretprobed frames (uprobe-emu uretprobe tests).
 *
 * main: three rounds of { setjmp; middle(3) -> inner(3..0) -> longjmp back; leaf(round) },
 * then outer(2), whose own setjmp catches the longjmp from inner and which then returns
 * normally.  Prints "total=1008" (leaf: 0 + 2 + 4, outer: 1002) and exits 0.
 */
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;
volatile int sink;

__attribute__((noinline, noipa)) int inner(int n)
{
    if (n == 0)
        longjmp(env, 1);
    int r = inner(n - 1);
    sink = r;
    return r + 1;
}

__attribute__((noinline, noipa)) int middle(int n)
{
    int r = inner(n);
    sink = r;
    return r + 1;
}

__attribute__((noinline, noipa)) int leaf(int x)
{
    sink = x;
    return x * 2;
}

__attribute__((noinline, noipa)) int outer(int n)
{
    volatile int vn = n;
    if (setjmp(env) == 0)
        middle(vn);
    return vn + 1000;
}

int main(void)
{
    volatile int total = 0;
    for (volatile int round = 0; round < 3; round++) {
        if (setjmp(env) == 0)
            middle(3);
        total += leaf(round);
    }
    total += outer(2);
    printf("total=%d\n", total);
    return 0;
}
