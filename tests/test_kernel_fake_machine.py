"""The kernel model against a small fake machine (no Unicorn): a trap handler queues a
signal with ``send_sig`` and returns, as the kernel's force_sig does; nothing of the
machine travels through kernel frames, and the code after the signal keeps its
semantics (what the handler did not do, it still does not do)."""

import struct
from types import SimpleNamespace

import pytest

from kernel_model.arch.x86.kernel import uprobes as arch
from kernel_model.arch.x86.ptrace import GPR_NAMES, PtRegs
from kernel_model.kernel.counters import Counters
from kernel_model.kernel.kernel import Kernel
from kernel_model.kernel.signals import SIGNALS
from kernel_model.mm.mm_types import PROT_EXEC, PROT_READ, GuestFault, MappedFile, Vma
from kernel_model.trace.events import EventBus

SIGILL, SIGTRAP = SIGNALS["SIGILL"], SIGNALS["SIGTRAP"]
STACK = 0x7FFF_0000


class FakeMem:
    """Bytes at addresses; anything else faults, as guest memory would."""

    def __init__(self):
        self.bytes: dict[int, int] = {}
        self.writes: list = []
        self.maps: list = []
        self.vmas: list = []
        self.vma_gen = 0  # as Memory's: bumped by each change of the VMAs

    def find_vma(self, addr):
        return next((v for v in self.vmas if v.start <= addr < v.end), None)

    def file_vmas(self, file):
        return [v for v in self.vmas if v.file is file]

    def unmap(self, start):
        self.vmas = [v for v in self.vmas if v.start != start]
        self.vma_gen += 1

    def map_file(self, start, file):
        self.vmas.append(Vma(start, start + 0x1000, PROT_READ | PROT_EXEC, file=file))
        self.vma_gen += 1
        self.fill(start, file.read(0, 0x1000))
        return self.vmas[-1]

    def _read(self, addr, n, access="read"):
        try:
            return bytes(self.bytes[a] for a in range(addr, addr + n))
        except KeyError:
            raise GuestFault(addr, access) from None

    read = read_user = _read

    def read_byte(self, addr):
        return self._read(addr, 1)[0]

    def write_user(self, addr, data):
        self._read(addr, len(data), "write")
        self.writes.append((addr, bytes(data)))
        for i, b in enumerate(data):
            self.bytes[addr + i] = b

    def read_user_struct(self, st, addr):
        return st.unpack(self._read(addr, st.size))

    def write_user_struct(self, st, addr, *values):
        self.write_user(addr, st.pack(*values))

    def fill(self, addr, data):
        for i, b in enumerate(data):
            self.bytes[addr + i] = b

    def get_unmapped_area(self, size, hint=None):
        return hint

    def map(self, start, size, prot, name="", special=False, **_):
        self.maps.append((start, size, name))
        self.fill(start, b"\0" * size)

    def text_poke(self, addr, data, count=True):
        self.fill(addr, data)


class FakeMachine:
    """What the kernel model uses of a machine, and a record of the signals it sent."""

    def __init__(self):
        self.counters = Counters()
        self.events = EventBus()
        self.syscalls = SimpleNamespace(register=lambda nr, fn: None)
        self.sent: list = []
        self.mem = FakeMem()
        proc = SimpleNamespace(
            pid=1000, mem=self.mem, mm_uprobes=None, mapped_files=[], tasks=[], exit_result=None, mm_owner=None
        )
        self.task = SimpleNamespace(tid=1000, process=proc, utask=None, state="running")
        self.main_process = proc
        self.processes = [proc]

    @property
    def process(self):
        return self.task.process

    def send_sig(self, task, signo, *, addr=None, detail="", code=None):
        self.sent.append((task, signo, detail))

    def signal_pending(self, task):
        return any(t is task for t, _, _ in self.sent)


@pytest.fixture
def fake():
    m = FakeMachine()
    return m, Kernel(m, "latest")


def regs_at(rip: int, rsp: int = STACK, eflags: int = 0x202, **values) -> PtRegs:
    v = dict.fromkeys(GPR_NAMES, 0)
    v.update(rip=rip, rsp=rsp, eflags=eflags, **values)
    return PtRegs.from_dict(v)


