/* USDT sites of every kind; prints how often the semaphore-guarded probe was enabled. */
#include <stdio.h>
#include "emu_usdt.h"

EMU_USDT_SEMA(demo, guarded);

int main(int argc, char **argv)
{
    int enabled = 0;
    for (int i = 0; i < 3; i++) {
        EMU_USDT(demo, plain);
        EMU_USDT_NOP5(demo, combo5);
        EMU_USDT_NOP10(demo, combo10);
        if (EMU_USDT_ENABLED(demo, guarded))
            enabled++;
        EMU_USDT_S(demo, guarded);
    }
    printf("enabled=%d\n", enabled);
    return 0;
}
