"""``/proc/PID/status`` and ``/proc/PID/stat`` (fs/proc/array.c: ``proc_pid_status``,
``do_task_stat``) and what they count: a task's state and signals, its thread group, its
mm's sizes (fs/proc/task_mmu.c: ``task_mem``).  :mod:`kernel_model.fs.proc.procfs`
serves them, with the rest of ``/proc``."""

from __future__ import annotations

import os

from kernel_model.include.linux.cpumask import cpulist, cpumask_hex
from kernel_model.kernel.resource import RLIMIT_SIGPENDING

NR_OPEN_DEFAULT = 64  # BITS_PER_LONG: the fd table embedded in files_struct
PF_FORKNOEXEC = 0x40  # forked but has not exec'd
PF_EXITED = 0x4 | 0x8 | 0x8000  # PF_EXITING | PF_POSTCOREDUMP | PF_NOFREEZE (do_exit)
SIGCHLD = 17
SIG_DFL, SIG_IGN = 0, 1
RLIM_INFINITY = (1 << 64) - 1
USER_HZ = 100
NSEC = 1_000_000_000
PAGE_SIZE = 4096


def max_fds(fds) -> int:
    """fdt->max_fds: the embedded table's 64 slots, else what alloc_fdtable sized for
    the highest descriptor in use (a multiple of 128, a power of two).  The kernel's
    table never shrinks; the model sizes it from the descriptors open now."""
    top = max(fds.fds, default=-1)
    if top < NR_OPEN_DEFAULT:
        return NR_OPEN_DEFAULT
    per = 1024 // 8
    n = top // per + 1
    return (1 << (n - 1).bit_length()) * per


def sigset(bits: int) -> str:
    """render_sigset_t: 64 signals as 16 hex digits, the highest first."""
    return f"{bits & (1 << 64) - 1:016x}"


def _sigbits(queue) -> int:
    bits = 0
    for sig in queue:
        bits |= 1 << (sig.signo - 1)
    return bits


def ign_catch(proc) -> tuple[int, int]:
    """collect_sigign_sigcatch: the signals whose handler is SIG_IGN, and those with a
    handler of their own."""
    ign = catch = 0
    for signo, raw in proc.sighand.action.items():
        handler = int.from_bytes(bytes(raw[:8]), "little")
        if handler == SIG_IGN:
            ign |= 1 << (signo - 1)
        elif handler != SIG_DFL:
            catch |= 1 << (signo - 1)
    return ign, catch


def escape_comm(comm: str) -> str:
    """proc_task_name with escaping (status' Name): backslash and newline escaped."""
    return comm.replace("\\", "\\\\").replace("\n", "\\n")


def process_alive(proc) -> bool:
    return proc.exit_result is None


def task_dead(task) -> bool:
    return task.state == "dead" or task.exit_code is not None


def task_has_mm(proc, task) -> bool:
    """Does ``task`` still hold its mm, files and fs_struct?  Not once it has exited: a
    zombie process, or a thread-group leader that exited before its threads (its
    /proc/PID then shows no Vm lines, no descriptors, an empty cmdline)."""
    return process_alive(proc) and not task_dead(task)


def nr_threads(proc) -> int:
    """get_nr_threads: the live threads and the leader, which stays counted as a zombie
    until the whole group is released."""
    return 1 + sum(1 for t in live_threads(proc) if t.tid != proc.pid)


def task_state(task) -> str:
    """get_task_state: R for a runnable task, S for one sleeping in a syscall, D for a
    vfork parent (wait_for_vfork_done sleeps TASK_KILLABLE, an uninterruptible
    state), Z for a dead one (a zombie, or a leader that exited before its threads)."""
    if task.state == "dead" or task.exit_code is not None:
        return "Z (zombie)"
    if task.state != "blocked":
        return "R (running)"
    return "D (disk sleep)" if task.blocked_on == "vfork" else "S (sleeping)"


def leader(machine, proc):
    """The thread-group leader of ``proc`` (tid == tgid), even after it exited."""
    for t in proc.tasks:
        if t.tid == proc.pid:
            return t
    for t in machine.all_tasks:
        if t.tid == proc.pid:
            return t
    return proc.tasks[0] if proc.tasks else None


def live_threads(proc) -> list:
    return [t for t in proc.tasks if t.state != "dead" and t.exit_code is None]


