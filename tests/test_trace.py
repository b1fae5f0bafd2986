"""`uprobe-emu trace` and ``emu.trace.Tracer``: instruction traces with the uprobes
model's work interleaved, in text, JSON lines, Tenet and Chrome trace-event formats.

Golden text traces pin every probe path (emulated, XOL, both uretprobe trampolines,
the optimized nop5 call): regenerate them with ``UPDATE_GOLDEN=1`` after an intended
change and review the diff.  The disassembly is checked against ``objdump -d -M intel``
of the same ELF (objdump is required: the test fails without it).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import cli, one_line_error

from emu import Machine
from emu.asm import asm_to_elf
from emu.frontends.trace import FORMATS, Tracer
from guest_programs import write_guest

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

# func runs twice: a first hit (int3 / first optimization) and a steady-state hit.
# site: a 5-byte nop (optimizable on 6.18); load: a rip-relative mov (XOL with the
# riprel rewrite); leave: ret (XOL); func's own push rbp is emulated.
GUEST = """
_start:
    mov ebx, 2
again:
    call func
    dec ebx
    jnz again
    mov edi, eax
    mov eax, 231
    syscall
func:
    push rbp
    mov rbp, rsp
site:
    .byte 0x0f, 0x1f, 0x44, 0x00, 0x00
load:
    mov rax, qword ptr [rip + value]
    pop rbp
leave:
    ret
.data
value:
    .quad 0x2a
