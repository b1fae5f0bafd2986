/* Pipes across processes: blocking reads and writes, the 64 KiB buffer, end of file,
   EPIPE and SIGPIPE, FIONREAD, O_NONBLOCK.  Prints one line per check. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int got_sigpipe;
static void on_pipe(int s) { got_sigpipe = s; }

static void child_writes_late(void)
{
	int p[2], st;
	char buf[16] = {0};
	pipe(p);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		for (volatile int i = 0; i < 200000; i++) ;
		write(p[1], "late", 4);
		_exit(0);
	}
	close(p[1]);
	ssize_t n = read(p[0], buf, sizeof buf);
	printf("blocking read: %zd %s\n", n, buf);
	n = read(p[0], buf, sizeof buf);
	printf("eof after writer exit: %zd\n", n);
	waitpid(pid, &st, 0);
	printf("child status: %d\n", st);
	close(p[0]);
}

static void big_write(void)
{
	int p[2], st, avail;
	static char big[200000], in[200000];
	memset(big, 'x', sizeof big);
	big[sizeof big - 1] = 'z';
	pipe(p);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		ssize_t n = write(p[1], big, sizeof big);
		_exit(n == sizeof big ? 0 : 1);
	}
	close(p[1]);
	size_t total = 0;
	ssize_t n;
	while ((n = read(p[0], in + total, sizeof in - total)) > 0)
		total += n;
	waitpid(pid, &st, 0);
	printf("big write: total %zu last %c status %d\n", total, in[total - 1], st);
	close(p[0]);

	pipe(p);
	fcntl(p[1], F_SETFL, O_NONBLOCK);
	size_t filled = 0;
	while ((n = write(p[1], big, 4096)) > 0)
		filled += n;
	printf("nonblock fill: %zu then %zd errno %d\n", filled, n, errno);
	ioctl(p[0], FIONREAD, &avail);
	printf("FIONREAD full: %d\n", avail);
	read(p[0], in, 100);
	ioctl(p[0], FIONREAD, &avail);
	printf("FIONREAD after 100: %d\n", avail);
	printf("pipe size: %d\n", fcntl(p[0], F_GETPIPE_SZ));
	close(p[0]);
	close(p[1]);
}

static void epipe(void)
{
	int p[2];
	pipe(p);
	close(p[0]);
	signal(SIGPIPE, on_pipe);
	ssize_t n = write(p[1], "x", 1);
	printf("write no reader: %zd errno %d sigpipe %d\n", n, errno, got_sigpipe);
	signal(SIGPIPE, SIG_IGN);
	got_sigpipe = 0;
	n = write(p[1], "x", 1);
	printf("ignored: %zd errno %d sigpipe %d\n", n, errno, got_sigpipe);
	close(p[1]);
	signal(SIGPIPE, SIG_DFL);
}

static void killed_by_sigpipe(void)
{
	int p[2], st;
	pipe(p);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		for (;;)              /* fills the pipe, sleeps, then the reader goes */
			write(p[1], "x", 1);
		_exit(7);
	}
	close(p[0]);
	close(p[1]);
	waitpid(pid, &st, 0);
	printf("writer child: signaled %d sig %d\n", WIFSIGNALED(st), WTERMSIG(st));
}

static void nonblock_read(void)
{
	int p[2];
	char c;
	pipe2(p, O_NONBLOCK | O_CLOEXEC);
	ssize_t n = read(p[0], &c, 1);
	printf("nonblock empty read: %zd errno %d\n", n, errno);
	printf("flags r=%#x w=%#x fd=%d\n", fcntl(p[0], F_GETFL), fcntl(p[1], F_GETFL), fcntl(p[0], F_GETFD));
	struct stat st;
	fstat(p[0], &st);
	printf("fifo %d mode %o\n", S_ISFIFO(st.st_mode), st.st_mode & 0777);
	int r = pipe2(p, 0x1);
	printf("pipe2 bad flags: %d errno %d\n", r, errno);
	close(p[0]);
	close(p[1]);
}

int main(int argc, char **argv)
{
	static const struct { const char *name; void (*fn)(void); } parts[] = {
		{ "child_writes_late", child_writes_late },
		{ "big_write", big_write },
		{ "epipe", epipe },
		{ "killed_by_sigpipe", killed_by_sigpipe },
		{ "nonblock_read", nonblock_read },
	};
	setvbuf(stdout, NULL, _IONBF, 0);
	for (unsigned i = 0; i < sizeof parts / sizeof parts[0]; i++)
		if (argc < 2 || !strcmp(argv[1], parts[i].name))
			parts[i].fn();
	return 0;
}
