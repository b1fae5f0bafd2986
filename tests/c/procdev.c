/* What a program sees in /proc/self and /dev, printed so that a native run and a run
 * in the model can be compared byte for byte (host-specific numbers are compared with
 * what the program learns from syscalls, not printed).  One mode per argument. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <sys/ioctl.h>
#include <sys/auxv.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

extern char **environ;
static char buf[1 << 16];

static long slurp(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -errno;
    long n = 0, got;
    while ((got = read(fd, buf + n, sizeof buf - 1 - n)) > 0)
        n += got;
    buf[n] = 0;
    close(fd);
    return n;
}

static const char *line(const char *name)
{
    static char out[256];
    size_t len = strlen(name);
    for (char *p = buf; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, len) && p[len] == ':') {
            char *end = strchr(p, '\n');
            size_t n = end ? (size_t)(end - p) : strlen(p);
            memcpy(out, p, n);
            out[n] = 0;
            return out;
        }
    return "(missing)";
}

static long num(const char *name)
{
    const char *l = line(name);
    const char *v = strchr(l, ':');
    return v ? strtol(v + 1, NULL, 10) : -1;
}

static void show(const char *name)
{
    printf("%s\n", line(name));
}

static void on_term(int sig) { (void)sig; }

static int status(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, on_term);
    umask(027);
    slurp("/proc/self/status");
    show("Name");
    show("Umask");
    show("State");
    printf("Tgid is getpid: %d\n", num("Tgid") == getpid());
    printf("Pid is gettid: %d\n", num("Pid") == gettid());
    printf("PPid is getppid: %d\n", num("PPid") == getppid());
    printf("Uid is getuid: %d\n", num("Uid") == (long)getuid());
    show("Threads");
    show("SigPnd");
    show("ShdPnd");
    show("SigBlk");
    show("SigIgn");
    show("SigCgt");
    show("Ngid");
    show("TracerPid");
    show("Kthread");
    show("VmLck");
    show("VmPin");
    show("VmSwap");
    show("HugetlbPages");
    show("CoreDumping");
    show("untag_mask");
    show("Groups");
    return 0;
}

static int stat_(char **argv)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, on_term);
    long cmdline_len = slurp("/proc/self/cmdline");
    long env_len = 0;
    for (char **e = environ; *e; e++)
        env_len += strlen(*e) + 1;
    slurp("/proc/self/stat");
    unsigned long f[53] = {0};                 /* f[3].. = fields 3.. after the comm */
    char *p = strrchr(buf, ')') + 2;
    for (int i = 3; i <= 52 && p; i++) {
        f[i] = i == 3 ? (unsigned long)*p : strtoul(p, NULL, 10);
        p = strchr(p, ' ');
        p = p ? p + 1 : NULL;
    }
    printf("priority %ld nice %ld itrealvalue %lu rsslim %lu kstkesp %lu kstkeip %lu\n",
           (long)f[18], (long)f[19], f[21], f[25], f[29], f[30]);
    printf("signal %lu blocked %lu sigignore %lu sigcatch %lu nswap %lu %lu\n", f[31], f[32], f[33],
           f[34], f[36], f[37]);
    printf("exit_signal %lu rt_priority %lu policy %lu exit_code %lu\n", f[38], f[40], f[41], f[52]);
    printf("start_stack is argc's address: %d\n", f[28] == (unsigned long)(argv - 1));
    printf("arg span is cmdline: %d\n", (long)(f[49] - f[48]) == cmdline_len && f[48] == (unsigned long)argv[0]);
    printf("env span is environ: %d\n", (long)(f[51] - f[50]) == env_len && f[49] == f[50]);
    printf("vsize nonzero: %d\n", f[23] != 0);
    slurp("/proc/self/stat");
    char *close_paren = strrchr(buf, ')');
    char state;
    long ppid, pgrp;
    sscanf(close_paren + 2, "%c %ld %ld", &state, &ppid, &pgrp);
    printf("pid is getpid: %d\n", atol(buf) == getpid());
    printf("comm: %.*s\n", (int)(close_paren - strchr(buf, '(') + 1), strchr(buf, '('));
    printf("state %c ppid is getppid: %d pgrp is getpgrp: %d\n", state, ppid == getppid(), pgrp == getpgrp());
    int fields = 0;
    for (char *p = close_paren + 1; *p; p++)
        fields += p[0] == ' ' && p[1] != ' ' && p[1] != '\n';
    printf("fields after comm: %d\n", fields);
    return 0;
}

