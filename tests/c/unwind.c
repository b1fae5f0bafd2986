/* Frames for the stepper's CFI unwinder: a leaf without a frame, a function whose
 * prologue moves rsp (a large local array), malloc reached from main through a helper,
 * and, with argv[1] = "exec", an execve of argv[2] (default: the program itself) with
 * argv[1] = "again", which returns through again() and leaf(); with argv[1] = "signal",
 * a SIGUSR1 handler runs on top of raise() called from signalled(). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) int leaf(int x) {
    asm volatile("" ::: "memory");
    return x * 3 + 1;
}

__attribute__((noinline)) int big_frame(int x) {
    volatile char buf[512];
    for (int i = 0; i < (int)sizeof buf; i++) buf[i] = (char)(i + x);
    int r = leaf(buf[x & 511]);
    return r + buf[(r + 7) & 511];
}

__attribute__((noinline)) void *alloc(int n) {
    void *p = malloc((size_t)n);
    asm volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) int again(int argc) {
    return leaf(argc) + 1;
}

__attribute__((noinline)) void on_usr1(int sig) {
    asm volatile("" ::: "memory");
    (void)sig;
}

__attribute__((noinline)) int signalled(int x) {
    raise(SIGUSR1);
    return x + 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "signal") == 0) {
        signal(SIGUSR1, on_usr1);
        return signalled(argc) & 1;
    }
    if (argc > 1 && strcmp(argv[1], "exec") == 0) {
        const char *path = argc > 2 ? argv[2] : argv[0];
        char *args[] = {(char *)path, "again", NULL};
        execv(path, args);
        return 99;
    }
    if (argc > 1)
        return again(argc) & 7;
    void *p = alloc(big_frame(argc + 4) & 255);
    printf("r=%d\n", p != NULL);
    free(p);
    return 0;
}
