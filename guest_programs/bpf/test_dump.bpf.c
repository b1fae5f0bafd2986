// SPDX-License-Identifier: GPL-2.0
/* Maps whose values exercise every way bpftool prints a BTF value: a struct with a
 * bitfield, a string, a bool, an enum, a pointer, byte and short arrays and a union; a
 * per-CPU array; a char-valued hash; .rodata and .data. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
enum color { RED = 1, BLUE = -3 };
struct val {
	int s;
	unsigned int flag:3, more:5;
	long long delta;
	char comm[6];
	_Bool on;
	enum color c;
	void *ptr;
	unsigned char raw[3];
	short arr[2];
	union { int i; char ch; } u;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, struct val);
} structs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} pc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, __u64);
	__type(value, char);
} chars SEC(".maps");

const volatile int knob = -5;
__u64 counter = 3;

SEC("uprobe")
int p(void *ctx)
{
	struct val v = {};
	__u32 k = 0;

	bpf_map_update_elem(&structs, &k, &v, 0);
	return knob + counter;
}

char LICENSE[] SEC("license") = "GPL";