static int cmdline(void)
{
    long n = slurp("/proc/self/cmdline");
    for (long i = 0; i < n; i++)
        putchar(buf[i] ? buf[i] : '|');
    putchar('\n');
    slurp("/proc/self/comm");
    printf("comm: %s", buf);
    long n_env = slurp("/proc/self/environ"), at = 0, same = 1;
    for (char **e = environ; *e; e++) {
        same &= at + (long)strlen(*e) < n_env && !strcmp(buf + at, *e);
        at += strlen(*e) + 1;
    }
    printf("environ matches: %d\n", same && at == n_env);
    char link[4096], here[4096];
    ssize_t k = readlink("/proc/self/cwd", link, sizeof link - 1);
    link[k > 0 ? k : 0] = 0;
    printf("cwd is getcwd: %d\n", getcwd(here, sizeof here) && !strcmp(link, here));
    k = readlink("/proc/self/root", link, sizeof link - 1);
    link[k > 0 ? k : 0] = 0;
    printf("root: %s\n", link);
    long n_aux = slurp("/proc/self/auxv"), pairs = n_aux / 16, agree = 0;
    unsigned long *aux = (unsigned long *)buf;
    for (long i = 0; i + 1 < pairs; i++)
        agree += getauxval(aux[2 * i]) == aux[2 * i + 1] ||
                 aux[2 * i] == AT_HWCAP;      /* glibc answers its own x86 HWCAP bits there */
    printf("auxv pairs agree with getauxval: %d, ends with AT_NULL: %d\n", agree == pairs - 1,
           pairs > 0 && aux[2 * pairs - 2] == AT_NULL && n_aux % 16 == 0);
    return 0;
}

static int fds(void)
{
    int p[2];
    char link[256];
    for (int i = 3; i < 256; i++)     /* the same table natively and in the model */
        close(i);
    if (pipe(p))
        return 1;
    dup2(p[1], 9);
    ssize_t n = readlink("/proc/self/fd/9", link, sizeof link - 1);
    link[n > 0 ? n : 0] = 0;
    printf("fd 9 is a pipe: %d\n", !strncmp(link, "pipe:[", 6));
    int w = open("/proc/self/fd/9", O_WRONLY);
    printf("reopened: %d\n", w);
    printf("write: %zd\n", write(w, "through proc", 12));
    char got[32] = {0};
    printf("read: %zd %s\n", read(p[0], got, sizeof got - 1), got);
    struct stat a, b;
    fstat(w, &a);
    fstat(p[0], &b);
    printf("same pipe inode: %d fifo: %d\n", a.st_ino == b.st_ino, S_ISFIFO(a.st_mode));
    close(w);
    close(p[1]);
    DIR *d = opendir("/proc/self/fd");
    int seen[16] = {0};
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && atoi(e->d_name) < 16)
            seen[atoi(e->d_name)] = e->d_type == DT_LNK ? 1 : 2;
    printf("listed:");
    for (int i = 0; i < 16; i++)
        if (seen[i] && i != dirfd(d))
            printf(" %d%s", i, seen[i] == 1 ? "" : "?");
    printf("\n");
    closedir(d);
    int exe = open("/proc/self/exe", O_RDONLY);   /* a file with a path: reopened by it */
    char head[4], again_head[4];
    lseek(exe, 1, SEEK_SET);
    read(exe, head, 3);
    snprintf(link, sizeof link, "/proc/self/fd/%d", exe);
    int again = open(link, O_RDONLY);
    ssize_t got_again = read(again, again_head, 4);
    printf("reopened file reads from 0: %d, the first still at %ld\n",
           got_again == 4 && !memcmp(again_head, "\177ELF", 4), (long)lseek(exe, 0, SEEK_CUR));
    close(again);
    close(exe);
    errno = 0;
    n = readlink("/proc/self/fd/42", link, sizeof link);
    printf("fd 42: %zd errno=%d\n", n, errno);
    return 0;
}

