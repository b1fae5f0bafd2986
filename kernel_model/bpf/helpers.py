"""The BPF helpers a uprobe program calls, as the kernel implements them: the map and
time helpers of ``kernel/bpf/helpers.c``, the ring buffer's of ``kernel/bpf/ringbuf.c``,
and the tracing ones of ``kernel/trace/bpf_trace.c`` (``bpf_probe_read_user``,
``bpf_get_func_ip``, ``bpf_get_attach_cookie``, ``bpf_send_signal``, ``bpf_get_stack``,
``bpf_trace_printk``...).

Each helper is ``fn(rt, r1, r2, r3, r4, r5) -> int`` where ``rt`` is the kernel's
:class:`~kernel_model.trace.bpf_trace.BpfTrace`, which knows the program's current run
(the task, its registers, the attach cookie).  A helper returns what the kernel's returns,
negative errnos included, as a u64.  The verifier has checked the argument kinds, so a
pointer argument is a region the program may access; a user-space pointer is read through
the task's page tables, and a fault there is the helper's -EFAULT, never the program's.
"""

from __future__ import annotations

import errno as E
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from kernel_model.bpf.bpf_types import PERCPU_MAP_TYPES
from kernel_model.bpf.insn import HELPER_IDS
from kernel_model.mm.mm_types import GuestFault

if TYPE_CHECKING:
    from kernel_model.trace.bpf_trace import BpfTrace

U64 = 0xFFFFFFFFFFFFFFFF
BPF_F_SKIP_FIELD_MASK = 0xFF
BPF_F_USER_STACK = 1 << 8
BPF_F_USER_BUILD_ID = 1 << 11
PERF_MAX_STACK_DEPTH = 127  # sysctl_perf_event_max_stack's default
TASK_COMM_LEN = 16
BPF_MAX_LOOPS = 1 << 23
MAX_BPRINTF_VARARGS = 12
TASK_SIZE_MAX = (1 << 47) - 4096  # x86_64 4-level paging: user addresses lie below
INITIAL_JIFFIES = (-300 * 250) & U64  # include/linux/jiffies.h at HZ=250 (Debian's)
JIFFY_NS = 4_000_000
SI_KERNEL = 0x80  # SEND_SIG_PRIV's si_code


def _err(errno: int) -> int:
    return -errno & U64


# ----------------------------------------------------------------------------- maps


def map_lookup_elem(rt: BpfTrace, map_addr: int, key: int, *_: int) -> int:
    m = rt.map_at(map_addr)
    return m.lookup_elem(rt.memory.read(key, m.key_size), rt.cpu) & U64


def map_update_elem(rt: BpfTrace, map_addr: int, key: int, value: int, flags: int, *_: int) -> int:
    m = rt.map_at(map_addr)
    mem = rt.memory
    return m.update_elem(mem.read(key, m.key_size), mem.read(value, m.value_size), flags, rt.cpu) & U64


def map_delete_elem(rt: BpfTrace, map_addr: int, key: int, *_: int) -> int:
    m = rt.map_at(map_addr)
    return m.delete_elem(rt.memory.read(key, m.key_size)) & U64


def map_lookup_percpu_elem(rt: BpfTrace, map_addr: int, key: int, cpu: int, *_: int) -> int:
    """``bpf_map_lookup_percpu_elem``: another CPU's copy; NULL for a CPU that does not
    exist (``cpu >= nr_cpu_ids``) or a map that is not per-CPU."""
    m = rt.map_at(map_addr)
    if m.map_type not in PERCPU_MAP_TYPES or cpu >= rt.nr_cpus:
        return 0
    return m.lookup_elem(rt.memory.read(key, m.key_size), cpu) & U64


def for_each_map_elem(rt: BpfTrace, map_addr: int, callback: int, cb_ctx: int, flags: int, *_: int) -> int:
    """``bpf_for_each_map_elem``: ``callback(map, &key, &value, cb_ctx)`` per element until
    it returns 1; the number of elements visited.  Keys are handed in a kernel buffer of
    their own, as hashtab's ``bpf_for_each_hash_elem`` hands the element's key."""
    if flags:
        return _err(E.EINVAL)
    m = rt.map_at(map_addr)
    key_region = rt.scratch(max(m.key_size, 1))
    n = 0
    key = m.get_next_key(None)
    while key is not None:
        value = m.lookup_elem(key, rt.cpu)
        n += 1
        if value:
            rt.memory.write(key_region.base, key)
            if rt.vm.call_function(callback, map_addr, key_region.base, value, cb_ctx) & U64 == 1:
                break
        key = m.get_next_key(key)
    return n