"""
GUEST_STATUS = 0x2A


def _noop(ctx):
    return 0


# name -> (kernel, entry probes, return-probed function)
SCENARIOS = {
    "emulated-6.10": ("6.10", ["func"], "func"),
    "emulated-latest": ("latest", ["func"], "func"),
    "xol-6.10": ("6.10", ["load", "leave"], "func"),
    "xol-latest": ("latest", ["load", "leave"], "func"),
    "optimized-6.18": ("6.18", ["site"], "func"),
}


def scenario_machine(name: str) -> Machine:
    kernel, entries, ret_func = SCENARIOS[name]
    m = Machine.from_asm(GUEST, kernel=kernel)
    for target in entries:
        m.uprobes.register(target, handler=_noop, name=f"entry:{target}")
    m.uprobes.register(ret_func, ret_handler=_noop, name=f"return:{ret_func}")
    return m


def trace_of(m: Machine, fmt: str = "text", max_insns: int | None = 100_000, **kw):
    out = io.StringIO()
    t = Tracer(m, fmt, out, **kw)
    result = m.run(max_insns=max_insns)
    t.close()
    return out.getvalue(), result


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"no golden {path.name}: run with UPDATE_GOLDEN=1 to create it"
    expected = path.read_text()
    if text != expected:
        import difflib

        diff = "".join(
            difflib.unified_diff(expected.splitlines(True), text.splitlines(True), f"golden/{path.name}", "actual", n=2)
        )
        pytest.fail(f"trace differs from golden/{path.name} (UPDATE_GOLDEN=1 to accept):\n" + diff[:6000])


# ----------------------------------------------------------------------------- parsing

_INSN = re.compile(r"^  ([0-9a-f]+):\t([0-9a-f ]+?) *\t(.*)$")
_CONT = re.compile(r"^  ([0-9a-f]+):\t([0-9a-f ]+?) *$")


def listing(text: str) -> list[tuple[int, bytes, str]]:
    """(address, bytes, disassembly) of every instruction line of a text trace or an
    objdump listing; continuation lines add their bytes to the instruction before."""
    out = []
    for line in text.splitlines():
        m = _INSN.match(line)
        if m:
            out.append((int(m.group(1), 16), bytes.fromhex(m.group(2)), m.group(3)))
            continue
        m = _CONT.match(line)
        if m and out:
            addr, raw, asm = out[-1]
            out[-1] = (addr, raw + bytes.fromhex(m.group(2)), asm)
    return out


def events(text: str) -> list[str]:
    return [ln.strip()[2:] for ln in text.splitlines() if ln.startswith("    # ")]


_NUM = re.compile(r"(?<![\w])(-?0x[0-9a-f]+|-?[0-9]+)(?![\w])")
_STRING_OPS = re.compile(r"^((?:rep[a-z]* )?)(stos|movs|lods|scas|cmps|ins|outs)[bwdq]?$")
_PREFIXES = ("addr32 ", "data16 ", "cs ", "ds ", "es ", "ss ", "notrack ", "bnd ")


def _signed_hex(text: str) -> str:
    v = int(text, 0)
    if 1 << 63 <= v < 1 << 64:
        v -= 1 << 64  # objdump: 64-bit two's complement
    elif 1 << 31 <= v < 1 << 32:
        v -= 1 << 32  # a sign-extended imm32
    return hex(v)


def normalize(asm: str) -> str:
    """One spelling for objdump's and capstone's Intel syntax (applied to both sides):
    no comments or <sym> annotations, lower case, no spaces, signed hex numbers, no
    ``*1`` / ``+0x0``, no redundant segment or size prefixes, bare string-op names."""
    asm = asm.split("#", 1)[0]
    asm = re.sub(r"<[^>]*>", "", asm).strip().lower()
    while asm.startswith(_PREFIXES):
        asm = asm.split(" ", 1)[1].lstrip()
    mnem, _, ops = asm.partition(" ")
    ops = ops.strip()
    sizes = ("qword", "dword", "word", "byte", "[")
    if mnem.startswith("rep") and " " in ops and not ops.startswith(sizes):
        more, _, ops = ops.partition(" ")  # "rep stosq ...": mnemonic has two words
        mnem += " " + more
    mnem = _STRING_OPS.sub(r"\1\2", mnem)
    ops = re.sub(r"\b(?:cs|ds|es|ss):", "", ops)
    ops = re.sub(r"\b([fg]s):\[(-?(?:0x)?[0-9a-f]+)\]", r"\1:\2", ops)
    ops = ops.replace(" ", "")
    if re.fullmatch(r"[0-9a-f]+", ops) and mnem.split()[-1].startswith(("j", "call", "loop")):
        ops = "0x" + ops  # objdump: `call 401020`
    ops = _NUM.sub(lambda m: _signed_hex(m.group(1)), ops)
    ops = ops.replace("+-", "-")
    ops = re.sub(r"\*0x1(?=[\]+-])", "", ops)
    ops = re.sub(r"[+-]0x0\]", "]", ops)
    return (mnem + " " + ops).strip()


def objdump(path: Path) -> dict[int, tuple[bytes, str]]:
    exe = shutil.which("objdump")
    if exe is None:
        pytest.fail("objdump (binutils) is required to check the trace's disassembly")
    res = subprocess.run([exe, "-d", "-M", "intel", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return {addr: (raw, asm) for addr, raw, asm in listing(res.stdout)}


# ----------------------------------------------------------------------------- goldens


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_golden_text_trace(name):
    text, result = trace_of(scenario_machine(name))
    assert result.reason == "exit" and result.exit_code == GUEST_STATUS, result
    check_golden(name, text)


def test_golden_builtin_guest_hello():
    m = Machine.from_guest("hello", kernel="latest")
    m.uprobes.register("_start", handler=_noop, name="entry:_start")
    text, result = trace_of(m)
    assert result.exit_code == 0 and result.stdout == b"hello, world\n"
    check_golden("hello-latest", text)


# ----------------------------------------------------------------------------- what a trace shows


def test_each_probe_path_is_visible_in_the_trace():
    text, _ = trace_of(scenario_machine("xol-latest"))
    ev = events(text)
    assert any(e.startswith("int3 trap: uprobe hit at 0x") and "<load>" in e for e in ev)
    assert any(e.startswith("XOL: 'mov rax, qword ptr [rip + ") and "rewritten to use" in e for e in ev)
    assert any(e.startswith("XOL: 'ret' copied to slot 1") for e in ev)
    assert any(e.startswith("#DB after the single-step: XOL fixups (") for e in ev)
    assert any(e.startswith("emulated 'push rbp'") for e in ev)
    assert any(e.startswith("uretprobe: return address at [") for e in ev)
    assert any(e.startswith("*** syscall 335 uretprobe()") for e in ev)
    assert any(e.startswith("ret_handler of consumer #") and "return:func" in e for e in ev)
    # the slot's copy runs at the slot address, marked; the trampoline too
    lines = text.splitlines()
    slot_mov = r"  7f[0-9a-f]+080:\t.*\tmov +rax, qword ptr \[rsi \+ 0x[0-9a-f]+\]  # \[XOL slot 1\]$"
    assert any(re.match(slot_mov, ln) for ln in lines), "the rewritten riprel mov runs in XOL slot 1"
    assert any("<[uprobes] uretprobe trampoline>:" in ln for ln in lines)
    assert any(ln.endswith("# [uretprobe trampoline]") and "\tsyscall" in ln for ln in lines)


def test_optimized_path_first_int3_then_call_trampoline_and_syscall_336():
    m = scenario_machine("optimized-6.18")
    site = m.resolve("site")
    text, _ = trace_of(m)
    ev = events(text)
    first_opt = next(i for i, e in enumerate(ev) if e.startswith("optimized: 0x"))
    assert ev[first_opt - 3].startswith("[uprobes-trampoline] mapped at")
    assert [e.split(":")[0] for e in ev[first_opt - 2 : first_opt]] == [
        f"text_poke {site + 1:#x} <site+0x1>",
        f"text_poke {site:#x} <site>",
    ]
    assert ev[first_opt + 1].startswith("emulated 'nop dword ptr [rax + rax]'")
    later = ev[first_opt + 2 :]
    i = later.index("*** syscall 336 uprobe()")
    assert later[i + 1].startswith(f"sys_uprobe: the optimized probe at {site:#x} <site>")
    assert later[i + 2].startswith(f"uprobe syscall: uprobe hit at {site:#x} <site>")
    lines = text.splitlines()
    assert any(
        re.match(
            rf"  {site:x}:\te8 [0-9a-f ]+\tcall +0x[0-9a-f]+ <\[uprobes-trampoline\]>"
            r"  # optimized uprobe$",
            ln,
        )
        for ln in lines
    )


def test_register_changes_follow_each_instruction():
    text, _ = trace_of(Machine.from_asm(GUEST))
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if "\tcall " in ln)
    assert re.fullmatch(r"    rsp=0x[0-9a-f]+ rip=0x401017", lines[i + 1]), lines[i + 1]
    i = next(i for i, ln in enumerate(lines) if "\tmov    rax, qword ptr [rip" in ln)
    assert lines[i + 1] == "    rax=0x2a"
    i = next(i for i, ln in enumerate(lines) if "\tmov    ebx, 2" in ln)
    assert lines[i + 1] == "    rbx=0x2", "fall-through rip is not shown"


def test_exit_and_signal_end_the_trace():
    text, result = trace_of(Machine.from_guest("segv"))
    assert result.reason == "signal"
    lines = text.splitlines()
    assert lines[-4].endswith("\tmov    qword ptr [rax], 1")
    assert lines[-3].startswith("    # signal SIGSEGV at rip 0x401007 <_start+0x7>, address 0x10")
    assert lines[-2] == "    rip=0x401007", "the faulting instruction did not complete"
    assert lines[-1] == "# end: 2 instructions traced (guest killed by SIGSEGV)"
    text, _ = trace_of(Machine.from_guest("exit42"))
    assert text.splitlines()[-2:] == [
        "    # syscall 60 exit(0x2a)",
        f"# end: {len(listing(text))} instructions traced (guest exited)",
    ]


def test_decode_cache_follows_text_writes():
    """A probe registered and removed while the guest runs shows up as int3 exactly on
    the executions between the two text writes."""
    m = Machine.from_asm(GUEST.replace("mov ebx, 2", "mov ebx, 3"))
    state = {}

    def on_func(ctx):
        n = state["n"] = state.get("n", 0) + 1
        if n == 2:
            state["p"] = m.uprobes.register("load", handler=_noop)
        elif n == 3:
            m.uprobes.unregister(state["p"])
        return 0

    m.uprobes.register("func", handler=on_func)
    text, _ = trace_of(m)
    load = m.resolve("load")
    seen = [asm.split("  #")[0].split()[0] for addr, _, asm in listing(text) if addr == load]
    assert seen == ["mov", "int3", "mov"]


def test_guest_stores_into_its_own_code_are_seen():
    m = Machine.from_asm("""
