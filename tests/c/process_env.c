/* The process environment a shell builds from fork, pipe, dup2 and wait: a two-child
 * pipeline, redirection into a file of the working directory, exit statuses as wait
 * reports them, and signal masks, dispositions and pending sets across fork.
 * argv[1] picks a section; each prints one line per check (pids never printed). */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void status_line(const char *what, int st)
{
	printf("%s: raw=%#x exited=%d code=%d signaled=%d sig=%d core=%d\n", what, st,
	       WIFEXITED(st), WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st),
	       WIFSIGNALED(st) ? WTERMSIG(st) : -1, WIFSIGNALED(st) ? !!WCOREDUMP(st) : 0);
}

/* producer | upcase, both children of this process, as sh runs "a | b". */
static void pipeline(void)
{
	int p[2], st1, st2;
	if (pipe(p))
		return;
	fflush(stdout);
	pid_t a = fork();
	if (a == 0) {
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		for (int i = 0; i < 300; i++)
			printf("line %d of the producer\n", i);
		exit(3);
	}
	pid_t b = fork();
	if (b == 0) {
		dup2(p[0], 0);
		close(p[0]);
		close(p[1]);
		char buf[512];
		long bytes = 0, lines = 0;
		ssize_t n;
		while ((n = read(0, buf, sizeof buf)) > 0) {
			bytes += n;
			for (ssize_t i = 0; i < n; i++)
				lines += buf[i] == '\n';
		}
		printf("consumer: %ld bytes %ld lines, read end %zd\n", bytes, lines, n);
		exit(4);
	}
	close(p[0]);
	close(p[1]);
	pid_t w2 = waitpid(b, &st2, 0), w1 = waitpid(a, &st1, 0);
	printf("reaped consumer %d producer %d\n", w2 == b, w1 == a);
	status_line("producer", st1);
	status_line("consumer", st2);
	printf("no child left: %d errno %d\n", (int)wait(NULL), errno);
}

static void cat_file(const char *name)
{
	char buf[256] = {0};
	int fd = open(name, O_RDONLY);
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	printf("%s (%zd bytes):\n%s", name, n, buf);
}

/* "cmd > out.txt 2>&1", then "cmd >> out.txt" from two processes. */
static void redirect(void)
{
	int st;
	fflush(stdout);
	pid_t c = fork();
	if (c == 0) {
		int fd = open("out.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || dup2(fd, 1) != 1 || dup2(1, 2) != 2)
			_exit(10);
		close(fd);
		printf("to stdout\n");
		fflush(stdout);
		fprintf(stderr, "to stderr\n");
		_exit(0);
	}
	waitpid(c, &st, 0);
	status_line("redirected child", st);
	cat_file("out.txt");
	int fd = open("out.txt", O_WRONLY | O_APPEND);
	c = fork();
	if (c == 0) {
		dup2(fd, 1);
		write(1, "child appends\n", 14);
		_exit(0);
	}
	waitpid(c, &st, 0);
	write(fd, "parent appends\n", 15);
	printf("offset after appends %ld\n", (long)lseek(fd, 0, SEEK_CUR));
	close(fd);
	cat_file("out.txt");
	struct stat sb;
	stat("out.txt", &sb);
	printf("mode %o size %ld\n", sb.st_mode & 07777, (long)sb.st_size);
	/* the child's dup2 did not touch the parent's stdout */
	printf("parent stdout still fd 1: %d\n", fcntl(1, F_GETFD) >= 0);
}

/* exit codes and deaths as wait4 encodes them */
static void statuses(void)
{
	static const int codes[] = {0, 1, 42, 255, 256, 257};
	for (unsigned i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		int st;
		pid_t c = fork();
		if (c == 0)
			_exit(codes[i]);
		waitpid(c, &st, 0);
		char what[32];
		snprintf(what, sizeof what, "_exit(%d)", codes[i]);
		status_line(what, st);
	}
	static const int sigs[] = {SIGTERM, SIGKILL, SIGUSR1, SIGSEGV, SIGABRT};
	for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		int st, gate[2];
		pipe(gate);
		pid_t c = fork();
		if (c == 0) {
			char x;
			close(gate[1]);
			read(gate[0], &x, 1);      /* wait until the parent has looked */
			if (sigs[i] == SIGSEGV)
				*(volatile int *)8 = 1;
			if (sigs[i] == SIGABRT)
				abort();
			pause();
			_exit(99);
		}
		close(gate[0]);
		pid_t early = waitpid(c, &st, WNOHANG);
		if (sigs[i] == SIGSEGV || sigs[i] == SIGABRT)
			write(gate[1], "x", 1);
		else
			kill(c, sigs[i]);
		waitpid(c, &st, 0);
		close(gate[1]);
		printf("%s: WNOHANG before %d; ", strsignal(sigs[i]), (int)early);
		status_line("status", st);
	}
	int st;
	pid_t c = fork();
	if (c == 0) {
		pid_t g = fork();            /* a grandchild is not ours to reap */
		if (g == 0)
			_exit(5);
		waitpid(g, &st, 0);
		_exit(WEXITSTATUS(st) + 1);
	}
	printf("wait(&st) = child %d\n", wait(&st) == c);
	status_line("child after reaping its own child", st);
}

