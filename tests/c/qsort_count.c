/* Comparisons glibc's qsort makes on a fixed permutation (its algorithm depends on
 * sysconf(_SC_PHYS_PAGES), i.e. on sysinfo). */
#include <stdio.h>
#include <stdlib.h>

static unsigned long compares;

static int cmp(const void *a, const void *b)
{
    compares++;
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    enum { N = 5000 };
    static int v[N];
    unsigned seed = 12345;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (int)(seed >> 8);
    }
    qsort(v, N, sizeof v[0], cmp);
    for (int i = 1; i < N; i++)
        if (v[i - 1] > v[i])
            return 1;
    printf("compares=%lu\n", compares);
    return 0;
}
