/* execve from a gcc-built guest, one section per argv[1]; every line is the same
 * natively and in the model (no pids, no addresses).  Modes the sections exec into:
 * "show" prints its argv, envp, AT_EXECFN and comm; "fds" which descriptors are open;
 * "sigstate" dispositions, mask, pending set and sigaltstack. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static const char *self;

static void comm(void) {
    char buf[64] = "";
    int fd = open("/proc/self/comm", O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (n > 0) buf[n] = 0;
    printf("comm %s", buf);
    close(fd);
}

__attribute__((noinline)) int show_main(int argc, char **argv) {
    printf("argc %d\n", argc);
    for (int i = 1; i < argc; i++) printf("argv[%d] [%s]\n", i, argv[i]);
    for (char **e = environ; *e; e++) printf("env [%s]\n", *e);
    printf("execfn %s\n", (char *)getauxval(AT_EXECFN));
    comm();
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    printf("exe %s\n", buf);
    int fd = open("/proc/self/cmdline", O_RDONLY);
    n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    for (ssize_t i = 0; i < n; i++) if (!buf[i]) buf[i] = '|';
    buf[n > 0 ? n : 0] = 0;
    printf("cmdline %s\n", buf);
    close(fd);
    printf("pid==tid %d\n", getpid() == (pid_t)syscall(SYS_gettid));
    return 3;
}

static int fds_main(void) {
    for (int fd = 0; fd < 10; fd++)
        printf("fd %d %s\n", fd, fcntl(fd, F_GETFD) >= 0 ? "open" : "closed");
    return 0;
}

static void on_sig(int s) { (void)s; }

static int sigstate_main(void) {
    int sigs[] = {SIGUSR1, SIGUSR2, SIGTERM, SIGCHLD};
    for (unsigned i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction sa;
        sigaction(sigs[i], NULL, &sa);
        printf("sig %d %s flags %#x\n", sigs[i], sa.sa_handler == SIG_DFL ? "default" :
               sa.sa_handler == SIG_IGN ? "ignored" : "caught", (unsigned)sa.sa_flags & ~0x04000000u);
    }
    sigset_t set, pend;
    sigprocmask(SIG_BLOCK, NULL, &set);
    sigpending(&pend);
    printf("blocked INT %d pending INT %d\n", sigismember(&set, SIGINT), sigismember(&pend, SIGINT));
    stack_t ss;
    sigaltstack(NULL, &ss);
    printf("altstack disabled %d\n", !!(ss.ss_flags & SS_DISABLE));
    return 0;
}

static int wait_child(pid_t pid) {
    int st;
    if (waitpid(pid, &st, 0) != pid) return printf("waitpid failed\n"), 1;
    if (WIFEXITED(st)) printf("child exited %d\n", WEXITSTATUS(st));
    else printf("child killed %d\n", WTERMSIG(st));
    fflush(stdout);
    return 0;
}

static int spawn(char *const argv[], char *const envp[]) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execve(self, argv, envp);
        printf("execve failed %d\n", errno);
        _exit(99);
    }
    return wait_child(pid);
}

static int args(void) {
    char *argv[] = {"exec", "show", "a b", "", "c", NULL};
    char *envp[] = {"X=1", "EMPTY=", "PATH=/nowhere", NULL};
    return spawn(argv, envp);
}

static int cloexec(void) {
    int a = open("/dev/null", O_RDONLY);
    int b = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int c = dup(a);
    fcntl(c, F_SETFD, FD_CLOEXEC);
    int d = fcntl(b, F_DUPFD, 7);          /* the dup has no FD_CLOEXEC */
    printf("opened %d %d %d %d\n", a, b, c, d);
    char *argv[] = {"exec", "fds", NULL};
    return spawn(argv, environ);
}

static int signals(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_sig;
    sa.sa_flags = SA_RESTART | SA_NODEFER;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGUSR2, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    static char alt[65536];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
    sigaltstack(&ss, NULL);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        raise(SIGINT);                     /* blocked: stays pending across exec */
        char *argv[] = {"exec", "sigstate", NULL};
        execve(self, argv, environ);
        _exit(99);
    }
    return wait_child(pid);
}

