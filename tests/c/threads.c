/* Threads calling a probed function under a mutex; prints the total. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long total;

__attribute__((noipa)) long work(long x)
{
    return x * 2 + 1;
}

static void *worker(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < 50; i++) {
        long v = work(id);
        pthread_mutex_lock(&lock);
        total += v;
        pthread_mutex_unlock(&lock);
    }
    return (void *)(id * 10);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    pthread_t t[16];
    long joined = 0;
    for (long i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < n; i++) {
        void *r;
        pthread_join(t[i], &r);
        joined += (long)r;
    }
    printf("total=%ld joined=%ld\n", total, joined);
    return 0;
}
