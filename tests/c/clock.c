#include <stdio.h>
#include <sys/random.h>
#include <sys/time.h>
#include <time.h>

int main(void)
{
    struct timespec a, b;
    struct timeval tv;
    unsigned char r[8];
    clock_gettime(CLOCK_MONOTONIC, &a);
    clock_gettime(CLOCK_MONOTONIC, &b);
    gettimeofday(&tv, 0);
    getrandom(r, sizeof r, 0);
    printf("mono=%ld.%09ld next=%ld.%09ld tv=%ld.%06ld rnd=%02x%02x%02x%02x\n",
           a.tv_sec, a.tv_nsec, b.tv_sec, b.tv_nsec, tv.tv_sec, tv.tv_usec, r[0], r[1], r[2], r[3]);
    return b.tv_nsec > a.tv_nsec || b.tv_sec > a.tv_sec ? 0 : 1;
}
