/* Calls libdemo_tick() of a shared library argv[1] times (default 3); prints how many
 * calls saw the library's USDT semaphore set. */
#include <stdio.h>
#include <stdlib.h>

int libdemo_tick(void);

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3, enabled = 0;
    for (int i = 0; i < n; i++)
        enabled += libdemo_tick();
    printf("ticks=%d enabled=%d\n", n, enabled);
    return 0;
}