# ----------------------------------------------------------------------------- ring buffer and perf output


def ringbuf_output(rt: BpfTrace, map_addr: int, data: int, size: int, flags: int, *_: int) -> int:
    return rt.map_at(map_addr).output(rt.memory.read(data, size), flags) & U64


def ringbuf_reserve(rt: BpfTrace, map_addr: int, size: int, flags: int, *_: int) -> int:
    return rt.map_at(map_addr).reserve(size, flags) & U64


def _ringbuf_of(rt: BpfTrace, addr: int):
    region = rt.memory.find(addr)
    if region is None or region.owner is None:
        raise GuestFault(addr)
    return region.owner


def ringbuf_submit(rt: BpfTrace, sample: int, flags: int, *_: int) -> int:
    _ringbuf_of(rt, sample).submit(sample, flags)
    return 0


def ringbuf_discard(rt: BpfTrace, sample: int, flags: int, *_: int) -> int:
    _ringbuf_of(rt, sample).discard(sample, flags)
    return 0


def ringbuf_query(rt: BpfTrace, map_addr: int, flags: int, *_: int) -> int:
    return rt.map_at(map_addr).query(flags) & U64


def perf_event_output(rt: BpfTrace, ctx: int, map_addr: int, flags: int, data: int, size: int) -> int:
    """``bpf_perf_event_output``: one raw sample to the perf event in the array slot
    ``flags & BPF_F_INDEX_MASK`` (BPF_F_CURRENT_CPU: this CPU's); the map's
    ``perf_event_output`` has the errnos."""
    return rt.map_at(map_addr).perf_event_output(flags, rt.memory.read(data, size), rt.cpu) & U64


# ----------------------------------------------------------------------------- memory


def _read_user(rt: BpfTrace, addr: int, size: int) -> bytes | None:
    """copy_from_user_nofault: None on a fault (or a kernel address)."""
    if addr >= TASK_SIZE_MAX or addr + size > TASK_SIZE_MAX:
        return None
    try:
        return rt.read_user(addr, size)
    except GuestFault:
        return None


def probe_read_user(rt: BpfTrace, dst: int, size: int, src: int, *_: int) -> int:
    """``bpf_probe_read_user``: ``size`` bytes of user memory, or -EFAULT with ``dst``
    zeroed (``bpf_probe_read_user_common``)."""
    data = _read_user(rt, src, size) if size else b""
    if data is None:
        rt.memory.write(dst, bytes(size))
        return _err(E.EFAULT)
    rt.memory.write(dst, data)
    return 0


def _strncpy_nofault(read: Callable[[int, int], bytes | None], src: int, size: int) -> tuple[bytes, int]:
    """``strncpy_from_*_nofault``: the bytes to store and the return value - the length
    with the NUL, or ``size`` with the last byte made NUL when the string is longer,
    or -EFAULT when the first byte cannot be read."""
    out = bytearray()
    while len(out) < size:
        chunk_len = min(size - len(out), 4096 - ((src + len(out)) & 0xFFF))
        chunk = read(src + len(out), chunk_len)
        if chunk is None:  # byte-wise to the fault
            for _ in range(chunk_len):
                b = read(src + len(out), 1)
                if b is None:
                    if not out:
                        return b"", -E.EFAULT
                    break
                out += b
                if b == b"\0":
                    return bytes(out), len(out)
            if len(out) < size:
                return b"", -E.EFAULT
            break
        nul = chunk.find(b"\0")
        if nul >= 0:
            out += chunk[: nul + 1]
            return bytes(out), len(out)
        out += chunk
    out = out[:size]
    out[size - 1] = 0
    return bytes(out), size


def probe_read_user_str(rt: BpfTrace, dst: int, size: int, src: int, *_: int) -> int:
    if not size:
        return 0
    data, ret = _strncpy_nofault(lambda a, n: _read_user(rt, a, n), src, size)
    if ret < 0:
        rt.memory.write(dst, bytes(size))
        return ret & U64
    rt.memory.write(dst, data)
    return ret