static void try_exec(const char *what, const char *path, char *const argv[], char *const envp[]) {
    errno = 0;
    long r = syscall(SYS_execve, path, argv, envp);
    printf("%s: %ld errno %d\n", what, r, errno);
}

static void write_file(const char *name, const char *text, mode_t mode) {
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (write(fd, text, strlen(text)) < 0) perror("write");
    close(fd);
    chmod(name, mode);
}

static int errors(void) {
    char *argv[] = {"x", NULL};
    write_file("plain.txt", "echo hi\n", 0644);
    write_file("garbage", "this is no program\n", 0755);
    write_file("noint.sh", "#!/nonexistent/interp\n", 0755);
    write_file("blank.sh", "#!   \n", 0755);
    write_file("badelf", "\177ELF\2\1\1\0\0\0\0\0\0\0\0\0", 0755);
    symlink("loop2", "loop1");
    symlink("loop1", "loop2");
    try_exec("missing", "/nonexistent", argv, environ);
    try_exec("empty name", "", argv, environ);
    try_exec("directory", "/", argv, environ);
    try_exec("not executable", "plain.txt", argv, environ);
    try_exec("unknown format", "./garbage", argv, environ);
    try_exec("missing interpreter", "./noint.sh", argv, environ);
    try_exec("blank #! line", "./blank.sh", argv, environ);
    try_exec("truncated ELF", "./badelf", argv, environ);
    try_exec("not a directory", "/etc/passwd/x", argv, environ);
    try_exec("symlink loop", "./loop1", argv, environ);
    try_exec("bad filename pointer", (const char *)1, argv, environ);
    char *const *volatile bad_array = (char *const *)8;
    try_exec("bad argv pointer", self, bad_array, environ);
    char *bad_str[] = {"x", (char *)8, NULL};
    try_exec("bad argv string", self, bad_str, environ);
    char *bad_env[] = {(char *)16, NULL};
    try_exec("bad envp string", self, argv, bad_env);
    char *big = malloc(32 * 4096 + 1);
    memset(big, 'a', 32 * 4096);
    big[32 * 4096] = 0;
    char *too_long[] = {"x", big, NULL};
    try_exec("string over MAX_ARG_STRLEN", self, too_long, environ);
    big[32 * 4096 - 1] = 0;
    char *many[40];
    for (int i = 0; i < 39; i++) many[i] = big;
    many[39] = NULL;
    try_exec("strings over a quarter of the stack", self, many, environ);
    size_t nptr = (4 << 20) / sizeof(char *);
    char **lots = mmap(NULL, (nptr + 1) * sizeof(char *), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (size_t i = 0; i < nptr; i++) lots[i] = "";
    try_exec("pointers over a quarter of the stack", self, lots, environ);
    lots[nptr - 1] = (char *)8;
    try_exec("bad string after too many pointers", self, lots, environ);
    errno = 0;
    long r = syscall(SYS_execveat, AT_FDCWD, self, argv, environ, 0x8000);
    printf("execveat bad flags: %ld errno %d\n", r, errno);
    errno = 0;
    r = syscall(SYS_execveat, 1000, "rel", argv, environ, 0);
    printf("execveat bad dirfd: %ld errno %d\n", r, errno);
    errno = 0;
    r = syscall(SYS_execveat, AT_FDCWD, "./loop1", argv, environ, AT_SYMLINK_NOFOLLOW);
    printf("execveat nofollow on a symlink: %ld errno %d\n", r, errno);
    printf("still here\n");
    return 0;
}

static int script(void) {
    char line[512];
    snprintf(line, sizeof line, "#!%s show  \t\nnot read\n", self);
    write_file("s.sh", line, 0755);
    write_file("s2.sh", "#! ./s.sh  arg with  spaces \n", 0755);
    write_file("d3.sh", "#!./s2.sh\n", 0755);
    write_file("d4.sh", "#!./d3.sh\n", 0755);
    write_file("d5.sh", "#!./d4.sh\n", 0755);
    write_file("d6.sh", "#!./d5.sh\n", 0755);
    char *envp[] = {"Y=2", NULL};
    char *a1[] = {"ignored-argv0", "one", NULL};
    char *a2[] = {"ignored-argv0", "two", NULL};
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { execve("./s.sh", a1, envp); _exit(99); }
    wait_child(pid);
    pid = fork();
    if (pid == 0) { execve("s2.sh", a2, envp); _exit(99); }
    wait_child(pid);
    pid = fork();
    if (pid == 0) { execve("./d5.sh", a2, envp); printf("depth 5: errno %d\n", errno); _exit(99); }
    wait_child(pid);
    try_exec("depth 6", "./d6.sh", a2, envp);
    /* BINPRM_BUF_SIZE: a #! line longer than 255 bytes is cut, its argument with it;
     * an interpreter name that does not end inside them is ENOEXEC */
    char longline[600];
    int n = snprintf(longline, sizeof longline, "#!%s show ", self);
    memset(longline + n, 'a', 300);
    strcpy(longline + n + 300, "\n");
    write_file("long.sh", longline, 0755);
    pid = fork();
    if (pid == 0) { execve("./long.sh", a1, envp); printf("long line: errno %d\n", errno); _exit(99); }
    wait_child(pid);
    memset(longline + 2, 'x', 300);
    write_file("longname.sh", longline, 0755);
    try_exec("long interpreter name", "./longname.sh", a1, envp);
    return 0;
}

static int at(void) {
    char *argv[] = {"at", "show", NULL};
    char *envp[] = {NULL};
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(self, O_PATH);
        syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH);
        printf("execveat failed %d\n", errno);
        _exit(99);
    }
    wait_child(pid);
    char line[512];
    snprintf(line, sizeof line, "#!%s show\n", self);
    write_file("t.sh", line, 0755);
    pid = fork();
    if (pid == 0) {
        int dir = open(".", O_RDONLY | O_DIRECTORY);
        syscall(SYS_execveat, dir, "t.sh", argv, envp, 0);
        printf("execveat failed %d\n", errno);
        _exit(99);
    }
    return wait_child(pid);
}

