/* Extended attributes, statfs and fadvise64 as a program sees them, printed so that a
 * native run and a run in the model can be compared byte for byte.  argv[1] is the mode
 * (xattr, perm, set, statfs, fadvise), argv[2] a directory prepared by the test (a file "f"
 * with user.* attributes, a symlink "lnk" to it, an unreadable file "secret" owned by root). Each
 * call prints its result or its errno's name. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <unistd.h>

static char buf[1024];
static void *volatile bad = (void *)1; /* an address nothing is mapped at */
static void *volatile big = buf;      /* a buffer the compiler cannot size */
static char path[512];

static const char *ename(int e)
{
    switch (e) {
    case ENODATA: return "ENODATA";
    case ERANGE: return "ERANGE";
    case EFAULT: return "EFAULT";
    case ENOENT: return "ENOENT";
    case ENOTDIR: return "ENOTDIR";
    case ELOOP: return "ELOOP";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EBADF: return "EBADF";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case EROFS: return "EROFS";
    case EINVAL: return "EINVAL";
    case ESPIPE: return "ESPIPE";
    case E2BIG: return "E2BIG";
    case EEXIST: return "EEXIST";
    default: return "E?";
    }
}

static void show(const char *what, long r)
{
    if (r < 0)
        printf("%s = %s\n", what, ename(errno));
    else
        printf("%s = %ld\n", what, r);
}

static void value(const char *what, long r)
{
    show(what, r);
    if (r > 0) {
        printf("  [");
        for (long i = 0; i < r; i++)
            putchar(buf[i] ? buf[i] : '|');
        printf("]\n");
    }
}