def _read_kernel(rt: BpfTrace, addr: int, size: int) -> bytes | None:
    region = rt.memory.find(addr, size)
    if region is None:
        return None
    off = addr - region.base
    return bytes(region.data[off : off + size])


def probe_read_kernel(rt: BpfTrace, dst: int, size: int, src: int, *_: int) -> int:
    data = _read_kernel(rt, src, size) if size else b""
    if data is None:
        rt.memory.write(dst, bytes(size))
        return _err(E.EFAULT)
    rt.memory.write(dst, data)
    return 0


def probe_read_kernel_str(rt: BpfTrace, dst: int, size: int, src: int, *_: int) -> int:
    if not size:
        return 0
    data, ret = _strncpy_nofault(lambda a, n: _read_kernel(rt, a, n), src, size)
    if ret < 0:
        rt.memory.write(dst, bytes(size))
        return ret & U64
    rt.memory.write(dst, data)
    return ret


def probe_read_compat(rt: BpfTrace, dst: int, size: int, src: int, *_: int) -> int:
    """``bpf_probe_read`` on x86_64 (``bpf_probe_read_compat``): a user address is read
    as user memory, anything else as kernel memory."""
    if src < TASK_SIZE_MAX:
        return probe_read_user(rt, dst, size, src)
    return probe_read_kernel(rt, dst, size, src)


def probe_read_compat_str(rt: BpfTrace, dst: int, size: int, src: int, *_: int) -> int:
    if src < TASK_SIZE_MAX:
        return probe_read_user_str(rt, dst, size, src)
    return probe_read_kernel_str(rt, dst, size, src)


def probe_write_user(rt: BpfTrace, dst: int, src: int, size: int, *_: int) -> int:
    """``bpf_probe_write_user``: copy_to_user_nofault; -EFAULT on a fault."""
    data = rt.memory.read(src, size)
    if dst >= TASK_SIZE_MAX:
        return _err(E.EFAULT)
    try:
        rt.write_user(dst, data)
    except GuestFault:
        return _err(E.EFAULT)
    return 0


# ----------------------------------------------------------------------------- the current task


def get_current_pid_tgid(rt: BpfTrace, *_: int) -> int:
    task = rt.task
    return (task.process.pid << 32) | task.tid


def get_current_uid_gid(rt: BpfTrace, *_: int) -> int:
    cred = rt.task.cred
    return (cred.gid << 32) | cred.uid


def get_current_comm(rt: BpfTrace, buf: int, size: int, *_: int) -> int:
    """``bpf_get_current_comm``: ``strscpy_pad`` of task->comm into ``size`` bytes."""
    comm = rt.task.comm.encode()[: TASK_COMM_LEN - 1][: max(size - 1, 0)]
    rt.memory.write(buf, comm + bytes(size - len(comm)))
    return 0


def get_smp_processor_id(rt: BpfTrace, *_: int) -> int:
    return rt.cpu


def get_prandom_u32(rt: BpfTrace, *_: int) -> int:
    return rt.prandom_u32()


def ktime_get_ns(rt: BpfTrace, *_: int) -> int:
    """CLOCK_MONOTONIC on the machine's virtual clock (which is also its boot clock)."""
    return rt.monotonic_ns()


def ktime_get_coarse_ns(rt: BpfTrace, *_: int) -> int:
    """CLOCK_MONOTONIC_COARSE: the monotonic clock at the last tick (one jiffy = 4 ms)."""
    return rt.monotonic_ns() // JIFFY_NS * JIFFY_NS


def ktime_get_tai_ns(rt: BpfTrace, *_: int) -> int:
    """CLOCK_TAI: the realtime clock plus the TAI offset, which the model keeps at 0
    (no adjtimex has set one, as on a host without a leap-second table loaded)."""
    return rt.realtime_ns()


