// SPDX-License-Identifier: GPL-2.0
/* A map in the pre-BTF "maps" section (struct bpf_map_def, as bcc-era objects declare
 * them), .kconfig externs, a string literal (.rodata.str1.1) and a custom data section:
 * the other ways an object declares what it uses. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct legacy_map_def {
	unsigned int type;
	unsigned int key_size;
	unsigned int value_size;
	unsigned int max_entries;
	unsigned int map_flags;
};

struct legacy_map_def SEC("maps") old_hash = {
	.type = BPF_MAP_TYPE_HASH,
	.key_size = 4,
	.value_size = 8,
	.max_entries = 32,
};

int tally SEC(".data.tally") = 5;

extern int LINUX_KERNEL_VERSION __kconfig;
extern _Bool CONFIG_BPF_SYSCALL __kconfig __weak;

SEC("uprobe")
int legacy(void *ctx)
{
	__u32 key = LINUX_KERNEL_VERSION + CONFIG_BPF_SYSCALL;
	__u64 *v = bpf_map_lookup_elem(&old_hash, &key);

	bpf_printk("key %u", key);
	tally++;

	return v ? *v : 0;
}

char LICENSE[] SEC("license") = "GPL";
