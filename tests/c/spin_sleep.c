/* A thread spins until another one, asleep for 2 ms, sets a flag: time passes while
 * the CPU runs, so the sleeper wakes up (also on the virtual clock). */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static volatile int flag;

static void *sleeper(void *arg)
{
    usleep(2000);
    flag = 1;
    return arg;
}

int main(void)
{
    pthread_t t;
    pthread_create(&t, 0, sleeper, 0);
    while (!flag)
        ;
    pthread_join(t, 0);
    puts("done");
    return 0;
}
