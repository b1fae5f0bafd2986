/* Prints the pointers a program sees at start-up: auxv (in the kernel's order), where
 * argv, envp, the stack, the heap, malloc, main, libc and the vDSO are, and its maps. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv)
{
    int local;
    unsigned long *p = (unsigned long *)environ;
    while (*p)
        p++;
    for (p++; p[0]; p += 2)
        printf("auxv %lu %#lx\n", p[0], p[1]);
    printf("argv=%p argv0=%p environ=%p env0=%p local=%p\n", (void *)argv, argv[0],
           (void *)environ, environ[0], (void *)&local);
    printf("sbrk=%p main=%p malloc_small=%p malloc_big=%p puts=%p\n", sbrk(0), (void *)main,
           malloc(16), malloc(1 << 20), (void *)puts);
    if (argc > 1) {
        FILE *f = fopen("/proc/self/maps", "r");
        char line[512];
        while (f && fgets(line, sizeof line, f))
            fputs(line, stdout);
    }
    return 0;
}
