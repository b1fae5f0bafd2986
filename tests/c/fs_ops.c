/* Runs filesystem operations named on the command line, one per argument
 * ("op,arg,arg..."), and prints each result: the value, or the errno's name.
 * "fd" operations use the descriptor the last successful open returned. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static int last = -1;
static long long saved_doff = -1;          /* d_off of the last entry getdents showed */

static void result(const char *op, long r)
{
    if (r < 0)
        printf("%s -> %s\n", op, strerrorname_np(errno));
    else
        printf("%s -> %ld\n", op, r);
}

static void show_stat(const char *op, long r, struct stat *st, int full)
{
    if (r < 0) {
        result(op, r);
        return;
    }
    printf("%s -> mode=%o nlink=%lu uid=%u gid=%u size=%ld", op, st->st_mode, (unsigned long)st->st_nlink,
           st->st_uid, st->st_gid, (long)st->st_size);
    if (full)
        printf(" dev=%lx ino=%lu rdev=%lx blksize=%ld blocks=%ld atime=%ld.%09ld mtime=%ld.%09ld ctime=%ld.%09ld",
               (unsigned long)st->st_dev, (unsigned long)st->st_ino, (unsigned long)st->st_rdev,
               (long)st->st_blksize, (long)st->st_blocks, st->st_atim.tv_sec, st->st_atim.tv_nsec,
               st->st_mtim.tv_sec, st->st_mtim.tv_nsec, st->st_ctim.tv_sec, st->st_ctim.tv_nsec);
    printf("\n");
}

static long num(const char *s)
{
    return s ? strtol(s, NULL, 0) : 0;
}

