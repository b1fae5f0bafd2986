"""``uprobe-emu sweep``: every site of a program probed in batches, only diverging
batches bisected, and every divergence either a known kernel-faithful exception or an
error of the emulation (which a deliberately wrong emulation shows it finds, site by
site)."""

from __future__ import annotations

import pytest
from sweep_helpers import findings, guest_program, sweep, unclassified

from emu.frontends.sweep.bisect import bisect
from emu.frontends.sweep.case import Case, CaseRunner, Program
from emu.frontends.sweep.runners import PoolRunner, SerialRunner
from emu.frontends.sweep.sites import enumerate_sites
from emu.machine import Machine
from guest_programs import GUESTS
from kernel_model.arch.x86.kernel import uprobes as arch_x86
from kernel_model.arch.x86.kernel.uprobes import arch_uprobe_analyze_insn
from kernel_model.errors import RegistrationError

# ----------------------------------------------------------------------------- bisection


@pytest.mark.parametrize("n,batch,bad", [(100, 100, {37}), (100, 25, {0, 99}), (64, 64, {1, 2, 3, 40}), (7, 3, set())])
def test_bisection_finds_exactly_the_bad_sites(n, batch, bad):
    res = bisect(n, batch, lambda groups: [("bad" if bad & set(g) else None, None) for g in groups])
    assert sorted(f.sites[0] for f in res.found) == sorted(bad), (
        f"expected {sorted(bad)}, found {[f.sites for f in res.found]}"
    )
    assert all(len(f.sites) == 1 and not f.interaction for f in res.found)


def test_a_clean_program_costs_one_run_per_batch():
    res = bisect(1000, 250, lambda groups: [(None, None)] * len(groups))
    assert (res.batches, res.runs) == (4, 4), f"expected 4 batches in 4 runs, got {res}"


def test_bisection_splits_hit_sites_from_the_others_first():
    calls = []

    def evaluate(groups):
        calls.extend(groups)
        return [("bad" if 5 in g else None, [g.index(5)] if 5 in g else []) for g in groups]

    res = bisect(1000, 1000, evaluate)
    assert [f.sites for f in res.found] == [(5,)]
    assert res.runs == 3, f"a batch, its hit site and the 999 others: expected 3 runs, got {res.runs}"


def test_two_probes_that_only_diverge_together_are_an_interaction():
    res = bisect(8, 8, lambda groups: [("x" if {2, 6} <= set(g) else None, None) for g in groups])
    assert [(f.sites, f.interaction) for f in res.found] == [((0, 1, 2, 3, 4, 5, 6, 7), True)]


# ----------------------------------------------------------------------------- sites


def test_insn_sites_are_the_boundaries_of_text_with_bytes_and_disassembly():
    m = Machine.from_guest("uprobe_targets", argv=["uprobe_targets", "1"])
    sites = {s.symbol: s for s in enumerate_sites(m, "insn", program=m.process.exe.path)}
    nop5 = sites["target_nop5"]
    assert (nop5.raw, nop5.text, nop5.kind) == (bytes.fromhex("0f1f440000"), "nop dword ptr [rax + rax]", "p")
    assert nop5.vaddr == m.resolve("target_nop5") and nop5.offset == nop5.vaddr - 0x400000
    assert sites["target_push+0x1"].text == "mov rbp, rsp"


def test_func_and_ret_sites_are_one_per_function():
    m = Machine.from_guest("uprobe_targets", argv=["uprobe_targets", "1"])
    funcs = enumerate_sites(m, "func", program=m.process.exe.path)
    rets = enumerate_sites(m, "ret", program=m.process.exe.path)
    assert [s.vaddr for s in funcs] == [s.vaddr for s in rets]
    assert {s.kind for s in funcs} == {"p"} and {s.kind for s in rets} == {"r"}
    assert len({s.vaddr for s in funcs}) == len(funcs)


def test_a_site_file_lists_offsets_and_symbols(tmp_path):
    m = Machine.from_guest("uprobe_targets", argv=["uprobe_targets", "1"])
    f = tmp_path / "sites"
    f.write_text("# push and its return\ntarget_push\ntarget_push%return\n0x1083  # nop5\n")
    sites = enumerate_sites(m, str(f), program=m.process.exe.path)
    assert [(s.symbol, s.kind) for s in sites] == [("target_push", "p"), ("target_push", "r"), ("target_nop5", "p")]


# ----------------------------------------------------------------------------- corpora


@pytest.mark.parametrize("kernel", ["6.18", "latest"])
@pytest.mark.parametrize("guest", sorted(GUESTS))
def test_builtin_guest_sweep_finds_only_kernel_faithful_divergences(guest, kernel):
    res = sweep(guest_program(guest), kernel)
    assert res.sites and res.runs >= 1
    assert not unclassified(res), f"unclassified divergences: {unclassified(res)}"


