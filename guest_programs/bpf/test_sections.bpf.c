// SPDX-License-Identifier: GPL-2.0
/* Section names of every uprobe flavour, .text subprograms called from two programs (one
 * calling another), a bpf_loop callback, global data in .data, and a kfunc extern: the
 * object the loader tests open. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

extern __u64 *bpf_session_cookie(void) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16);
	__uint(key_size, 8);
	__uint(value_size, 12);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} scratch SEC(".maps");

__u64 hits = 7;
__u32 last_cookie;

static __noinline __u64 bump(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&counts, &slot);

	if (v)
		__sync_fetch_and_add(v, 1);
	return v ? *v : 0;
}

static __noinline __u64 bump_twice(__u32 slot)
{
	return bump(slot) + bump(slot + 1);
}

static int add_one(__u32 index, void *ctx)
{
	*(__u64 *)ctx += index;
	return 0;
}

SEC("uprobe.multi/libc.so.6:malloc*")
int multi_entry(struct pt_regs *ctx)
{
	return bump(0);
}

SEC("uretprobe.multi/libc.so.6:free")
int multi_exit(struct pt_regs *ctx)
{
	return bump_twice(1);
}

SEC("uprobe.session")
int with_cookie(struct pt_regs *ctx)
{
	__u64 *cookie = bpf_session_cookie();

	last_cookie = (__u32)*cookie;
	hits++;
	return 0;
}

SEC("usdt/./app:myprov:myprobe")
int usdt_probe(struct pt_regs *ctx)
{
	__u64 sum = 0;

	bpf_loop(4, add_one, &sum, 0);
	return sum;
}

SEC("uretprobe.s//bin/true:main")
int sleepy_ret(struct pt_regs *ctx)
{
	return bump(3);
}

SEC("uprobe//bin/true:main+0x10")
int at_offset(struct pt_regs *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