static volatile sig_atomic_t got_usr1, got_usr2;
static void on_usr1(int s) { (void)s; got_usr1++; }
static void on_usr2(int s) { (void)s; got_usr2++; }

static int is_pending(int sig)
{
	sigset_t p;
	sigpending(&p);
	return sigismember(&p, sig);
}

static int is_blocked(int sig)
{
	sigset_t cur;
	sigprocmask(SIG_BLOCK, NULL, &cur);
	return sigismember(&cur, sig);
}

/* fork copies the blocked mask and the dispositions, not the pending set */
static void masks(void)
{
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	signal(SIGUSR1, on_usr1);
	signal(SIGUSR2, on_usr2);
	signal(SIGHUP, SIG_IGN);
	sigprocmask(SIG_BLOCK, &usr1, NULL);
	raise(SIGUSR1);
	printf("parent: usr1 pending %d handled %d\n", is_pending(SIGUSR1), got_usr1);
	fflush(stdout);
	int st, gate[2];
	pipe(gate);
	pid_t c = fork();
	if (c == 0) {
		struct sigaction sa;
		sigaction(SIGUSR2, NULL, &sa);
		int usr2_ours = sa.sa_handler == on_usr2;
		sigaction(SIGHUP, NULL, &sa);
		printf("child: usr1 blocked %d pending %d; usr2 handler inherited %d; hup ignored %d\n",
		       is_blocked(SIGUSR1), is_pending(SIGUSR1), usr2_ours, sa.sa_handler == SIG_IGN);
		raise(SIGHUP);               /* ignored: nothing happens */
		kill(getppid(), SIGUSR2);
		char x;
		close(gate[1]);
		read(gate[0], &x, 1);        /* the parent sent SIGUSR1 (blocked here) meanwhile */
		printf("child: usr1 from parent pending %d handled %d\n", is_pending(SIGUSR1), got_usr1);
		sigprocmask(SIG_UNBLOCK, &usr1, NULL);
		printf("child: after unblock handled %d\n", got_usr1);
		fflush(stdout);
		_exit(got_usr1 == 1 ? 0 : 1);
	}
	close(gate[0]);
	while (!got_usr2)
		;                            /* the child's SIGUSR2 reaches our handler */
	kill(c, SIGUSR1);
	write(gate[1], "x", 1);
	waitpid(c, &st, 0);
	status_line("child", st);
	printf("parent: got usr2 %d; usr1 still pending %d handled %d\n", got_usr2,
	       is_pending(SIGUSR1), got_usr1);
	sigprocmask(SIG_UNBLOCK, &usr1, NULL);
	printf("parent: after unblock handled %d\n", got_usr1);
}

#define SHOW(expr) do { errno = 0; long r_ = (long)(expr); \
	printf("%-44s = %ld errno %s\n", #expr, r_ < 0 ? r_ : (long)(r_ != 0), r_ < 0 ? strerrorname_np(errno) : "-"); } while (0)

/* process groups and sessions as a shell's job control uses them (kernel/sys.c);
 * results are printed as -1/errno or 0/1 ("nonzero"), never as pids */
static void groups(void)
{
	SHOW(setpgid(0, 0));
	SHOW(getpgrp() == getpid());
	SHOW(setsid());                      /* a group leader may not start a session */
	SHOW(setpgid(0, -1));
	SHOW(setpgid(2147483000, 0));
	SHOW(setpgid(1, 0));                 /* not ours: ESRCH */
	fflush(stdout);
	int st, gate[2], back[2];
	pipe(gate);
	pipe(back);
	pid_t c = fork();
	if (c == 0) {
		char x;
		printf("child: in the parent's group %d, own group %d\n", getpgrp() == getppid(),
		       getpgrp() == getpid());
		SHOW(setpgid(0, 0));
		SHOW(getpgrp() == getpid());
		SHOW(setpgid(0, getppid()));     /* back into the parent's group */
		SHOW(getpgrp() == getppid());
		SHOW(getsid(0) == getsid(getppid()));
		SHOW(setsid() == getpid());
		SHOW(getsid(0) == getpid());
		SHOW(getpgrp() == getpid());
		SHOW(setsid());                  /* already a session leader */
		SHOW(setpgid(0, 0));             /* a session leader may not move */
		SHOW(setpgid(0, getppid()));
		fflush(stdout);
		write(back[1], "x", 1);
		read(gate[0], &x, 1);
		_exit(0);
	}
	char x;
	read(back[0], &x, 1);
	SHOW(getsid(c) == c);
	SHOW(getsid(0) == getsid(c));
	SHOW(setpgid(c, c));                 /* the child is in another session now */
	SHOW(getsid(2147483000));
	fflush(stdout);
	write(gate[1], "x", 1);
	waitpid(c, &st, 0);
	status_line("child", st);
}

int main(int argc, char **argv)
{
	static const struct { const char *name; void (*fn)(void); } parts[] = {
		{"pipeline", pipeline}, {"redirect", redirect}, {"statuses", statuses},
		{"masks", masks}, {"groups", groups},
	};
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (unsigned i = 0; i < sizeof parts / sizeof parts[0]; i++)
		if (argc > 1 && !strcmp(argv[1], parts[i].name)) {
			parts[i].fn();
			return 0;
		}
	fprintf(stderr, "usage: %s pipeline|redirect|statuses|masks|groups\n", argv[0]);
	return 2;
}
