// SPDX-License-Identifier: GPL-2.0
/* One program per helper the helper tests pin down, each attached at probed(s, n) of
 * tests/c/bpf_calls.c and leaving what the helper returned in a global the test reads. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define MAX_HITS 4

/* set by the tests before load */
const volatile __u32 signal_number = 0;
const volatile __u64 fault_addr = 16;

__u32 hits;
__u64 pid_tgid, uid_gid, cpu, ktime[MAX_HITS];
char comm[16];
char comm_short[4];
long read_ret, fault_ret[3], str_fault_ret;
char arg_bytes[16];
__u32 str_hits;
long str_ret[MAX_HITS], cut_ret[MAX_HITS];
char str_full[MAX_HITS][32], str_cut[MAX_HITS][5];
__u64 fault_dst[3] = {0x1111111111111111ULL, 0x1111111111111111ULL, 0x1111111111111111ULL};
char str_fault_dst[8] = "xxxxxxx";
__u64 func_ip[MAX_HITS], cookies[MAX_HITS];
__u32 return_hits;
__u64 return_func_ip[MAX_HITS], ret_rax;
long stack_len, skip_len, bad_stack_ret;
__u64 stack[8], skipped[2];
__u64 bad_stack[2] = {1, 2};
long signal_ret;
long printk_ret[8];
long loop_ret[3], loop_sum[3], for_each_ret[3], for_each_sum[3];
long snprintf_ret, snprintf_cut_ret;
char snprintf_out[32], snprintf_cut[6];
long strncmp_ret[4];

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} per_cpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 6);
	__type(key, __u32);
	__type(value, __u64);
} values SEC(".maps");

static __always_inline __u32 slot(void)
{
	__u32 i = hits++;

	return i < MAX_HITS ? i : MAX_HITS - 1;
}