static void *thread_exec(void *arg) {
    (void)arg;
    char *argv[] = {"exec", "show", "from-thread", NULL};
    char *envp[] = {NULL};
    execve(self, argv, envp);
    printf("thread execve failed %d\n", errno);
    return NULL;
}

static void *sleeper(void *arg) {
    (void)arg;
    for (;;) pause();
    return NULL;
}

static int threads(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        pthread_t a, b;
        pthread_create(&a, NULL, sleeper, NULL);
        pthread_create(&b, NULL, thread_exec, NULL);
        for (;;) pause();
    }
    return wait_child(pid);
}

static int do_vfork(void) {
    /* the parent resumes when the child execs (not when it exits): it unblocks the
     * new program through a pipe the program waits on */
    char *argv[] = {"exec", "waitshow", "vforked", NULL};
    char *envp[] = {NULL};
    int p[2];
    if (pipe(p) || p[0] != 3) return printf("pipe not on fd 3\n"), 1;
    fflush(stdout);
    pid_t pid = vfork();
    if (pid == 0) {
        execve(self, argv, envp);
        _exit(99);
    }
    printf("parent resumed\n");
    if (write(p[1], "x", 1) != 1) return 1;
    return wait_child(pid);
}

static int run(const char *path) {
    char *argv[] = {(char *)path, NULL};
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execve(path, argv, environ);
        printf("execve failed %d\n", errno);
        _exit(99);
    }
    return wait_child(pid);
}

int main(int argc, char **argv) {
    self = "/proc/self/exe";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) return 2;
    const char *s = argv[1];
    if (!strncmp(s, "show", 4)) return show_main(argc, argv);     /* "show aaa...": a cut #! argument */
    if (!strcmp(s, "waitshow")) {
        char c;
        if (read(3, &c, 1) != 1) return 1;
        return show_main(argc, argv);
    }
    if (!strcmp(s, "fds")) return fds_main();
    if (!strcmp(s, "sigstate")) return sigstate_main();
    if (!strcmp(s, "args")) return args();
    if (!strcmp(s, "cloexec")) return cloexec();
    if (!strcmp(s, "signals")) return signals();
    if (!strcmp(s, "errors")) return errors();
    if (!strcmp(s, "script")) return script();
    if (!strcmp(s, "at")) return at();
    if (!strcmp(s, "threads")) return threads();
    if (!strcmp(s, "vfork")) return do_vfork();
    if (!strcmp(s, "run") && argc > 2) return run(argv[2]);
    return 2;
}
