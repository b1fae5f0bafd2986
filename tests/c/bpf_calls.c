/* The guest of the BPF helper and attach tests: probed(s, n) called in the ways a test
 * asks for (argv[1]), printing what the tests compare the programs' findings with -
 * its ids, its CLOCK_MONOTONIC around a call, the return addresses of the call chain,
 * the CPU it runs on. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

char text[64] = "hello, bpf";
void *ret_addr[3];

__attribute__((noinline)) long callee(long x)
{
	asm volatile("" ::: "memory");
	return x + 1;
}

/* not a leaf: it sets up a frame (push %rbp first), so a user stack walk finds its caller */
__attribute__((noinline)) long probed(const char *s, long n)
{
	ret_addr[0] = __builtin_return_address(0);
	return callee(n) * 2 + (s != 0);
}

__attribute__((noinline)) long level2(long n)
{
	ret_addr[1] = __builtin_return_address(0);
	return probed(text, n) + 1;
}

__attribute__((noinline)) long level1(long n)
{
	ret_addr[2] = __builtin_return_address(0);
	return level2(n) + 1;
}

static unsigned long long now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void on_usr1(int sig)
{
	printf("handled %d\n", sig);
}

static void calls(int n)
{
	for (int i = 0; i < n; i++)
		printf("probed %ld\n", probed(text, i));
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "calls";
	int n = argc > 2 ? atoi(argv[2]) : 1;

	if (!strcmp(mode, "calls")) {
		calls(n);
	} else if (!strcmp(mode, "ids")) {
		/* two calls between two clock reads */
		unsigned long long t0 = now();
		probed(text, 1);
		probed(text, 2);
		unsigned long long t1 = now();
		printf("pid %d tid %d uid %d gid %d\n", getpid(), gettid(), getuid(), getgid());
		printf("clock %llu %llu\n", t0, t1);
	} else if (!strcmp(mode, "str")) {
		/* argv[2...]: the strings probed gets, one call each */
		for (int i = 2; i < argc; i++)
			printf("probed %ld\n", probed(argv[i], i));
	} else if (!strcmp(mode, "stack")) {
		level1(n);
		printf("probed %p\n", (void *)probed);
		for (int i = 0; i < 3; i++)
			printf("ret %p\n", ret_addr[i]);
	} else if (!strcmp(mode, "signal")) {
		signal(SIGUSR1, on_usr1);
		calls(1);
		printf("after\n");
	} else if (!strcmp(mode, "cpu")) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(n, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			return 2;
		calls(3);
		printf("cpu %d\n", sched_getcpu());
	} else if (!strcmp(mode, "fork")) {
		/* the child calls probed 3 times, then the parent twice */
		pid_t pid = fork();

		if (pid == 0) {
			calls(3);
			_exit(0);
		}
		waitpid(pid, 0, 0);
		printf("child %d\n", pid);
		calls(2);
	} else if (!strcmp(mode, "exec")) {
		/* one call, then the same pid runs "calls 2" */
		calls(1);
		execl(argv[0], argv[0], "calls", "2", (char *)0);
		return 3;
	}
	return 0;
}
