/* Resource limits, personality and process groups, printed for a native comparison. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

static void show(const char *what, int r) { printf("%s: %d errno=%d\n", what, r, r < 0 ? errno : 0); }

static int nofile(int argc, char **argv) {
    struct rlimit rl = {100, 200}, got;
    show("setrlimit nofile 100/200", setrlimit(RLIMIT_NOFILE, &rl));
    getrlimit(RLIMIT_NOFILE, &got);
    printf("now %llu/%llu\n", (unsigned long long)got.rlim_cur, (unsigned long long)got.rlim_max);
    show("dup2 to 99", dup2(1, 99));
    show("dup2 to 100", dup2(1, 100));
    show("fcntl F_DUPFD 100", fcntl(1, F_DUPFD, 100));
    struct rlimit bad = {300, 200};
    show("cur above max", setrlimit(RLIMIT_NOFILE, &bad));
    struct rlimit huge = {10, 2000000};
    show("max above nr_open", setrlimit(RLIMIT_NOFILE, &huge));
    show("bad resource", setrlimit(99, &rl));
    pid_t pid = fork();
    if (pid == 0) {
        getrlimit(RLIMIT_NOFILE, &got);
        printf("child %llu/%llu\n", (unsigned long long)got.rlim_cur, (unsigned long long)got.rlim_max);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    struct rlimit old;
    struct rlimit mine = {50, 200};
    show("prlimit64 self", (int)prlimit(0, RLIMIT_NOFILE, &mine, &old));
    printf("old %llu/%llu\n", (unsigned long long)old.rlim_cur, (unsigned long long)old.rlim_max);
    show("prlimit64 no such pid", (int)prlimit(999999, RLIMIT_NOFILE, NULL, &old));
    return 0;
}

static int unprivileged(int argc, char **argv) {
    struct rlimit rl = {1024, 2048};
    show("lower hard limit", setrlimit(RLIMIT_NOFILE, &rl));
    struct rlimit up = {1024, 4096};
    show("raise hard limit again", setrlimit(RLIMIT_NOFILE, &up));
    return 0;
}

static int persona(int argc, char **argv) {
    struct utsname u;
    printf("query %#x\n", personality(0xffffffff));
    printf("set32 old %#x\n", personality(PER_LINUX32));
    uname(&u);
    printf("machine %s\n", u.machine);
    pid_t pid = fork();
    if (pid == 0) {
        uname(&u);
        printf("child machine %s persona %#x\n", u.machine, personality(0xffffffff));
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    printf("back old %#x\n", personality(PER_LINUX));
    uname(&u);
    printf("machine %s\n", u.machine);
    return 0;
}

static int pgid(int argc, char **argv) {
    int fds[2];
    pipe(fds);
    pid_t pid = fork();
    if (pid == 0) {
        char c;
        read(fds[0], &c, 1);
        _exit(0);
    }
    printf("child pgid is mine: %d\n", getpgid(pid) == getpgrp());
    show("setpgid child", setpgid(pid, pid));
    printf("child pgid is its pid: %d\n", getpgid(pid) == pid);
    show("getpgid of no such pid", getpgid(999999));
    write(fds[1], "x", 1);
    waitpid(pid, NULL, 0);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 2) return 2;
    if (!strcmp(argv[1], "nofile")) return nofile(argc, argv);
    if (!strcmp(argv[1], "unprivileged")) return unprivileged(argc, argv);
    if (!strcmp(argv[1], "persona")) return persona(argc, argv);
    if (!strcmp(argv[1], "pgid")) return pgid(argc, argv);
    return 2;
}
