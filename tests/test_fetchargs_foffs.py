"""``@+OFFSET`` fetchargs read where the kernel reads: ``translate_user_vaddr()``
(kernel/trace/trace_uprobe.c, FETCH_OP_FOFFS) adds OFFSET to ``bp_addr - tu->offset``,
the address file offset 0 would have if the whole file were mapped like the probed
page.  A segment mapped with a different vaddr - offset delta (the RW segment of
busybox and of most gcc executables, PIE or not) is therefore not where the kernel reads.
"""

from __future__ import annotations

import pytest
from test_hostdiff import diff, needs_tracefs

from emu import Machine
from kernel_model.fs.elf import load_elf_file

BUSYBOX = "/bin/busybox"
U32 = 0xFFFFFFFF


@pytest.fixture(scope="module")
def pie(build_c):
    return build_c("foffs.c", "-static-pie")


def rw_segment(image):
    return next(s for s in image.segments if s.flags & 2)


def text_segment(image):
    return next(s for s in image.segments if s.flags & 1)


def target(name: str, build_c):
    """(path, argv, probe file offset, @+OFFSETs in the RW segment) of a test target."""
    if name == "busybox":
        image = load_elf_file(BUSYBOX)
        rw = rw_segment(image)
        return (
            BUSYBOX,
            [BUSYBOX, "true"],
            image.vaddr_to_offset(image.entry),
            [rw.offset, rw.offset + 0x1000, rw.offset + rw.filesz - 4],
        )
    path = build_c("foffs.c", "-static-pie")
    image = load_elf_file(path)
    counter = image.vaddr_to_offset(image.resolve("counter").value)
    return path, [path], image.vaddr_to_offset(image.resolve("probed").value), [rw_segment(image).offset, counter]


def run_probe(path, argv, kind, probe_off, offs):
    """One event with `@+OFF:x32` per offset; at the hit, also read the words at
    bp_addr - probe offset + OFF.  Returns (machine, event, [(kernel address, word)])."""
    m = Machine.from_elf(path, argv=argv)
    seen = []

    def at_hit(ctx):
        bp_addr = ctx.func if ctx.is_return else ctx.vaddr
        for off in offs:
            addr = bp_addr - probe_off + off
            try:
                word = int.from_bytes(ctx.machine.mem.read_user(addr, 4), "little")
            except Exception:
                word = 0  # copy_from_user() failed: zero-filled
            seen.append((addr, word))

    args = " ".join(f"@+{o:#x}:x32" for o in offs)
    ev = m.uprobes.add_event(f"{kind}:t/e {path}:{probe_off:#x} {args}", programs=[at_hit])
    r = m.run()
    assert r.reason == "exit", r.describe()
    return m, ev, seen


def arg_values(line: str) -> list[int]:
    return [int(w.split("=", 1)[1], 0) for w in line.split(": ", 1)[1].split() if "=" in w]


@pytest.mark.parametrize("name", ["busybox", "static-pie"])
def test_the_targets_have_a_data_segment_with_another_delta(name, build_c):
    image = load_elf_file(target(name, build_c)[0])
    text, rw = text_segment(image), rw_segment(image)
    assert text.vaddr - text.offset != rw.vaddr - rw.offset, (
        "the test needs a data segment mapped with a different vaddr - offset than the text"
    )


@pytest.mark.parametrize("name,kind", [("busybox", "p"), ("static-pie", "p"), ("static-pie", "r")])
def test_foffs_reads_at_the_probed_mappings_base_plus_offset(name, kind, build_c):
    path, argv, probe_off, offs = target(name, build_c)
    m, ev, seen = run_probe(path, argv, kind, probe_off, offs)
    image = load_elf_file(path)
    bias = m.load_bias(m.process.exe)
    for (addr, _), off in zip(seen, offs):
        assert addr != bias + image.offset_to_vaddr(off), (
            f"@+{off:#x}: the kernel's address is the segment's own; nothing to test"
        )
    (line,) = ev.lines
    assert arg_values(line) == [w for _, w in seen], (
        f"expected the words at {[hex(a) for a, _ in seen]}: {[hex(w) for _, w in seen]}; got {line!r}"
    )


def test_foffs_of_a_changed_variable_is_not_its_live_value(pie):
    """`counter` is rewritten by main(); @+<its file offset> does not see the new value."""
    image = load_elf_file(pie)
    off = image.vaddr_to_offset(image.resolve("counter").value)
    m, ev, seen = run_probe(pie, [pie], "p", image.vaddr_to_offset(image.resolve("probed").value), [off])
    live = int.from_bytes(m.mem.read(m.load_bias(m.process.exe) + image.resolve("counter").value, 4), "little")
    assert live == 0xC0FFEE01
    assert arg_values(ev.lines[0]) == [seen[0][1]] and seen[0][1] != live


def test_foffs_in_the_text_segment_reads_the_code_bytes(pie):
    """Inside the probed segment both rules agree: OFFSET is the code there."""
    image = load_elf_file(pie)
    probe_off = image.vaddr_to_offset(image.resolve("probed").value)
    off = probe_off + 1  # past the int3 the probe wrote
    m, ev, _ = run_probe(pie, [pie], "p", probe_off, [off])
    assert arg_values(ev.lines[0]) == [int.from_bytes(image.data[off : off + 4], "little")]


def test_foffs_past_every_mapping_prints_zero_like_a_faulting_copy(pie):
    """copy_from_user() of an unmapped address zero-fills: the kernel prints 0."""
    image = load_elf_file(pie)
    probe_off = image.vaddr_to_offset(image.resolve("probed").value)
    m, ev, _ = run_probe(pie, [pie], "p", probe_off, [0x7F0000000000])
    assert arg_values(ev.lines[0]) == [0]


@needs_tracefs
@pytest.mark.parametrize("where", ["rw", "rodata"])
def test_foffs_agrees_with_the_host_kernel_on_a_static_pie(pie, where):
    guest = pie
    image = load_elf_file(guest)
    rw = rw_segment(image)
    off = {"rw": rw.offset, "rodata": image.vaddr_to_offset(image.resolve("rodata_val").value)}[where]
    counter = image.vaddr_to_offset(image.resolve("counter").value)
    probed = image.vaddr_to_offset(image.resolve("probed").value)
    native, model, problems = diff(
        guest, [f"p {guest}:{probed:#x} @+{off:#x}:x32 @+{counter:#x}:x32", f"r {guest}:{probed:#x} @+{off:#x}:x32"]
    )
    assert len(native.events) == 2, native.events
    assert problems == [], problems


@needs_tracefs
def test_foffs_agrees_with_the_host_kernel_on_busybox():
    image = load_elf_file(BUSYBOX)
    rw = rw_segment(image)
    entry = image.vaddr_to_offset(image.entry)
    offs = [rw.offset, rw.offset + 0x1000, rw.offset + rw.filesz - 4]
    args = " ".join(f"@+{o:#x}:x32" for o in offs)
    native, model, problems = diff(BUSYBOX, [f"p {BUSYBOX}:{entry:#x} {args}"], ["true"])
    assert len(native.events) == 1, native.events
    assert problems == [], problems
