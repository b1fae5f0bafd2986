/* takes() gets strings holding bytes a trace line does not expect: a newline, a tab and
 * other control bytes, UTF-8, quotes and a backslash, nothing, a byte that is not
 * UTF-8.  Prints the sum of their first bytes. */
#include <stdio.h>

__attribute__((noinline)) int takes(const char *s)
{
    return (unsigned char)s[0];
}

int main(void)
{
    int r = 0;
    r += takes("a\nb");
    r += takes("tab\there\x01\x7f\xc3\xa9 end");
    r += takes("");
    r += takes("quote\"back\\slash");
    r += takes("\xff\n");
    printf("%d\n", r);
    return 0;
}
