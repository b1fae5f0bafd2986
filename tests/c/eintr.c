/* Signals that interrupt sleeping syscalls (kernel/signal.c, arch/x86/kernel/signal.c
 * handle_signal / arch_do_signal_or_restart).  A 50 ms ITIMER_REAL (or a child's kill)
 * interrupts the sleep; the handler is installed with SA_RESTART when the mode ends in
 * "_restart".  Each mode prints one line.
 *   stdin         - read of fd 0 (a host pipe the test writes to 300 ms later): -1 EINTR;
 *                   with SA_RESTART the read restarts and gets the bytes;
 *   stdin_nonblock - the same read with O_NONBLOCK: -1 EAGAIN;
 *   read          - read of an empty pipe: -1 EINTR; with SA_RESTART the read restarts
 *                   and gets the byte the handler wrote;
 *   write         - write to a full pipe: -1 EINTR; with SA_RESTART the handler drains
 *                   the pipe and the restarted write completes;
 *   write_partial - a write bigger than the pipe returns the count written so far;
 *   wait4         - wait4 while a child sends SIGUSR1 then exits: -1 EINTR, or (SA_RESTART)
 *                   the restarted wait reaps the child;
 *   sigchld       - a SIGCHLD handler runs while wait4 reaps the child: the pid, not EINTR;
 *   waitid        - waitid interrupted by the timer: -1 EINTR; SA_RESTART restarts it;
 *   futex         - FUTEX_WAIT: -1 EINTR; SA_RESTART restarts it and the handler's store
 *                   to the word makes it EAGAIN;
 *   futex_timed   - FUTEX_WAIT with a 1 s timeout: -1 EINTR, SA_RESTART or not;
 *   futex_timeout, futex_abs - a relative / absolute (BITSET, MONOTONIC) 100 ms timeout
 *                   passes: ETIMEDOUT; a malformed timeout is EINVAL;
 *   nanosleep     - -1 EINTR (SA_RESTART or not) and the time left, rounded to 10 ms;
 *   nanosleep_child - the SIGUSR1 a child sends 100 ms into a 1 s nanosleep: EINTR, 90 cs left;
 *   clock_abs     - clock_nanosleep(TIMER_ABSTIME): -1 EINTR, rem untouched;
 *   poll, ppoll, select, pselect, pause, sigsuspend, sigtimedwait
 *                 - -1 EINTR even with SA_RESTART; select/pselect also print the
 *                   timeout left;
 *   sigsuspend_ignored, ppoll_ignored
 *                 - a blocked SIGCHLD (default: ignore) pends; the temporary mask lets it
 *                   through, it is discarded and the call restarts: the timer ends it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile int hits;
static int fds[2];
static volatile unsigned futex_word;
static const char *mode;

static int is(const char *m) { return !strcmp(mode, m); }

static void on_sig(int sig)
{
    hits++;
    if (is("read_restart"))
        write(fds[1], "x", 1);
    if (is("write_restart")) {
        static char sink[65536];
        read(fds[0], sink, sizeof sink);
    }
    if (is("futex_restart"))
        futex_word = 1;
}

static void catch(int sig, int restart)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(sig, &sa, 0);
}

static void timer_ms(int ms)
{
    struct itimerval it = {{0, 0}, {ms / 1000, (ms % 1000) * 1000}};
    setitimer(ITIMER_REAL, &it, 0);
}

static long cs(long sec, long nsec) { return (sec * 1000000000L + nsec + 5000000) / 10000000; }

static void fill_pipe(void)
{
    static char block[65536];
    int fl = fcntl(fds[1], F_GETFL);
    fcntl(fds[1], F_SETFL, fl | O_NONBLOCK);
    while (write(fds[1], block, sizeof block) > 0)
        ;
    fcntl(fds[1], F_SETFL, fl);
}

static pid_t child_kills_then_exits(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct timespec nap = {0, 100000000};
        nanosleep(&nap, 0);
        kill(getppid(), SIGUSR1);
        nanosleep(&nap, 0);
        _exit(3);
    }
    return pid;
}

int main(int argc, char **argv)
{
    mode = argc > 1 ? argv[1] : "read";
    int restart = strstr(mode, "_restart") != 0;
    int r = 0, e = 0;
    pipe(fds);
    catch(SIGALRM, restart);
    if (is("stdin_nonblock")) {
        char got[16];
        fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
        r = read(0, got, sizeof got);
        e = errno;
        printf("stdin_nonblock r=%d errno=%d\n", r, r < 0 ? e : 0);
    } else if (!strncmp(mode, "stdin", 5)) {
        char got[16] = "";
        timer_ms(50);
        r = read(0, got, sizeof got - 1);
        e = errno;
        printf("stdin r=%d errno=%d hits=%d got=%s\n", r, r < 0 ? e : 0, hits, r > 0 ? got : "-");
    } else if (!strncmp(mode, "read", 4)) {
        char c = 0;
        timer_ms(50);
        r = read(fds[0], &c, 1);
        e = errno;
        printf("read r=%d errno=%d hits=%d c=%c\n", r, r < 0 ? e : 0, hits, c ? c : '-');
    } else if (is("write") || is("write_restart")) {
        fill_pipe();
        timer_ms(50);
        r = write(fds[1], "abcd", 4);
        e = errno;
        printf("write r=%d errno=%d hits=%d\n", r, r < 0 ? e : 0, hits);
    } else if (is("write_partial")) {
        static char big[100000];
        timer_ms(50);
        r = write(fds[1], big, sizeof big);
        printf("write_partial r=%d hits=%d\n", r, hits);
    } else if (!strncmp(mode, "wait4", 5)) {
        catch(SIGUSR1, restart);
        pid_t pid = child_kills_then_exits();
        int status = 0;
        r = wait4(pid, &status, 0, 0);
        e = errno;
        printf("wait4 r=%s errno=%d hits=%d", r == pid ? "pid" : r < 0 ? "-1" : "?", r < 0 ? e : 0, hits);
        if (r < 0)
            r = wait4(pid, &status, 0, 0);
        printf(" then=%s status=%d\n", r == pid ? "pid" : "?", WEXITSTATUS(status));
    } else if (is("sigchld")) {
        catch(SIGCHLD, 0);
        pid_t pid = fork();
        if (pid == 0) {
            struct timespec nap = {0, 50000000};
            nanosleep(&nap, 0);
            _exit(5);
        }
        int status = 0;
        r = wait4(pid, &status, 0, 0);
        printf("sigchld r=%s hits=%d status=%d\n", r == pid ? "pid" : "?", hits, WEXITSTATUS(status));
    } else if (!strncmp(mode, "waitid", 6)) {
        pid_t pid = fork();
        if (pid == 0) {
            struct timespec nap = {0, 200000000};
            nanosleep(&nap, 0);
            _exit(4);
        }
        siginfo_t si;
        memset(&si, 0, sizeof si);
        timer_ms(50);
        r = waitid(P_PID, pid, &si, WEXITED);
        e = errno;
        printf("waitid r=%d errno=%d hits=%d status=%d\n", r, r < 0 ? e : 0, hits, si.si_status);
        if (r < 0)
            waitpid(pid, 0, 0);
    } else if (!strncmp(mode, "futex_timed", 11)) {
        struct timespec ts = {1, 0};
        timer_ms(50);
        r = syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, &ts, 0, 0);
        e = errno;
        printf("futex_timed r=%d errno=%d hits=%d\n", r, r < 0 ? e : 0, hits);
    } else if (is("futex_timeout") || is("futex_abs")) {
        struct timespec ts = {0, 100000000}, now;
        int op = FUTEX_WAIT_PRIVATE;
        if (is("futex_abs")) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            ts.tv_sec = now.tv_sec + (now.tv_nsec + 100000000) / 1000000000;
            ts.tv_nsec = (now.tv_nsec + 100000000) % 1000000000;
            op = FUTEX_WAIT_BITSET_PRIVATE;
        }
        r = syscall(SYS_futex, &futex_word, op, 0, &ts, 0, FUTEX_BITSET_MATCH_ANY);
        e = errno;
        struct timespec bad = {0, 1000000000};
        int rb = syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, &bad, 0, 0);
        printf("%s r=%d errno=%d bad=%d/%d\n", mode, r, r < 0 ? e : 0, rb, errno);
    } else if (!strncmp(mode, "futex", 5)) {
        timer_ms(50);
        r = syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0);
        e = errno;
        printf("futex r=%d errno=%d hits=%d\n", r, r < 0 ? e : 0, hits);
    } else if (is("nanosleep") || is("nanosleep_restart")) {
        struct timespec req = {1, 0}, rem = {0, 0};
        timer_ms(50);
        r = nanosleep(&req, &rem);
        e = errno;
        printf("nanosleep r=%d errno=%d hits=%d rem_cs=%ld\n", r, r < 0 ? e : 0, hits,
               cs(rem.tv_sec, rem.tv_nsec));
    } else if (is("nanosleep_child")) {
        catch(SIGUSR1, 1);
        pid_t pid = fork();
        if (pid == 0) {
            struct timespec nap = {0, 100000000};
            nanosleep(&nap, 0);
            kill(getppid(), SIGUSR1);
            _exit(0);
        }
        struct timespec req = {1, 0}, rem = {0, 0};
        r = nanosleep(&req, &rem);
        e = errno;
        waitpid(pid, 0, 0);
        printf("nanosleep_child r=%d errno=%d hits=%d rem_cs=%ld\n", r, r < 0 ? e : 0, hits,
               cs(rem.tv_sec, rem.tv_nsec));
    } else if (is("clock_abs")) {
        struct timespec now, rem = {7, 7};
        clock_gettime(CLOCK_MONOTONIC, &now);
        now.tv_sec += 1;
        timer_ms(50);
        r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &now, &rem);
        printf("clock_abs r=%d hits=%d rem=%ld.%ld\n", r, hits, (long)rem.tv_sec, rem.tv_nsec);
    } else if (!strncmp(mode, "poll", 4)) {
        struct pollfd p = {fds[0], POLLIN, 0};
        timer_ms(50);
        r = poll(&p, 1, -1);
        e = errno;
        printf("poll r=%d errno=%d hits=%d\n", r, r < 0 ? e : 0, hits);
    } else if (!strncmp(mode, "ppoll", 5) && !strstr(mode, "ignored")) {
        struct pollfd p = {fds[0], POLLIN, 0};
        struct timespec ts = {1, 0};
        timer_ms(50);
        r = ppoll(&p, 1, &ts, 0);
        e = errno;
        printf("ppoll r=%d errno=%d hits=%d left_cs=%ld\n", r, r < 0 ? e : 0, hits, cs(ts.tv_sec, ts.tv_nsec));
    } else if (!strncmp(mode, "select", 6)) {
        fd_set in;
        FD_ZERO(&in);
        FD_SET(fds[0], &in);
        struct timeval tv = {1, 0};
        timer_ms(50);
        r = select(fds[0] + 1, &in, 0, 0, &tv);
        e = errno;
        printf("select r=%d errno=%d hits=%d left_cs=%ld\n", r, r < 0 ? e : 0, hits,
               cs(tv.tv_sec, tv.tv_usec * 1000L));
    } else if (!strncmp(mode, "pselect", 7)) {
        fd_set in;
        FD_ZERO(&in);
        FD_SET(fds[0], &in);
        struct timespec ts = {1, 0};
        timer_ms(50);
        r = pselect(fds[0] + 1, &in, 0, 0, &ts, 0);
        e = errno;
        printf("pselect r=%d errno=%d hits=%d\n", r, r < 0 ? e : 0, hits);
    } else if (!strncmp(mode, "pause", 5)) {
        timer_ms(50);
        r = pause();
        e = errno;
        printf("pause r=%d errno=%d hits=%d\n", r, e, hits);
    } else if (is("sigsuspend") || is("sigsuspend_restart")) {
        sigset_t none;
        sigemptyset(&none);
        timer_ms(50);
        r = sigsuspend(&none);
        e = errno;
        printf("sigsuspend r=%d errno=%d hits=%d\n", r, e, hits);
    } else if (!strncmp(mode, "sigtimedwait", 12)) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        sigprocmask(SIG_BLOCK, &set, 0);
        struct timespec ts = {1, 0};
        timer_ms(50);
        r = sigtimedwait(&set, 0, &ts);
        e = errno;
        printf("sigtimedwait r=%d errno=%d hits=%d\n", r, e, hits);
    } else if (is("sigsuspend_ignored") || is("ppoll_ignored")) {
        sigset_t chld, none;
        sigemptyset(&chld);
        sigemptyset(&none);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, 0);
        pid_t pid = fork();
        if (pid == 0)
            _exit(0);
        siginfo_t si;
        waitid(P_PID, pid, &si, WEXITED | WNOWAIT);      /* a zombie: SIGCHLD pends */
        sigset_t pend;
        sigpending(&pend);
        timer_ms(50);
        if (is("ppoll_ignored"))
            r = ppoll(0, 0, 0, &none);
        else
            r = sigsuspend(&none);
        e = errno;
        sigset_t after;
        sigpending(&after);
        printf("%s r=%d errno=%d hits=%d chld_pending=%d then=%d\n", mode, r, e, hits,
               sigismember(&pend, SIGCHLD), sigismember(&after, SIGCHLD));
    } else {
        printf("unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
