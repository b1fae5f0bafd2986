// SPDX-License-Identifier: GPL-2.0
/* Counting programs for the attach tests: a perf-event uprobe and uretprobe and their
 * uprobe_multi twins, each returning what the test sets (ret_value) and recording the
 * hits, the probed function's argument and return value, and the attach cookies. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define MAX_HITS 8

const volatile __u32 ret_value = 0;

__u32 entry_hits, return_hits;
__u64 args[MAX_HITS], rcs[MAX_HITS];
__u32 tgids[MAX_HITS];

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u64);
	__type(value, __u64);
} by_cookie SEC(".maps");

static __always_inline __u32 slot(__u32 *counter)
{
	__u32 i = __sync_fetch_and_add(counter, 1);

	return i < MAX_HITS ? i : MAX_HITS - 1;
}

static __always_inline void count_cookie(void *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx), one = 1, *v;

	v = bpf_map_lookup_elem(&by_cookie, &cookie);
	if (v)
		__sync_fetch_and_add(v, 1);
	else
		bpf_map_update_elem(&by_cookie, &cookie, &one, BPF_NOEXIST);
}

static __always_inline int on_entry(struct pt_regs *ctx)
{
	__u32 i = slot(&entry_hits);

	args[i] = PT_REGS_PARM2(ctx);
	tgids[i] = bpf_get_current_pid_tgid() >> 32;
	count_cookie(ctx);
	return ret_value;
}

static __always_inline int on_return(struct pt_regs *ctx)
{
	rcs[slot(&return_hits)] = PT_REGS_RC(ctx);
	return ret_value;
}

SEC("uprobe")
int count_entry(struct pt_regs *ctx)
{
	return on_entry(ctx);
}

SEC("uretprobe")
int count_return(struct pt_regs *ctx)
{
	return on_return(ctx);
}

SEC("uprobe.multi")
int multi_entry(struct pt_regs *ctx)
{
	return on_entry(ctx);
}

SEC("uretprobe.multi")
int multi_return(struct pt_regs *ctx)
{
	return on_return(ctx);
}

/* a session program without the session kfuncs: it loads on any kernel */
SEC("uprobe.session")
int plain_session(struct pt_regs *ctx)
{
	return on_entry(ctx);
}

char LICENSE[] SEC("license") = "GPL";