static void dents(const char *op, int size, int max)
{
    char buf[65536];
    long n = syscall(SYS_getdents64, last, buf, size);
    if (n < 0) {
        result(op, n);
        return;
    }
    printf("%s -> %ld:", op, n);
    for (long off = 0; off < n && max-- != 0;) {
        struct dirent64 *d = (struct dirent64 *)(buf + off);
        struct stat st;
        int same = fstatat(last, d->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == d->d_ino;
        printf(" %s/%d%s", d->d_name, d->d_type, same ? "" : "/ino?");
        off += d->d_reclen;
        if (off >= n || max == 0)
            printf(" next=%s", off >= n ? "end" : "more");
        if (max == 0) {
            printf(" d_off=%lld", (long long)d->d_off);
            saved_doff = d->d_off;
        }
    }
    printf("\n");
}

int main(int argc, char **argv)
{
    char buf[8192];
    for (int i = 1; i < argc; i++) {
        char *op = strdup(argv[i]), *a[6] = {0};
        char *save, *name = strtok_r(op, ",", &save);
        for (int k = 0; k < 6; k++)
            a[k] = strtok_r(NULL, ",", &save);
        const char *label = argv[i];
        long r;
        struct stat st;
        errno = 0;
        if (!strcmp(name, "open")) {
            r = open(a[0], num(a[1]), num(a[2]));
            if (r >= 0)
                last = r;
            result(label, r);
        } else if (!strcmp(name, "openat")) {      /* relative to the last descriptor */
            r = openat(last, a[0], num(a[1]), num(a[2]));
            if (r >= 0)
                last = r;
            result(label, r);
        } else if (!strcmp(name, "openat2")) {
            uint64_t how[3] = {num(a[1]), num(a[2]), num(a[3])};
            r = syscall(SYS_openat2, AT_FDCWD, a[0], how, sizeof how);
            if (r >= 0)
                last = r;
            result(label, r);
        } else if (!strcmp(name, "creat")) {
            r = creat(a[0], num(a[1]));
            if (r >= 0)
                last = r;
            result(label, r);
        } else if (!strcmp(name, "close")) {
            result(label, close(last));
        } else if (!strcmp(name, "getfl")) {
            result(label, fcntl(last, F_GETFL));
        } else if (!strcmp(name, "read") || !strcmp(name, "pread")) {
            r = name[0] == 'r' ? read(last, buf, num(a[0])) : pread(last, buf, num(a[0]), num(a[1]));
            if (r < 0)
                result(label, r);
            else
                printf("%s -> %ld '%.*s'\n", label, r, (int)r, buf);
        } else if (!strcmp(name, "readv") || !strcmp(name, "preadv")) {
            char b1[64], b2[64];
            struct iovec iov[2] = {{b1, num(a[0])}, {b2, num(a[1])}};
            r = name[0] == 'r' ? readv(last, iov, 2) : preadv(last, iov, 2, num(a[2]));
            if (r < 0)
                result(label, r);
            else {
                long n1 = r < (long)iov[0].iov_len ? r : (long)iov[0].iov_len;
                printf("%s -> %ld '%.*s' '%.*s'\n", label, r, (int)n1, b1, (int)(r - n1), b2);
            }
        } else if (!strcmp(name, "write")) {
            result(label, write(last, a[0], strlen(a[0])));
        } else if (!strcmp(name, "pwrite")) {
            result(label, pwrite(last, a[0], strlen(a[0]), num(a[1])));
        } else if (!strcmp(name, "writev") || !strcmp(name, "pwritev")) {
            struct iovec iov[2] = {{a[0], strlen(a[0])}, {a[1], strlen(a[1])}};
            r = name[0] == 'w' ? writev(last, iov, 2) : pwritev(last, iov, 2, num(a[2]));
            result(label, r);
        } else if (!strcmp(name, "seekdoff")) {  /* back to where getdents stopped */
            result(label, lseek(last, saved_doff, SEEK_SET) == saved_doff ? 0 : -1);
        } else if (!strcmp(name, "forkchdir")) { /* the child changes directory, not the parent */
            pid_t pid = fork();
            if (pid == 0) {
                r = chdir(a[0]);
                printf("child %s -> %ld %s\n", label, r, getcwd(buf, sizeof buf));
                fflush(stdout);
                _exit(0);
            }
            int status;
            waitpid(pid, &status, 0);
            printf("parent %s -> %s\n", label, getcwd(buf, sizeof buf));
        } else if (!strcmp(name, "lseek")) {
            result(label, lseek(last, num(a[0]), num(a[1])));
        } else if (!strcmp(name, "stat") || !strcmp(name, "statfull")) {
            r = stat(a[0], &st);
            show_stat(label, r, &st, name[4] == 'f');
        } else if (!strcmp(name, "lstat") || !strcmp(name, "lstatfull")) {
            r = lstat(a[0], &st);
            show_stat(label, r, &st, name[5] == 'f');
        } else if (!strcmp(name, "fstat") || !strcmp(name, "fstatfull")) {
            r = fstat(last, &st);
            show_stat(label, r, &st, name[5] == 'f');
        } else if (!strcmp(name, "fstatat")) {
            r = fstatat(AT_FDCWD, a[0] ? a[0] : "", &st, num(a[1]));
            show_stat(label, r, &st, 0);
        } else if (!strcmp(name, "times")) {     /* path, fstatat flags: atime and mtime */
            r = fstatat(AT_FDCWD, a[0], &st, num(a[1]));
            if (r < 0)
                result(label, r);
            else
                printf("%s -> atime=%ld.%09ld mtime=%ld.%09ld\n", label, st.st_atim.tv_sec,
                       st.st_atim.tv_nsec, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
        } else if (!strcmp(name, "statx")) {
            struct statx sx;
            r = syscall(SYS_statx, AT_FDCWD, a[0] ? a[0] : "", num(a[1]), num(a[2]), &sx);
            if (r < 0)
                result(label, r);
            else
                printf("%s -> mask=%x mode=%o nlink=%u uid=%u gid=%u size=%llu blksize=%u blocks=%llu"
                       " ino=%llu dev=%u:%u rdev=%u:%u mtime=%lld.%09u\n", label, sx.stx_mask, sx.stx_mode,
                       sx.stx_nlink, sx.stx_uid, sx.stx_gid, (unsigned long long)sx.stx_size, sx.stx_blksize,
                       (unsigned long long)sx.stx_blocks, (unsigned long long)sx.stx_ino, sx.stx_dev_major,
                       sx.stx_dev_minor, sx.stx_rdev_major, sx.stx_rdev_minor,
                       (long long)sx.stx_mtime.tv_sec, sx.stx_mtime.tv_nsec);
        } else if (!strcmp(name, "access")) {
            result(label, access(a[0], num(a[1])));
        } else if (!strcmp(name, "faccessat2")) {
            result(label, syscall(SYS_faccessat2, AT_FDCWD, a[0] ? a[0] : "", num(a[1]), num(a[2])));
        } else if (!strcmp(name, "readlink")) {
            r = readlink(a[0], buf, num(a[1]));
            if (r < 0)
                result(label, r);
            else
                printf("%s -> %ld '%.*s'\n", label, r, (int)r, buf);
        } else if (!strcmp(name, "getdents")) {  /* size, entries to show (-1: all) */
            dents(label, num(a[0]), a[1] ? num(a[1]) : -1);
        } else if (!strcmp(name, "mkdir")) {
            result(label, mkdir(a[0], num(a[1])));
        } else if (!strcmp(name, "rmdir")) {
            result(label, rmdir(a[0]));
        } else if (!strcmp(name, "unlink")) {
            result(label, unlink(a[0]));
        } else if (!strcmp(name, "unlinkat")) {
            result(label, unlinkat(AT_FDCWD, a[0], num(a[1])));
        } else if (!strcmp(name, "rename")) {
            result(label, rename(a[0], a[1]));
        } else if (!strcmp(name, "renameat2")) {
            result(label, syscall(SYS_renameat2, AT_FDCWD, a[0], AT_FDCWD, a[1], num(a[2])));
        } else if (!strcmp(name, "truncate")) {
            result(label, truncate(a[0], num(a[1])));
        } else if (!strcmp(name, "fsync")) {
            result(label, fsync(last));
        } else if (!strcmp(name, "fdatasync")) {
            result(label, fdatasync(last));
        } else if (!strcmp(name, "ftruncate")) {
            result(label, ftruncate(last, num(a[0])));
        } else if (!strcmp(name, "umask")) {
            printf("%s -> %o\n", label, umask(num(a[0])));
        } else if (!strcmp(name, "getcwd")) {
            r = syscall(SYS_getcwd, buf, num(a[0]));
            if (r < 0)
                result(label, r);
            else
                printf("%s -> %ld '%s'\n", label, r, buf);
        } else if (!strcmp(name, "chdir")) {
            result(label, chdir(a[0]));
        } else if (!strcmp(name, "fchdir")) {
            result(label, fchdir(last));
        } else if (!strcmp(name, "chmod")) {
            result(label, chmod(a[0], num(a[1])));
        } else if (!strcmp(name, "fchmod")) {
            result(label, fchmod(last, num(a[0])));
        } else if (!strcmp(name, "chown")) {
            result(label, chown(a[0], num(a[1]), num(a[2])));
        } else if (!strcmp(name, "lchown")) {
            result(label, lchown(a[0], num(a[1]), num(a[2])));
        } else if (!strcmp(name, "fchown")) {
            result(label, fchown(last, num(a[0]), num(a[1])));
        } else if (!strcmp(name, "utimens")) {   /* path, sec, nsec, flags */
            struct timespec ts[2] = {{num(a[1]), num(a[2])}, {num(a[1]), num(a[2])}};
            result(label, utimensat(AT_FDCWD, a[0], ts, num(a[3])));
        } else if (!strcmp(name, "utimensnull")) {
            result(label, utimensat(AT_FDCWD, a[0], NULL, 0));
        } else if (!strcmp(name, "symlink")) {
            result(label, symlink(a[0], a[1]));
        } else if (!strcmp(name, "link")) {
            result(label, link(a[0], a[1]));
        } else if (!strcmp(name, "linkat")) {
            result(label, linkat(AT_FDCWD, a[0], AT_FDCWD, a[1], num(a[2])));
        } else if (!strcmp(name, "linkfd")) {   /* the last descriptor's file, AT_EMPTY_PATH */
            result(label, linkat(last, "", AT_FDCWD, a[0], AT_EMPTY_PATH));
        } else if (!strcmp(name, "become")) {   /* drop to uid,gid */
            r = setgroups(0, NULL);
            r = r < 0 ? r : setresgid(num(a[1]), num(a[1]), num(a[1]));
            result(label, r < 0 ? r : setresuid(num(a[0]), num(a[0]), num(a[0])));
        } else if (!strcmp(name, "seteuid")) {
            result(label, syscall(SYS_setresuid, -1, num(a[0]), -1));
        } else {
            printf("%s: unknown operation\n", label);
            return 2;
        }
        free(op);
    }
    return 0;
}
