/* /proc/self/maps and /proc/filesystems as the kernel's seq_files produce them, for a
 * comparison of the native run with the model's.  One mode per argument:
 *   regions     the named regions with their permissions, the [vsyscall] line whole
 *   stack       the [stack] line's extent before and after a deep recursion
 *   change      read part of maps, map pages above and below what was read, read the rest
 *   seek        read it all, map a page, read again from offset 0 (lseek) and by pread
 *   fs CHUNK    read /proc/filesystems CHUNK bytes at a time: bytes, reads, the text
 *   fsline      /proc/filesystems through stdio, line by line, as libselinux does
 *   single      /proc/self/status: made at the first read, not at the open
 *   xol         read part of maps, run xol_probe (a uprobe there single-steps out of
 *               line: the [uprobes] page appears), read the rest
 * Addresses the host chooses are never printed, only what follows from them. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

static char all[1 << 20];

static long slurp(int fd, char *buf, long size)
{
    long n = 0, got;
    while (n < size && (got = read(fd, buf + n, size - n)) > 0)
        n += got;
    buf[n] = 0;
    return n;
}

static long read_maps(void)
{
    int fd = open("/proc/self/maps", O_RDONLY);
    long n = slurp(fd, all, sizeof all - 1);
    close(fd);
    return n;
}

/* the [stack] line's start and end */
static int stack_extent(unsigned long *lo, unsigned long *hi)
{
    read_maps();
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, "[stack]"))
            return sscanf(line, "%lx-%lx", lo, hi) == 2;
    return 0;
}

static void regions(void)
{
    void *volatile heap = malloc(1000); /* a [heap] */
    read_maps();
    free(heap);
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        char *name = strchr(line, '[');
        if (strstr(line, "[vsyscall]"))
            printf("%s\n", line);
        else if (name)
            printf("%.4s %s\n", strchr(line, ' ') + 1, name);
    }
}

static volatile char *deepest;

static int recurse(int n)
{
    volatile char frame[1024];
    frame[0] = (char)n;
    deepest = frame;
    return n ? recurse(n - 1) + frame[0] : 0;
}

static void stack(void)
{
    unsigned long lo, hi, lo2, hi2;
    if (!stack_extent(&lo, &hi))
        return (void)puts("no [stack] line");
    printf("initial size is at least 128 KiB: %d\n", hi - lo >= 128 << 10);
    recurse(2048); /* over 2 MiB below */
    unsigned long low = (unsigned long)deepest;
    stack_extent(&lo2, &hi2);
    printf("top stays: %d\n", hi2 == hi);
    printf("grew to the deepest frame: %d\n", lo2 <= low && lo2 < lo);
    printf("no further than the page below it: %d\n", low - lo2 < 2 * 4096);
    printf("grown size over 2 MiB: %d\n", hi2 - lo2 > (2 << 20));
}

static int has_line_at(const char *text, void *addr)
{
    char key[32];
    snprintf(key, sizeof key, "%lx-", (unsigned long)addr);
    for (const char *p = text; (p = strstr(p, key)); p++)
        if (p == text || p[-1] == '\n')
            return 1;
    return 0;
}