class MmStats:
    """What task_mem and do_task_stat read from an mm: page counts by kind of mapping
    (vm_stat_account's rules) and the executable's code/data bounds (load_elf_binary's
    start_code/end_code/start_data/end_data)."""

    def __init__(self, proc):
        total = exec_ = data = stack = 0
        for v in proc.mem.vmas:
            pages = v.size // PAGE_SIZE
            total += pages
            is_stack = v.name == "[stack]"
            writable = bool(v.prot & 2)
            if is_stack:
                stack += pages
            elif v.prot & 4 and not writable:
                exec_ += pages
            elif writable:
                data += pages
        self.total_vm, self.exec_vm, self.data_vm, self.stack_vm = total, exec_, data, stack
        self.start_code = self.end_code = self.start_data = self.end_data = 0
        exe = proc.exe
        image = getattr(exe, "elf", None)
        if image is not None and getattr(image, "segments", None):
            self._elf_bounds(image, getattr(exe, "load_bias", 0))

    def _elf_bounds(self, image, bias: int) -> None:
        start_code, end_code, start_data, end_data = (1 << 64) - 1, 0, 0, 0
        for seg in image.segments:
            k = seg.vaddr
            if seg.flags & 1 and k < start_code:  # PF_X
                start_code = k
            start_data = max(start_data, k)
            k = seg.vaddr + seg.filesz
            if seg.flags & 1 and end_code < k:
                end_code = k
            end_data = max(end_data, k)
        if start_code == (1 << 64) - 1:
            start_code = 0
        self.start_code, self.end_code = start_code + bias, end_code + bias
        self.start_data, self.end_data = start_data + bias, end_data + bias

    def text_lib_kb(self) -> tuple[int, int]:
        """task_mem's VmExe/VmLib split of the executable mappings."""
        text = _page_up(self.end_code) - (self.start_code & ~(PAGE_SIZE - 1))
        text = min(max(text, 0), self.exec_vm * PAGE_SIZE)
        return text >> 10, (self.exec_vm * PAGE_SIZE - text) >> 10


def _page_up(x: int) -> int:
    return (x + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1)


def _kb(label: str, value: int) -> str:
    """seq_put_decimal_ull_width(m, label, value, 8) then " kB"."""
    return f"{label}{value:>8} kB\n"


# ----------------------------------------------------------------------------- texts
def status_text(machine, proc, task) -> str:
    """proc_pid_status for ``task`` of ``proc``."""
    cred = task.cred
    alive, has_mm = process_alive(proc), task_has_mm(proc, task)
    lines = [f"Name:\t{escape_comm(task.comm)}\n"]
    if has_mm:  # task_umask: no fs_struct after exit
        lines.append(f"Umask:\t{proc.fs.umask:04o}\n")
    lines += [
        f"State:\t{task_state(task)}\n",
        f"Tgid:\t{proc.pid}\n",
        "Ngid:\t0\n",
        f"Pid:\t{task.tid}\n",
        f"PPid:\t{proc.ppid if alive or proc.parent else 0}\n",
        "TracerPid:\t0\n",
        f"Uid:\t{cred.uid}\t{cred.euid}\t{cred.suid}\t{cred.fsuid}\n",
        f"Gid:\t{cred.gid}\t{cred.egid}\t{cred.sgid}\t{cred.fsgid}\n",
        f"FDSize:\t{max_fds(proc.files) if has_mm else 0}\n",
        "Groups:\t" + " ".join(str(g) for g in cred.groups) + " \n",
        f"NStgid:\t{proc.pid}\n",
        f"NSpid:\t{task.tid}\n",
        f"NSpgid:\t{proc.pgid}\n",
        "Kthread:\t0\n",
    ]
    if has_mm:
        mm = MmStats(proc)
        text_kb, lib_kb = mm.text_lib_kb()
        lines += [
            _kb("VmSize:\t", mm.total_vm * 4),
            _kb("VmLck:\t", 0),
            _kb("VmPin:\t", 0),
            _kb("VmData:\t", mm.data_vm * 4),
            _kb("VmStk:\t", mm.stack_vm * 4),
            _kb("VmExe:\t", text_kb),
            _kb("VmLib:\t", lib_kb),
            _kb("VmSwap:\t", 0),
            _kb("HugetlbPages:\t", 0),
            "CoreDumping:\t0\n",
            "untag_mask:\t0xffffffffffffffff\n",
        ]
    ign, catch = ign_catch(proc)
    nbits = machine.scheduler.nr_cpu_ids
    cpus = task.cpus_mask & ((1 << nbits) - 1)
    queued = sum(len(t.pending_signals) for t in machine.tasks) + sum(
        len(p.signal.shared_pending) for p in machine.processes
    )
    lines += [
        f"Threads:\t{nr_threads(proc)}\n",
        f"SigQ:\t{queued}/{machine.syscalls.rlimits_of(proc)[RLIMIT_SIGPENDING][0]}\n",
        f"SigPnd:\t{sigset(_sigbits(task.pending_signals))}\n",
        f"ShdPnd:\t{sigset(_sigbits(proc.signal.shared_pending))}\n",
        f"SigBlk:\t{sigset(task.sigmask)}\n",
        f"SigIgn:\t{sigset(ign)}\n",
        f"SigCgt:\t{sigset(catch)}\n",
        f"Cpus_allowed:\t{cpumask_hex(cpus, nbits)}\n",
        f"Cpus_allowed_list:\t{cpulist(cpus)}\n",
    ]
    return "".join(lines)


