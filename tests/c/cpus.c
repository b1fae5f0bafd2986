/* The machine's CPUs as glibc sees them (tests/test_cpus.py):
 *   info        get_nprocs(), get_nprocs_conf(), sysconf(_SC_NPROCESSORS_ONLN),
 *               sched_getcpu() and the affinity; then pins itself to the last CPU
 *               with sched_setaffinity and prints sched_getcpu() again.
 *   threads N   N threads, thread i pinned to CPU i with pthread_setaffinity_np,
 *               each reports sched_getcpu() after some work (report(): a probe site).
 *   inherit     pins itself to CPU 1, then prints the affinity a thread, a forked
 *               child and the program exec'd again ("mask") see.
 *   mask        prints its affinity as a hex word and its CPU.
 *   mono N      N threads read CLOCK_MONOTONIC in a loop: no read is earlier than
 *               any read another thread published before it; prints the violations.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int cpus_seen[64];
static int rcs[64];

__attribute__((noinline)) void report(long i, int cpu)
{
    cpus_seen[i] = cpu;
    __asm__ volatile("" ::: "memory");
}

static unsigned long mask_word(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof set, &set);
    unsigned long w = 0;
    for (int i = 0; i < 64; i++)
        if (CPU_ISSET(i, &set))
            w |= 1UL << i;
    return w;
}

static void *show_mask(void *arg)
{
    printf("%s mask=%#lx cpu=%d\n", (char *)arg, mask_word(), sched_getcpu());
    return NULL;
}

static long latest, violations;

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void *mono(void *arg)
{
    for (int k = 0; k < 2000; k++) {
        long seen = __atomic_load_n(&latest, __ATOMIC_SEQ_CST);
        long t = now_ns();
        if (t < seen)
            __atomic_add_fetch(&violations, 1, __ATOMIC_SEQ_CST);
        long cur = seen;
        while (cur < t && !__atomic_compare_exchange_n(&latest, &cur, t, 0, __ATOMIC_SEQ_CST,
                                                       __ATOMIC_SEQ_CST))
            ;
        for (volatile int j = 0; j < 50 * (int)(long)arg; j++)
            ;
    }
    return NULL;
}

static void *pinned(void *arg)
{
    long i = (long)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(i, &set);
    rcs[i] = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    volatile long x = 0;
    for (long k = 0; k < 200000; k++)
        x += k;
    report(i, sched_getcpu());
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 2 && !strcmp(argv[1], "threads")) {
        int n = atoi(argv[2]);
        pthread_t t[64];
        for (long i = 0; i < n; i++)
            pthread_create(&t[i], NULL, pinned, (void *)i);
        for (int i = 0; i < n; i++)
            pthread_join(t[i], NULL);
        for (int i = 0; i < n; i++)
            printf("thread %d rc=%d cpu=%d\n", i, rcs[i], cpus_seen[i]);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "mask")) {
        show_mask("exec");
        return 0;
    }
    if (argc > 2 && !strcmp(argv[1], "mono")) {
        int n = atoi(argv[2]);
        pthread_t t[64];
        for (long i = 0; i < n; i++)
            pthread_create(&t[i], NULL, mono, (void *)(i + 1));
        for (int i = 0; i < n; i++)
            pthread_join(t[i], NULL);
        printf("violations=%ld\n", violations);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "inherit")) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(1, &one);
        sched_setaffinity(0, sizeof one, &one);
        pthread_t t;
        pthread_create(&t, NULL, show_mask, "thread");
        pthread_join(t, NULL);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            show_mask("fork");
            fflush(stdout);
            execl("/proc/self/exe", argv[0], "mask", (char *)NULL);
            _exit(127);
        }
        waitpid(pid, NULL, 0);
        return 0;
    }
    int n = get_nprocs();
    cpu_set_t set;
    CPU_ZERO(&set);
    int grc = sched_getaffinity(0, sizeof set, &set);
    printf("get_nprocs=%d\n", n);
    printf("get_nprocs_conf=%d\n", get_nprocs_conf());
    printf("sysconf_onln=%ld\n", sysconf(_SC_NPROCESSORS_ONLN));
    printf("sysconf_conf=%ld\n", sysconf(_SC_NPROCESSORS_CONF));
    printf("sched_getcpu=%d\n", sched_getcpu());
    printf("getaffinity=%d count=%d\n", grc, CPU_COUNT(&set));
    CPU_ZERO(&set);
    CPU_SET(n - 1, &set);
    int rc = sched_setaffinity(0, sizeof set, &set);
    printf("setaffinity=%d\n", rc);
    printf("sched_getcpu_after=%d\n", sched_getcpu());
    unsigned cpu = 99, node = 99;
    getcpu(&cpu, &node);
    printf("getcpu_after=%u node=%u\n", cpu, node);
    return 0;
}
