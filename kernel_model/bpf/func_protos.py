"""The helper prototypes (``struct bpf_func_proto``) the verifier checks a call against, and
which helpers a uprobe program may call.

Each prototype names the helper's return type, the kind of each argument register and
whether only GPL-compatible programs may call it, as the ``bpf_*_proto`` definitions in
``kernel/bpf/helpers.c``, ``kernel/trace/bpf_trace.c`` and ``kernel/bpf/ringbuf.c`` do.
:func:`kprobe_func_proto` is ``kprobe_prog_func_proto`` (which falls back to
``bpf_tracing_func_proto`` and ``bpf_base_func_proto``): a helper it does not return is
"unknown func" for the program, as in the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_model.bpf.bpf_types import (
    BPF_MAP_TYPE_ARRAY,
    BPF_MAP_TYPE_HASH,
    BPF_MAP_TYPE_LRU_HASH,
    BPF_MAP_TYPE_LRU_PERCPU_HASH,
    BPF_MAP_TYPE_PERCPU_ARRAY,
    BPF_MAP_TYPE_PERCPU_HASH,
    BPF_MAP_TYPE_PERF_EVENT_ARRAY,
    BPF_MAP_TYPE_PROG_ARRAY,
    BPF_MAP_TYPE_RINGBUF,
    BPF_MAP_TYPE_STACK_TRACE,
)
from kernel_model.bpf.insn import HELPER_IDS

# enum bpf_map_type values bpf_types does not name
BPF_MAP_TYPE_QUEUE, BPF_MAP_TYPE_STACK = 22, 23

# enum bpf_func_id in ___BPF_FUNC_MAPPER order (func_id_name() spells them with "bpf_"):
# the names the verifier's messages use, for every id up to the newest profile's last one
_FUNC_NAMES = """
    unspec map_lookup_elem map_update_elem map_delete_elem probe_read ktime_get_ns trace_printk
    get_prandom_u32 get_smp_processor_id skb_store_bytes l3_csum_replace l4_csum_replace tail_call
    clone_redirect get_current_pid_tgid get_current_uid_gid get_current_comm get_cgroup_classid
    skb_vlan_push skb_vlan_pop skb_get_tunnel_key skb_set_tunnel_key perf_event_read redirect
    get_route_realm perf_event_output skb_load_bytes get_stackid csum_diff skb_get_tunnel_opt
    skb_set_tunnel_opt skb_change_proto skb_change_type skb_under_cgroup get_hash_recalc
    get_current_task probe_write_user current_task_under_cgroup skb_change_tail skb_pull_data
    csum_update set_hash_invalid get_numa_node_id skb_change_head xdp_adjust_head probe_read_str
    get_socket_cookie get_socket_uid set_hash setsockopt skb_adjust_room redirect_map sk_redirect_map
    sock_map_update xdp_adjust_meta perf_event_read_value perf_prog_read_value getsockopt
    override_return sock_ops_cb_flags_set msg_redirect_map msg_apply_bytes msg_cork_bytes msg_pull_data
    bind xdp_adjust_tail skb_get_xfrm_state get_stack skb_load_bytes_relative fib_lookup
    sock_hash_update msg_redirect_hash sk_redirect_hash lwt_push_encap lwt_seg6_store_bytes
    lwt_seg6_adjust_srh lwt_seg6_action rc_repeat rc_keydown skb_cgroup_id get_current_cgroup_id
    get_local_storage sk_select_reuseport skb_ancestor_cgroup_id sk_lookup_tcp sk_lookup_udp sk_release
    map_push_elem map_pop_elem map_peek_elem msg_push_data msg_pop_data rc_pointer_rel spin_lock
    spin_unlock sk_fullsock tcp_sock skb_ecn_set_ce get_listener_sock skc_lookup_tcp
    tcp_check_syncookie sysctl_get_name sysctl_get_current_value sysctl_get_new_value
    sysctl_set_new_value strtol strtoul sk_storage_get sk_storage_delete send_signal tcp_gen_syncookie
    skb_output probe_read_user probe_read_kernel probe_read_user_str probe_read_kernel_str tcp_send_ack
    send_signal_thread jiffies64 read_branch_records get_ns_current_pid_tgid xdp_output
    get_netns_cookie get_current_ancestor_cgroup_id sk_assign ktime_get_boot_ns seq_printf seq_write
    sk_cgroup_id sk_ancestor_cgroup_id ringbuf_output ringbuf_reserve ringbuf_submit ringbuf_discard
    ringbuf_query csum_level skc_to_tcp6_sock skc_to_tcp_sock skc_to_tcp_timewait_sock
    skc_to_tcp_request_sock skc_to_udp6_sock get_task_stack load_hdr_opt store_hdr_opt reserve_hdr_opt
    inode_storage_get inode_storage_delete d_path copy_from_user snprintf_btf seq_printf_btf
    skb_cgroup_classid redirect_neigh per_cpu_ptr this_cpu_ptr redirect_peer task_storage_get
    task_storage_delete get_current_task_btf bprm_opts_set ktime_get_coarse_ns ima_inode_hash
    sock_from_file check_mtu for_each_map_elem snprintf sys_bpf btf_find_by_name_kind sys_close
    timer_init timer_set_callback timer_start timer_cancel get_func_ip get_attach_cookie task_pt_regs
    get_branch_snapshot trace_vprintk skc_to_unix_sock kallsyms_lookup_name find_vma loop strncmp
    get_func_arg get_func_ret get_func_arg_cnt get_retval set_retval xdp_get_buff_len xdp_load_bytes
    xdp_store_bytes copy_from_user_task skb_set_tstamp ima_file_hash kptr_xchg map_lookup_percpu_elem
    skc_to_mptcp_sock dynptr_from_mem ringbuf_reserve_dynptr ringbuf_submit_dynptr
    ringbuf_discard_dynptr dynptr_read dynptr_write dynptr_data tcp_raw_gen_syncookie_ipv4
    tcp_raw_gen_syncookie_ipv6 tcp_raw_check_syncookie_ipv4 tcp_raw_check_syncookie_ipv6
    ktime_get_tai_ns user_ringbuf_drain
    cgrp_storage_get cgrp_storage_delete
