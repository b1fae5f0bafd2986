/* fork after a nop5 site was optimized: 6.18-7.1 do not copy the trampoline (VM_DONTCOPY),
 * so the child dies of SIGSEGV at the site; the parent goes on. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
extern void site_nop5(void);
__asm__(".text\n.globl site_nop5\nsite_nop5: .byte 0x0f,0x1f,0x44,0x00,0x00\n ret\n");
static void dump(const char *who) {
    unsigned char *p = (unsigned char *)site_nop5;
    printf("%s: %02x %02x %02x %02x %02x\n", who, p[0], p[1], p[2], p[3], p[4]);
    FILE *f = fopen("/proc/self/maps", "r"); char line[512];
    while (fgets(line, sizeof line, f)) if (strstr(line, "[uprobes")) printf("%s: %s", who, line);
    fclose(f); fflush(stdout);
}
int main(void) {
    site_nop5(); site_nop5();
    dump("parent");
    pid_t pid = fork();
    if (pid == 0) { dump("child"); site_nop5(); site_nop5(); printf("child survived\n"); return 3; }
    int st; waitpid(pid, &st, 0);
    printf("child status: %s %d\n", WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    site_nop5();
    return 0;
}
