// SPDX-License-Identifier: GPL-2.0
/* A program the verifier must reject: it dereferences a map lookup's result without
 * checking it for NULL ("R0 invalid mem access 'map_value_or_null'", EACCES).  A hash map:
 * a lookup in an array map with a constant key in range never returns NULL (6.18). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

SEC("uprobe")
int unchecked(void *ctx)
{
	__u32 key = 0;
	__u64 *v = bpf_map_lookup_elem(&counts, &key);

	return *(volatile __u64 *)v;
}

char LICENSE[] SEC("license") = "GPL";
