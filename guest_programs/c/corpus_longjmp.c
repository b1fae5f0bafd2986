/* longjmp out of probed frames: abandoned frames never return through the trampoline. */
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;

__attribute__((noinline)) long inner(long n)
{
    if (n == 3)
        longjmp(env, 7);
    return n;
}

__attribute__((noinline)) long outer(long n)
{
    return inner(n) + 1;
}

int main(void)
{
    long total = 0;
    for (long i = 0; i < 5; i++) {
        int r = setjmp(env);
        if (r == 0)
            total += outer(i);
        else
            total += 100 * r;
    }
    printf("total=%ld\n", total);
    return 0;
}
