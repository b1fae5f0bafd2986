/* Blocks for ever in read() on a pipe nobody writes: a native run that has to be
   interrupted. */
#include <unistd.h>

int main(void)
{
	int p[2];
	char c;

	if (pipe(p))
		return 1;
	return (int)read(p[0], &c, 1);
}