def test_the_nop5_red_zone_clobber_is_found_on_6_18_and_gone_with_nop10():
    on_618 = findings(sweep(guest_program("uprobe_targets"), "6.18"))
    on_73 = findings(sweep(guest_program("uprobe_targets"), "7.3"))
    nop5 = "guest:uprobe_targets:0x1083"
    assert [f[:2] for f in on_618 if f[0] == "nop5-redzone"] == [("nop5-redzone", (nop5,))]
    assert "[stack]" in [f for f in on_618 if f[0] == "nop5-redzone"][0][2]
    assert not [f for f in on_73 if f[0] == "nop5-redzone"], on_73


def test_a_probed_exit_syscall_is_classified_with_the_slot_rip_it_leaves():
    res = sweep(guest_program("exit42"), "6.18")
    [d] = res.divergences
    assert d.cls == "syscall-xol" and d.sites[0].raw == b"\x0f\x05"
    assert "rip reference" in d.divergence.first and "probed 0x7fffffffe0" in d.divergence.first


@pytest.mark.parametrize("flavour", ["-static", "-dynamic"])
def test_gcc_guest_sweep_finds_only_kernel_faithful_divergences(build_c, flavour):
    exe = build_c("hello.c", *([flavour] if flavour == "-static" else []))
    prog = Program.of(exe, [exe, "one", "two"])
    # the static program: every function entry; the dynamic one: every boundary of its
    # own text, and every function entry of ld.so and libc
    modes = [("func", False)] if flavour == "-static" else [("insn", False), ("func", True)]
    for mode, libraries in modes:
        res = sweep(prog, "6.18", mode=mode, libraries=libraries)
        assert res.reference == "exit 7" and len(res.sites) > 100
        assert not unclassified(res), f"{mode}: unclassified divergences: {unclassified(res)}"
        if libraries:
            paths = {s.path for s in res.sites}
            assert any("libc.so" in p for p in paths) and any("ld-linux" in p for p in paths), paths


def test_a_dynamic_program_probed_in_ld_so_before_its_mmaps_sees_them_a_page_lower(build_c):
    exe = build_c("hello.c")
    res = sweep(Program.of(exe, [exe]), "6.18", site_specs=["/lib64/ld-linux-x86-64.so.2:_dl_catch_exception"])
    [d] = res.divergences
    assert d.cls == "xol-area-layout" and d.divergence.tag == "mmap-lower"
    assert d.divergence.first.startswith("syscall #") and " mmap(" in d.divergence.first


# ----------------------------------------------------------------------------- a wrong emulation


def _mis_emulated_push(monkeypatch):
    """push %reg emulated with the wrong value (one more): an emulation bug."""

    def wrong(au, regs, mem):
        if not arch_x86.emulate_push_stack(regs, mem, (getattr(regs, au.push_reg) + 1) & 0xFFFFFFFFFFFFFFFF):
            return False
        regs.rip = (regs.rip + au.ilen) & 0xFFFFFFFFFFFFFFFF
        return True

    ops = arch_x86.UprobeXolOps("wrong_push_xol_ops", emulate=wrong)
    monkeypatch.setitem(arch_x86._SETUP_OPS, "push", ops)


def _executed_push_sites(program, kernel):
    """The push-class sites a clean probed run hits (the case's own hit record)."""
    m, _ = CaseRunner().execute(Case(program, kernel))
    sites = enumerate_sites(m, "insn", program=m.process.exe.path)
    result = CaseRunner().run(Case(program, kernel, (), tuple(s.probe for s in sites)))
    out = set()
    for i in result.hit:
        try:
            if arch_uprobe_analyze_insn(sites[i].raw).kind == "push":
                out.add(sites[i].key)
        except RegistrationError:
            pass
    return out


@pytest.mark.parametrize(
    "guest,argv", [("uprobe_targets", ["uprobe_targets", "4"]), ("bench_trigger", ["bench_trigger", "3", "3", "2"])]
)
def test_a_wrong_push_emulation_is_bisected_to_exactly_the_executed_push_sites(monkeypatch, guest, argv):
    prog = guest_program(guest, argv)
    expected = _executed_push_sites(prog, "6.18")
    assert expected, "the guest runs no push %reg"
    clean = sweep(prog, "6.18")
    _mis_emulated_push(monkeypatch)
    res = sweep(prog, "6.18")
    found = {d.sites[0].key for d in res.unclassified}
    assert found == expected, f"expected the push sites {sorted(expected)}, found {sorted(found)}"
    assert all(len(d.sites) == 1 and d.cls == "unclassified" for d in res.unclassified)
    assert res.runs < len(res.sites), f"{res.runs} runs for {len(res.sites)} sites: not batched"
    assert set(findings(clean)) <= set(findings(res)), "the kernel-faithful findings stay"


def test_the_pool_finds_what_the_serial_runner_finds(monkeypatch):
    prog = guest_program("uprobe_targets")
    _mis_emulated_push(monkeypatch)  # the forked workers inherit it
    serial = sweep(prog, "6.18", runner=SerialRunner())
    pool = sweep(prog, "6.18", runner=PoolRunner(2))
    assert findings(pool) == findings(serial) and len(serial.unclassified) == 1
    assert (serial.batches, pool.batches) == (1, 2), "the pool shares the sites out over 2 workers"