static void change(void)
{
    int fd = open("/proc/self/maps", O_RDONLY);
    char first[64];
    long a = read(fd, first, sizeof first);          /* part of the first line */
    void *low = mmap((void *)0x100000, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    void *high = mmap((void *)0x7e0000000000, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    long b = slurp(fd, all, sizeof all - 1);
    printf("first read: %ld\n", a);
    printf("mapped: %d %d\n", low == (void *)0x100000, high == (void *)0x7e0000000000);
    printf("rest starts with the first line's rest: %d\n", memchr(all, '\n', b) != NULL && all[0] != 0);
    printf("mapping above what was read is shown: %d\n", has_line_at(all, high));
    printf("mapping below what was read is not: %d\n", !has_line_at(all, low));
    printf("ends with [vsyscall]: %d\n", b > 11 && !strcmp(all + b - 11, "[vsyscall]\n"));
    close(fd);
}

static void seek(void)
{
    int fd = open("/proc/self/maps", O_RDONLY);
    long n = slurp(fd, all, sizeof all - 1);
    void *page = mmap((void *)0x7e0000000000, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    printf("first pass shows it: %d\n", has_line_at(all, page));
    printf("at the end: %ld\n", read(fd, all, 100));
    static char again[1 << 20];
    printf("lseek 0: %ld\n", (long)lseek(fd, 0, SEEK_SET));
    long m = slurp(fd, again, sizeof again - 1);
    printf("after lseek 0 it is shown: %d, one line longer: %d\n", has_line_at(again, page), m > n);
    long p = pread(fd, all, 200, 0);
    printf("pread at 0 is the new text's start: %d\n", p == 200 && !memcmp(all, again, 200));
    close(fd);
}

static void fs(int chunk)
{
    int fd = open("/proc/filesystems", O_RDONLY);
    long n = 0, got, reads = 0;
    while ((got = read(fd, all + n, chunk)) > 0) {
        n += got;
        reads++;
    }
    printf("bytes=%ld reads=%ld last=%ld\n", n, reads + 1, got);
    fwrite(all, 1, n, stdout);
    close(fd);
}

static void fsline(void)
{
    /* libselinux's selinuxfs_exists: getline until a "selinuxfs" entry */
    FILE *fp = fopen("/proc/filesystems", "re");
    char *buf = NULL;
    size_t len = 0;
    long lines = 0, bytes = 0, found = 0;
    ssize_t num;
    while ((num = getline(&buf, &len, fp)) != -1) {
        lines++;
        bytes += num;
        found |= strstr(buf, "selinuxfs") != NULL;
    }
    printf("lines=%ld bytes=%ld selinuxfs=%ld\n", lines, bytes, found);
    free(buf);
    fclose(fp);
}

/* its first instruction is neither emulated nor skipped by x86 uprobes: a probe
 * here executes it out of line */
long xol_probe(long);
__asm__(".globl xol_probe\n.type xol_probe,@function\nxol_probe:\n\tmov %rdi, %rax\n\tret\n"
        ".size xol_probe, .-xol_probe\n");

static void xol(void)
{
    int fd = open("/proc/self/maps", O_RDONLY);
    char first[64];
    read(fd, first, sizeof first);
    long r = xol_probe(7);
    long b = slurp(fd, all, sizeof all - 1);
    printf("probed function returns: %ld\n", r);
    printf("[uprobes] in the rest: %d\n", b > 0 && strstr(all, "[uprobes]") != NULL);
    close(fd);
}

static void single(void)
{
    int fd = open("/proc/self/status", O_RDONLY);
    prctl(PR_SET_NAME, "after-open");
    char head[17] = {0};
    read(fd, head, 16);                              /* made now: the new name */
    printf("first read: %s\n", strchr(head, '\t') + 1);
    prctl(PR_SET_NAME, "after-read");
    long n = slurp(fd, all, sizeof all - 1);         /* the rest of that text */
    printf("rest is the first text's: %d\n", n > 0 && !strstr(all, "after-read"));
    lseek(fd, 0, SEEK_SET);
    n = slurp(fd, all, sizeof all - 1);              /* offset 0: made again */
    printf("after lseek 0: %.16s\n", all + 6);
    close(fd);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "regions"))
        regions();
    else if (!strcmp(mode, "stack"))
        stack();
    else if (!strcmp(mode, "change"))
        change();
    else if (!strcmp(mode, "seek"))
        seek();
    else if (!strcmp(mode, "fs") && argc > 2)
        fs(atoi(argv[2]));
    else if (!strcmp(mode, "fsline"))
        fsline();
    else if (!strcmp(mode, "single"))
        single();
    else if (!strcmp(mode, "xol"))
        xol();
    else
        return 2;
    return 0;
}
