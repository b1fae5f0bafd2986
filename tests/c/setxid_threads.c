/* glibc's setgid/setuid in a threaded program: every other thread gets SIGSETXID
   (tgkill) and changes its own ids in the handler before setgid returns. */
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile int stop;

static void *worker(void *arg)
{
    while (!stop)
        usleep(1000);
    gid_t r, e, s;
    getresgid(&r, &e, &s);                 /* this thread's own ids, after the change */
    printf("worker gids %u %u %u\n", r, e, s);
    return arg;
}

int main(void)
{
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    int rc = setresgid(5, 5, 5);
    printf("setresgid=%d\n", rc);
    stop = 1;
    pthread_join(t, 0);
    gid_t r, e, s;
    getresgid(&r, &e, &s);
    printf("main gids %u %u %u\n", r, e, s);
    return 0;
}
