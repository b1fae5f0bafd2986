"""The uprobes side of execve: what exec does to the exec'ing task and to probes.

- A probe registered before the exec on a file the new image maps is installed in the
  new mm (uprobe_mmap of load_elf_binary's mappings) and fires there: on the same
  program exec'd again, and on another program registered by path before anything
  mapped it.
- ftrace lines name the task by its comm after the exec (the new file's basename).
- The task's pending return instances are freed at exec (mm_release ->
  uprobe_free_utask): a uretprobe on the libc ``execve`` wrapper whose call never
  returns reports no return, and the first hit in the new program starts with none.
- The new mm starts without the old [uprobes] XOL page.
"""

from __future__ import annotations

import pytest
from guest_compare import BUSYBOX, fresh_dir, model_machine, require

from emu import Machine
from kernel_model.fs.elf import load_elf_file
from kernel_model.kernel.events.uprobes import UprobeConsumer


@pytest.fixture(scope="module")
def exe(build_c):
    return build_c("exec.c", "-static", name="exec")


def machine(exe, tmp_path, section="args"):
    return model_machine([exe, section], fresh_dir(tmp_path / "w", {}))


def test_probe_on_the_exec_d_program_fires_in_the_new_mm(exe, tmp_path):
    """show_main runs only in the child after its execve of /proc/self/exe."""
    m = machine(exe, tmp_path)
    hits = []
    m.uprobes.register("show_main", handler=lambda ctx: hits.append((ctx.task.process.pid, ctx.task.comm)))
    r = m.run(timeout=60)
    assert r.exit_code == 0, r.describe()
    child = [p for p in m.all_tasks if p.process is not m.main_process]
    assert hits == [(child[0].process.pid, "exe")], f"expected one hit in the exec'd child, got {hits}"


def test_ftrace_line_shows_the_comm_after_exec(exe, tmp_path):
    m = machine(exe, tmp_path)
    ev = m.uprobes.add_event(f"p:g/show {exe}:show_main")
    r = m.run(timeout=60)
    assert r.exit_code == 0, r.describe()
    lines = m.uprobes.trace.lines_of(ev)
    assert len(lines) == 1 and lines[0].lstrip().startswith("exe-"), f"expected one line of task 'exe', got {lines}"


def test_probe_registered_by_path_before_exec_fires_in_another_program(tmp_path):
    """/usr/bin/env is mapped by nobody when the probe is registered: the inode is the
    key, and the exec installs the breakpoint (at its entry point)."""
    target = "/usr/bin/env"
    m = model_machine([require(BUSYBOX), "sh", "-c", f"{target} -i X=1"], fresh_dir(tmp_path / "w", {}))
    f = m.mapped_file(target)
    image = load_elf_file(target)
    off = image.vaddr_to_offset(image.entry)
    hits = []
    m.uprobes.uprobe_register(f, off, UprobeConsumer(handler=lambda ctx: hits.append(ctx.task.comm)))
    r = m.run(timeout=60)
    assert (r.exit_code, r.stdout) == (0, b"X=1\n"), r.describe()
    assert hits == ["env"], f"expected one hit of comm 'env', got {hits}"


@pytest.mark.parametrize("kernel", ["6.9", "latest"])
def test_pending_return_instance_is_freed_at_exec(exe, tmp_path, kernel):
    """The child's call of execve never returns: its return instance goes with the
    utask; show_main's hit in the new program finds no return instance pending."""
    fresh_dir(tmp_path / "w", {})
    m = Machine.from_elf(exe, argv=[exe, "args"], grant_dir=str(tmp_path / "w"), kernel=kernel)
    returns, pending = [], []
    m.uprobes.register("execve", handler=lambda ctx: None, ret_handler=lambda ctx: returns.append(1))
    m.uprobes.register(
        "show_main", handler=lambda ctx: pending.append(len(ctx.task.utask.return_instances) if ctx.task.utask else 0)
    )
    r = m.run(timeout=60)
    assert r.exit_code == 0, r.describe()
    assert (returns, pending) == ([], [0]), f"expected no return and 0 pending, got {returns}, {pending}"
    c = m.counters
    assert c.ri_freed == c.ri_allocated, f"allocated {c.ri_allocated} return instances, freed {c.ri_freed}"


def test_new_mm_has_no_xol_area_of_the_old_one(exe, tmp_path):
    """The child single-steps execve's first instruction out of line (an [uprobes]
    page in its mm, seen by a probe on the second instruction); the new program's mm
    starts without it (show_main's hit, before its own XOL step)."""
    from capstone import CS_ARCH_X86, CS_MODE_64, Cs

    m = machine(exe, tmp_path)
    at = m.resolve("execve")
    first = next(Cs(CS_ARCH_X86, CS_MODE_64).disasm(m.mem.read(at, 16), at, 1))
    seen = []

    def xol_pages(ctx):
        return [v.name for v in ctx.task.process.mem.vmas if v.name == "[uprobes]"]

    m.uprobes.register("execve", handler=lambda ctx: None)
    m.uprobes.register(at + first.size, handler=lambda ctx: seen.append(("old mm", xol_pages(ctx))))
    m.uprobes.register("show_main", handler=lambda ctx: seen.append(("new mm", xol_pages(ctx))))
    r = m.run(timeout=60)
    assert r.exit_code == 0, r.describe()
    assert seen == [("old mm", ["[uprobes]"]), ("new mm", [])], f"got {seen}"


def test_execve_single_stepped_out_of_line_runs_the_new_program(exe, tmp_path):
    """A probe on the ``syscall`` of libc's execve: the syscall runs from the XOL slot
    with TF set and execs; start_thread's fresh flags have no TF, so the new program
    runs (as on a real 6.18 with the same tracefs probe: the child exits 3)."""
    from capstone import CS_ARCH_X86, CS_MODE_64, Cs

    m = machine(exe, tmp_path)
    at = m.resolve("execve")
    insns = list(Cs(CS_ARCH_X86, CS_MODE_64).disasm(m.mem.read(at, 16), at, 2))
    assert insns[1].mnemonic == "syscall", f"execve starts {[i.mnemonic for i in insns]}"
    hits = []
    m.uprobes.register(insns[1].address, handler=lambda ctx: hits.append(ctx.task.comm))
    r = m.run(timeout=60)
    assert (r.exit_code, hits) == (0, ["exec"]), r.describe()
    assert r.stdout.endswith(b"child exited 3\n"), bytes(r.stdout)
