/* sched_getaffinity's buffer rules, getrusage and times (raw syscalls). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/times.h>
#include <unistd.h>

static void show(const char *what, long rc) {
    printf("%-28s rc=%ld errno=%s\n", what, rc, rc < 0 ? strerrorname_np(errno) : "0");
}

int main(void) {
    unsigned char mask[128];
    struct rusage ru;
    struct tms t;
    memset(mask, 0xee, sizeof mask);
    show("sched_getaffinity(0,0)", syscall(SYS_sched_getaffinity, 0, 0, mask));
    show("sched_getaffinity(0,4)", syscall(SYS_sched_getaffinity, 0, 4, mask));
    show("sched_getaffinity(0,12)", syscall(SYS_sched_getaffinity, 0, 12, mask));
    show("sched_getaffinity(0,8)", syscall(SYS_sched_getaffinity, 0, 8, mask));
    show("sched_getaffinity(0,128)", syscall(SYS_sched_getaffinity, 0, 128, mask));
    show("sched_getaffinity(-1,8)", syscall(SYS_sched_getaffinity, -1, 8, mask));
    show("sched_getaffinity(0,8,NULL)", syscall(SYS_sched_getaffinity, 0, 8, NULL));
    printf("mask");
    for (int i = 0; i < 10; i++)
        printf(" %02x", mask[i]);
    printf("\n");
    show("getrusage(2)", syscall(SYS_getrusage, 2, &ru));
    show("getrusage(SELF,NULL)", syscall(SYS_getrusage, RUSAGE_SELF, NULL));
    memset(&ru, 0xee, sizeof ru);
    show("getrusage(SELF)", syscall(SYS_getrusage, RUSAGE_SELF, &ru));
    printf("utime=%ld.%06ld stime=%ld.%06ld maxrss=%ld minflt=%ld nvcsw=%ld\n",
           ru.ru_utime.tv_sec, ru.ru_utime.tv_usec, ru.ru_stime.tv_sec, ru.ru_stime.tv_usec,
           ru.ru_maxrss, ru.ru_minflt, ru.ru_nvcsw);
    memset(&t, 0xee, sizeof t);
    long ticks = syscall(SYS_times, &t);
    printf("times=%ld utime=%ld stime=%ld cutime=%ld cstime=%ld\n", ticks, (long)t.tms_utime,
           (long)t.tms_stime, (long)t.tms_cutime, (long)t.tms_cstime);
    sleep(3);
    printf("elapsed ticks over sleep(3): +%ld\n", syscall(SYS_times, NULL) - ticks);
    show("times(bad)", syscall(SYS_times, (void *)8));
    return 0;
}
