// SPDX-License-Identifier: MIT
/* The malloc_sizes tool's target: allocations of sizes across many size classes, freed in
 * an order of its own, so the counts and the free addresses say whether probes fired. */
#include <stdlib.h>

int main(void)
{
	static const unsigned long sizes[] = {1, 7, 8, 24, 100, 200, 1000, 5000, 70000, 3, 64, 65};
	void *p[sizeof(sizes) / sizeof(sizes[0])];
	unsigned int i, n = sizeof(sizes) / sizeof(sizes[0]);

	for (i = 0; i < n; i++)
		p[i] = malloc(sizes[i]);
	for (i = 0; i < n; i += 2)
		free(p[i]);
	for (i = 1; i < n; i += 2)
		free(p[i]);
	return 0;
}