_start:
    mov ebx, 2
again:
    call patchme
    lea rdi, [rip + patchme]
    mov byte ptr [rdi], 0xc3
    dec ebx
    jnz again
    mov eax, 231
    xor edi, edi
    syscall
patchme:
    nop
    nop
    ret
""")
    from kernel_model.mm.mm_types import PROT_EXEC, PROT_READ, PROT_WRITE

    m.mem.protect(0x401000, 0x1000, PROT_READ | PROT_WRITE | PROT_EXEC)
    text, _ = trace_of(m)
    patchme = m.resolve("patchme")
    assert [asm.split()[0] for a, _, asm in listing(text) if a == patchme] == ["nop", "ret"]


def test_memory_writes_when_asked():
    text, _ = trace_of(Machine.from_asm(GUEST), mem=True)
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if "\tcall " in ln)
    effects = r"    rsp=(0x[0-9a-f]+) rip=0x401017 \[\1\]=0x40100a"
    assert re.fullmatch(effects, lines[i + 1]), lines[i + 1]


# ----------------------------------------------------------------------------- objdump


def _objdump_check(elf: bytes, tmp_path: Path, text: str) -> int:
    path = tmp_path / "guest.elf"
    path.write_bytes(elf)
    ref = objdump(path)
    checked = 0
    for addr, raw, asm in listing(text):
        if addr not in ref:
            continue  # kernel-model code, or a patched site
        ref_raw, ref_asm = ref[addr]
        if raw != ref_raw:
            continue  # int3 / optimized call: not the file's bytes
        assert normalize(asm) == normalize(ref_asm), f"{addr:#x}: trace {asm!r} vs objdump {ref_asm!r}"
        checked += 1
    return checked


@pytest.mark.parametrize("name", ["xol-latest", "optimized-6.18"])
def test_disassembly_agrees_with_objdump(name, tmp_path):
    elf, _ = asm_to_elf(GUEST)
    text, _ = trace_of(scenario_machine(name))
    assert _objdump_check(elf, tmp_path, text) >= 10


@pytest.mark.parametrize("guest,argv", [("fib", ["fib", "3"]), ("hello", None), ("echo", None)])
def test_builtin_guest_disassembly_agrees_with_objdump(guest, argv, tmp_path):
    path = tmp_path / guest
    write_guest(guest, str(path))
    text, _ = trace_of(Machine.from_guest(guest, argv=argv))
    assert _objdump_check(path.read_bytes(), tmp_path, text) >= 5


def test_gcc_static_binary_disassembly_agrees_with_objdump(build_c, tmp_path):
    """glibc's own code: prefixes, fs: operands, string ops, SSE, negative displacements."""
    exe = Path(build_c("hello.c", "-static"))
    m = Machine.from_elf(str(exe), argv=[str(exe), "x"])
    text, result = trace_of(m)
    assert result.exit_code == 7
    assert _objdump_check(exe.read_bytes(), tmp_path, text) > 5000


