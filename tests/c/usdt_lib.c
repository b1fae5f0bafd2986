/* A shared library with a semaphore-guarded USDT probe (libdemo:tick). */
#include "emu_usdt.h"

EMU_USDT_SEMA(libdemo, tick);

int libdemo_tick(void)
{
    int on = EMU_USDT_ENABLED(libdemo, tick);
    EMU_USDT_S(libdemo, tick);
    return on;
}