def xol_area(kernel, proc):
    area = kernel.uprobes.get_xol_area(proc)
    kernel.uprobes.mm(proc).has_uprobes = True
    return area


def test_int3_without_uprobes_queues_sigtrap_and_returns(fake):
    m, kernel = fake
    regs = regs_at(0x401001)
    kernel.do_int3(m.task, regs)  # returns: no exception through the kernel
    assert [(s, d) for _, s, d in m.sent] == [(SIGTRAP, "breakpoint trap (int3)")], m.sent
    assert regs.changed() == {}, f"registers changed: {regs.changed()}"


def test_single_step_trap_outside_uprobes_queues_sigtrap(fake):
    m, kernel = fake
    kernel.do_debug(m.task, regs_at(0x401002))
    assert [(s, d) for _, s, d in m.sent] == [(SIGTRAP, "trace trap (single-step)")], m.sent


def test_uretprobe_trampoline_without_return_instance_queues_sigill(fake):
    m, kernel = fake
    area = xol_area(kernel, m.process)
    regs = regs_at(area.vaddr + 1)  # after the trampoline's int3
    assert kernel.uprobes.handle_int3(m.task, regs) is True
    assert [(s, d) for _, s, d in m.sent] == [(SIGILL, "uretprobe trampoline without a return instance")], m.sent
    assert regs.rip == area.vaddr + 1, f"rip moved to {regs.rip:#x}"


def _sys_uretprobe_regs(area):
    return regs_at(area.vaddr + arch.URETPROBE_SYSCALL_CHECK, rax=335)


def test_sys_uretprobe_with_an_unreadable_stack_queues_sigill_and_changes_nothing(fake):
    m, kernel = fake
    area = xol_area(kernel, m.process)
    regs = _sys_uretprobe_regs(area)  # rsp points at nothing mapped
    ret = kernel.uprobes.uret.sys_uretprobe(m.task, regs)
    assert ret == -1, f"expected the sigill exit's -1, got {ret!r}"
    assert [(s, d) for _, s, d in m.sent] == [(SIGILL, "uretprobe syscall: bad stack")], m.sent
    assert regs.changed() == {}, f"registers changed: {regs.changed()}"


def test_sys_uretprobe_without_return_instance_goes_on_and_copies_back_as_the_kernel_does(fake):
    """uprobe_handle_trampoline only queues its SIGILL; sys_uretprobe goes on: sp back
    at the saved registers, the ax slot rewritten with regs->ip (the check address, the
    trampoline handler moved nothing), rip and rcx that address, r11 the flags, rax
    the saved ax - what the 6.18 host shows (tests/test_uretprobe_syscall_sigill.py)."""
    m, kernel = fake
    area = xol_area(kernel, m.process)
    m.mem.fill(STACK, struct.pack("<3Q", 0x246, 0x1111, 0x2222))  # r11, rcx, rax
    regs = _sys_uretprobe_regs(area)
    check = area.vaddr + arch.URETPROBE_SYSCALL_CHECK
    ret = kernel.uprobes.uret.sys_uretprobe(m.task, regs)
    assert ret is None, f"expected rax left as restored, got a return value {ret!r}"
    assert [(s, d) for _, s, d in m.sent] == [(SIGILL, "uretprobe trampoline without a return instance")], m.sent
    assert m.mem.writes == [(STACK, struct.pack("<3Q", 0x246, 0x1111, check))], f"stack written: {m.mem.writes}"
    got = (regs.r11, regs.rcx, regs.rax, regs.rsp, regs.rip)
    want = (0x202, check, 0x2222, STACK, check)
    assert got == want, f"expected r11 rcx rax rsp rip {[hex(v) for v in want]}, got {[hex(v) for v in got]}"


def test_sys_uretprobe_outside_the_trampoline_queues_sigill(fake):
    m, kernel = fake
    area = xol_area(kernel, m.process)
    regs = regs_at(area.vaddr + arch.URETPROBE_SYSCALL_CHECK + 2, rax=335)
    assert kernel.uprobes.uret.sys_uretprobe(m.task, regs) == -1, "the sigill exit returns -1"
    assert [(s, d) for _, s, d in m.sent] == [(SIGILL, "uretprobe syscall outside the trampoline")], m.sent