static int devices(void)
{
    const char *names[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"};
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++) {
        struct stat st;
        if (stat(names[i], &st)) {
            printf("%s: errno=%d\n", names[i], errno);
            continue;
        }
        printf("%s: chr=%d mode=%o rdev=%u:%u ino=%lu\n", names[i], S_ISCHR(st.st_mode), st.st_mode & 07777,
               major(st.st_rdev), minor(st.st_rdev), (unsigned long)st.st_ino);
    }
    int fd = open("/dev/null", O_RDWR);
    struct stat a, b;
    stat("/dev/null", &a);
    fstat(fd, &b);
    printf("fstat is stat: %d\n", a.st_ino == b.st_ino && a.st_rdev == b.st_rdev && a.st_dev == b.st_dev);
    ssize_t r = read(fd, buf, 10), w = write(fd, "abc", 3);
    printf("null read %zd write %zd\n", r, w);
    struct termios t;
    errno = 0;
    int rc = ioctl(fd, TCGETS, &t);
    printf("TCGETS on null: %d errno=%d\n", rc, errno);
    int z = open("/dev/zero", O_RDONLY);
    memset(buf, 1, 8);
    r = read(z, buf, 8);
    printf("zero read %zd first %d last %d\n", r, buf[0], buf[7]);
    int f = open("/dev/full", O_WRONLY);
    errno = 0;
    w = write(f, "x", 1);
    printf("full write %zd errno=%d\n", w, errno);
    int u = open("/dev/urandom", O_RDONLY);
    printf("urandom read %zd\n", read(u, buf, 16));
    char link[64];
    ssize_t n = readlink("/dev/stdin", link, sizeof link - 1);
    link[n > 0 ? n : 0] = 0;
    printf("/dev/stdin -> %s\n", link);
    n = readlink("/dev/fd", link, sizeof link - 1);
    link[n > 0 ? n : 0] = 0;
    printf("/dev/fd -> %s\n", link);
    return 0;
}

static int redirect(void)
{
    /* what a shell does for "cmd >/dev/null": the output is gone, the exit status stays */
    fflush(stdout);
    int saved = dup(1);
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, 1);
    printf("this is swallowed\n");
    fflush(stdout);
    dup2(saved, 1);
    printf("after: back on stdout\n");
    return 0;
}

static int uptime(void)
{
    double up, idle;
    slurp("/proc/uptime");
    printf("parsed: %d\n", sscanf(buf, "%lf %lf", &up, &idle) == 2);
    slurp("/proc/meminfo");
    printf("%s\n", !strncmp(buf, "MemTotal:", 9) ? "MemTotal first" : "no MemTotal");
    long total = num("MemTotal");
    printf("MemTotal is sysconf: %d\n", total == sysconf(_SC_PHYS_PAGES) * (sysconf(_SC_PAGESIZE) / 1024));
    return 0;
}

static int fork_status(void)
{
    static char parent_cmdline[4096];
    long parent_len = slurp("/proc/self/cmdline");
    memcpy(parent_cmdline, buf, parent_len);
    pid_t child = fork();
    if (child == 0) {
        long n = slurp("/proc/self/cmdline");
        printf("child cmdline is the parent's: %d\n", n == parent_len && !memcmp(buf, parent_cmdline, n));
        slurp("/proc/self/status");
        printf("child PPid is getppid: %d\n", num("PPid") == getppid());
        printf("child Tgid is getpid: %d\n", num("Tgid") == getpid());
        fflush(stdout);
        _exit(3);
    }
    siginfo_t info;
    waitid(P_PID, child, &info, WEXITED | WNOWAIT);   /* a zombie until reaped */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", child);
    slurp(path);
    show("State");
    show("Threads");
    show("VmSize");
    show("FDSize");
    snprintf(path, sizeof path, "/proc/%d/cmdline", child);
    printf("zombie cmdline: %ld\n", slurp(path));
    snprintf(path, sizeof path, "/proc/%d/stat", child);
    slurp(path);
    char *paren = strrchr(buf, ')');
    char *f = paren + 2;
    for (int i = 0; i < 49 && f; i++)          /* to field 52: exit_code */
        f = strchr(f, ' ') ? strchr(f, ' ') + 1 : NULL;
    printf("zombie state %c exit_code %s", paren[2], f ? f : "?\n");
    unsigned long flags = 0;
    sscanf(paren + 2, "%*c %*d %*d %*d %*d %*d %lu", &flags);
    printf("zombie flags without PF_RANDOMIZE: %#lx\n", flags & ~0x400000UL);
    char *w = paren + 2;
    for (int i = 3; i < 35 && w; i++)          /* to field 35: wchan, "not running" */
        w = strchr(w, ' ') ? strchr(w, ' ') + 1 : NULL;
    printf("zombie wchan: %ld\n", w ? strtol(w, NULL, 10) : -1L);
    int st;
    waitpid(child, &st, 0);
    snprintf(path, sizeof path, "/proc/%d/status", child);
    printf("reaped child's dir: %ld\n", slurp(path));
    return 0;
}

static int ready[2], go[2];
static pid_t thread_tid;
static int thread_self_ok;

