/* alarm/setitimer(ITIMER_REAL) and nanosleep (kernel/time/itimer.c, hrtimer.c):
 *   sleep    - nanosleep past an alarm is cut short: -1 EINTR, the handler ran, rem
 *              holds the rest (printed rounded to seconds);
 *   pause    - pause() until the alarm's SIGALRM: the handler runs, -1 EINTR;
 *   interval - a periodic setitimer wakes sigsuspend three times, getitimer reports it;
 *   alarmret - alarm() returns the seconds left of the previous alarm;
 *   dfl      - SIGALRM at its default action terminates the process. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int alarms;
static void on_alrm(int sig) { alarms++; }

static void handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alrm;
    sigaction(SIGALRM, &sa, 0);
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "sleep";
    if (!strcmp(what, "sleep")) {
        handler();
        alarm(1);
        struct timespec req = {3, 0}, rem = {0, 0};
        int r = nanosleep(&req, &rem);
        long ms = rem.tv_sec * 1000 + rem.tv_nsec / 1000000;
        printf("r=%d errno=%d alarms=%d rem=%lds\n", r, errno, alarms, (ms + 500) / 1000);
        struct timespec bad = {0, 1000000000};
        r = nanosleep(&bad, 0);
        printf("bad nsec: r=%d errno=%d\n", r, errno);
        struct timespec shortreq = {0, 1000};
        r = nanosleep(&shortreq, 0);
        printf("short: r=%d alarms=%d\n", r, alarms);
    } else if (!strcmp(what, "pause")) {
        handler();
        alarm(1);
        int r = pause();
        printf("pause r=%d errno=%d alarms=%d\n", r, errno, alarms);
    } else if (!strcmp(what, "interval")) {
        handler();
        sigset_t set, old;
        sigemptyset(&set);
        sigaddset(&set, SIGALRM);
        sigprocmask(SIG_BLOCK, &set, &old);
        struct itimerval it = {{0, 200000}, {0, 200000}}, cur;
        setitimer(ITIMER_REAL, &it, 0);
        getitimer(ITIMER_REAL, &cur);
        printf("interval=%ld.%06ld armed=%d\n", (long)cur.it_interval.tv_sec,
               (long)cur.it_interval.tv_usec, cur.it_value.tv_sec == 0 && cur.it_value.tv_usec > 0);
        while (alarms < 3)
            sigsuspend(&old);
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &off, 0);
        getitimer(ITIMER_REAL, &cur);
        printf("alarms=%d disarmed=%d\n", alarms, cur.it_value.tv_sec == 0 && cur.it_value.tv_usec == 0);
        int r = setitimer(7, &it, 0);
        printf("bad which: r=%d errno=%d\n", r, errno);
    } else if (!strcmp(what, "alarmret")) {
        unsigned a = alarm(5);
        unsigned b = alarm(2);
        unsigned c = alarm(0);
        printf("alarm: %u %u %u\n", a, b, c);
    } else if (!strcmp(what, "dfl")) {
        alarm(1);
        pause();
        printf("not reached\n");
    }
    return 0;
}