TEXT = 0x400000
NOP_AT = 0x10  # file offset of a one-byte nop (emulated)


def probed_nop(m, kernel):
    file = MappedFile("/fake/a.out", b"\xcc" * NOP_AT + b"\x90" + b"\xc3" * 15)
    m.process.mapped_files.append(file)
    m.mem.map_file(TEXT, file)
    hits = []
    kernel.uprobes.register(("/fake/a.out", NOP_AT), handler=lambda ctx: hits.append(ctx.regs.rip))
    return hits


@pytest.mark.parametrize("tf,signals", [(False, []), (True, [(SIGTRAP, "single-step over an emulated probe")])])
def test_handle_swbp_runs_the_handler_once_and_queues_sigtrap_only_under_tf(fake, tf, signals):
    m, kernel = fake
    hits = probed_nop(m, kernel)
    vaddr = TEXT + NOP_AT
    assert m.mem.read(vaddr, 1) == b"\xcc", "the breakpoint was not installed"
    regs = regs_at(vaddr + 1, eflags=0x302 if tf else 0x202)
    assert kernel.uprobes.handle_int3(m.task, regs) is True
    assert hits == [vaddr], f"handler saw rip {[hex(h) for h in hits]}, expected [{vaddr:#x}]"
    assert regs.rip == vaddr + 1, f"the emulated nop should leave rip at {vaddr + 1:#x}, not {regs.rip:#x}"
    assert [(s, d) for _, s, d in m.sent] == signals, m.sent


def test_an_address_mapped_afresh_hits_the_uprobe_of_the_new_mapping(fake):
    """handle_swbp keeps its address -> uprobe answers only while the VMAs stay as they
    were: once the page at the probed address maps another file (the uprobes tree
    unchanged), a hit there is that file's probe, not the one found there before."""
    m, kernel = fake
    a_hits = probed_nop(m, kernel)
    other = MappedFile("/fake/b.so", b"\xcc" * NOP_AT + b"\x90" + b"\xc3" * 15)
    m.process.mapped_files.append(other)
    b_hits = []
    kernel.uprobes.register(("/fake/b.so", NOP_AT), handler=lambda ctx: b_hits.append(ctx.regs.rip))
    vaddr = TEXT + NOP_AT
    assert kernel.uprobes.handle_int3(m.task, regs_at(vaddr + 1)) is True
    m.mem.unmap(TEXT)
    kernel.uprobes.uprobe_mmap(m.process, m.mem.map_file(TEXT, other))
    assert m.mem.read(vaddr, 1) == b"\xcc", "the new mapping's breakpoint was not installed"
    assert kernel.uprobes.handle_int3(m.task, regs_at(vaddr + 1)) is True
    assert (a_hits, b_hits) == ([vaddr], [vaddr]), (
        f"expected one hit each for a.out then b.so, got a.out {a_hits}, b.so {b_hits}"
    )


def test_a_uprobe_made_afresh_at_a_hit_address_is_the_one_a_hit_finds(fake):
    """The same for the tree: a consumer unregistered (its uprobe erased) and a new one
    registered at the same offset make a new uprobe, and the next hit runs it."""
    m, kernel = fake
    probed_nop(m, kernel)
    (first,) = kernel.uprobes.tree.values()
    vaddr = TEXT + NOP_AT
    assert kernel.uprobes.handle_int3(m.task, regs_at(vaddr + 1)) is True
    kernel.uprobes.unregister(first.consumers[0])
    hits = []
    kernel.uprobes.register(("/fake/a.out", NOP_AT), handler=lambda ctx: hits.append(ctx.uprobe))
    assert kernel.uprobes.handle_int3(m.task, regs_at(vaddr + 1)) is True
    (now,) = kernel.uprobes.tree.values()
    assert now is not first and hits == [now], f"the hit ran {hits}, expected the new uprobe {now}"
