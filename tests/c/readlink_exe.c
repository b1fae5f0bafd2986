/* What readlink("/proc/self/exe") says. */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n < 0)
        return 1;
    buf[n] = 0;
    printf("%s\n", buf);
    return 0;
}
