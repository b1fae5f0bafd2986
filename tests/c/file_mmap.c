/* File-backed mmap as do_mmap answers it.  argv: FILE (0x3800 bytes, byte i = i*7+3),
 * DIR, WRONLY_FILE, HARDLINK (of FILE).  Prints one line per case
 * and the maps lines of its MAP_FIXED area (0x200000000...). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AT(n) ((void *)(0x200000000UL + (n) * 0x1000UL))

static unsigned char want(long i) { return (unsigned char)(i * 7 + 3); }

static void result(const char *what, void *p)
{
    if (p == MAP_FAILED)
        printf("%s: errno=%d\n", what, errno);
    else
        printf("%s: ok\n", what);
}

static void maps(const char *when)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    printf("maps %s:\n", when);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "2000", 4) == 0)
            fputs(line, stdout);
    fclose(f);
}

int main(int argc, char **argv)
{
    const char *path = argv[1];
    int fd = open(path, O_RDONLY), dfd = open(argv[2], O_RDONLY | O_DIRECTORY);
    int wfd = open(argv[3], O_WRONLY), pfd[2];
    pipe(pfd);

    unsigned char *p = mmap(AT(0), 0x2000, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0x3000);
    result("private offset 0x3000", p);
    printf("first=%d last=%d tail=%d\n", p[0] == want(0x3000), p[0x7ff] == want(0x37ff), p[0x800] | p[0xfff]);
    p[0] = 0xAA;
    unsigned char b;
    pread(fd, &b, 1, 0x3000);
    printf("private write stays private: file=%d map=%d\n", b == want(0x3000), p[0] == 0xAA);

    unsigned char *h = mmap(AT(0x10), 0x1000, PROT_READ, MAP_PRIVATE, fd, 0x1000);
    printf("hint taken=%d byte=%d\n", h == AT(0x10), h[5] == want(0x1005));

    unsigned char *s = mmap(AT(0x20), 0x1000, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
    result("shared read-only", s);
    printf("shared byte=%d\n", s[100] == want(100));
    int rc = mprotect(s, 0x1000, PROT_READ | PROT_WRITE);
    printf("mprotect shared writable: %d errno=%d\n", rc, errno);
    result("shared writable on O_RDONLY", mmap(0, 0x1000, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    result("private on O_WRONLY", mmap(0, 0x1000, PROT_READ, MAP_PRIVATE, wfd, 0));
    int rwfd = open(argv[3], O_RDWR);
    void *rs = mmap(0, 0x1000, PROT_READ, MAP_SHARED, rwfd, 0);
    result("shared read-only on O_RDWR", rs);
    if (rs != MAP_FAILED)
        munmap(rs, 0x1000);
    result("directory", mmap(0, 0x1000, PROT_READ, MAP_PRIVATE, dfd, 0));
    result("pipe", mmap(0, 0x1000, PROT_READ, MAP_PRIVATE, pfd[0], 0));
    result("closed fd", mmap(0, 0x1000, PROT_READ, MAP_PRIVATE, 1000, 0));
    result("unaligned offset", mmap(0, 0x1000, PROT_READ, MAP_PRIVATE, fd, 0x10));
    result("bad map type", mmap(0, 0x1000, PROT_READ, 0, fd, 0));
    result("zero length", mmap(0, 0, PROT_READ, MAP_PRIVATE, fd, 0));
    unsigned long offs[] = {0x8000000000000000UL, 0x7ffffffffffff000UL, 0x7fffffffffffe000UL};
    for (int i = 0; i < 3; i++) {          /* file_mmap_ok: offset + length <= MAX_LFS_FILESIZE */
        long r = syscall(SYS_mmap, 0, 0x1000, PROT_READ, MAP_PRIVATE, fd, offs[i]);
        printf("offset %#lx: %s errno=%d\n", offs[i], r < 0 ? "failed" : "ok", r < 0 ? errno : 0);
        if (r >= 0)
            munmap((void *)r, 0x1000);
    }

    munmap(AT(0), 0x2000);
    munmap(AT(0x10), 0x1000);
    munmap(AT(0x20), 0x1000);
    unsigned char *m = mmap(AT(0x40), 0x3000, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    maps("three pages");
    mprotect(m + 0x1000, 0x1000, PROT_READ | PROT_WRITE);
    maps("middle page writable");
    munmap(m, 0x1000);
    maps("first page unmapped");
    printf("after split: %d %d\n", m[0x1000] == want(0x1000), m[0x2fff] == want(0x2fff));
    munmap(AT(0x40), 0x3000);

    int hfd = open(argv[4], O_RDONLY);
    mmap(AT(0x60), 0x1000, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    mmap(AT(0x61), 0x1000, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, 0x1000);
    mmap(AT(0x62), 0x1000, PROT_READ, MAP_SHARED | MAP_FIXED, hfd, 0x2000);
    maps("the file and a hard link of it");
    return 0;
}
