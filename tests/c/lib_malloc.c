/* malloc/free through libc in a loop; prints every pointer malloc returned and its own
 * counts.  argv[1]: iterations (default 5); argv[2] "fork": a child runs the loop too.
 * Output goes through write() from a stack buffer, so stdio allocates nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void say(const char *text)
{
    ssize_t unused = write(1, text, strlen(text));
    (void)unused;
}

static void loop(int n)
{
    char line[96];
    for (int i = 0; i < n; i++) {
        void *p = malloc(32 + 16 * i);
        snprintf(line, sizeof line, "pid=%d ptr=%p\n", (int)getpid(), p);
        say(line);
        free(p);
    }
    snprintf(line, sizeof line, "pid=%d mallocs=%d frees=%d\n", (int)getpid(), n, n);
    say(line);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 5;
    if (argc > 2 && strcmp(argv[2], "fork") == 0) {
        pid_t child = fork();
        if (child == 0) {
            loop(n);
            _exit(0);
        }
        int status;
        waitpid(child, &status, 0);
    }
    loop(n);
    return 0;
}
