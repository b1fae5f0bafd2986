// SPDX-License-Identifier: GPL-2.0
/* USDT programs as libbpf tools write them: BPF_USDT names a probe's first six arguments
 * (bpf_usdt_arg reads each through the spec libbpf stored for the site), and each hit
 * leaves one ring buffer record: which program ran, the argument count, the spec id (the
 * BPF cookie), the user cookie, what bpf_usdt_arg returns just past the last argument,
 * and the six arguments.  Used by tests/test_bpf_usdt.py with tests/c/usdt_args.c.
 *
 *   -DUSDT_SEC='"usdt/PATH:PROVIDER:NAME"'  adds on_section, attached by its section
 *   -DLIGHT                                  on_probe only counts its hits (quick to verify)
 *   -DLIGHT -DNO_USDT_H                      ... and the object lacks <bpf/usdt.bpf.h> */
#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

__u32 nr_hits;

#ifdef LIGHT
#ifndef NO_USDT_H
#include <bpf/usdt.bpf.h>
#endif
SEC("usdt")
int on_probe(struct pt_regs *ctx)
{
	__sync_fetch_and_add(&nr_hits, 1);
	return 0;
}
#else
#include <bpf/usdt.bpf.h>

struct hit {
	long prog;
	long arg_cnt;
	long spec_id;
	long usdt_cookie;
	long past_last_ret;
	long args[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} hits SEC(".maps");

static __always_inline int record(struct pt_regs *ctx, long prog, long a0, long a1, long a2, long a3, long a4,
				  long a5)
{
	struct hit *h;
	long past;
	int cnt;

	__sync_fetch_and_add(&nr_hits, 1);
	h = bpf_ringbuf_reserve(&hits, sizeof(*h), 0);
	if (!h)
		return 0;
	cnt = bpf_usdt_arg_cnt(ctx);
	h->prog = prog;
	h->arg_cnt = cnt;
	h->spec_id = bpf_get_attach_cookie(ctx);
	h->usdt_cookie = bpf_usdt_cookie(ctx);
	h->past_last_ret = bpf_usdt_arg(ctx, cnt < 0 ? 0 : cnt, &past);
	h->args[0] = a0;
	h->args[1] = a1;
	h->args[2] = a2;
	h->args[3] = a3;
	h->args[4] = a4;
	h->args[5] = a5;
	bpf_ringbuf_submit(h, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_probe, long a0, long a1, long a2, long a3, long a4, long a5)
{
	return record(ctx, 0, a0, a1, a2, a3, a4, a5);
}

SEC("usdt")
int BPF_USDT(on_other, long a0, long a1)
{
	return record(ctx, 1, a0, a1, 0, 0, 0, 0);
}

#ifdef USDT_SEC
SEC(USDT_SEC)
int BPF_USDT(on_section, long a0, long a1)
{
	return record(ctx, 2, a0, a1, 0, 0, 0, 0);
}
#endif
#endif

char LICENSE[] SEC("license") = "GPL";
