// SPDX-License-Identifier: GPL-2.0
/* Objects the loader must refuse, one per -D flag: BAD_SECTION puts a program in a
 * section libbpf knows no type for, NO_PROGRAMS leaves only a map and the license. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} only_map SEC(".maps");

#ifdef BAD_SECTION
SEC("nosuchtype/thing")
int prog(void *ctx)
{
	return 0;
}
#endif

char LICENSE[] SEC("license") = "GPL";
