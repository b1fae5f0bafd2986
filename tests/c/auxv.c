/* Prints what the kernel's initial stack told the program. */
#include <elf.h>
#include <stdio.h>
#include <sys/auxv.h>

extern char __executable_start;
extern void _start(void);

int main(int argc, char **argv, char **envp)
{
    unsigned char *rnd = (unsigned char *)getauxval(AT_RANDOM);
    printf("pagesz=%lu\n", getauxval(AT_PAGESZ));
    printf("phnum=%lu\n", getauxval(AT_PHNUM));
    printf("phent=%lu\n", getauxval(AT_PHENT));
    printf("entry_ok=%d\n", getauxval(AT_ENTRY) == (unsigned long)&_start);
    printf("phdr_ok=%d\n", getauxval(AT_PHDR) ==
           (unsigned long)&__executable_start + ((Elf64_Ehdr *)&__executable_start)->e_phoff);
    printf("random_nonnull=%d\n", rnd != 0 && (rnd[0] | rnd[1] | rnd[2] | rnd[3]) != 0);
    printf("uid=%lu euid=%lu gid=%lu egid=%lu\n", getauxval(AT_UID), getauxval(AT_EUID),
           getauxval(AT_GID), getauxval(AT_EGID));
    printf("execfn=%s\n", (char *)getauxval(AT_EXECFN));
    printf("platform=%s\n", (char *)getauxval(AT_PLATFORM));
    printf("argc=%d argv1=%s env0=%s\n", argc, argc > 1 ? argv[1] : "-", envp[0] ? envp[0] : "-");
    printf("stack_aligned=%d\n", ((unsigned long)argv & 7) == 0);
    return 0;
}
