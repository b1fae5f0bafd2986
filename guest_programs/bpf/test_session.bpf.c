// SPDX-License-Identifier: GPL-2.0
/* A uprobe.session program: at entry it writes the probed function's argument into its
 * session cookie and returns entry_ret (1: skip the return run); at return it records
 * that it knows it is the return run and the cookie its entry left. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define MAX_HITS 4
#define COOKIE_BASE 0xc0de0000ULL

extern _Bool bpf_session_is_return(void) __ksym;
extern __u64 *bpf_session_cookie(void) __ksym;

const volatile __u32 entry_ret = 0;

__u32 entries, returns;
__u64 cookies_at_return[MAX_HITS], rcs[MAX_HITS];

SEC("uprobe.session")
int session(struct pt_regs *ctx)
{
	__u64 *cookie = bpf_session_cookie();
	__u32 i;

	if (!bpf_session_is_return()) {
		entries++;
		*cookie = COOKIE_BASE + PT_REGS_PARM2(ctx);
		return entry_ret;
	}
	i = returns++;
	if (i >= MAX_HITS)
		i = MAX_HITS - 1;
	cookies_at_return[i] = *cookie;
	rcs[i] = PT_REGS_RC(ctx);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
