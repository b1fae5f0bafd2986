/* Which variant glibc's IFUNCs chose: the offset in libc of the function each name
 * resolved to (dladdr's dli_fbase is libc's load address).  Then "calls N": strlen and
 * memmove N times, for probes on the variants. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void show(const char *name, void *fn) {
    Dl_info info;
    if (!dladdr(fn, &info)) {
        printf("%s ?\n", name);
        return;
    }
    printf("%s %#lx\n", name, (unsigned long)((char *)fn - (char *)info.dli_fbase));
}

int main(int argc, char **argv) {
    if (argc > 2) { /* calls N */
        static char buf[256], dst[256];
        size_t total = 0;
        memset(buf, 'x', 100);
        for (int i = 0; i < atoi(argv[2]); i++) {
            buf[10 + i % 50] = 0;
            total += strlen(buf);
            memmove(dst, buf, 64 + i % 7);
            buf[10 + i % 50] = 'x';
        }
        printf("%zu\n", total);
        return 0;
    }
    size_t (*volatile pstrlen)(const char *) = strlen;
    void *(*volatile pmemmove)(void *, const void *, size_t) = memmove;
    void *(*volatile pmemcpy)(void *, const void *, size_t) = memcpy;
    void *(*volatile pmemset)(void *, int, size_t) = memset;
    char *(*volatile pstrchr)(const char *, int) = strchr;
    int (*volatile pstrcmp)(const char *, const char *) = strcmp;
    show("strlen", (void *)pstrlen);
    show("memmove", (void *)pmemmove);
    show("memcpy", (void *)pmemcpy);
    show("memset", (void *)pmemset);
    show("strchr", (void *)pstrchr);
    show("strcmp", (void *)pstrcmp);
    return 0;
}