def test_normalize_covers_the_dialect_differences():
    assert normalize("nop    DWORD PTR [rax+rax*1+0x0]") == normalize("nop dword ptr [rax + rax]")
    assert normalize("mov    ebx,0x2") == normalize("mov    ebx, 2")
    assert normalize("call   401012 <func>") == normalize("call   0x401012 <func>")
    assert normalize("mov    rax,QWORD PTR [rip+0xfe1]        # 402000 <value>") == normalize(
        "mov    rax, qword ptr [rip + 0xfe1]        # 402000 <value>"
    )
    assert normalize("mov    r8,QWORD PTR [rsp]") != normalize("mov r9, qword ptr [rsp]")
    assert normalize("mov    rbx,QWORD PTR fs:0x10") == normalize("mov    rbx, qword ptr fs:[0x10]")
    assert normalize("lea    rax,[rip+0xfffffffffffcd004]") == normalize("lea    rax, [rip - 0x32ffc]")
    assert normalize("rep stos QWORD PTR es:[rdi],rax") == normalize("rep stosq qword ptr [rdi], rax")
    assert normalize("cs nop WORD PTR [rax+rax*1+0x0]") == normalize("nop    word ptr cs:[rax + rax]")
    assert normalize("addr32 call 4027f0 <f>") == normalize("call   0x4027f0 <f>")


# ----------------------------------------------------------------------------- jsonl