def stat_text(machine, proc, task, whole: bool) -> str:
    """do_task_stat: /proc/PID/stat (``whole``) or /proc/PID/task/TID/stat."""
    alive = process_alive(proc)
    state = task_state(task)[0]
    threads = nr_threads(proc)
    ign, catch = ign_catch(proc)
    ctty = _ctty(machine)
    tty_nr, tty_pgrp = (ctty, machine.main_process.pgid) if ctty else (0, -1)
    flags = PF_FORKNOEXEC if task is not machine.all_tasks[0] else 0
    if state == "Z":
        flags |= PF_EXITED
    mm = MmStats(proc) if task_has_mm(proc, task) else None
    not_running = 1 if state != "R" and (not whole or threads < 2) else 0  # wchan
    if task.tid != proc.pid:
        exit_signal = -1  # a thread (CLONE_THREAD)
    else:
        exit_signal = proc.exit_signal if proc.parent is not None else SIGCHLD
    fields = [
        task.tid,
        f"({task.comm})",
        state,
        proc.ppid,
        proc.pgid,
        0,
        tty_nr,
        tty_pgrp,
        flags,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        20,
        0,
        threads,
        0,
        task.start_time_ns // (NSEC // USER_HZ),
        mm.total_vm * PAGE_SIZE if mm else 0,
        0,
        RLIM_INFINITY,
        mm.start_code if mm else 0,
        mm.end_code if mm else 0,
        proc.start_stack if mm else 0,
        0,
        0,
        _sigbits(task.pending_signals) & 0x7FFFFFFF,
        task.sigmask & 0x7FFFFFFF,
        ign & 0x7FFFFFFF,
        catch & 0x7FFFFFFF,
        not_running,
        0,
        0,
        exit_signal,
        task.cpu,
        0,
        0,
        0,
        0,
        0,
    ]
    if mm:
        fields += [
            mm.start_data,
            mm.end_data,
            proc.brk_start,
            proc.arg_start,
            proc.arg_end,
            proc.env_start,
            proc.env_end,
        ]
    else:
        fields += [0] * 7
    fields.append(_exit_code(proc) if not alive else 0)
    return " ".join(str(f) for f in fields) + "\n"


def _exit_code(proc) -> int:
    """task->exit_code of a zombie: the wait status (code << 8, or the signal)."""
    r = proc.exit_result
    sig = getattr(r, "signal", None)
    if getattr(r, "reason", "") == "signal" and sig:
        return sig
    return (getattr(r, "exit_code", 0) or 0) << 8


def _ctty(machine) -> int:
    """tty_devnum of the controlling terminal, new_encode_dev'd (0: none)."""
    devfs = getattr(machine.syscalls, "devfs", None)
    fd = getattr(getattr(devfs, "ctty", None), "fd", None)
    if fd is None:
        return 0
    try:
        rdev = os.fstat(fd).st_rdev
    except OSError:
        return 0
    major, minor = os.major(rdev), os.minor(rdev)
    return (minor & 0xFF) | (major << 8) | ((minor & ~0xFF) << 12)
