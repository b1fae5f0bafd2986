/* Empty and NULL path names with and without AT_EMPTY_PATH, on the working directory
 * and on a descriptor, as the raw syscalls answer them. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void show(const char *what, long r, struct stat *st)
{
    if (r < 0)
        printf("%s -> %s\n", what, strerrorname_np(errno));
    else
        printf("%s -> %ld mode=%o\n", what, r, st ? st->st_mode : 0);
}

int main(void)
{
    struct stat st;
    char b[64];
    show("fstatat(cwd, \"\", EMPTY)", syscall(SYS_newfstatat, AT_FDCWD, "", &st, AT_EMPTY_PATH), &st);
    show("fstatat(cwd, NULL, EMPTY)", syscall(SYS_newfstatat, AT_FDCWD, NULL, &st, AT_EMPTY_PATH), &st);
    show("fstatat(cwd, \"\", 0)", syscall(SYS_newfstatat, AT_FDCWD, "", &st, 0), NULL);
    show("fstatat(0, NULL, EMPTY)", syscall(SYS_newfstatat, 0, NULL, &st, AT_EMPTY_PATH), NULL);
    show("fstatat(0, NULL, 0)", syscall(SYS_newfstatat, 0, NULL, &st, 0), NULL);
    show("stat(NULL)", syscall(SYS_stat, NULL, &st), NULL);
    show("faccessat2(cwd, \"\", EMPTY)", syscall(SYS_faccessat2, AT_FDCWD, "", 0, AT_EMPTY_PATH), NULL);
    show("faccessat2(cwd, \"\", 0)", syscall(SYS_faccessat2, AT_FDCWD, "", 0, 0), NULL);
    show("readlinkat(cwd, \"\")", syscall(SYS_readlinkat, AT_FDCWD, "", b, 64), NULL);
    int dir = open(".", O_RDONLY | O_DIRECTORY);
    int lnk = open("lnk", O_PATH | O_NOFOLLOW);
    show("readlinkat(dir, \"\")", syscall(SYS_readlinkat, dir, "", b, 64), NULL);
    show("readlinkat(O_PATH link, \"\")", syscall(SYS_readlinkat, lnk, "", b, 64), NULL);
    show("fstatat(O_PATH link, \"\", EMPTY)", syscall(SYS_newfstatat, lnk, "", &st, AT_EMPTY_PATH), &st);
    show("fchownat(O_PATH link, \"\", EMPTY)", syscall(SYS_fchownat, lnk, "", -1, -1, AT_EMPTY_PATH), NULL);
    show("open(\"\")", syscall(SYS_open, "", O_RDONLY), NULL);
    show("mkdir(\"\")", syscall(SYS_mkdir, "", 0755), NULL);
    show("unlink(\"\")", syscall(SYS_unlink, ""), NULL);
    show("chdir(\"\")", syscall(SYS_chdir, ""), NULL);
    show("utimensat(cwd, NULL)", syscall(SYS_utimensat, AT_FDCWD, NULL, NULL, 0), NULL);
    return 0;
}