def test_jsonl_parses_and_carries_the_text_content():
    text, _ = trace_of(scenario_machine("xol-latest"))
    m = scenario_machine("xol-latest")
    js, _ = trace_of(m, "jsonl")
    objs = [json.loads(line) for line in js.splitlines()]
    assert objs[0]["type"] == "start" and objs[-1]["type"] == "end"
    insns = [o for o in objs if o["type"] == "insn"]
    assert [o["i"] for o in insns] == list(range(len(insns))) == list(range(objs[-1]["insns"]))
    assert [int(o["addr"], 16) for o in insns] == [a for a, _, _ in listing(text)]
    assert [bytes.fromhex(o["bytes"]) for o in insns] == [r for _, r, _ in listing(text)]
    evs = [o for o in objs if o["type"] == "event"]
    assert [o["text"] for o in evs] == events(text)
    # each event follows the instruction it happened in
    last_i = None
    for o in objs[1:-1]:
        if o["type"] == "insn":
            last_i = o["i"]
        else:
            assert o["i"] == last_i
    for o in insns:
        assert all(re.fullmatch(r"0x[0-9a-f]+", v) for v in o["regs"].values())
    hit = next(o for o in evs if o["event"] == "uprobe_hit")
    func = m.resolve("func")
    assert hit["uprobe"] == {"path": "asm-guest", "offset": hex(func - 0x400000)}
    assert hit["vaddr"] == hex(func) and hit["tid"] == 1000


# ----------------------------------------------------------------------------- tenet

_TENET = re.compile(r"^(?:[a-z0-9]+=0x[0-9a-f]+,)*rip=0x[0-9a-f]+(?:,mw=0x[0-9a-f]+:(?:[0-9a-f]{2})+)*$")


def test_tenet_lines():
    tenet, _ = trace_of(scenario_machine("emulated-latest"), "tenet")
    text, _ = trace_of(scenario_machine("emulated-latest"))
    lines = tenet.splitlines()
    for ln in lines:
        assert _TENET.match(ln), ln
    first = dict(kv.split("=") for kv in lines[0].split(","))
    assert list(first) == [
        "rax",
        "rbx",
        "rcx",
        "rdx",
        "rsi",
        "rdi",
        "rbp",
        "rsp",
        "r8",
        "r9",
        "r10",
        "r11",
        "r12",
        "r13",
        "r14",
        "r15",
        "rip",
    ]
    rips = [int(re.search(r"rip=(0x[0-9a-f]+)", ln).group(1), 16) for ln in lines]
    assert rips == [a for a, _, _ in listing(text)], "one line per instruction, in order"
    # replaying the deltas gives every register change of the text trace
    state = {}
    for ln in lines:
        for kv in ln.split(","):
            k, v = kv.split("=")
            if k != "mw":
                state[k] = int(v, 16)
    assert state["rax"] == 231 and state["rdi"] == GUEST_STATUS
    # the emulated push (the kernel's write) and the call's push are both memory writes
    call_i = next(i for i, (_, _, asm) in enumerate(listing(text)) if asm.startswith("call"))
    assert re.search(r",mw=0x[0-9a-f]+:0a10400000000000$", lines[call_i + 1])
    push = lines[call_i + 2]  # after the int3 at func: hijack + emulated push
    assert re.search(r"mw=0x[0-9a-f]+:00e0ffffff7f0000,mw=0x[0-9a-f]+:0000000000000000$", push), push


# ----------------------------------------------------------------------------- chrome


def check_chrome(doc: dict) -> list[dict]:
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    evs = doc["traceEvents"]
    last_ts = -1
    stacks: dict = {}
    for e in evs:
        for key in ("ph", "ts", "pid", "tid", "name"):
            assert key in e, f"{key} missing in {e}"
        assert e["ph"] in ("B", "E", "i", "M", "X"), e
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= last_ts, "ts must not go back"
        last_ts = e["ts"]
        stack = stacks.setdefault((e["pid"], e["tid"]), [])
        if e["ph"] == "B":
            stack.append(e["name"])
        elif e["ph"] == "E":
            assert stack, f"E without B: {e}"
            assert stack.pop() == e["name"], f"badly nested E: {e}"
        elif e["ph"] == "i":
            assert e.get("s") in ("t", "p", "g")
    assert all(not s for s in stacks.values()), f"unclosed spans: {stacks}"
    return evs


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_chrome_trace_event_schema(name):
    out, _ = trace_of(scenario_machine(name), "chrome")
    evs = check_chrome(json.loads(out))
    spans = [(e["ph"], e["name"]) for e in evs if e["ph"] in "BE"]
    assert spans[0] == ("B", "_start") and spans[1] == ("B", "func")
    assert spans.count(("B", "func")) == 2
    names = [e["name"] for e in evs if e["ph"] == "i"]
    assert "syscall exit_group" in names
    assert names.count("uretprobe func") == 2
    kernel = SCENARIOS[name][0]
    tramp = "[uprobes] uretprobe trampoline"
    assert spans.count(("B", tramp)) == 2
    if kernel == "6.18":
        assert spans.count(("B", "[uprobes-trampoline]")) == 1 and "syscall uprobe" in names
    if kernel != "6.10":
        assert names.count("syscall uretprobe") == 2


