/* dlopen()s libm after start-up; dlsym()s cos twice (an IFUNC: its resolver runs at
 * each binding) and frexp once, calls frexp argv[1] times, prints what it did; then
 * dlclose()s libm (ld.so unmaps it). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    void *h = dlopen("libm.so.6", RTLD_NOW);
    if (!h) {
        printf("dlopen: %s\n", dlerror());
        return 1;
    }
    double (*c1)(double) = (double (*)(double))dlsym(h, "cos");
    double (*c2)(double) = (double (*)(double))dlsym(h, "cos");
    double (*fr)(double, int *) = (double (*)(double, int *))dlsym(h, "frexp");
    int e, sum = 0;
    for (int i = 0; i < n; i++) {
        fr(i + 1.5, &e);
        sum += e;
    }
    printf("cos_bindings=2 same=%d frexp_calls=%d sum=%d cos0=%g\n", c1 == c2, n, sum, c1(0.0));
    fflush(stdout);
    return dlclose(h) != 0;
}
