/* Recursion 80 deep: a return probe on rec() gives 64 return events (the kernel's
 * MAX_URETPROBE_DEPTH); the result must be right either way. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long rec(long n)
{
    if (n == 0)
        return 0;
    return n + rec(n - 1);
}

int main(int argc, char **argv)
{
    long depth = argc > 1 ? atol(argv[1]) : 80;
    printf("sum=%ld\n", rec(depth));
    return 0;
}