SEC("uprobe")
int ids(struct pt_regs *ctx)
{
	__u32 i = slot();

	pid_tgid = bpf_get_current_pid_tgid();
	uid_gid = bpf_get_current_uid_gid();
	bpf_get_current_comm(comm, sizeof(comm));
	bpf_get_current_comm(comm_short, sizeof(comm_short));
	cpu = bpf_get_smp_processor_id();
	ktime[i] = bpf_ktime_get_ns();
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(read_arg, const char *s, long n)
{
	read_ret = bpf_probe_read_user(arg_bytes, sizeof(arg_bytes), s);
	/* an unmapped user page, a kernel address, a read across the end of user space */
	fault_ret[0] = bpf_probe_read_user(&fault_dst[0], 8, (void *)fault_addr);
	fault_ret[1] = bpf_probe_read_user(&fault_dst[1], 8, (void *)0xffff888000000000ULL);
	fault_ret[2] = bpf_probe_read_user(&fault_dst[2], 8, (void *)((1ULL << 47) - 4096 - 4));
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(read_str, const char *s, long n)
{
	__u32 i = str_hits++;

	if (i >= MAX_HITS)
		return 0;
	str_ret[i] = bpf_probe_read_user_str(str_full[i], sizeof(str_full[i]), s);
	cut_ret[i] = bpf_probe_read_user_str(str_cut[i], sizeof(str_cut[i]), s);
	str_fault_ret = bpf_probe_read_user_str(str_fault_dst, sizeof(str_fault_dst), (void *)fault_addr);
	return 0;
}

SEC("uprobe")
int func_ip_entry(struct pt_regs *ctx)
{
	func_ip[slot()] = bpf_get_func_ip(ctx);
	return 0;
}

SEC("uretprobe")
int func_ip_return(struct pt_regs *ctx)
{
	__u32 i = return_hits++;

	return_func_ip[i < MAX_HITS ? i : MAX_HITS - 1] = bpf_get_func_ip(ctx);
	ret_rax = PT_REGS_RC(ctx);
	return 0;
}

SEC("uprobe")
int cookie_perf(struct pt_regs *ctx)
{
	cookies[slot()] = bpf_get_attach_cookie(ctx);
	return 0;
}

SEC("uprobe.multi")
int cookie_multi(struct pt_regs *ctx)
{
	cookies[slot()] = bpf_get_attach_cookie(ctx);
	return 0;
}

SEC("uprobe")
int user_stack(struct pt_regs *ctx)
{
	stack_len = bpf_get_stack(ctx, stack, sizeof(stack), BPF_F_USER_STACK);
	/* the third and fourth entries; an unknown flag (bit 9) */
	skip_len = bpf_get_stack(ctx, skipped, sizeof(skipped), BPF_F_USER_STACK | 2);
	bad_stack_ret = bpf_get_stack(ctx, bad_stack, sizeof(bad_stack), BPF_F_USER_STACK | (1 << 9));
	return 0;
}

SEC("uprobe")
int send_signal(struct pt_regs *ctx)
{
	signal_ret = bpf_send_signal(signal_number);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(printk, const char *s, long n)
{
	static const char f0[] = "d=%d u=%u x=%x\n";
	static const char f1[] = "lld=%lld s=%s c=%c";
	static const char f2[] = "100%% n=%ld";
	static const char f3[] = "bad %q";
	static const char f4[] = "[%5d|%-4u|%03x]";
	static const char f5[] = "short %hd";
	static const char f6[] = "precision %.2s";
	static const char f7[] = "control \x01";

	printk_ret[0] = bpf_trace_printk(f0, sizeof(f0), -5, -5, 255);
	printk_ret[1] = bpf_trace_printk(f1, sizeof(f1), -(1LL << 40), s, 'Z');
	printk_ret[2] = bpf_trace_printk(f2, sizeof(f2), n);
	printk_ret[3] = bpf_trace_printk(f3, sizeof(f3), 1);
	printk_ret[4] = bpf_trace_printk(f4, sizeof(f4), -42, 7, 10);
	printk_ret[5] = bpf_trace_printk(f5, sizeof(f5), 1);
	printk_ret[6] = bpf_trace_printk(f6, sizeof(f6), s);
	printk_ret[7] = bpf_trace_printk(f7, sizeof(f7));
	return 0;
}

/* a callback's context: the running sum, and the call to stop at (0: none) */
struct loop_ctx {
	long sum;
	long stop_at;
};

static long add_index(__u32 index, struct loop_ctx *c)
{
	c->sum += index;
	return c->stop_at && index + 1 == c->stop_at;
}

static long sum_values(void *map, __u32 *key, __u64 *value, struct loop_ctx *c)
{
	c->sum += *value;
	return c->stop_at && *key + 1 == c->stop_at;
}

/* bpf_loop(10) and bpf_for_each_map_elem over values, stopping at the stop_at-th call */
static __always_inline void run_loops(int i, long stop_at)
{
	struct loop_ctx c = {0, stop_at};

	loop_ret[i] = bpf_loop(10, add_index, &c, 0);
	loop_sum[i] = c.sum;
	c.sum = 0;
	for_each_ret[i] = bpf_for_each_map_elem(&values, sum_values, &c, 0);
	for_each_sum[i] = c.sum;
}

static __always_inline void set_value(__u32 k)
{
	__u64 v = 10 * (k + 1);

	bpf_map_update_elem(&values, &k, &v, 0);
}

SEC("uprobe")
int loops(struct pt_regs *ctx)
{
	set_value(0);
	set_value(1);
	set_value(2);
	set_value(3);
	set_value(4);
	set_value(5);
	run_loops(0, 0);
	run_loops(1, 3);
	run_loops(2, 1);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(formats, const char *s, long n)
{
	static const char fmt[] = "%d-%s-%x";
	__u64 args[] = {-7, (__u64)s, 0xbeef};

	snprintf_ret = bpf_snprintf(snprintf_out, sizeof(snprintf_out), fmt, args, sizeof(args));
	snprintf_cut_ret = bpf_snprintf(snprintf_cut, sizeof(snprintf_cut), fmt, args, sizeof(args));
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(compare, const char *s, long n)
{
	char buf[8] = {};

	bpf_probe_read_user_str(buf, sizeof(buf), s);
	strncmp_ret[0] = bpf_strncmp(buf, sizeof(buf), "hello, ");
	strncmp_ret[1] = bpf_strncmp(buf, 5, "hello!");
	strncmp_ret[2] = bpf_strncmp(buf, sizeof(buf), "help");
	strncmp_ret[3] = bpf_strncmp(buf, sizeof(buf), "hell");
	return 0;
}

SEC("uprobe")
int count_cpu(struct pt_regs *ctx)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&per_cpu, &zero);

	if (v)
		*v += 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
