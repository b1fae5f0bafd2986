#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    printf("hello from %s argc=%d\n", argv[0], argc);
    char *p = malloc(200000);           /* large enough for mmap, small ones use brk */
    memset(p, 1, 200000);
    char *q = malloc(100);
    strcpy(q, "heap ok");
    for (int i = 1; i < argc; i++)
        puts(argv[i]);
    puts(q);
    free(p);
    free(q);
    fprintf(stderr, "to stderr\n");
    return 7;
}
