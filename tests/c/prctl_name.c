/* prctl(PR_SET_NAME/PR_GET_NAME): the calling thread's comm, 15 bytes and a NUL.
 * argv[1] is the new name; named() is a probe site called after the rename. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

__attribute__((noinline)) int named(int x) {
    __asm__ volatile("" ::: "memory");
    return x + 1;
}

static void show(const char *who) {
    char buf[17];
    memset(buf, 'X', sizeof buf);
    long rc = prctl(PR_GET_NAME, buf);
    printf("%s rc=%ld name=%.16s len=%zu pad=%d,%c\n", who, rc, buf, strnlen(buf, 16),
           buf[15], buf[16]);
}

static void *thread(void *arg) {
    prctl(PR_SET_NAME, "worker");
    show("thread");
    named(2);
    return arg;
}

int main(int argc, char **argv) {
    show("start");
    long rc = prctl(PR_SET_NAME, argc > 1 ? argv[1] : "renamed");
    printf("set rc=%ld\n", rc);
    show("main");
    named(1);
    pthread_t t;
    pthread_create(&t, NULL, thread, NULL);
    pthread_join(t, NULL);
    show("main again");
    rc = prctl(PR_SET_NAME, (char *)8);
    printf("bad pointer rc=%ld errno=%s\n", rc, strerrorname_np(errno));
    return named(0) - 1;
}
