/* A second workload for the transparent-probing tests: callbacks from glibc into the
 * program (qsort, bsearch), varargs, setjmp/longjmp, x87 long double, 64-bit division,
 * bit fields, an unaligned copy and a leaf function that keeps data in its red zone.
 * Every helper is noinline so the tests can probe each of their instructions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

struct packed_bits {
    unsigned a : 3, b : 7, c : 12, d : 10;
};

static jmp_buf escape;
static int depth_reached;

NOINLINE int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

NOINLINE long sum_va(int n, ...)
{
    va_list ap;
    long s = 0;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        s += va_arg(ap, long);
    va_end(ap);
    return s;
}

NOINLINE void dive(int n)
{
    depth_reached = n;
    if (n == 5)
        longjmp(escape, n * 10);
    dive(n + 1);
}

NOINLINE long double harmonic(int n)
{
    long double h = 0;
    for (int i = 1; i <= n; i++)
        h += 1.0L / i;
    return h;
}

NOINLINE unsigned long divmix(unsigned long a, unsigned long b)
{
    return a / b + a % b + (unsigned long)((long)a / -(long)b);
}

NOINLINE unsigned bits(unsigned v)
{
    struct packed_bits p = { v, v >> 3, v >> 10, v >> 22 };
    p.b += p.a;
    p.c ^= p.d;
    return p.a + p.b + p.c + p.d;
}

NOINLINE unsigned long red_zone_leaf(unsigned long x)
{
    volatile unsigned long spill[4] = { x, x * 3, x ^ 0x55, x + 7 };   /* below rsp: red zone */
    return spill[0] + spill[1] + spill[2] + spill[3];
}

int main(void)
{
    int v[] = { 42, 7, 19, 3, 88, 61, 25, 14, 50, 1 };
    char raw[64], out[64];
    long total = 0;

    qsort(v, 10, sizeof v[0], cmp_int);
    int key = 50;
    int *hit = bsearch(&key, v, 10, sizeof v[0], cmp_int);
    total += hit ? hit - v : -1;
    total += sum_va(5, 1L, 2L, 3L, 4L, 5L);

    int r = setjmp(escape);
    if (r == 0)
        dive(0);
    total += r + depth_reached;

    long double h = harmonic(12);
    total += (long)(h * 1000);
    total += divmix(1000003, 97) & 0xffff;
    total += bits(0xdeadbeef);
    total += red_zone_leaf(total) & 0xff;

    for (int i = 0; i < 64; i++)
        raw[i] = (char)(i * 7);
    memcpy(out + 1, raw + 3, 40);                /* unaligned source and destination */
    total += out[1] + out[40];

    char line[96];
    int n = snprintf(line, sizeof line, "v=%d,%d,%d h=%.5Lf total=%ld", v[0], v[5], v[9], h, total);
    puts(line);
    return (int)((total + n) & 0x7f);
}
