/* A deterministic workload for the transparent-probing tests: loops, calls, recursion, a
 * switch that compiles to a jump table, indirect calls, string functions, floating point
 * (SSE), a struct copy, and output on stdout and stderr.  Every helper is noinline so the
 * tests can probe each instruction of each function by symbol.  The exit status is a
 * checksum of everything computed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

struct record {
    long id;
    double weight;
    char name[40];
    int tags[6];
};

static struct record table[4];
volatile long sink;

NOINLINE long fact(long n)
{
    return n <= 1 ? 1 : n * fact(n - 1);
}

NOINLINE long fib_rec(int n)
{
    return n < 2 ? n : fib_rec(n - 1) + fib_rec(n - 2);
}

NOINLINE int classify(int op, int a, int b)
{
    switch (op) {                       /* dense cases: a jump table at -O1 */
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return b ? a / b : -1;
    case 4: return a & b;
    case 5: return a | b;
    case 6: return a ^ b;
    case 7: return a << (b & 7);
    case 8: return a >> (b & 7);
    default: return 0;
    }
}

NOINLINE double poly(double x)
{
    double acc = 0.0;
    for (int i = 0; i < 5; i++)
        acc = acc * x + 1.0 / (i + 1);
    return acc;
}

NOINLINE float dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

NOINLINE unsigned checksum(const char *s, size_t n)
{
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

NOINLINE void fill(struct record *r, long id, const char *name)
{
    r->id = id;
    r->weight = id * 1.5;
    strncpy(r->name, name, sizeof r->name - 1);
    r->name[sizeof r->name - 1] = 0;
    for (int i = 0; i < 6; i++)
        r->tags[i] = (int)(id * 7 + i);
}

NOINLINE struct record copy_record(const struct record *r)
{
    struct record out = *r;             /* a small struct copy */
    out.id += 100;
    return out;
}

typedef long (*unary_fn)(long);

NOINLINE long twice(long x) { return 2 * x; }
NOINLINE long square(long x) { return x * x; }

NOINLINE long apply_all(long x)
{
    static const unary_fn fns[] = { twice, square, fact };
    long acc = 0;
    for (int i = 0; i < 3; i++)
        acc += fns[i](x);               /* indirect calls through a table */
    return acc;
}

int main(int argc, char **argv)
{
    static const char *names[] = { "alpha", "beta", "gamma-delta", "epsilon" };
    char buf[128];
    long total = 0;

    for (int i = 0; i < 4; i++)
        fill(&table[i], i, names[i]);
    for (int i = 0; i < 4; i++) {
        struct record c = copy_record(&table[i]);
        total += c.id + c.tags[5] + (long)strlen(c.name);
    }

    total += fact(10) % 1000 + fib_rec(8);
    for (int op = 0; op < 10; op++)
        total += classify(op, 29 + op, 3 + op);

    float a[8], b[8];
    for (int i = 0; i < 8; i++) {
        a[i] = i * 0.5f;
        b[i] = 8 - i;
    }
    double p = poly(1.25);
    float d = dot(a, b, 8);
    total += (long)(p * 1000) + (long)d;

    memset(buf, 0, sizeof buf);
    strcpy(buf, "transparent ");
    strcat(buf, names[argc % 4]);
    memcpy(buf + 64, buf, 24);
    total += strcmp(buf, "transparent alpha") == 0 ? 5 : 3;
    total += strchr(buf, 'p') - buf;
    total += checksum(buf, strlen(buf)) & 0xffff;
    total += apply_all(5);
    sink = total;

    printf("total=%ld p=%.6f d=%.3f name=%s len=%zu\n", total, p, d, buf + 64, strlen(buf));
    fprintf(stderr, "records: %s %s %.2f\n", table[2].name, table[3].name, table[3].weight);
    return (int)(total & 0x7f);
}
