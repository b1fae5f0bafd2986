/* Credentials: the ids a process starts with (syscalls and auxv) and a fixed sequence
 * of set*id calls (raw syscalls: glibc's setxid broadcast plays no part), each followed
 * by every id, so a run as root and a run as an ordinary user can be compared. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

static void ids(const char *what, long rc) {
    unsigned r, e, s, gr, ge, gs;
    int err = rc < 0 ? errno : 0;
    syscall(SYS_getresuid, &r, &e, &s);
    syscall(SYS_getresgid, &gr, &ge, &gs);
    long fsu = syscall(SYS_setfsuid, -1), fsg = syscall(SYS_setfsgid, -1);
    printf("%-22s rc=%ld errno=%s uid=%u,%u,%u,%ld gid=%u,%u,%u,%ld\n", what, rc,
           err ? strerrorname_np(err) : "0", r, e, s, fsu, gr, ge, gs, fsg);
}

int main(void) {
    gid_t groups[64];
    printf("uid=%ld euid=%ld gid=%ld egid=%ld\n", syscall(SYS_getuid), syscall(SYS_geteuid),
           syscall(SYS_getgid), syscall(SYS_getegid));
    printf("auxv uid=%lu euid=%lu gid=%lu egid=%lu\n", getauxval(AT_UID), getauxval(AT_EUID),
           getauxval(AT_GID), getauxval(AT_EGID));
    long n = syscall(SYS_getgroups, 0, NULL);
    printf("ngroups=%ld", n);
    long got = syscall(SYS_getgroups, 64, groups);
    for (long i = 0; i < got; i++)
        printf(" %u", groups[i]);
    printf("\n");
    long small = syscall(SYS_getgroups, -1, groups);
    printf("getgroups(-1) rc=%ld errno=%s\n", small, strerrorname_np(errno));
    ids("start", 0);
    ids("setuid(-1)", syscall(SYS_setuid, -1));
    ids("setresuid(-1,-1,-1)", syscall(SYS_setresuid, -1, -1, -1));
    ids("setuid(own)", syscall(SYS_setuid, getuid()));
    ids("setfsuid(4141)", syscall(SYS_setfsuid, 4141));
    ids("setgid(777)", syscall(SYS_setgid, 777));
    ids("setresgid(-1,778,-1)", syscall(SYS_setresgid, -1, 778, -1));
    ids("setregid(779,-1)", syscall(SYS_setregid, 779, -1));
    ids("setfsgid(780)", syscall(SYS_setfsgid, 780));
    gid_t two[2] = {9, 3};
    long sg = syscall(SYS_setgroups, 2, two);
    ids("setgroups(9,3)", sg);
    got = syscall(SYS_getgroups, 64, groups);
    printf("groups now:");
    for (long i = 0; i < got; i++)
        printf(" %u", groups[i]);
    printf("\n");
    ids("setresuid(-1,-1,5)", syscall(SYS_setresuid, -1, -1, 5));
    ids("setuid(own) resets", syscall(SYS_setuid, getuid()));
    ids("setreuid(-1,4242)", syscall(SYS_setreuid, -1, 4242));
    ids("setuid(0)", syscall(SYS_setuid, 0));
    ids("setresuid(4343,-1,-1)", syscall(SYS_setresuid, 4343, -1, -1));
    ids("setreuid(-1,4343)", syscall(SYS_setreuid, -1, 4343));
    ids("setresuid(-1,0,-1)", syscall(SYS_setresuid, -1, 0, -1));
    ids("setuid(1000)", syscall(SYS_setuid, 1000));
    ids("setuid(0) again", syscall(SYS_setuid, 0));
    ids("setgroups(0)", syscall(SYS_setgroups, 0, NULL));
    return 0;
}