static const char *in(const char *dir, const char *name)
{
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static void xattrs(const char *dir)
{
    static const char *names[] = {"user.x", "security.x", "trusted.x", "system.posix_acl_access",
                                  "system.posix_acl_default", "system.foo", "foo.bar"};
    static const char *paths[] = {"/etc", "/etc/passwd", "/proc", "/proc/self/status", "/dev", "/dev/null",
                                  "/sys", "/sys/devices/system/cpu/online"};
    char what[160], longname[300];
    for (unsigned p = 0; p < sizeof paths / sizeof *paths; p++)
        for (unsigned n = 0; n < sizeof names / sizeof *names; n++) {
            snprintf(what, sizeof what, "getxattr %s %s", paths[p], names[n]);
            show(what, getxattr(paths[p], names[n], buf, sizeof buf));
        }
    show("lgetxattr /dev/stdin user.x", lgetxattr("/dev/stdin", "user.x", buf, sizeof buf));
    show("lgetxattr /dev/stdin acl", lgetxattr("/dev/stdin", "system.posix_acl_access", buf, sizeof buf));
    show("listxattr /proc/self/status", listxattr("/proc/self/status", buf, sizeof buf));
    show("listxattr /dev/null", listxattr("/dev/null", buf, sizeof buf));
    show("listxattr /sys", listxattr("/sys", buf, sizeof buf));
    /* the names */
    show("empty name", getxattr("/etc", "", buf, sizeof buf));
    memset(longname, 'a', sizeof longname);
    memcpy(longname, "user.", 5);
    longname[255] = 0;
    show("255-byte name", getxattr("/etc", longname, buf, sizeof buf));
    longname[255] = 'a';
    longname[256] = 0;
    show("256-byte name", getxattr("/etc", longname, buf, sizeof buf));
    show("name fault", getxattr("/etc", (const char *)bad, buf, sizeof buf));
    show("name fault before path", getxattr("/nonexistent", (const char *)bad, buf, sizeof buf));
    show("path fault", getxattr((const char *)bad, "user.x", buf, sizeof buf));
    show("missing", getxattr("/nonexistent", "user.x", buf, sizeof buf));
    show("not a directory", getxattr("/etc/passwd/x", "user.x", buf, sizeof buf));
    show("list missing", listxattr("/nonexistent", buf, sizeof buf));
    /* the prepared directory: real values */
    value("getxattr f user.a", getxattr(in(dir, "f"), "user.a", buf, sizeof buf));
    value("getxattr f user.b", getxattr(in(dir, "f"), "user.b", buf, sizeof buf));
    show("getxattr f user.a size 0", getxattr(in(dir, "f"), "user.a", NULL, 0));
    show("getxattr f user.a size 2", getxattr(in(dir, "f"), "user.a", buf, 2));
    show("getxattr f user.a value fault", getxattr(in(dir, "f"), "user.a", bad, 64));
    show("getxattr f user.none value fault", getxattr(in(dir, "f"), "user.none", bad, 64));
    value("getxattr lnk user.a", getxattr(in(dir, "lnk"), "user.a", buf, sizeof buf));
    show("lgetxattr lnk user.a", lgetxattr(in(dir, "lnk"), "user.a", buf, sizeof buf));
    show("lgetxattr lnk acl", lgetxattr(in(dir, "lnk"), "system.posix_acl_access", buf, sizeof buf));
    show("getxattr loop", getxattr(in(dir, "loop"), "user.a", buf, sizeof buf));
    value("listxattr f", listxattr(in(dir, "f"), buf, sizeof buf));
    show("listxattr f size 0", listxattr(in(dir, "f"), NULL, 0));
    show("listxattr f size 3", listxattr(in(dir, "f"), buf, 3));
    show("listxattr f fault", listxattr(in(dir, "f"), bad, 64));
    value("listxattr lnk", listxattr(in(dir, "lnk"), buf, sizeof buf));
    show("llistxattr lnk", llistxattr(in(dir, "lnk"), buf, sizeof buf));
    value("listxattr dir", listxattr(dir, buf, sizeof buf));
    /* descriptors */
    int fd = open(in(dir, "f"), O_RDONLY);
    value("fgetxattr f user.a", fgetxattr(fd, "user.a", buf, sizeof buf));
    value("flistxattr f", flistxattr(fd, buf, sizeof buf));
    close(fd);
    fd = open(in(dir, "f"), O_PATH);
    show("fgetxattr O_PATH", fgetxattr(fd, "user.a", buf, sizeof buf));
    show("flistxattr O_PATH", flistxattr(fd, buf, sizeof buf));
    close(fd);
    show("fgetxattr bad fd", fgetxattr(99, "user.a", buf, sizeof buf));
    show("flistxattr bad fd", flistxattr(99, buf, sizeof buf));
    int p[2];
    pipe(p);
    show("fgetxattr pipe user.x", fgetxattr(p[0], "user.x", buf, sizeof buf));
    show("fgetxattr pipe security.x", fgetxattr(p[0], "security.x", buf, sizeof buf));
    show("fgetxattr pipe acl", fgetxattr(p[0], "system.posix_acl_access", buf, sizeof buf));
    show("flistxattr pipe", flistxattr(p[0], buf, sizeof buf));
    fd = open("/proc/self/status", O_RDONLY);
    show("fgetxattr /proc file", fgetxattr(fd, "user.x", buf, sizeof buf));
    close(fd);
    fd = open("/dev/null", O_RDONLY);
    show("fgetxattr /dev/null", fgetxattr(fd, "security.x", buf, sizeof buf));
    close(fd);
}

static void set(const char *dir)
{
    show("setxattr user.c", setxattr(in(dir, "f"), "user.c", "val", 3, 0));
    value("getxattr user.c", getxattr(in(dir, "f"), "user.c", buf, sizeof buf));
    show("setxattr create existing", setxattr(in(dir, "f"), "user.c", "v2", 2, XATTR_CREATE));
    show("setxattr replace missing", setxattr(in(dir, "f"), "user.d", "v2", 2, XATTR_REPLACE));
    show("setxattr bad flags", setxattr(in(dir, "f"), "user.c", "v2", 2, 4));
    show("setxattr too big", setxattr(in(dir, "f"), "user.c", big, 65537, 0));
    show("setxattr value fault", setxattr(in(dir, "f"), "user.c", bad, 2, 0));
    show("lsetxattr lnk user.c", lsetxattr(in(dir, "lnk"), "user.c", "v", 1, 0));
    int fd = open(in(dir, "f"), O_RDONLY);
    show("fsetxattr user.e", fsetxattr(fd, "user.e", "fd", 2, 0));
    show("fremovexattr user.e", fremovexattr(fd, "user.e"));
    close(fd);
    show("removexattr user.c", removexattr(in(dir, "f"), "user.c"));
    show("removexattr user.c again", removexattr(in(dir, "f"), "user.c"));
    show("lremovexattr lnk user.c", lremovexattr(in(dir, "lnk"), "user.c"));
    value("listxattr f", listxattr(in(dir, "f"), buf, sizeof buf));
}

static void perms(const char *dir)
{
    value("getxattr f trusted.t", getxattr(in(dir, "f"), "trusted.t", buf, sizeof buf));
    value("listxattr f", listxattr(in(dir, "f"), buf, sizeof buf));
    show("listxattr f size 0", listxattr(in(dir, "f"), NULL, 0));
    show("getxattr secret user.x", getxattr(in(dir, "secret"), "user.x", buf, sizeof buf));
    show("getxattr secret security.x", getxattr(in(dir, "secret"), "security.x", buf, sizeof buf));
    show("getxattr secret foo.bar", getxattr(in(dir, "secret"), "foo.bar", buf, sizeof buf));
    show("getxattr secret acl", getxattr(in(dir, "secret"), "system.posix_acl_access", buf, sizeof buf));
    show("listxattr secret", listxattr(in(dir, "secret"), buf, sizeof buf));
    show("setxattr secret user.x", setxattr(in(dir, "secret"), "user.x", "v", 1, 0));
    show("removexattr secret user.x", removexattr(in(dir, "secret"), "user.x"));
}

static void fs_line(const char *what, long r, struct statfs *s, int counts)
{
    if (r < 0) {
        show(what, r);
        return;
    }
    printf("%s type=%lx bsize=%ld namelen=%ld frsize=%ld flags=%lx", what, (long)s->f_type, (long)s->f_bsize,
           (long)s->f_namelen, (long)s->f_frsize, (long)s->f_flags);
    if (counts)
        printf(" blocks=%lu bfree=%lu bavail=%lu files=%lu ffree=%lu", (unsigned long)s->f_blocks,
               (unsigned long)s->f_bfree, (unsigned long)s->f_bavail, (unsigned long)s->f_files,
               (unsigned long)s->f_ffree);
    printf("\n");
}

static void statfses(const char *dir)
{
    struct statfs s, h;
    struct stat st;
    fs_line("statfs /proc", statfs("/proc", &s), &s, 1);
    stat("/proc", &st);
    printf("  fsid is st_dev: %d\n", s.f_fsid.__val[0] == (int)st.st_dev && s.f_fsid.__val[1] == 0);
    fs_line("statfs /proc/self/status", statfs("/proc/self/status", &s), &s, 1);
    fs_line("statfs /sys", statfs("/sys", &s), &s, 1);
    fs_line("statfs /dev/null", statfs("/dev/null", &s), &s, 0);
    printf("  blocks free, as many inodes: %d %d %d\n", s.f_bfree == s.f_blocks, s.f_bavail == s.f_blocks,
           s.f_files == s.f_blocks);
    int p[2];
    pipe(p);
    fs_line("fstatfs pipe", fstatfs(p[0], &s), &s, 1);
    fstat(p[0], &st);
    printf("  fsid is st_dev: %d\n", s.f_fsid.__val[0] == (int)st.st_dev && s.f_fsid.__val[1] == 0);
    int r = statfs(dir, &s);
    fs_line("statfs dir", r, &s, 0);
    printf("  blocks=%lu files=%lu\n", (unsigned long)s.f_blocks, (unsigned long)s.f_files);
    int fd = open(dir, O_PATH);
    fs_line("fstatfs O_PATH dir", fstatfs(fd, &h), &h, 0);
    printf("  same blocks, files and fsid: %d\n", h.f_blocks == s.f_blocks && h.f_files == s.f_files &&
                                                     !memcmp(&h.f_fsid, &s.f_fsid, sizeof h.f_fsid));
    close(fd);
    show("statfs missing", statfs("/nonexistent", &s));
    show("statfs not a directory", statfs("/etc/passwd/x", &s));
    show("statfs path fault", statfs((const char *)bad, &s));
    show("statfs buffer fault", statfs("/", (struct statfs *)bad));
    show("fstatfs bad fd", fstatfs(99, &s));
    show("fstatfs buffer fault", fstatfs(0, (struct statfs *)bad));
}

static void fadvises(const char *dir)
{
    char what[64];
    int fd = open(in(dir, "f"), O_RDONLY);
    for (int advice = -1; advice <= 6; advice++) {
        snprintf(what, sizeof what, "fadvise file advice %d", advice);
        show(what, syscall(SYS_fadvise64, fd, 0L, 0L, advice));
    }
    show("fadvise negative len", syscall(SYS_fadvise64, fd, 0L, -1L, 0));
    show("fadvise negative offset", syscall(SYS_fadvise64, fd, -5L, 10L, 0));
    close(fd);
    fd = open(dir, O_RDONLY | O_DIRECTORY);
    show("fadvise directory", syscall(SYS_fadvise64, fd, 0L, 0L, 3));
    close(fd);
    fd = open(in(dir, "f"), O_PATH);
    show("fadvise O_PATH", syscall(SYS_fadvise64, fd, 0L, 0L, 0));
    close(fd);
    show("fadvise bad fd", syscall(SYS_fadvise64, 99, 0L, 0L, 0));
    int p[2];
    pipe(p);
    show("fadvise pipe", syscall(SYS_fadvise64, p[0], 0L, 0L, 0));
    show("fadvise pipe bad advice", syscall(SYS_fadvise64, p[1], 0L, -1L, 9));
    fd = open("/dev/null", O_RDONLY);
    show("fadvise /dev/null", syscall(SYS_fadvise64, fd, 0L, 0L, 4));
    show("fadvise /dev/null bad advice", syscall(SYS_fadvise64, fd, 0L, 0L, 6));
    close(fd);
    fd = open("/proc/self/status", O_RDONLY);
    show("fadvise /proc file", syscall(SYS_fadvise64, fd, 0L, 0L, 1));
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    if (!strcmp(argv[1], "xattr"))
        xattrs(argv[2]);
    else if (!strcmp(argv[1], "perm"))
        perms(argv[2]);
    else if (!strcmp(argv[1], "set"))
        set(argv[2]);
    else if (!strcmp(argv[1], "statfs"))
        statfses(argv[2]);
    else if (!strcmp(argv[1], "fadvise"))
        fadvises(argv[2]);
    else
        return 2;
    return 0;
}
