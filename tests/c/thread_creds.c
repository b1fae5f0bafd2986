/* Credentials are per task: a raw setresuid in one thread leaves the others' ids; a
 * forked child starts with its parent thread's ids. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void show(const char *who) {
    unsigned r, e, s;
    syscall(SYS_getresuid, &r, &e, &s);
    printf("%s uid=%u,%u,%u\n", who, r, e, s);
    fflush(stdout);
}

static void *thread(void *arg) {
    syscall(SYS_setresuid, 5, 6, 7);
    show("thread");
    pid_t p = fork();
    if (p == 0) {
        show("thread's child");
        _exit(0);
    }
    waitpid(p, NULL, 0);
    return arg;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, thread, NULL);
    pthread_join(t, NULL);
    show("main");
    syscall(SYS_setresuid, 8, 8, 8);
    pid_t p = fork();
    if (p == 0) {
        show("main's child");
        _exit(0);
    }
    waitpid(p, NULL, 0);
    return 0;
}
