"""``diff -b OBJ``: one BPF object's programs on the host kernel and in the model, the
program under them run on each, and what the programs recorded compared - every map's
contents (as dicts: the host's hash maps iterate in an order its random hash seed
decides) and each ring buffer's records in order - with the exit status and stdout.

Natively the object is loaded through the host's ``bpf()`` (:mod:`.host_bpf`) and each
program attached as a uprobe perf event for the program's process only.  That process
is started under ``PTRACE_TRACEME``: it stops at its exec before its first instruction,
the probes are attached for its pid, and it is let go - so nothing before its start and
nothing of any other process is counted.  As ``diff`` does, a dynamic program runs
without address randomization, so addresses the programs record (heap pointers) match
the model's.  Every descriptor is closed at the end: nothing is left in the host kernel.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field

from emu.frontends.host_bpf import HostBpfError, HostObject, attach_uprobe, create_map, freeze, load_prog, update_elem
from emu.inspect import DEFAULT_ENV
from emu.machine import Machine
from emu.probes.bpf_api import BPF_MAP_TYPE_RINGBUF, BpfObject, program_target
from kernel_model.errors import EmuError, InputError

PTRACE_TRACEME, PTRACE_DETACH = 0, 17
ADDR_NO_RANDOMIZE = 0x0040000


@dataclass
class BpfRecord:
    """What one side's programs recorded, and how its program ended."""

    status: str
    stdout: bytes
    pid: int
    maps: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    rings: dict[str, list[bytes]] = field(default_factory=dict)


def _int_values(obj: BpfObject, values: dict[str, int]) -> None:
    for name, value in values.items():
        obj.set_rodata(name, value)


def resolve_targets(m: Machine, obj: BpfObject, attach: dict[str, str]) -> dict[str, tuple[str, int, bool]]:
    """Each program to attach -> (host path, file offset, retprobe), resolved by the
    model's symbol lookup (the same files: the model sees the host's)."""
    out = {}
    for p in obj.programs:
        target = program_target(p, attach.get(p.name))
        if target is None:
            continue
        file, offset = m.uprobes.targets.resolve_target(target)
        out[p.name] = (file.path, offset, p.attach.retprobe)
    return out


def run_model_bpf(path: str, argv: list[str], obj_path: str, attach, values, kernel: str, pid: int) -> BpfRecord:
    """The model's run, its first process given the native child's ``pid``: the pids
    the programs record (bpf_get_current_pid_tgid) are then the same on both sides."""
    m = Machine.from_elf(path, argv=argv, env=list(DEFAULT_ENV), stdin=b"", kernel=kernel, first_pid=pid)
    loaded = m.bpf.load(obj_path, attach=attach, rodata=values, pid=m.main_process.pid)
    rings: dict[str, list[bytes]] = {}
    for name, view in loaded.maps.items():
        if view.map.map_type == BPF_MAP_TYPE_RINGBUF:
            rings[name] = []
            loaded.on_ringbuf(name, rings[name].append)
    r = m.run()
    if r.reason == "exit":
        status = f"exit {r.exit_code}"
    elif r.reason == "signal":
        status = f"signal {r.signal_name}"
    else:
        status = f"stopped ({r.reason})"
    maps = {
        name: dict(view.map.items())
        for name, view in loaded.maps.items()
        if view.map.map_type != BPF_MAP_TYPE_RINGBUF and not name.endswith(".rodata")
    }
    return BpfRecord(status, bytes(m.stdout), m.main_process.pid, maps, rings)


def _traced_child(argv: list[str], no_randomize: bool) -> subprocess.Popen:
    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        if no_randomize:
            libc.personality(libc.personality(0xFFFFFFFF) | ADDR_NO_RANDOMIZE)
        libc.ptrace(PTRACE_TRACEME, 0, 0, 0)

    env = dict(item.split("=", 1) for item in DEFAULT_ENV)
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, preexec_fn=setup, env=env)


