// SPDX-License-Identifier: GPL-2.0
/* malloc calls per size class (a power-of-two bucket) in a hash map, and every free()'s
 * address streamed through a ring buffer: the BPF side of the malloc_sizes tool. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct free_event {
	__u32 pid;
	__u32 seq;
	__u64 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} sizes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} frees SEC(".maps");

/* the process to count (0: every process), set by the loader before load */
const volatile __u32 target_tgid = 0;
__u32 free_seq = 0;

static __always_inline int wanted(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	return !target_tgid || tgid == target_tgid;
}

static __always_inline __u32 size_class(__u64 size)
{
	__u32 cls = 0;
	/* bucket i holds sizes in [2^(i-1), 2^i): a bounded loop */
	for (int i = 0; i < 40 && size; i++) {
		size >>= 1;
		cls++;
	}
	return cls;
}

SEC("uprobe")
int BPF_KPROBE(on_malloc, __u64 size)
{
	__u32 cls;
	__u64 one = 1, *count;

	if (!wanted())
		return 0;
	cls = size_class(size);
	count = bpf_map_lookup_elem(&sizes, &cls);
	if (count)
		__sync_fetch_and_add(count, 1);
	else
		bpf_map_update_elem(&sizes, &cls, &one, BPF_NOEXIST);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_free, void *ptr)
{
	struct free_event *e;

	if (!wanted() || !ptr)
		return 0;
	e = bpf_ringbuf_reserve(&frees, sizeof(*e), 0);
	if (!e)
		return 0;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->seq = __sync_fetch_and_add(&free_seq, 1);
	e->addr = (__u64)ptr;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
