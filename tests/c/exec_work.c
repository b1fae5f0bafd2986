/* A dynamic program that execs another image and is traced across the exec.
 * "exec PATH ARGS...": before_exec() runs, then execv(PATH, [PATH, ARGS...]) (no malloc
 * in this image: its output goes through write()).
 * "work N": work_loop() mallocs and frees N blocks, then prints "mallocs=N frees=N". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void say(const char *text)
{
    ssize_t unused = write(1, text, strlen(text));
    (void)unused;
}

__attribute__((noinline)) void before_exec(const char *path)
{
    say("exec ");
    say(path);
    say("\n");
}

__attribute__((noinline)) int work_loop(int n)
{
    int done = 0;
    for (int i = 0; i < n; i++) {
        void *volatile p = malloc(24 + 8 * i);
        free(p);
        done++;
    }
    return done;
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "exec") == 0) {
        before_exec(argv[2]);
        execv(argv[2], argv + 2);
        say("execv failed\n");
        return 127;
    }
    if (argc > 2 && strcmp(argv[1], "work") == 0) {
        char line[64];
        int n = work_loop(atoi(argv[2]));
        snprintf(line, sizeof line, "mallocs=%d frees=%d\n", n, n);
        say(line);
        return 0;
    }
    say("usage: exec_work exec PATH ARGS... | work N\n");
    return 2;
}
