/* sysinfo(2) field by field, and what glibc derives from it. */
#include <stdio.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

int main(void)
{
    struct timespec nap = {7, 0};
    struct sysinfo si;
    printf("start\n");                 /* stdout's buffer is allocated before the call */
    nanosleep(&nap, NULL);
    if (sysinfo(&si) != 0) {
        perror("sysinfo");
        return 1;
    }
    printf("uptime=%ld loads=%lu,%lu,%lu\n", si.uptime, si.loads[0], si.loads[1], si.loads[2]);
    printf("totalram=%lu freeram=%lu sharedram=%lu bufferram=%lu\n", si.totalram, si.freeram,
           si.sharedram, si.bufferram);
    printf("totalswap=%lu freeswap=%lu procs=%u totalhigh=%lu freehigh=%lu mem_unit=%u\n",
           si.totalswap, si.freeswap, si.procs, si.totalhigh, si.freehigh, si.mem_unit);
    printf("phys_pages=%ld avphys_pages=%ld\n", sysconf(_SC_PHYS_PAGES), sysconf(_SC_AVPHYS_PAGES));
    return 0;
}