static void *worker(void *arg)
{
    (void)arg;
    char link[64], want[64];
    thread_tid = gettid();
    ssize_t n = readlink("/proc/thread-self", link, sizeof link - 1);
    link[n > 0 ? n : 0] = 0;
    snprintf(want, sizeof want, "%d/task/%d", getpid(), gettid());
    thread_self_ok = !strcmp(link, want);
    write(ready[1], "r", 1);
    char c;
    read(go[0], &c, 1);
    return NULL;
}

static int threads(void)
{
    pthread_t t;
    char c, path[96];
    pipe(ready);
    pipe(go);
    pthread_create(&t, NULL, worker, NULL);
    read(ready[0], &c, 1);
    printf("thread-self from the thread: %d\n", thread_self_ok);
    slurp("/proc/self/status");
    show("Threads");
    int tasks = 0, found = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            tasks++;
            found += atoi(e->d_name) == thread_tid;
        }
    closedir(d);
    printf("task entries: %d, the thread's among them: %d\n", tasks, found);
    snprintf(path, sizeof path, "/proc/self/task/%d/status", thread_tid);
    slurp(path);
    printf("thread Pid is its tid: %d, Tgid is getpid: %d\n", num("Pid") == thread_tid, num("Tgid") == getpid());
    snprintf(path, sizeof path, "/proc/%d/status", thread_tid);
    printf("/proc/TID reachable: %d\n", slurp(path) > 0 && num("Pid") == thread_tid);
    write(go[1], "g", 1);
    pthread_join(t, NULL);
    /* join returns at the CLONE_CHILD_CLEARTID wake (exit_mm), before release_task
       unhashes the thread: natively its task entry can linger a moment. */
    snprintf(path, sizeof path, "/proc/self/task/%d", thread_tid);
    for (int i = 0; i < 2000 && access(path, F_OK) == 0; i++)
        usleep(1000);
    slurp("/proc/self/status");
    show("Threads");
    return 0;
}

static int title(int argc, char **argv)
{
    /* setproctitle: the argument strings overwritten, their last NUL too */
    char *end = argv[argc - 1] + strlen(argv[argc - 1]);
    memset(argv[0], 't', end - argv[0] + 1);
    long n = slurp("/proc/self/cmdline");
    for (long i = 0; i < n; i++)
        putchar(buf[i] ? buf[i] : '|');
    printf("\n%ld bytes\n", n);
    return 0;
}

static int vfork_parent(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", getpid());
    pid_t child = vfork();
    if (child == 0) {                 /* the parent sleeps in vfork until this exits */
        slurp(path);
        const char *state = line("State");
        write(1, state, strlen(state));
        write(1, "\n", 1);
        _exit(0);
    }
    waitpid(child, NULL, 0);
    return 0;
}

static void *survivor(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100000; i++) {    /* until the main thread is a zombie */
        slurp("/proc/self/stat");
        if (strrchr(buf, ')')[2] == 'Z')
            break;
        sched_yield();
    }
    slurp("/proc/self/status");
    show("State");
    show("Threads");
    show("FDSize");
    printf("VmSize shown: %d, Umask shown: %d\n", strstr(buf, "VmSize") != NULL, strstr(buf, "Umask") != NULL);
    printf("cmdline: %ld bytes\n", slurp("/proc/self/cmdline"));
    char path[96];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", gettid());
    slurp(path);
    show("State");
    printf("thread's VmSize shown: %d\n", strstr(buf, "VmSize") != NULL);
    int tasks = 0;
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *e; (e = readdir(d));)
        tasks += e->d_name[0] != '.';
    closedir(d);
    printf("task entries: %d\n", tasks);
    fflush(stdout);
    exit(0);
}

static int leader_exit(void)
{
    pthread_t t;
    pthread_create(&t, NULL, survivor, NULL);
    pthread_exit(NULL);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "status";
    if (!strcmp(mode, "status")) return status();
    if (!strcmp(mode, "stat")) return stat_(argv);
    if (!strcmp(mode, "cmdline")) return cmdline();
    if (!strcmp(mode, "fds")) return fds();
    if (!strcmp(mode, "devices")) return devices();
    if (!strcmp(mode, "redirect")) return redirect();
    if (!strcmp(mode, "uptime")) return uptime();
    if (!strcmp(mode, "fork")) return fork_status();
    if (!strcmp(mode, "threads")) return threads();
    if (!strcmp(mode, "title")) return title(argc, argv);
    if (!strcmp(mode, "vfork")) return vfork_parent();
    if (!strcmp(mode, "leader_exit")) return leader_exit();
    return 2;
}
