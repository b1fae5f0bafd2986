/* Calls every vDSO function through glibc, N times each, and prints what they said. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/time.h>
#include <time.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    struct timespec ts = {0}, res = {0};
    struct timeval tv = {0};
    time_t t = 0;
    for (int i = 0; i < n; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        gettimeofday(&tv, NULL);
        t = time(NULL);
        clock_getres(CLOCK_MONOTONIC_COARSE, &res);
    }
    unsigned cpu = 99, node = 99;
    int rc = getcpu(&cpu, &node);
    printf("vdso=%#lx res=%ld.%09ld getcpu=%d cpu=%u node=%u\n", getauxval(AT_SYSINFO_EHDR),
           res.tv_sec, res.tv_nsec, rc, cpu, node);
    printf("mono=%ld.%09ld tv=%ld.%06ld time=%ld\n", ts.tv_sec, ts.tv_nsec, tv.tv_sec, tv.tv_usec, (long)t);
    return 0;
}
