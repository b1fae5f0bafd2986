/* A program whose bss alone is 64 MiB: loading it needs that much address space. */
static char big[64 << 20];

int main(void) {
    big[sizeof big - 1] = 1;
    return big[0];
}
