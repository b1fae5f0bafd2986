"""The bench's scenarios and its guest: the scenario table (the kernel's ``bench_trigger``
bodies), kernel columns (a profile plus switch overrides), the guest
ELFs, and how a scenario's counting consumer is attached to a machine.

USDT scenarios: the keystone guest has no ``.note.stapsdt``, so the bench probes the site
address (the note's pc) with libbpf's nop-combo rule (``emu.probes.usdt.
usdt_attach_offsets``): attach one byte further, on the nop5/nop10, when the profile has
the uprobe syscall and the site is the matching combo.  The same ELF runs natively for
``--host-kernel``, where the same rule picks the tracefs probe offset.

Consumers: ``program`` (a trace event with a program-only consumer, like the BPF programs
of the kernel's bench: the args buffer is filled only by kernels without the lazy
buffer), ``handler`` (a plain Python uprobe consumer), ``ftrace`` (a trace event that
writes ftrace lines; args buffer filled on every hit).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import MappingProxyType, SimpleNamespace

from emu.asm import asm_to_elf
from emu.frontends.bench.bpf_counter import attach_bpf_counter
from emu.machine import Machine
from emu.probes.symbols import probe_file
from emu.probes.usdt import usdt_attach_offsets
from guest_programs import build_guest, guest_source
from kernel_model.errors import InputError
from kernel_model.profiles import KernelProfile

GUEST = "bench_trigger"
GUEST_PATH = "/guest/bench_trigger"
MARKER_NR = 110  # getppid: the guest's phase marker
EXIT_NR = 231
SLED_SIZE = 50_000


# ----------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    name: str
    loop: int  # the guest's LOOP argument
    target: str | None  # probed symbol (None: no probe)
    kind: str  # "none" | "entry" | "return"
    usdt: bool = False
    description: str = ""


def _scenarios() -> dict:
    out = [
        Scenario("usermode-count", 0, None, "none", description="call uprobe_target_nop, bump a counter"),
        Scenario("syscall-count", 1, None, "none", description="syscall(getpgid), bump a counter"),
    ]
    for kind, word in (("entry", "uprobe"), ("return", "uretprobe")):
        for i, t in enumerate(("nop", "push", "ret", "nop5", "nop10")):
            out.append(
                Scenario(f"{word}-{t}", 2 + i, f"uprobe_target_{t}", kind, description=f"{word} on uprobe_target_{t}")
            )
    for i, t in enumerate(("nop", "nop5", "nop10")):
        out.append(
            Scenario(
                f"usdt-{t}",
                7 + i,
                f"usdt_site_{t}",
                "entry",
                usdt=True,
                description=f"USDT site '{'nop' if t == 'nop' else 'nop; ' + t}' (libbpf nop-combo rule)",
            )
        )
    return {s.name: s for s in out}


# read-only tables (no module-level mutable state)
SCENARIOS = MappingProxyType(_scenarios())
LOOP_NAMES = MappingProxyType(
    {
        0: "usermode",
        1: "syscall",
        2: "nop",
        3: "push",
        4: "ret",
        5: "nop5",
        6: "nop10",
        7: "usdt-nop",
        8: "usdt-nop5",
        9: "usdt-nop10",
    }
)


@dataclass(frozen=True)
class ColumnSpec:
    """A kernel profile plus switch overrides: ``6.17`` or ``6.17:nop_emulation=x86_nops``."""

    kernel: str
    overrides: tuple = ()

    @property
    def label(self) -> str:
        if not self.overrides:
            return self.kernel
        return self.kernel + " " + ",".join(f"{k}={v}" for k, v in self.overrides)

    @property
    def key(self) -> str:
        """The costmodel Column key."""
        return self.kernel + "".join(f"+{k}={v}" for k, v in self.overrides)

    def profile(self):
        return KernelProfile.get(self.kernel, **dict(self.overrides))

    def as_dict(self) -> dict:
        return {"label": self.label, "kernel": self.kernel, "overrides": dict(self.overrides)}


def _switch_value(text: str):
    low = text.lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "on", "yes"):
        return True
    if low in ("false", "off", "no"):
        return False
    return text


def parse_column(text: str, extra: dict | None = None) -> ColumnSpec:
    kernel, _, rest = text.partition(":")
    ov = {}
    for part in filter(None, rest.split(",")):
        k, eq, v = part.partition("=")
        if not eq:
            raise InputError(f"bad kernel switch {part!r} (want switch=value)")
        ov[k.strip()] = _switch_value(v.strip())
    ov.update(extra or {})
    spec = ColumnSpec(kernel.strip(), tuple(sorted(ov.items())))
    spec.profile()  # validates names and switches (InputError)
    return spec


def column_from_costmodel(col) -> ColumnSpec:
    return ColumnSpec(col.profile, tuple(sorted(col.overrides)))


# ----------------------------------------------------------------------------- guest


def guest_elf() -> bytes:
    return build_guest(GUEST)[0]


@functools.cache
def growth_elf() -> bytes:
    """The same guest with a never-executed run of SLED_SIZE one-byte nops appended to its
    text (``probe_sled``): distinct probe sites for the growth scenarios.  Built here, not
    registered as a guest, so the built-in guest stays small."""
    src = guest_source(GUEST)
    head, sep, data = src.partition("\n.data\n")
    sled = f"\nprobe_sled:\n    .fill {SLED_SIZE}, 1, 0x90\nprobe_sled_end:\n    ret\n"
    return asm_to_elf(head + sled + sep + data)[0]


@functools.cache
def guest_file():
    """The guest as a MappedFile (for offsets without a machine)."""
    data = guest_elf()
    return probe_file(GUEST_PATH, data)


def site_offset(file, scen: Scenario, profile) -> int:
    """File offset the scenario probes; USDT sites follow libbpf's nop-combo rule."""
    vaddr = file.elf.resolve(scen.target).value
    if scen.usdt:
        offset, _ = usdt_attach_offsets(file, SimpleNamespace(pc=vaddr, semaphore=0), profile)
        return offset
    return file.elf.vaddr_to_offset(vaddr)


def new_machine(col: ColumnSpec, loop: int, n: int, warmup: int, n2: int = 0, *, sled: bool = False):
    argv = [GUEST, str(loop), str(n), str(warmup), str(n2)]
    return Machine.from_bytes(
        growth_elf() if sled else guest_elf(), GUEST_PATH, argv=argv, kernel=col.kernel, **dict(col.overrides)
    )


def attach(m, scen: Scenario, consumer: str):
    """Attach the counting consumer; returns a function that says how many hits it
    counted so far.  Raises RegistrationError when the kernel refuses."""
    box = [0]
    if scen.kind == "none":
        return lambda: box[0]
    file = m.process.exe
    off = site_offset(file, scen, m.profile)

    def count(ctx):
        box[0] += 1

    ret = scen.kind == "return"
    if consumer == "handler":
        if ret:
            m.uprobes.register((file.path, off), ret_handler=count)
        else:
            m.uprobes.register((file.path, off), handler=count)
        return lambda: box[0]
    if consumer == "bpf":
        return attach_bpf_counter(m, (file.path, off), ret)
    if consumer not in ("program", "ftrace"):
        raise InputError(f"unknown consumer {consumer!r} (handler, program, ftrace, bpf)")
    m.uprobes.add_event(
        f"{'r' if ret else 'p'}:bench/trigger {file.path}:{off:#x}", ftrace=consumer == "ftrace", programs=[count]
    )
    return lambda: box[0]
