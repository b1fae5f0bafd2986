/* For sweep --host: what it writes to stderr, and the syscalls it makes, depend on its
 * argument (two of the same length, so the stack is laid out the same):
 *   "ab": write(1, "out\n", 4), write(2, "ab", 2), exit 3
 *   "ac": write(1, "out\n", 4), write(2, "a", 1), exit 3
 *   "xb": write(1, "out\n", 4), getppid(), write(2, "xb", 2), exit 3 */
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const char *arg = argc > 1 ? argv[1] : "ab";
    write(1, "out\n", 4);
    if (arg[0] == 'x')
        getppid();
    write(2, arg, arg[1] == 'c' ? 1 : strlen(arg));
    return 3;
}
