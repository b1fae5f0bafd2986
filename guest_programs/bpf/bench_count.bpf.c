// SPDX-License-Identifier: GPL-2.0
/* The bench's counting consumer, as the kernel's uprobe trigger bench counts hits
 * (tools/testing/selftests/bpf/progs/trigger_bench.c): one counter per CPU, each on a
 * cache line of its own, bumped by an atomic add; the program returns 0. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define CPU_MASK 255

struct counter {
	long value;
} __attribute__((aligned(128)));

struct counter hits[CPU_MASK + 1];

static __always_inline void inc_counter(void)
{
	int cpu = bpf_get_smp_processor_id();

	__sync_add_and_fetch(&hits[cpu & CPU_MASK].value, 1);
}

SEC("uprobe")
int bench_trigger_uprobe(void *ctx)
{
	inc_counter();
	return 0;
}

SEC("uretprobe")
int bench_trigger_uretprobe(void *ctx)
{
	inc_counter();
	return 0;
}

SEC("uprobe.multi")
int bench_trigger_uprobe_multi(void *ctx)
{
	inc_counter();
	return 0;
}

SEC("uretprobe.multi")
int bench_trigger_uretprobe_multi(void *ctx)
{
	inc_counter();
	return 0;
}

char _license[] SEC("license") = "GPL";
