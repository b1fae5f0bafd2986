/* A thread created inside a function under a return probe starts with no pending
 * return instances; its own probed calls return normally. */
#include <pthread.h>
#include <stdio.h>

__attribute__((noipa)) long leaf(long x)
{
    return x + 1;
}

static void *body(void *arg)
{
    return (void *)leaf((long)arg);
}

__attribute__((noipa)) long spawn(void)
{
    pthread_t t;
    void *r;
    pthread_create(&t, NULL, body, (void *)41);
    pthread_join(t, &r);
    return (long)r;
}

int main(void)
{
    printf("spawn=%ld\n", spawn());
    return 0;
}
