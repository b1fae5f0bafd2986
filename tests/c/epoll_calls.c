/* epoll as the kernel answers it: epoll_create/epoll_create1/epoll_ctl errors, level- and
 * edge-triggered pipes, EPOLLONESHOT, a wait woken by a forked writer, a timeout, a wait
 * ended by a signal (EINTR), epoll_pwait's mask, and an epoll instance inside another.
 * One line per case: "case: result". */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static void res(const char *what, long r)
{
	if (r < 0)
		printf("%s: -1 %s\n", what, strerrorname_np(errno));
	else
		printf("%s: %ld\n", what, r);
}

static void ready(const char *what, int ep, int max, int timeout)
{
	struct epoll_event evs[8];
	int n = epoll_wait(ep, evs, max, timeout);

	if (n < 0) {
		printf("%s: -1 %s\n", what, strerrorname_np(errno));
		return;
	}
	printf("%s: %d", what, n);
	for (int i = 0; i < n; i++)
		printf(" [%#x %llu]", evs[i].events, (unsigned long long)evs[i].data.u64);
	printf("\n");
}

static void on_alarm(int sig)
{
	(void)sig;
}

int main(void)
{
	int p[2], q[2], ep, ep2, fd;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 7};
	char buf[16];

	if (pipe(p) || pipe(q))
		return 1;
	res("create size 0", epoll_create(0));
	res("create size -1", epoll_create(-1));
	res("create1 bad flags", epoll_create1(1));
	ep = epoll_create1(EPOLL_CLOEXEC);
	printf("create1 cloexec: %d\n", fcntl(ep, F_GETFD));
	fd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY);
	{
		char link[64], path[64];
		ssize_t n;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", ep);
		n = readlink(path, link, sizeof(link) - 1);
		link[n > 0 ? n : 0] = 0;
		printf("readlink: %s\n", link);
	}
	{
		struct stat st;
		fstat(ep, &st);
		printf("fstat: mode=%o uid=%u size=%lld\n", st.st_mode, st.st_uid, (long long)st.st_size);
	}
	res("ctl bad epfd", epoll_ctl(99, EPOLL_CTL_ADD, p[0], &ev));
	res("ctl bad fd", epoll_ctl(ep, EPOLL_CTL_ADD, 99, &ev));
	res("ctl epfd not epoll", epoll_ctl(p[0], EPOLL_CTL_ADD, p[1], &ev));
	res("ctl self", epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev));
	res("ctl directory", epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
	res("ctl bad op", epoll_ctl(ep, 7, p[0], &ev));
	res("ctl bad event pointer", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], (struct epoll_event *)8));
	res("ctl del missing", epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL));
	res("ctl mod missing", epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev));
	ev.events = EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT;
	res("ctl exclusive with oneshot", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev));
	ev.events = EPOLLIN;
	res("ctl add", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev));
	res("ctl add again", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev));
	ev.events = EPOLLIN | EPOLLEXCLUSIVE;
	res("ctl mod exclusive", epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev));
	res("wait maxevents 0", epoll_wait(ep, (struct epoll_event *)buf, 0, 0));
	res("wait bad epfd", epoll_wait(p[0], (struct epoll_event *)buf, 1, 0));
	ready("level empty", ep, 8, 0);
	res("write", write(p[1], "ab", 2));
	ready("level ready", ep, 8, 0);
	ready("level ready again", ep, 8, 0);
	res("wait bad buffer", epoll_wait(ep, (struct epoll_event *)8, 1, 0));
	res("read", read(p[0], buf, 2));
	ready("level drained", ep, 8, 0);

	ev.events = EPOLLIN | EPOLLET;
	ev.data.u64 = 9;
	res("ctl mod edge", epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev));
	res("write", write(p[1], "c", 1));
	ready("edge first", ep, 8, 0);
	ready("edge second", ep, 8, 0);
	res("write", write(p[1], "d", 1));
	ready("edge after new data", ep, 8, 0);
	res("read", read(p[0], buf, 2));

	ev.events = EPOLLIN | EPOLLONESHOT;
	ev.data.u64 = 11;
	res("ctl mod oneshot", epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev));
	res("write", write(p[1], "e", 1));
	ready("oneshot first", ep, 8, 0);
	ready("oneshot disabled", ep, 8, 0);
	res("ctl mod rearm", epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev));
	ready("oneshot rearmed", ep, 8, 0);
	res("read", read(p[0], buf, 2));

	ev.events = EPOLLOUT;
	ev.data.u64 = 13;
	res("ctl add write end", epoll_ctl(ep, EPOLL_CTL_ADD, p[1], &ev));
	ready("two items, max 1", ep, 1, 0);
	res("ctl del write end", epoll_ctl(ep, EPOLL_CTL_DEL, p[1], NULL));
	ev.events = EPOLLIN;
	ev.data.u64 = 15;
	res("ctl mod level", epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev));

	ready("timeout", ep, 8, 30);

	if (fork() == 0) {
		usleep(20000);
		if (write(p[1], "f", 1) != 1)
			_exit(1);
		_exit(0);
	}
	ready("woken by child", ep, 8, -1);
	wait(NULL);
	res("read", read(p[0], buf, 2));

	close(p[1]);
	ready("writer closed", ep, 8, 0);

	{
		struct sigaction sa = {.sa_handler = on_alarm};
		struct itimerval it = {.it_value = {.tv_usec = 20000}};
		sigaction(SIGALRM, &sa, NULL);
		setitimer(ITIMER_REAL, &it, NULL);
		ev.events = EPOLLIN;
		epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL);
		epoll_ctl(ep, EPOLL_CTL_ADD, q[0], &ev);
		ready("interrupted", ep, 8, -1);
	}
	{
		sigset_t mask;
		sigemptyset(&mask);
		struct epoll_event evs[2];
		res("pwait bad sigsetsize", syscall(SYS_epoll_pwait, ep, evs, 2, 0, &mask, 4));
		res("pwait", epoll_pwait(ep, evs, 2, 0, &mask));
	}
	ep2 = epoll_create1(0);
	ev.events = EPOLLIN;
	ev.data.u64 = 21;
	res("ctl add epoll in epoll", epoll_ctl(ep2, EPOLL_CTL_ADD, ep, &ev));
	ready("outer empty", ep2, 8, 0);
	res("write", write(q[1], "g", 1));
	ready("outer ready", ep2, 8, 0);
	ev.events = EPOLLIN | EPOLLEXCLUSIVE;
	res("ctl exclusive epoll", epoll_ctl(ep2, EPOLL_CTL_ADD, ep, &ev));
	ev.events = EPOLLIN;
	res("ctl loop", epoll_ctl(ep, EPOLL_CTL_ADD, ep2, &ev));
	{
		int chain[8];
		chain[0] = ep2;
		for (int i = 1; i < 8; i++) {
			char what[32];
			chain[i] = epoll_create1(0);
			snprintf(what, sizeof(what), "ctl nest %d", i);
			res(what, epoll_ctl(chain[i], EPOLL_CTL_ADD, chain[i - 1], &ev));
		}
	}
	close(fd);
	return 0;
}