def run_native_bpf(
    path: str,
    argv: list[str],
    obj: BpfObject,
    targets: dict[str, tuple[str, int, bool]],
    no_randomize: bool,
    timeout: float,
) -> BpfRecord:
    host = HostObject()
    libc = ctypes.CDLL(None, use_errno=True)
    proc = None
    try:
        for d in obj.maps:
            hm = create_map(d.name, d.type, d.key_size, d.value_size, d.max_entries, d.flags)
            host.maps.append(hm)
            if d.initial is not None:
                update_elem(hm, bytes(4), d.initial)
            if d.internal == "rodata":
                freeze(hm)
        fds = [hm.fd for hm in host.maps]
        for p in obj.programs:
            if p.name in targets:
                host.prog_fds[p.name] = load_prog(
                    p.name, obj.resolved_insns(p), fds, p.license or "GPL", p.prog_type, p.expected_attach_type
                )
        proc = _traced_child([path, *argv[1:]], no_randomize)
        _, st = os.waitpid(proc.pid, 0)  # stopped at the exec (SIGTRAP), before its first instruction
        if not os.WIFSTOPPED(st):
            raise EmuError(f"{path} did not start (status {st:#x})")
        for name, (hpath, offset, retprobe) in targets.items():
            host.event_fds.append(attach_uprobe(host.prog_fds[name], hpath, offset, retprobe=retprobe, pid=proc.pid))
        libc.ptrace(PTRACE_DETACH, proc.pid, 0, 0)
        rings: dict[str, list[bytes]] = {hm.name: [] for hm in host.maps if hm.map_type == BPF_MAP_TYPE_RINGBUF}
        out = bytearray()
        deadline = time.monotonic() + timeout
        assert proc.stdout is not None
        while True:
            for hm in host.maps:
                if hm.map_type == BPF_MAP_TYPE_RINGBUF:
                    rings[hm.name].extend(hm.ring_records())
            ready, _, _ = select.select([proc.stdout], [], [], 0.02)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if chunk:
                    out += chunk
                    continue
                break
            if time.monotonic() > deadline:
                raise EmuError(f"the native run did not finish in {timeout} s")
        code = proc.wait()
        for hm in host.maps:
            if hm.map_type == BPF_MAP_TYPE_RINGBUF:
                rings[hm.name].extend(hm.ring_records())
        status = f"exit {code}" if code >= 0 else f"signal {signal.Signals(-code).name}"
        maps = {
            hm.name: dict(hm.items())
            for hm in host.maps
            if hm.map_type != BPF_MAP_TYPE_RINGBUF and not hm.name.endswith(".rodata")
        }
        return BpfRecord(status, bytes(out), proc.pid, maps, rings)
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            proc.wait()
        host.close()


def _show(data: bytes) -> str:
    return data.hex(" ") if data else "(empty)"


def compare(native: BpfRecord, model: BpfRecord) -> list[str]:
    problems = []
    if native.status != model.status:
        problems.append(f"status: host {native.status}, model {model.status}")
    if native.stdout != model.stdout:
        problems.append(f"stdout: host {native.stdout[:200]!r}, model {model.stdout[:200]!r}")
    for name in sorted(set(native.maps) | set(model.maps)):
        a, b = native.maps.get(name, {}), model.maps.get(name, {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                ha = _show(a[key]) if key in a else "missing"
                hb = _show(b[key]) if key in b else "missing"
                problems.append(f"map {name} key {_show(key)}: host {ha}, model {hb}")
    for name in sorted(set(native.rings) | set(model.rings)):
        ha_recs, hb_recs = native.rings.get(name, []), model.rings.get(name, [])
        for i in range(max(len(ha_recs), len(hb_recs))):
            ra = _show(ha_recs[i]) if i < len(ha_recs) else "none"
            rb = _show(hb_recs[i]) if i < len(hb_recs) else "none"
            if ra != rb:
                problems.append(f"ringbuf {name} record {i}: host {ra}, model {rb}")
                break
        if len(ha_recs) != len(hb_recs):
            problems.append(f"ringbuf {name}: host {len(ha_recs)} records, model {len(hb_recs)}")
    return problems


def cmd_diff_bpf(args, path: str, kernel: str) -> int:
    """The ``diff -b`` run: both sides, then ``agree`` or the differences."""
    if os.geteuid() != 0:
        raise InputError("diff -b loads BPF programs into the host kernel: it needs root")
    if len(args.bpf) != 1:
        raise InputError("diff takes one BPF object (-b OBJ)")
    attach = dict(args.bpf_attach)
    values = {}
    for name, text in args.bpf_set:
        try:
            values[name] = int(text, 0)
        except ValueError:
            raise InputError(f"--bpf-set {name}: {text!r} is not an integer") from None
    argv = [path, *args.args]
    obj = BpfObject.open(args.bpf[0])
    _int_values(obj, values)
    m = Machine.from_elf(path, argv=argv, env=list(DEFAULT_ENV), stdin=b"", kernel=kernel)
    targets = resolve_targets(m, obj, attach)
    if not targets:
        raise InputError(f"{args.bpf[0]}: no program to attach (name targets with --bpf-attach PROG=TARGET)")
    try:
        native = run_native_bpf(path, argv, obj, targets, True, args.timeout)
    except HostBpfError as e:
        raise EmuError(f"{e}{': ' + e.log.strip().splitlines()[-1] if e.log.strip() else ''}") from None
    model = run_model_bpf(path, argv, args.bpf[0], attach, values, kernel, native.pid)
    records = sum(len(r) for r in native.rings.values())
    summary = (
        f"host {os.uname().release} vs model {kernel}: {native.status}, {len(native.maps)} maps, "
        f"{records} ring buffer records"
    )
    problems = compare(native, model)
    if problems:
        print(f"DIVERGE (host {os.uname().release} vs model {kernel})")
        for line in problems:
            print(line)
        return 1
    print(f"agree: {summary}")
    return 0
