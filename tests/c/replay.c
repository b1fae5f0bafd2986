/* Reverse-execution guest: a probed recursive function (uprobes + uretprobes), two
 * threads and a fork, output on stdout; every step deterministic under the emulator. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

long counter;
pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) long work(long n) {
    if (n <= 1)
        return 1;
    return n + work(n - 1);
}

static void *worker(void *arg) {
    long k = (long)arg;
    for (int i = 0; i < 3; i++) {
        long v = work(k + i);
        pthread_mutex_lock(&lock);
        counter += v;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(void) {
    printf("start %ld\n", work(4));
    fflush(stdout);
    pthread_t t[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i + 3));
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("threads %ld\n", counter);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        printf("child %ld\n", work(5));
        fflush(stdout);
        _exit(7);
    }
    int st;
    waitpid(pid, &st, 0);
    printf("parent saw %d, %ld\n", WEXITSTATUS(st), work(3));
    return 0;
}
