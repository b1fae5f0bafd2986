/* MAP_SHARED | MAP_ANONYMOUS memory: writes seen across fork in both directions (pages
 * touched before the fork and pages first touched after it), a private mapping that
 * stays private, MAP_SHARED_VALIDATE, mprotect on shared pages, and the mapping as
 * /proc/self/maps shows it (permissions and name).  One line per case. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096
#define PAGES 40

static void maps_line(void *addr)
{
	char line[512];
	unsigned long lo, hi;
	FILE *f = fopen("/proc/self/maps", "r");

	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo == (unsigned long)addr) {
			char perms[8], name[256] = "";
			sscanf(line, "%*s %7s %*s %*s %*s %255[^\n]", perms, name);
			printf("maps: %lu pages %s %s\n", (hi - lo) / PAGE, perms, name);
		}
	}
	fclose(f);
}

int main(void)
{
	char *s = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	char *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *v;
	int status;

	if (s == MAP_FAILED || p == MAP_FAILED)
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("zeroed: %d\n", s[0] == 0 && s[PAGES * PAGE - 1] == 0);
	strcpy(s, "parent wrote");
	strcpy(p, "private");
	maps_line(s);
	if (fork() == 0) {
		printf("child sees: %s\n", s);
		fflush(stdout);
		strcpy(s + 8, "child");
		strcpy(s + 30 * PAGE, "untouched page written by the child");
		strcpy(p, "child's own");
		_exit(0);
	}
	wait(&status);
	printf("parent sees: %s\n", s);
	printf("parent sees late page: %s\n", s + 30 * PAGE);
	printf("private stays: %s\n", p);
	if (mprotect(s, PAGE, PROT_READ) || mprotect(s, PAGE, PROT_READ | PROT_WRITE))
		return 1;
	if (fork() == 0) {
		strcpy(s, "after mprotect");
		_exit(0);
	}
	wait(&status);
	printf("after mprotect: %s\n", s);
	v = mmap(NULL, PAGE, PROT_READ, MAP_SHARED_VALIDATE | MAP_ANONYMOUS | 0x40000000, -1, 0);
	printf("validate unknown flag: %s\n", v == MAP_FAILED ? strerrorname_np(errno) : "mapped");
	v = mmap(NULL, PAGE, PROT_READ, MAP_SHARED_VALIDATE | MAP_ANONYMOUS, -1, 0);
	printf("validate: %s\n", v == MAP_FAILED ? strerrorname_np(errno) : "mapped");
	v = mmap(NULL, PAGE, PROT_READ, MAP_ANONYMOUS, -1, 0);
	printf("no type: %s\n", v == MAP_FAILED ? strerrorname_np(errno) : "mapped");
	return 0;
}