""".split()
FUNC_NAMES: tuple[str, ...] = tuple(_FUNC_NAMES)
# __BPF_FUNC_MAX_ID: a call to this id or above is "invalid func unknown#N"
BPF_FUNC_MAX_ID = len(FUNC_NAMES)


def func_id_name(func_id: int) -> str:
    """``func_id_name()``: ``bpf_map_lookup_elem`` for 1, ``unknown`` outside the enum."""
    if 0 <= func_id < len(FUNC_NAMES):
        return "bpf_" + FUNC_NAMES[func_id]
    return "unknown"


# enum bpf_arg_type (the base types, with the flags folded into distinct kinds)
ARG_DONTCARE = "dontcare"
ARG_ANYTHING = "anything"
ARG_CONST_MAP_PTR = "const_map_ptr"
ARG_PTR_TO_MAP_KEY = "map_key"
ARG_PTR_TO_MAP_VALUE = "map_value"
ARG_PTR_TO_UNINIT_MAP_VALUE = "uninit_map_value"  # ARG_PTR_TO_MAP_VALUE | MEM_UNINIT
ARG_PTR_TO_MEM = "mem"  # ARG_PTR_TO_MEM | MEM_RDONLY: read by the helper
ARG_PTR_TO_MEM_OR_NULL = "mem_or_null"
ARG_PTR_TO_UNINIT_MEM = "uninit_mem"  # written by the helper
ARG_PTR_TO_UNINIT_MEM_OR_NULL = "uninit_mem_or_null"
ARG_CONST_SIZE = "const_size"
ARG_CONST_SIZE_OR_ZERO = "const_size_or_zero"
ARG_PTR_TO_CTX = "ctx"
ARG_PTR_TO_RINGBUF_MEM_RELEASE = "ringbuf_mem_release"  # ARG_PTR_TO_RINGBUF_MEM | OBJ_RELEASE
ARG_CONST_ALLOC_SIZE_OR_ZERO = "const_alloc_size_or_zero"
ARG_PTR_TO_FUNC = "func"
ARG_PTR_TO_STACK_OR_NULL = "stack_or_null"
ARG_PTR_TO_CONST_STR = "const_str"
ARG_PTR_TO_BTF_ID = "btf_id"

# enum bpf_return_type
RET_INTEGER = "integer"
RET_VOID = "void"
RET_PTR_TO_MAP_VALUE_OR_NULL = "map_value_or_null"
RET_PTR_TO_RINGBUF_MEM_OR_NULL = "ringbuf_mem_or_null"  # RET_PTR_TO_MEM | MEM_RINGBUF | PTR_MAYBE_NULL
RET_PTR_TO_BTF_ID = "btf_id"


@dataclass(frozen=True)
class FuncProto:
    """``struct bpf_func_proto``: ``args`` lists arg1..argN (the rest are ARG_DONTCARE)."""

    ret: str
    args: tuple[str, ...] = ()
    gpl_only: bool = False
    might_sleep: bool = False  # only sleepable (``uprobe.s``) programs may call it


_M, _K, _V = ARG_CONST_MAP_PTR, ARG_PTR_TO_MAP_KEY, ARG_PTR_TO_MAP_VALUE
_A = ARG_ANYTHING
_READ_USER = FuncProto(RET_INTEGER, (ARG_PTR_TO_UNINIT_MEM, ARG_CONST_SIZE_OR_ZERO, _A), gpl_only=True)
_NOARGS = FuncProto(RET_INTEGER)

PROTOS: dict[str, FuncProto] = {
    "map_lookup_elem": FuncProto(RET_PTR_TO_MAP_VALUE_OR_NULL, (_M, _K)),
    "map_update_elem": FuncProto(RET_INTEGER, (_M, _K, _V, _A)),
    "map_delete_elem": FuncProto(RET_INTEGER, (_M, _K)),
    "map_push_elem": FuncProto(RET_INTEGER, (_M, _V, _A)),
    "map_pop_elem": FuncProto(RET_INTEGER, (_M, ARG_PTR_TO_UNINIT_MAP_VALUE)),
    "map_peek_elem": FuncProto(RET_INTEGER, (_M, ARG_PTR_TO_UNINIT_MAP_VALUE)),
    "map_lookup_percpu_elem": FuncProto(RET_PTR_TO_MAP_VALUE_OR_NULL, (_M, _K, _A)),
    "probe_read": _READ_USER,
    "probe_read_str": _READ_USER,
    "probe_read_user": _READ_USER,
    "probe_read_kernel": _READ_USER,
    "probe_read_user_str": _READ_USER,
    "probe_read_kernel_str": _READ_USER,
    "copy_from_user": FuncProto(
        RET_INTEGER, (ARG_PTR_TO_UNINIT_MEM, ARG_CONST_SIZE_OR_ZERO, _A), gpl_only=True, might_sleep=True
    ),
    "ktime_get_ns": _NOARGS,
    "ktime_get_boot_ns": _NOARGS,
    "ktime_get_coarse_ns": _NOARGS,
    "ktime_get_tai_ns": _NOARGS,
    "jiffies64": _NOARGS,
    "get_prandom_u32": _NOARGS,
    "get_smp_processor_id": _NOARGS,
    "get_current_pid_tgid": _NOARGS,
    "get_current_uid_gid": _NOARGS,
    "get_current_cgroup_id": _NOARGS,
    "get_current_task": FuncProto(RET_INTEGER, gpl_only=True),
    "get_current_comm": FuncProto(RET_INTEGER, (ARG_PTR_TO_UNINIT_MEM, ARG_CONST_SIZE)),
    "trace_printk": FuncProto(RET_INTEGER, (ARG_PTR_TO_MEM, ARG_CONST_SIZE), gpl_only=True),
    "trace_vprintk": FuncProto(
        RET_INTEGER, (ARG_PTR_TO_MEM, ARG_CONST_SIZE, ARG_PTR_TO_MEM_OR_NULL, ARG_CONST_SIZE_OR_ZERO), gpl_only=True
    ),
    "snprintf": FuncProto(
        RET_INTEGER,
        (
            ARG_PTR_TO_UNINIT_MEM_OR_NULL,
            ARG_CONST_SIZE_OR_ZERO,
            ARG_PTR_TO_CONST_STR,
            ARG_PTR_TO_MEM_OR_NULL,
            ARG_CONST_SIZE_OR_ZERO,
        ),
        gpl_only=True,
    ),
    "strncmp": FuncProto(RET_INTEGER, (ARG_PTR_TO_MEM, ARG_CONST_SIZE, ARG_PTR_TO_CONST_STR)),
    "tail_call": FuncProto(RET_VOID, (ARG_PTR_TO_CTX, _M, _A)),
    "perf_event_output": FuncProto(
        RET_INTEGER, (ARG_PTR_TO_CTX, _M, _A, ARG_PTR_TO_MEM, ARG_CONST_SIZE_OR_ZERO), gpl_only=True
    ),
    "get_stackid": FuncProto(RET_INTEGER, (ARG_PTR_TO_CTX, _M, _A), gpl_only=True),
    "get_stack": FuncProto(
        RET_INTEGER, (ARG_PTR_TO_CTX, ARG_PTR_TO_UNINIT_MEM, ARG_CONST_SIZE_OR_ZERO, _A), gpl_only=True
    ),
    "probe_write_user": FuncProto(RET_INTEGER, (_A, ARG_PTR_TO_MEM, ARG_CONST_SIZE), gpl_only=True),
    "send_signal": FuncProto(RET_INTEGER, (_A,)),
    "send_signal_thread": FuncProto(RET_INTEGER, (_A,)),
    "ringbuf_output": FuncProto(RET_INTEGER, (_M, ARG_PTR_TO_MEM, ARG_CONST_SIZE_OR_ZERO, _A)),
    "ringbuf_reserve": FuncProto(RET_PTR_TO_RINGBUF_MEM_OR_NULL, (_M, ARG_CONST_ALLOC_SIZE_OR_ZERO, _A)),
    "ringbuf_submit": FuncProto(RET_VOID, (ARG_PTR_TO_RINGBUF_MEM_RELEASE, _A)),
    "ringbuf_discard": FuncProto(RET_VOID, (ARG_PTR_TO_RINGBUF_MEM_RELEASE, _A)),
    "ringbuf_query": FuncProto(RET_INTEGER, (_M, _A)),
    "for_each_map_elem": FuncProto(RET_INTEGER, (_M, ARG_PTR_TO_FUNC, ARG_PTR_TO_STACK_OR_NULL, _A)),
    "loop": FuncProto(RET_INTEGER, (_A, ARG_PTR_TO_FUNC, ARG_PTR_TO_STACK_OR_NULL, _A)),
    "get_func_ip": FuncProto(RET_INTEGER, (ARG_PTR_TO_CTX,)),
    "get_attach_cookie": FuncProto(RET_INTEGER, (ARG_PTR_TO_CTX,)),
    "task_pt_regs": FuncProto(RET_PTR_TO_BTF_ID, (ARG_PTR_TO_BTF_ID,), gpl_only=True),
}
assert set(PROTOS) == set(HELPER_IDS), sorted(set(PROTOS) ^ set(HELPER_IDS))

# check_map_func_compatibility(): a map of one of these types passes only to these helpers ...
_MAP_ONLY_FUNCS: dict[int, frozenset[str]] = {
    BPF_MAP_TYPE_PROG_ARRAY: frozenset({"tail_call"}),
    BPF_MAP_TYPE_PERF_EVENT_ARRAY: frozenset({"perf_event_output"}),
    BPF_MAP_TYPE_RINGBUF: frozenset({"ringbuf_output", "ringbuf_reserve", "ringbuf_query"}),
    BPF_MAP_TYPE_STACK_TRACE: frozenset({"get_stackid"}),
}
# ... and these helpers take only maps of these types
_FUNC_ONLY_MAPS: dict[str, frozenset[int]] = {
    "tail_call": frozenset({BPF_MAP_TYPE_PROG_ARRAY}),
    "perf_event_output": frozenset({BPF_MAP_TYPE_PERF_EVENT_ARRAY}),
    "get_stackid": frozenset({BPF_MAP_TYPE_STACK_TRACE}),
    "ringbuf_output": frozenset({BPF_MAP_TYPE_RINGBUF}),
    "ringbuf_reserve": frozenset({BPF_MAP_TYPE_RINGBUF}),
    "ringbuf_query": frozenset({BPF_MAP_TYPE_RINGBUF}),
    "map_push_elem": frozenset({BPF_MAP_TYPE_QUEUE, BPF_MAP_TYPE_STACK}),
    "map_pop_elem": frozenset({BPF_MAP_TYPE_QUEUE, BPF_MAP_TYPE_STACK}),
    "map_peek_elem": frozenset({BPF_MAP_TYPE_QUEUE, BPF_MAP_TYPE_STACK}),
    "for_each_map_elem": frozenset(
        {
            BPF_MAP_TYPE_HASH,
            BPF_MAP_TYPE_LRU_HASH,
            BPF_MAP_TYPE_ARRAY,
            BPF_MAP_TYPE_PERCPU_HASH,
            BPF_MAP_TYPE_PERCPU_ARRAY,
            BPF_MAP_TYPE_LRU_PERCPU_HASH,
        }
    ),
    "map_lookup_percpu_elem": frozenset(
        {BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_LRU_PERCPU_HASH}
    ),
}


def map_func_compatible(map_type: int, func_name: str) -> bool:
    """``check_map_func_compatibility()``: may a map of ``map_type`` be passed to the helper?"""
    only_funcs = _MAP_ONLY_FUNCS.get(map_type)
    if only_funcs is not None and func_name not in only_funcs:
        return False
    only_maps = _FUNC_ONLY_MAPS.get(func_name)
    return only_maps is None or map_type in only_maps


def kprobe_func_proto(func_id: int) -> FuncProto | None:
    """``kprobe_prog_func_proto``: the prototype of a helper a BPF_PROG_TYPE_KPROBE program
    (a uprobe, uretprobe, USDT or uprobe_multi/session program) may call, else None.

    Every helper this model provides is in the tracing or the base set; one that may
    sleep (``bpf_copy_from_user``) is refused later to a program that is not sleepable.
    """
    name = FUNC_NAMES[func_id] if 0 <= func_id < len(FUNC_NAMES) else ""
    proto = PROTOS.get(name)
    if proto is None or HELPER_IDS.get(name) != func_id:
        return None
    return proto