def test_chrome_trace_starting_inside_a_function_keeps_spans_nested():
    out, _ = trace_of(scenario_machine("xol-latest"), "chrome", start="load")
    evs = check_chrome(json.loads(out))
    spans = [(e["ph"], e["name"]) for e in evs if e["ph"] in "BE" and e["cat"] == "function"]
    assert spans[0] == ("B", "load"), "labels of keystone guests are FUNC symbols"
    assert spans[1:3] == [("E", "load"), ("B", "again")], "the caller opens when it returns"


# ----------------------------------------------------------------------------- --from / --count


def test_from_symbol_starts_at_its_first_instruction_once():
    m = Machine.from_asm(GUEST)
    text, result = trace_of(m, start="func", count=4)
    assert result.exit_code == GUEST_STATUS
    addrs = [a for a, _, _ in listing(text)]
    func = m.resolve("func")
    assert addrs == [func, func + 1, func + 4, func + 9]
    assert text.splitlines()[-1] == "# end: 4 instructions traced (count of 4 reached)"


def test_count_stops_tracing_and_the_guest_runs_on():
    m = Machine.from_guest("fib", argv=["fib", "1000"])
    text, result = trace_of(m, count=25)
    assert len(listing(text)) == 25
    assert (
        result.reason == "exit" and result.exit_code == Machine.from_guest("fib", argv=["fib", "1000"]).run().exit_code
    )


def test_hooks_and_listeners_are_removed_after_tracing():
    m = Machine.from_asm(GUEST)
    before = list(m.mem.text_write_listeners)
    t = Tracer(m, "text", io.StringIO(), count=3)
    assert t.active and len(m.events) == 1, "the tracer subscribes to the event stream"
    m.run()
    assert not t.active and t._code_hook is None and t.insns == 3
    t.close()
    assert not m.events, f"subscribers left after close: {len(m.events)}"
    assert m.mem.text_write_listeners == before, "no decode cache left behind"


def test_start_never_reached():
    m = Machine.from_guest("exit42")
    text, _ = trace_of(m, start=0x500000)
    assert listing(text) == []
    assert text.splitlines()[-1] == "# end: 0 instructions traced (start never reached)"


def test_bad_arguments():
    m = Machine.from_asm(GUEST)
    with pytest.raises(Exception, match="unknown trace format"):
        Tracer(m, "xml", io.StringIO())
    with pytest.raises(Exception, match="unknown symbol 'nosuch'"):
        Tracer(m, "text", io.StringIO(), start="nosuch")


class _FullDisk(io.StringIO):
    def write(self, text):
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_output_error_stops_the_run_and_surfaces(fmt):
    m = Machine.from_guest("fib", argv=["fib", "100000"])
    Tracer(m, fmt, _FullDisk())
    with pytest.raises(OSError, match="No space left"):
        m.run()


