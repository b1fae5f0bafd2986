/* uprobe_race in miniature: threads hammer a USDT site (with a semaphore) while probes
 * are attached and detached; the program prints how often it saw the probe enabled. */
#include <pthread.h>
#include <stdio.h>
#include "emu_usdt.h"

EMU_USDT_SEMA(race, hit);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long calls;

__attribute__((noipa)) void site(void)
{
    EMU_USDT_S(race, hit);
}

static void *trigger(void *arg)
{
    for (int i = 0; i < 40; i++) {
        site();
        pthread_mutex_lock(&lock);
        calls++;
        pthread_mutex_unlock(&lock);
    }
    return arg;
}

int main(void)
{
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, trigger, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    printf("calls=%ld\n", calls);
    return 0;
}
