/* mremap as the kernel answers it; MAP_FIXED addresses make the output comparable. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define AT(n) ((char *)(0x300000000UL + (n) * 0x1000UL))
#define ANON (MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED)

static void show(const char *what, void *p)
{
    if (p == MAP_FAILED)
        printf("%s: errno=%d\n", what, errno);
    else
        printf("%s: %#lx\n", what, (unsigned long)p);
}

static void maps(const char *when)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    printf("maps %s:\n", when);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "3000", 4) == 0)
            fputs(line, stdout);
    fclose(f);
}

int main(int argc, char **argv)
{
    char *a = mmap(AT(0), 0x2000, PROT_READ | PROT_WRITE, ANON, -1, 0);
    strcpy(a, "moved bytes");
    show("grow in place", mremap(a, 0x2000, 0x4000, 0));
    mmap(AT(4), 0x1000, PROT_READ, ANON, -1, 0);                     /* a wall at AT(4) */
    show("grow into the wall", mremap(a, 0x4000, 0x6000, 0));
    show("shrink", mremap(a, 0x4000, 0x3000, 0));
    show("fixed move", mremap(a, 0x3000, 0x5000, MREMAP_MAYMOVE | MREMAP_FIXED, AT(0x10)));
    printf("contents: %s old gone: %d\n", AT(0x10), mremap(a, 0x1000, 0x1000, 0) == MAP_FAILED);
    show("unaligned", mremap(AT(0x10) + 1, 0x1000, 0x2000, MREMAP_MAYMOVE));
    show("bad flags", mremap(AT(0x10), 0x1000, 0x2000, 8));
    show("fixed without maymove", mremap(AT(0x10), 0x1000, 0x2000, MREMAP_FIXED, AT(0x40)));
    show("zero new length", mremap(AT(0x10), 0x1000, 0, MREMAP_MAYMOVE));
    show("unmapped", mremap(AT(0x80), 0x1000, 0x2000, MREMAP_MAYMOVE));
    show("spans two mappings", mremap(AT(0x10), 0x6000, 0x7000, MREMAP_MAYMOVE));
    show("overlapping target", mremap(AT(0x10), 0x2000, 0x2000, MREMAP_MAYMOVE | MREMAP_FIXED, AT(0x11)));
    show("dontunmap", mremap(AT(0x10), 0x1000, 0x1000, MREMAP_MAYMOVE | MREMAP_DONTUNMAP | MREMAP_FIXED, AT(0x20)));
    printf("dontunmap: new=%s old=%d\n", AT(0x20), AT(0x10)[0]);
    maps("anonymous");

    int fd = open(argv[1], O_RDONLY);
    char *f = mmap(AT(0x30), 0x1000, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0x1000);
    show("file grow in place", mremap(f, 0x1000, 0x2000, 0));
    maps("file grown in place");
    mmap(AT(0x32), 0x1000, PROT_READ, ANON, -1, 0);
    char *g = mremap(f, 0x2000, 0x3000, MREMAP_MAYMOVE | MREMAP_FIXED, AT(0x50));
    show("file move", g);
    printf("file bytes: %d %d %d\n", g[0] == (char)(0x1000 * 7 + 3), g[0x1fff] == (char)(0x2fff * 7 + 3),
           g[0x2000] == (char)(0x3000 * 7 + 3));
    maps("file");

    char *big = malloc(1 << 20);
    memset(big, 5, 1 << 20);
    big = realloc(big, 8 << 20);
    printf("realloc keeps the bytes: %d\n", big[(1 << 20) - 1] == 5);
    return 0;
}