def test_context_manager_and_path_output(tmp_path):
    path = tmp_path / "t.jsonl"
    m = Machine.from_guest("exit42")
    with Tracer(m, "jsonl", path) as t:
        m.run()
    assert t.finished and t.out.closed
    objs = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert objs[-1] == {"type": "end", "insns": 3, "reason": "guest exited"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_traces_the_same_instruction_count(fmt):
    out, _ = trace_of(scenario_machine("optimized-6.18"), fmt, count=40)
    if fmt == "text":
        assert len(listing(out)) == 40
    elif fmt == "jsonl":
        assert sum(json.loads(ln)["type"] == "insn" for ln in out.splitlines()) == 40
    elif fmt == "tenet":
        assert len(out.splitlines()) == 40
    else:
        assert json.loads(out)["otherData"]["insns"] == 40


# ----------------------------------------------------------------------------- threads


def test_threads_each_keep_their_own_trace_state(build_c):
    """Threads share the CPU between time slices: each switch is marked, a thread's
    exit does not end the trace, and every thread gets its own Chrome track."""
    exe = build_c("threads.c", "-static", "-pthread", name="threads")
    text, result = trace_of(Machine.from_elf(exe, argv=[exe, "2"]), max_insns=None)
    assert result.exit_code == 0, result
    lines = text.splitlines()
    switches = [ln for ln in lines if re.fullmatch(r"# task \d+ \(threads\) is on the CPU", ln)]
    assert {ln.split()[2] for ln in switches} >= {"1000", "1001", "1002"}
    assert sum("# syscall 60 exit(" in ln for ln in lines) == 2
    assert any(ln.startswith("    # clone: new task 1001 (thread)") for ln in lines)
    assert lines[-2] == "    # syscall 231 exit_group(0x0)"
    assert lines[-1].endswith("(guest exited)")
    # a switched-in task's first line is its own full register set
    i = lines.index(switches[0])
    assert lines[i + 1].startswith("# registers: rax=")
    out, _ = trace_of(Machine.from_elf(exe, argv=[exe, "2"]), "chrome")
    evs = check_chrome(json.loads(out))
    assert {e["tid"] for e in evs} == {1000, 1001, 1002}


# ----------------------------------------------------------------------------- CLI


def test_cli_text_trace_to_stdout_keeps_guest_output_in_place():
    p = cli("trace", "guest:hello")
    out = p.stdout.decode()
    assert p.returncode == 0, p.stderr.decode()
    write = out.index("# syscall 1 write(0x1, 0x402000, 0xd)")
    assert out.index("hello, world\n") > write
    assert out.index("# syscall 1 write returns 0xd") > out.index("hello, world\n")
    assert out.rstrip().endswith("(guest exited)")


@pytest.mark.parametrize("fmt", ["jsonl", "chrome", "tenet"])
def test_cli_formats_to_a_file(fmt, tmp_path):
    path = tmp_path / f"trace.{fmt}"
    p = cli("trace", "--format", fmt, "-o", str(path), "--kernel", "6.18", "guest:fib", "10")
    assert p.returncode == 55, p.stderr.decode()
    data = path.read_text()
    if fmt == "jsonl":
        assert [json.loads(ln) for ln in data.splitlines()][-1]["type"] == "end"
    elif fmt == "chrome":
        check_chrome(json.loads(data))
    else:
        assert all(_TENET.match(ln) for ln in data.splitlines())


def test_cli_machine_readable_trace_on_stdout_moves_guest_output_to_stderr():
    p = cli("trace", "--format", "jsonl", "guest:hello")
    assert p.returncode == 0
    assert [json.loads(ln) for ln in p.stdout.decode().splitlines()][-1]["type"] == "end"
    assert p.stderr == b"hello, world\n"


def test_cli_from_count_and_probe_events(tmp_path):
    path = tmp_path / "t.txt"
    p = cli(
        "trace",
        "--from",
        "fib_loop",
        "--count",
        "12",
        "-o",
        str(path),
        "-e",
        "p:f/loop guest:fib:fib_loop %ax",
        "guest:fib",
        "5",
    )
    assert p.returncode == 5, p.stderr.decode()
    text = path.read_text()
    assert len(listing(text)) == 12
    loop = Machine.from_guest("fib").resolve("fib_loop")
    assert f"\n{loop:016x} <fib_loop>:\n  {loop:x}:\tcc" in text
    ev = events(text)
    assert ev[0].startswith(f"int3 trap: uprobe hit at {loop:#x} <fib_loop>")
    assert ev[1].startswith("ftrace: ") and f"loop: ({loop:#x}) arg1=0x0" in ev[1]
    assert ev[2] == "handler of consumer #1 f/loop returns 0"


@pytest.mark.parametrize(
    "args,fragment",
    [
        (("trace", "--from", "nosuch", "guest:hello"), "unknown symbol 'nosuch'"),
        (("trace", "--format", "xml", "guest:hello"), "invalid choice"),
        (("trace", "--count", "-3", "guest:hello"), "must be 0 or more"),
        (("trace", "-o", "/nonexistent/dir/t.txt", "guest:hello"), "cannot write the trace"),
    ],
    ids=["unknown-symbol", "bad-format", "negative-count", "bad-output"],
)
def test_cli_bad_input_is_one_line(args, fragment):
    assert fragment in one_line_error(cli(*args))
