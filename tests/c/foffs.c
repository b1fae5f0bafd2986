/* @+OFFSET fetchargs: a data segment whose vaddr - offset differs from the text's.
 * `counter` is changed before `probed` runs, so its file bytes and its memory differ. */
volatile unsigned int counter = 0x11223344;
const volatile unsigned int rodata_val = 0x55667788;
volatile unsigned int filler[1024] = {1};

__attribute__((noinline)) int probed(int x)
{
    return x + (int)counter + (int)rodata_val;
}

int main(int argc, char **argv)
{
    (void)argv;
    counter = 0xc0ffee00u + (unsigned)argc;
    filler[100] = 0xabcdef01u;
    return probed(argc) & 0x7f;
}