def jiffies64(rt: BpfTrace, *_: int) -> int:
    return (INITIAL_JIFFIES + rt.monotonic_ns() // JIFFY_NS) & U64


def get_func_ip(rt: BpfTrace, *_: int) -> int:
    """The probed address for an entry probe, the function's entry for a return probe
    (``uprobe_dispatch_data.bp_addr`` / ``bpf_uprobe_multi_run_ctx.entry_ip``)."""
    return rt.run.entry_ip & U64


def get_attach_cookie(rt: BpfTrace, *_: int) -> int:
    return rt.run.cookie & U64


def send_signal(rt: BpfTrace, sig: int, *_: int) -> int:
    return rt.send_signal(sig & 0xFFFFFFFF, thread=False) & U64


def send_signal_thread(rt: BpfTrace, sig: int, *_: int) -> int:
    return rt.send_signal(sig & 0xFFFFFFFF, thread=True) & U64


# the first bytes of an instruction that starts a function compiled with frame pointers
# (``is_uprobe_at_func_entry``): push %rbp, endbr64, endbr32, and the poisoned endbr
_FUNC_ENTRY_INSNS = (b"\x55", b"\xf3\x0f\x1e\xfa", b"\xf3\x0f\x1e\xfb", b"\x66\x0f\x1f\x00")


def _at_func_entry(rt: BpfTrace) -> bool:
    """``is_uprobe_at_func_entry``: an entry handler's run (``utask->auprobe`` is set
    around ``handler_chain`` only) at a probe whose original instruction opens a frame
    - the function has not pushed %rbp yet, so its return address is at the stack
    pointer, not along the rbp chain."""
    uctx = rt.run.uctx
    if uctx is None or rt.run.is_return or uctx.uprobe is None or uctx.uprobe.arch is None:
        return False
    insn = bytes(uctx.uprobe.arch.insn)
    return insn.startswith(_FUNC_ENTRY_INSNS)


def get_stack(rt: BpfTrace, ctx: int, buf: int, size: int, flags: int, *_: int) -> int:
    """``bpf_get_stack``: with BPF_F_USER_STACK the user call chain as perf's
    ``perf_callchain_user`` walks it - the probed ip; at a function's entry the return
    address at the stack pointer (the caller the rbp chain would skip); then each
    frame's return address along the rbp chain until a read faults - skipping ``flags &
    0xff`` entries, 8 bytes each, the rest of ``buf`` zeroed; the number of bytes stored.
    The model has no kernel frames: a kernel stack is empty (0 bytes)."""
    if flags & ~(BPF_F_SKIP_FIELD_MASK | BPF_F_USER_STACK | BPF_F_USER_BUILD_ID) or size & 7:
        rt.memory.write(buf, bytes(size))  # __bpf_get_stack's "clear": the buffer zeroed
        return _err(E.EINVAL)
    if flags & BPF_F_USER_BUILD_ID:
        rt.memory.write(buf, bytes(size))
        return _err(E.EINVAL)  # the build-id form needs BPF_F_USER_STACK and a 32-byte element: not modeled
    skip = flags & BPF_F_SKIP_FIELD_MASK
    ips: list[int] = []
    if flags & BPF_F_USER_STACK:
        want = min(size // 8 + skip, PERF_MAX_STACK_DEPTH)
        regs = rt.run.regs
        ips.append(regs.rip & U64)
        if _at_func_entry(rt):
            ret = _read_user(rt, regs.rsp & U64, 8)
            if ret is not None:
                ips.append(int.from_bytes(ret, "little"))
        fp = regs.rbp & U64
        while len(ips) < want:
            if fp > TASK_SIZE_MAX - 16:
                break
            frame = _read_user(rt, fp, 16)
            if frame is None:
                break
            ips.append(int.from_bytes(frame[8:], "little"))
            fp = int.from_bytes(frame[:8], "little")
    ips = ips[skip:][: size // 8]
    data = b"".join(ip.to_bytes(8, "little") for ip in ips)
    rt.memory.write(buf, data + bytes(size - len(data)))
    return len(data)


# ----------------------------------------------------------------------------- strings and printing

# the conversions bpf_bprintf_prepare accepts: "[0 +-]" flags, a width, an l/ll length
# (integers only), a type - no precision, no other flag or length
_SPEC = re.compile(rb"%([-+ 0]*)([1-9][0-9]*)?(ll|l)?([diuxXcs]|p[a-zA-Z0-9]*)")
_FMT_SPACE = frozenset(b" \t\n\v\f\r")


class _FormatError(Exception):
    pass


def bprintf(rt: BpfTrace, fmt: bytes, args: list[int], *, max_args: int) -> bytes:
    """``bpf_bprintf_prepare`` + ``bstr_printf``: a format of ``%d %i %u %x %X %c %s %p
    %%`` (with ``l``/``ll`` lengths on integers, ``0 +-`` flags and a width) over u64
    arguments; a ``%s`` argument is read as a kernel or user string.  Raises
    _FormatError where the kernel returns -EINVAL: a byte neither printable ASCII nor
    white space, an unknown conversion, a precision, an ``h``/``z`` length, more
    conversions than ``max_args``."""
    if any(not (0x20 <= c < 0x7F or c in _FMT_SPACE) for c in fmt):
        raise _FormatError(b"a non-printable character")
    out = bytearray()
    pos = nargs = 0
    while True:
        i = fmt.find(b"%", pos)
        if i < 0:
            out += fmt[pos:]
            return bytes(out)
        out += fmt[pos:i]
        if fmt[i + 1 : i + 2] == b"%":
            out += b"%"
            pos = i + 2
            continue
        m = _SPEC.match(fmt, i)
        if m is None or (m[3] and m[4][:1] in b"csp"):
            raise _FormatError(fmt[i : i + 3])
        flags, width, length, conv = m[1], m[2] or b"", m[3], m[4]
        pos = m.end()
        if nargs >= min(max_args, len(args)):
            raise _FormatError(b"too many arguments")
        arg = args[nargs] & U64
        nargs += 1
        spec = "%" + flags.decode() + width.decode()
        if conv == b"s":
            data, ret = _strncpy_nofault(
                lambda a, n: _read_user(rt, a, n) if a < TASK_SIZE_MAX else _read_kernel(rt, a, n), arg, 256
            )
            text = data.rstrip(b"\0").decode("latin-1") if ret > 0 else "(fault)"
            out += (spec + "s").__mod__(text).encode("latin-1")
        elif conv == b"c":
            out += (spec + "c").__mod__(chr(arg & 0xFF)).encode("latin-1")
        elif conv.startswith(b"p"):
            if conv not in (b"p", b"pK", b"px"):
                raise _FormatError(conv)
            out += (spec + "s").__mod__(f"{arg:016x}" if conv == b"px" else f"{arg:016x}").encode()
        else:
            bits = 64 if length else 32
            v = arg & ((1 << bits) - 1)
            if conv in (b"d", b"i") and v >> (bits - 1):
                v -= 1 << bits
            c = "d" if conv in (b"d", b"i", b"u") else conv.decode()
            out += (spec + c).__mod__(v).encode()


def _format_string(rt: BpfTrace, fmt_ptr: int, fmt_size: int) -> bytes | None:
    """The format a program passes: NUL-terminated within ``fmt_size`` (else -EINVAL)."""
    raw = rt.memory.read(fmt_ptr, fmt_size)
    nul = raw.find(b"\0")
    return None if nul < 0 else raw[:nul]


def trace_printk(rt: BpfTrace, fmt_ptr: int, fmt_size: int, a1: int, a2: int, a3: int) -> int:
    """``bpf_trace_printk``: a ``bpf_trace_printk: MESSAGE`` line in trace_pipe; the
    number of bytes formatted, or -EINVAL for a bad format."""
    fmt = _format_string(rt, fmt_ptr, fmt_size)
    if fmt is None:
        return _err(E.EINVAL)
    try:
        text = bprintf(rt, fmt, [a1, a2, a3], max_args=3)
    except _FormatError:
        return _err(E.EINVAL)
    rt.trace_printk(text)
    return len(text)


def trace_vprintk(rt: BpfTrace, fmt_ptr: int, fmt_size: int, data: int, data_len: int, *_: int) -> int:
    """``bpf_trace_vprintk``: as trace_printk with the arguments in a u64 array."""
    fmt = _format_string(rt, fmt_ptr, fmt_size)
    if fmt is None or data_len % 8 or data_len > 8 * MAX_BPRINTF_VARARGS or (data_len and not data):
        return _err(E.EINVAL)
    raw = rt.memory.read(data, data_len) if data_len else b""
    args = [int.from_bytes(raw[i : i + 8], "little") for i in range(0, data_len, 8)]
    try:
        text = bprintf(rt, fmt, args, max_args=MAX_BPRINTF_VARARGS)
    except _FormatError:
        return _err(E.EINVAL)
    rt.trace_printk(text)
    return len(text)


def snprintf(rt: BpfTrace, out: int, out_size: int, fmt_ptr: int, data: int, data_len: int) -> int:
    """``bpf_snprintf``: the formatted string into ``out`` (NUL-terminated, cut to fit);
    the length it needed with the NUL."""
    region = rt.memory.find(fmt_ptr)
    if region is None:
        return _err(E.EINVAL)
    raw = bytes(region.data[fmt_ptr - region.base :])
    nul = raw.find(b"\0")
    if nul < 0 or data_len % 8 or data_len > 8 * MAX_BPRINTF_VARARGS:
        return _err(E.EINVAL)
    vals = rt.memory.read(data, data_len) if data_len else b""
    args = [int.from_bytes(vals[i : i + 8], "little") for i in range(0, data_len, 8)]
    try:
        text = bprintf(rt, raw[:nul], args, max_args=MAX_BPRINTF_VARARGS)
    except _FormatError:
        return _err(E.EINVAL)
    if out_size:
        cut = text[: out_size - 1] + b"\0"
        rt.memory.write(out, cut)
    return len(text) + 1


def strncmp(rt: BpfTrace, s1: int, s1_sz: int, s2: int, *_: int) -> int:
    """``bpf_strncmp``: strncmp of ``s1`` (``s1_sz`` bytes) with the constant string s2:
    -1, 0 or 1 as ``strncmp`` in lib/string.c returns (the sign of the first difference)."""
    a = rt.memory.read(s1, s1_sz)
    region = rt.memory.find(s2)
    if region is None:
        return _err(E.EINVAL)
    b = bytes(region.data[s2 - region.base :])
    for i in range(s1_sz):
        ca, cb = a[i], b[i] if i < len(b) else 0
        if ca != cb:
            return 1 if ca > cb else U64
        if not ca:
            return 0
    return 0


def loop(rt: BpfTrace, nr_loops: int, callback: int, cb_ctx: int, flags: int, *_: int) -> int:
    """``bpf_loop``: ``callback(i, cb_ctx)`` for i in 0..nr_loops-1 until it returns 1;
    the number of calls made.  More than 1 << 23 loops is -E2BIG, flags -EINVAL."""
    if flags:
        return _err(E.EINVAL)
    nr_loops &= 0xFFFFFFFF
    if nr_loops > BPF_MAX_LOOPS:
        return _err(E.E2BIG)
    call = rt.vm.call_function
    for i in range(nr_loops):
        if call(callback, i, cb_ctx) & U64:
            return i + 1
    return nr_loops


_BY_NAME: dict[str, Callable[..., int]] = {
    "map_lookup_elem": map_lookup_elem,
    "map_update_elem": map_update_elem,
    "map_delete_elem": map_delete_elem,
    "map_lookup_percpu_elem": map_lookup_percpu_elem,
    "for_each_map_elem": for_each_map_elem,
    "probe_read": probe_read_compat,
    "probe_read_str": probe_read_compat_str,
    "probe_read_user": probe_read_user,
    "probe_read_user_str": probe_read_user_str,
    "probe_read_kernel": probe_read_kernel,
    "probe_read_kernel_str": probe_read_kernel_str,
    "copy_from_user": probe_read_user,
    "probe_write_user": probe_write_user,
    "ktime_get_ns": ktime_get_ns,
    "ktime_get_boot_ns": ktime_get_ns,
    "ktime_get_coarse_ns": ktime_get_coarse_ns,
    "ktime_get_tai_ns": ktime_get_tai_ns,
    "jiffies64": jiffies64,
    "trace_printk": trace_printk,
    "trace_vprintk": trace_vprintk,
    "snprintf": snprintf,
    "get_prandom_u32": get_prandom_u32,
    "get_smp_processor_id": get_smp_processor_id,
    "get_current_pid_tgid": get_current_pid_tgid,
    "get_current_uid_gid": get_current_uid_gid,
    "get_current_comm": get_current_comm,
    "perf_event_output": perf_event_output,
    "get_stack": get_stack,
    "send_signal": send_signal,
    "send_signal_thread": send_signal_thread,
    "ringbuf_output": ringbuf_output,
    "ringbuf_reserve": ringbuf_reserve,
    "ringbuf_submit": ringbuf_submit,
    "ringbuf_discard": ringbuf_discard,
    "ringbuf_query": ringbuf_query,
    "get_func_ip": get_func_ip,
    "get_attach_cookie": get_attach_cookie,
    "loop": loop,
    "strncmp": strncmp,
}
HELPERS: dict[int, Callable[..., int]] = {HELPER_IDS[name]: fn for name, fn in _BY_NAME.items()}
