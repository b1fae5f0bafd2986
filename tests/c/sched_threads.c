/* Threads for the scheduler's tests (tests/test_sched_perf.py):
 *   work N L    N threads (0: the main thread) each run L rounds of a counting loop
 *               with no syscalls; prints the per-thread sums in thread order.
 *   pingpong R  two threads hand a turn to each other R times by spinning on a shared
 *               word (no syscalls: only preemption lets the waiting one see the turn).
 *   wake        a thread sleeps in read(2) on a pipe; main writes the pipe, then spins
 *               until the woken thread sets a flag; prints how many rounds it spun.
 *   spin N      N threads spin forever.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long rounds;
static long sums[16];
static volatile long turn, handovers;
static volatile int flag;
static int pipefd[2];

static void *work(void *arg)
{
    long id = (long)arg, s = 0;
    for (long i = 0; i < rounds; i++)
        s += i ^ id;
    sums[id] = s;
    return NULL;
}

static void *player(void *arg)
{
    long me = (long)arg;
    for (long i = 0; i < rounds; i++) {
        while (turn != me)
            ;
        handovers++;
        turn = 1 - me;
    }
    return NULL;
}

static void *reader(void *arg)
{
    char c;
    if (read(pipefd[0], &c, 1) == 1)
        flag = 1;
    return arg;
}

static void *spinner(void *arg)
{
    for (;;)
        turn++;
    return arg;
}

int main(int argc, char **argv)
{
    pthread_t t[16];
    const char *mode = argc > 1 ? argv[1] : "work";
    long n = argc > 2 ? atol(argv[2]) : 4;
    if (!strcmp(mode, "work")) {
        rounds = argc > 3 ? atol(argv[3]) : 100000;
        if (n == 0)
            work(0);
        for (long i = 0; i < n && i < 16; i++)
            pthread_create(&t[i], NULL, work, (void *)i);
        for (long i = 0; i < n && i < 16; i++)
            pthread_join(t[i], NULL);
        for (long i = 0; i < (n ? n : 1); i++)
            printf("%ld ", sums[i]);
        printf("\n");
    } else if (!strcmp(mode, "pingpong")) {
        rounds = n;
        pthread_create(&t[0], NULL, player, (void *)0);
        pthread_create(&t[1], NULL, player, (void *)1);
        pthread_join(t[0], NULL);
        pthread_join(t[1], NULL);
        printf("handovers=%ld\n", handovers);
    } else if (!strcmp(mode, "wake")) {
        long spins = 0;
        if (pipe(pipefd))
            return 1;
        pthread_create(&t[0], NULL, reader, NULL);
        usleep(1000);                    /* the reader is asleep in read() by now */
        if (write(pipefd[1], "x", 1) != 1)
            return 1;
        while (!flag)
            spins++;
        pthread_join(t[0], NULL);
        printf("spins=%ld\n", spins);
    } else if (!strcmp(mode, "spin")) {
        for (long i = 0; i < n && i < 16; i++)
            pthread_create(&t[i], NULL, spinner, NULL);
        spinner(NULL);
    }
    return 0;
}
