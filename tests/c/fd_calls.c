/* dup/dup2/dup3, fcntl and poll/ppoll/select/pselect6 on pipes: one line per check. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SHOW(expr) do { errno = 0; long r_ = (long)(expr); \
	printf("%-40s = %ld errno %d\n", #expr, r_, r_ < 0 ? errno : 0); } while (0)

static void dups(void)
{
	int p[2];
	struct rlimit lim;
	getrlimit(RLIMIT_NOFILE, &lim);
	int nofile = (int)lim.rlim_cur;     /* the first descriptor past the limit */
	pipe(p);
	SHOW(dup(p[1]));
	SHOW(dup2(p[1], 10));
	SHOW(dup2(10, 10));
	SHOW(dup2(99, 10));
	SHOW(dup2(p[1], nofile));
	SHOW(dup2(p[1], nofile - 1) == nofile - 1);
	SHOW(close(nofile - 1));
	SHOW(dup3(p[1], 11, O_CLOEXEC));
	SHOW(fcntl(11, F_GETFD));
	SHOW(fcntl(10, F_GETFD));
	SHOW(dup3(p[1], p[1], 0));
	SHOW(dup3(p[1], 12, 1));
	SHOW(fcntl(p[1], F_DUPFD, 20));
	SHOW(fcntl(p[1], F_DUPFD_CLOEXEC, 20));
	SHOW(fcntl(21, F_GETFD));
	SHOW(fcntl(21, F_SETFD, 0));
	SHOW(fcntl(21, F_GETFD));
	SHOW(fcntl(p[1], F_DUPFD, nofile));
	SHOW(fcntl(p[1], F_GETFL));
	SHOW(fcntl(10, F_SETFL, O_NONBLOCK | O_APPEND | O_RDWR));
	SHOW(fcntl(p[1], F_GETFL));     /* shared description: the flag shows here too */
	SHOW(fcntl(55, F_GETFL));
	SHOW(fcntl(p[0], 9999));
	SHOW(write(10, "via dup", 7));
	char buf[16] = {0};
	SHOW(read(p[0], buf, sizeof buf));
	printf("read back: %s\n", buf);
	SHOW(close(10));
	SHOW(close(10));
	SHOW(fcntl(1, F_GETFL));
	for (int fd = 3; fd < 30; fd++)
		close(fd);
}

static void polls(void)
{
	int p[2], q[2];
	struct pollfd pf[3];
	pipe(p);
	pipe(q);
	pf[0] = (struct pollfd){ .fd = p[0], .events = POLLIN };
	pf[1] = (struct pollfd){ .fd = p[1], .events = POLLOUT };
	pf[2] = (struct pollfd){ .fd = 77, .events = POLLIN };
	SHOW(poll(pf, 3, 0));
	printf("revents %#x %#x %#x\n", pf[0].revents, pf[1].revents, pf[2].revents);
	write(p[1], "abc", 3);
	SHOW(poll(pf, 2, 0));
	printf("revents %#x %#x\n", pf[0].revents, pf[1].revents);
	close(p[1]);
	pf[1].fd = -1;
	SHOW(poll(pf, 2, 0));
	printf("revents %#x %#x\n", pf[0].revents, pf[1].revents);

	/* finite timeout, nothing ready */
	struct pollfd one = { .fd = q[0], .events = POLLIN };
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	SHOW(poll(&one, 1, 30));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	printf("waited at least 30ms: %d\n", ms >= 30);
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	SHOW(ppoll(&one, 1, &ts, NULL));
	printf("ppoll remaining: %ld.%09ld\n", (long)ts.tv_sec, ts.tv_nsec);

	/* infinite wait until a child writes */
	pid_t pid = fork();
	if (pid == 0) {
		for (volatile int i = 0; i < 100000; i++) ;
		write(q[1], "!", 1);
		_exit(0);
	}
	one.revents = 0;
	SHOW(poll(&one, 1, -1));
	printf("revents %#x\n", one.revents);
	waitpid(pid, NULL, 0);

	/* select */
	fd_set r, w;
	FD_ZERO(&r); FD_ZERO(&w);
	FD_SET(q[0], &r); FD_SET(q[1], &w); FD_SET(p[0], &r);
	struct timeval tv = { 0, 0 };
	SHOW(select(q[1] + 1, &r, &w, NULL, &tv));
	printf("isset q0 %d q1 %d p0 %d\n", FD_ISSET(q[0], &r), FD_ISSET(q[1], &w), FD_ISSET(p[0], &r));
	char c;
	read(q[0], &c, 1);
	FD_ZERO(&r);
	FD_SET(q[0], &r);
	tv = (struct timeval){ 0, 10000 };
	SHOW(select(q[0] + 1, &r, NULL, NULL, &tv));
	printf("isset %d tv %ld.%06ld\n", FD_ISSET(q[0], &r), (long)tv.tv_sec, (long)tv.tv_usec);
	FD_SET(40, &r);
	SHOW(select(41, &r, NULL, NULL, &tv));
	tv = (struct timeval){ 0, 200000 };
	SHOW(select(1, NULL, NULL, NULL, &tv));
	FD_ZERO(&r);
	FD_SET(q[0], &r);
	ts = (struct timespec){ 0, 0 };
	SHOW(pselect(q[0] + 1, &r, NULL, NULL, &ts, NULL));
	close(q[1]);
	FD_SET(q[0], &r);
	SHOW(pselect(q[0] + 1, &r, NULL, NULL, NULL, NULL));
	printf("hup readable %d\n", FD_ISSET(q[0], &r));
	close(q[0]);
	close(p[0]);
}

int main(int argc, char **argv)
{
	static const struct { const char *name; void (*fn)(void); } parts[] = {
		{ "dups", dups },
		{ "polls", polls },
	};
	setvbuf(stdout, NULL, _IONBF, 0);
	for (unsigned i = 0; i < sizeof parts / sizeof parts[0]; i++)
		if (argc < 2 || !strcmp(argv[1], parts[i].name))
			parts[i].fn();
	return 0;
}
