"""execve and execveat as fs/exec.c, binfmt_script and binfmt_elf do them.

``do_execveat_common`` in order: the file opened through the guest's view
(``do_open_execat``: MAY_EXEC on a regular file), argv and envp counted and copied from
guest memory with the kernel's limits (MAX_ARG_STRLEN, MAX_ARG_STRINGS, a quarter of the
8 MiB stack rlimit), then ``exec_binprm``: ``#!`` scripts rewrite the arguments
(``load_script``) up to five interpreters deep, an ELF (static or with PT_INTERP) is
checked, and an unknown format is ENOEXEC.  Every error up to there is an errno and the
process goes on.

``begin_new_exec`` is the point of no return: the other threads die (``de_thread``: the
exec'ing thread takes the leader's pid), the task gets a new address space (a new
Unicorn instance: the old one goes unless a vfork parent still owns it), the vfork
parent is released (``mm_release``), the descriptor table is unshared and FD_CLOEXEC
descriptors closed, caught signals go back to SIG_DFL (ignored ones stay ignored), the
alternate signal stack is disabled, the blocked mask and pending signals stay, ``comm``
becomes the file's basename, robust list, rseq and clear_child_tid are dropped, and the
FPU starts from its initial state (the new Unicorn's).  Credentials are kept: set-user-ID
and set-group-ID bits are not honoured (no privilege changes are modeled), so AT_SECURE
stays 0.  Noexec mounts are not modeled.  An error after that point kills the process
with SIGSEGV, as ``bprm_execve`` forces it.
"""

from __future__ import annotations

import errno as E
import os
import stat as S
from array import array
from dataclasses import dataclass

from kernel_model.arch.x86.kernel.signal import SIG_IGN, parse_sigaction
from kernel_model.errors import EmuError
from kernel_model.fs.binfmt_elf import load_image
from kernel_model.fs.elf import MAX_ELF_FILE_SIZE, parse_elf
from kernel_model.fs.namei import MAY_EXEC
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.include.uapi.linux.fcntl import AT_EMPTY_PATH, AT_FDCWD, AT_SYMLINK_NOFOLLOW
from kernel_model.kernel.kernel_base import KernelBase
from kernel_model.kernel.signals import RunResult
from kernel_model.mm.mm_types import PAGE_SIZE, GuestFault, MappedFile
from kernel_model.trace.events import Exec

MAX_ARG_STRLEN = 32 * PAGE_SIZE  # include/uapi/linux/binfmts.h
MAX_ARG_STRINGS = 0x7FFFFFFF
ARG_MAX = 32 * PAGE_SIZE  # bprm_stack_limits' floor
STK_LIM = 8 << 20  # _STK_LIM
RLIMIT_STACK_CUR = 8 << 20  # what prlimit64 answers for RLIMIT_STACK
BINPRM_BUF_SIZE = 256
MAX_BINPRM_DEPTH = 5  # exec_binprm: "if (depth > 5) return -ELOOP"
# bprm_stack_limits: a quarter of the stack rlimit, at most 3/4 of _STK_LIM, at least ARG_MAX
ARG_MAX_STRING_SPACE = max(min(STK_LIM // 4 * 3, RLIMIT_STACK_CUR // 4), ARG_MAX)
SIGSEGV = 11
ELFMAG = b"\x7fELF"


@dataclass
class ExecFile:
    """An opened executable (``struct file`` of open_exec): the guest path it was
    reached by, the host file behind it and the first BINPRM_BUF_SIZE bytes."""

    guest_path: str
    host_path: str
    st: os.stat_result
    buf: bytes
    data: bytes = b""  # the whole file (up to MAX_ELF_FILE_SIZE)


@dataclass
class Binprm:
    """``struct linux_binprm``: the strings the new program gets and the file chain."""

    filename: str  # bprm->filename: what AT_EXECFN and comm come from
    argv: list[bytes]
    envp: list[bytes]
    room: int  # bytes left above bprm->argmin
    file: ExecFile  # the file being executed (an interpreter after a #! line)
    comm_from_dentry: bool = False  # an empty name (AT_EMPTY_PATH): comm is the file's name
    interp: str = ""  # bprm->interp: the script path a #! line gets

    def take(self, s: bytes) -> int:
        """copy_string_kernel/copy_strings' bookkeeping of one string: E2BIG past
        MAX_ARG_STRLEN or below argmin, else 0."""
        n = len(s) + 1
        if n > MAX_ARG_STRLEN or n > self.room:
            return neg(E.E2BIG)
        self.room -= n
        return 0


def _read_up_to(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes of a host file from its start (a file growing meanwhile
    cannot make the read unbounded)."""
    chunks, n = [], 0
    while n < limit:
        chunk = os.pread(fd, min(1 << 20, limit - n), n)
        if not chunk:
            break
        chunks.append(chunk)
        n += len(chunk)
    return b"".join(chunks)


def _spacetab(c: int) -> bool:
    return c in (0x20, 0x09)


def _next_non_spacetab(buf: bytes, first: int, last: int) -> int | None:
    for i in range(first, last):
        if not _spacetab(buf[i]):
            return i
    return None


def _next_terminator(buf: bytes, first: int, last: int) -> int | None:
    for i in range(first, last):
        if _spacetab(buf[i]) or buf[i] == 0:
            return i
    return None


def parse_shebang(head: bytes) -> tuple[bytes, bytes | None] | int:
    """load_script's parse of the ``#!`` line in the first BINPRM_BUF_SIZE bytes
    (zero-padded, as bprm->buf is): (interpreter, optional argument) or -ENOEXEC.
    The argument is everything after the interpreter name up to the end of the line,
    trailing blanks trimmed; a line longer than the buffer is refused unless the
    interpreter name ends inside it."""
    buf = head[:BINPRM_BUF_SIZE].ljust(BINPRM_BUF_SIZE, b"\0")
    if buf[:2] != b"#!":
        return neg(E.ENOEXEC)
    buf_end = BINPRM_BUF_SIZE - 1
    i_end = None
    for i in range(BINPRM_BUF_SIZE):  # strnchr: stops at a NUL
        if buf[i] == 0:
            break
        if buf[i] == 0x0A:
            i_end = i
            break
    if i_end is None:
        i_end = _next_non_spacetab(buf, 2, buf_end)
        if i_end is None or _next_terminator(buf, i_end, buf_end) is None:
            return neg(E.ENOEXEC)  # only blanks, or a truncated name
        i_end = buf_end
    while _spacetab(buf[i_end - 1]):
        i_end -= 1
    i_name = _next_non_spacetab(buf, 2, i_end)
    if i_name is None or i_name == i_end:
        return neg(E.ENOEXEC)
    i_arg = None
    i_sep = _next_terminator(buf, i_name, i_end)
    if i_sep is not None and buf[i_sep] != 0:
        i_arg = _next_non_spacetab(buf, i_sep, i_end)
    line = buf[:i_end] + b"\0"

    def cstr(at: int) -> bytes:
        return line[at : line.index(b"\0", at)]

    name = cstr(i_name) if i_sep is None else line[i_name:i_sep].split(b"\0")[0]
    return name, (cstr(i_arg) if i_arg is not None else None)


class ExecSyscalls:
    """execve(59) and execveat(322)."""

    def __init__(self, sc):
        self.m = sc.m
        self.vfs = sc.vfs
        self.namei = sc.namei

    @syscall(59, "execve")
    def sys_execve(self, task, regs, filename, argv, envp, *_):
        return self.do_execveat(task, AT_FDCWD, filename, argv, envp, 0)

    @syscall(322, "execveat")
    def sys_execveat(self, task, regs, dirfd, filename, argv, envp, flags, *_):
        return self.do_execveat(task, dirfd, filename, argv, envp, flags)

    # -- do_execveat_common ---------------------------------------------------------
    def do_execveat(self, task, dirfd: int, filename: int, argv: int, envp: int, flags: int):
        dirfd = dirfd & 0xFFFFFFFF
        dirfd = dirfd - (1 << 32) if dirfd >> 31 else dirfd
        flags &= 0xFFFFFFFF
        if flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
            return neg(E.EINVAL)
        name = self.namei.pathname(filename, empty_ok=bool(flags & AT_EMPTY_PATH))
        if isinstance(name, int):
            return name
        file = self.open_exec(task, dirfd, name, flags)  # alloc_bprm: do_open_execat
        if isinstance(file, int):
            return file
        bprm = self._alloc_bprm(dirfd, name, file)
        mem = task.process.mem
        counted = self._count(mem, argv)
        if isinstance(counted, int):
            return counted
        argc, args = counted
        counted = self._count(mem, envp)
        if isinstance(counted, int):
            return counted
        envc, envs = counted
        room = self._stack_limit(argc, envc)
        if room < 0:
            return room
        bprm.room = room
        err = bprm.take(os.fsencode(bprm.filename))
        if err:
            return err
        for ptrs, out in ((envs, bprm.envp), (args, bprm.argv)):  # envp first, each backwards
            strs = []
            for p in reversed(ptrs):
                s = self._arg_string(mem, p)
                if isinstance(s, int):
                    return s
                err = bprm.take(s)
                if err:
                    return err
                strs.append(s)
            out[:] = strs[::-1]
        if not bprm.argv:
            bprm.argv = [b""]  # an empty argv becomes { "" } (5.18+)
            err = bprm.take(b"")
            if err:
                return err
        return self.bprm_execve(task, bprm)

    def _alloc_bprm(self, dirfd: int, name: str, file: ExecFile) -> Binprm:
        """alloc_bprm: the filename the new program sees (AT_EXECFN, script paths):
        the name itself, or /dev/fd/N[/name] for a dirfd-relative or empty one."""
        if dirfd == AT_FDCWD or name.startswith("/"):
            return Binprm(name, [], [], 0, file)
        fname = f"/dev/fd/{dirfd}" + (f"/{name}" if name else "")
        return Binprm(fname, [], [], 0, file, comm_from_dentry=not name)

    @staticmethod
    def _stack_limit(argc: int, envc: int) -> int:
        """bprm_stack_limits: the string space, a quarter of the stack rlimit (at most
        3/4 of _STK_LIM, at least ARG_MAX) less the pointer arrays; -E2BIG when the
        pointers alone do not fit."""
        limit = ARG_MAX_STRING_SPACE
        ptr_size = (max(argc, 1) + envc) * 8
        if limit <= ptr_size:
            return neg(E.E2BIG)
        return limit - ptr_size

    @staticmethod
    def _count(mem, ptr: int) -> tuple[int, list[int]] | int:
        """count(): the length of a NULL-terminated user array (a NULL array is empty)
        and its pointers; -EFAULT on an unreadable slot, -E2BIG past MAX_ARG_STRINGS.
        Read a page at a time; pointers past what the string space could ever hold are
        counted, not kept (bprm_stack_limits refuses such an array)."""
        out: list[int] = []
        total = 0
        if not ptr:
            return 0, out
        keep = ARG_MAX_STRING_SPACE // 8 + 1
        addr = ptr
        while True:
            n = max(8, (PAGE_SIZE - (addr & (PAGE_SIZE - 1))) // 8 * 8)  # 8: a slot across pages
            try:
                chunk = mem.read_user(addr, n)
            except GuestFault:
                return neg(E.EFAULT)
            words = array("Q", chunk)
            try:
                end = words.index(0)
            except ValueError:
                end = -1
            got = words if end < 0 else words[:end]
            total += len(got)
            if len(out) < keep:
                out.extend(got[: keep - len(out)])
            if total > MAX_ARG_STRINGS:
                return neg(E.E2BIG)
            if end >= 0:
                return total, out
            addr += len(words) * 8

    @staticmethod
    def _arg_string(mem, ptr: int) -> bytes | int:
        """strnlen_user(str, MAX_ARG_STRLEN) then the copy: -EFAULT when unreadable
        before its NUL, -E2BIG when longer than MAX_ARG_STRLEN."""
        out = bytearray()
        addr = ptr
        while len(out) <= MAX_ARG_STRLEN:
            n = PAGE_SIZE - (addr & (PAGE_SIZE - 1))
            try:
                chunk = mem.read_user(addr, n)
            except GuestFault:
                return neg(E.EFAULT)
            nul = chunk.find(b"\0")
            if nul >= 0:
                out += chunk[:nul]
                return bytes(out) if len(out) < MAX_ARG_STRLEN else neg(E.E2BIG)
            out += chunk
            addr += n
        return neg(E.E2BIG)

    # -- open_exec -------------------------------------------------------------------
    def open_exec(self, task, dirfd: int, name: str, flags: int = 0) -> ExecFile | int:
        """do_open_execat: the walk (ENOENT, ENOTDIR, ELOOP, EACCES on a directory on
        the way), may_open's EACCES for what is not a regular file, MAY_EXEC (an x bit
        even for root), and the first BINPRM_BUF_SIZE bytes."""
        with self.vfs.nameidata(task) as nd:
            if name == "":
                loc = self.namei.fd_loc(task, dirfd) if dirfd != AT_FDCWD else neg(E.ENOENT)
            else:
                stack = self.namei.lookup(nd, task, dirfd, name, not flags & AT_SYMLINK_NOFOLLOW)
                loc = stack if isinstance(stack, int) else stack[-1]
            if isinstance(loc, int):
                return loc
            mode = loc.mode(task)
            if S.S_ISLNK(mode):
                return neg(E.ELOOP)
            if not S.S_ISREG(mode) or loc.fd is None:
                return neg(E.EACCES)
            err = self.namei.perm(nd, loc, MAY_EXEC)
            if err:
                return err
            try:
                fd = os.open(f"/proc/self/fd/{loc.fd}", os.O_RDONLY | os.O_CLOEXEC)
            except OSError as e:
                return neg(e.errno or E.EACCES)
            try:
                st = os.fstat(fd)
                host = os.readlink(f"/proc/self/fd/{fd}")
                data = _read_up_to(fd, MAX_ELF_FILE_SIZE + 1 if st.st_size <= MAX_ELF_FILE_SIZE else BINPRM_BUF_SIZE)
            except OSError as e:
                return neg(e.errno or E.EIO)
            finally:
                os.close(fd)
        return ExecFile(loc.path, host, st, data[:BINPRM_BUF_SIZE], data)

    @staticmethod
    def _read_whole(file: ExecFile) -> bytes | int:
        """The whole file, read through the descriptor the walk opened (never again by
        its host path, which another host process could have replaced)."""
        if file.st.st_size > MAX_ELF_FILE_SIZE or len(file.data) > MAX_ELF_FILE_SIZE:
            return neg(E.ENOEXEC)
        return file.data

    # -- exec_binprm -----------------------------------------------------------------
    def bprm_execve(self, task, bprm: Binprm):
        """exec_binprm: search_binary_handler until an ELF, at most five interpreters."""
        for depth in range(MAX_BINPRM_DEPTH + 2):
            if depth > MAX_BINPRM_DEPTH:
                return neg(E.ELOOP)
            head = bprm.file.buf
            if head[:4] == ELFMAG:
                return self.load_elf_binary(task, bprm)
            if head[:2] != b"#!":
                return neg(E.ENOEXEC)
            err = self.load_script(task, bprm)
            if err:
                return err
        return neg(E.ELOOP)

    def load_script(self, task, bprm: Binprm) -> int:
        """binfmt_script: argv[0] replaced by interpreter [argument] script-path, and the
        interpreter opened (relative to the working directory) as the next file."""
        parsed = parse_shebang(bprm.file.buf)
        if isinstance(parsed, int):
            return parsed
        i_name, i_arg = parsed
        # remove_arg_zero, then the script's path (bprm->interp), the argument, the name
        script = os.fsencode(bprm.interp or bprm.filename)
        rest = bprm.argv[1:]
        bprm.room += len(bprm.argv[0]) + 1 if bprm.argv else 0
        new = [i_name] + ([i_arg] if i_arg is not None else []) + [script]
        for s in reversed(new):
            err = bprm.take(s)
            if err:
                return err
        bprm.argv = new + rest
        bprm.interp = os.fsdecode(i_name)  # bprm_change_interp
        file = self.open_exec(task, AT_FDCWD, os.fsdecode(i_name))
        if isinstance(file, int):
            return file
        bprm.file = file
        return 0

    def load_elf_binary(self, task, bprm: Binprm):
        """The checks load_elf_binary makes before begin_new_exec (ENOEXEC for what is
        not a loadable x86-64 ELF, the interpreter's open errors, ELIBBAD for an
        interpreter that is no ELF), then the point of no return and the load."""
        data = self._read_whole(bprm.file)
        if isinstance(data, int):
            return data
        try:
            image = parse_elf(data, bprm.file.host_path)
        except EmuError:
            return neg(E.ENOEXEC)
        if not image.segments:
            return neg(E.ENOEXEC)
        if image.interp is not None:
            interp = self.open_exec(task, AT_FDCWD, image.interp)
            if isinstance(interp, int):
                return interp
            if interp.buf[:4] != ELFMAG:
                return neg(E.ELIBBAD)
        st = bprm.file.st
        cache = self.m.page_cache
        mfile = cache.lookup(st.st_dev, st.st_ino) or MappedFile(
            bprm.file.host_path, image.data, image, dev=st.st_dev, ino=st.st_ino, d_path=bprm.file.guest_path
        )
        if mfile.elf is None:  # met by mmap first: now read whole
            mfile.data, mfile.elf, mfile.reader, mfile.file_size = image.data, image, None, None
        mfile = cache.add(mfile)
        old_tid = task.tid
        self.begin_new_exec(task, bprm)
        self._load_new_image(task, bprm, image, mfile)
        if self.m.events and task.state != "dead":
            self.m.events.publish(Exec(task, old_tid, bprm.filename))  # trace_sched_process_exec
        return None

    # -- begin_new_exec --------------------------------------------------------------
    def begin_new_exec(self, task, bprm: Binprm) -> None:
        """The point of no return (see the module docstring)."""
        m = self.m
        proc = task.process
        m.de_thread(task)
        m.exec_mmap(task)  # new mm; mm_release of the old one
        self._exec_release_vfork(proc)
        if proc.files.users > 1:  # unshare_files
            table = proc.files.fork()
            proc.files.put()
            proc.files = table
        for fd in sorted(proc.files.cloexec):  # do_close_on_exec
            proc.files.close(fd)
        self._flush_signal_handlers(proc)
        task.sigaltstack = None
        task.robust_list = task.rseq = 0
        task.restart_block = None
        # __set_task_comm: kbasename(filename), or the dentry's name for a made-up /dev/fd/N
        comm = os.path.basename(bprm.file.guest_path if bprm.comm_from_dentry else bprm.filename)[:15]
        task.comm = proc.comm = comm

    def _exec_release_vfork(self, proc) -> None:
        """mm_release's complete_vfork_done: a vfork parent resumes with the child's pid."""
        ptask = proc.vfork_parent_task
        if ptask is not None:
            proc.vfork_parent_task = None
            self.m.wake(ptask, getattr(ptask, "vfork_child_tid", proc.pid))

    @staticmethod
    def _flush_signal_handlers(proc) -> None:
        """flush_signal_handlers(force_default=0): handlers become SIG_DFL, SIG_IGN stays;
        flags, restorer and mask are cleared."""
        for signo, raw in list(proc.sighand.action.items()):
            if parse_sigaction(raw)[0] == SIG_IGN:
                proc.sighand.action[signo] = SIG_IGN.to_bytes(8, "little") + bytes(24)
            else:
                del proc.sighand.action[signo]

    def _load_new_image(self, task, bprm: Binprm, image, mfile) -> None:
        """load_elf_binary past begin_new_exec; a failure now is a SIGSEGV death."""
        m = self.m
        proc = task.process
        keep = None if proc is m.main_process else (m.symbols, m.auxv)
        argv = [os.fsdecode(a) for a in bprm.argv]
        envp = [os.fsdecode(e) for e in bprm.envp]
        try:
            load_image(m, image, mfile, argv, envp, execfn=bprm.filename, exe_path=bprm.file.host_path)
        except EmuError as e:
            m.process_exit(proc, RunResult("signal", signal=SIGSEGV, detail=f"execve failed late: {e}"))
            return None
        finally:
            if keep is not None:
                m.symbols, m.auxv = keep
        m.kernel.exec_mm(task)
        return None


# ============================================================================ exec_mmap


class ExecMm(KernelBase):
    """What exec does to the task and its address space (de_thread, exec_mmap): part
    of :class:`kernel_model.kernel.kernel.Kernel`."""

    def de_thread(self, task) -> None:
        """de_thread (exec): every other thread of the process dies, and a non-leader
        exec'ing thread takes the leader's pid as its tid."""
        proc = task.process
        for t in list(proc.tasks):
            if t is not task and t.state != "dead":
                self.do_exit(t)
        proc.tasks = [task]
        task.tid = proc.pid

    def exec_mmap(self, task) -> None:
        """exec_mmap + exec_mm_release: the task's process gets a new, empty address
        space (a new engine CPU).  mm_release of the old one: clear_child_tid is
        written and woken only when another process still uses that mm (a vfork parent),
        then dropped.  The old mm is freed once the CPU has left it, unless it is
        borrowed (a vfork child's is its parent's)."""
        proc = task.process
        old_mem = proc.mem
        borrowed = proc.mm_owner is not None
        shared = borrowed or any(p.mm_owner is proc and p.exit_result is None for p in self.processes)
        if task.clear_child_tid and shared:
            try:
                old_mem.write_user(task.clear_child_tid, b"\0\0\0\0")
            except GuestFault:
                pass
            self.syscalls.futex.futex_wake(proc.mm_owner or proc, task.clear_child_tid, 1)
        task.clear_child_tid = 0
        proc.cpu, proc.mem, proc.cpu_regs = self.mm_alloc()
        proc.mm_owner = None
        proc.mm_uprobes = None  # the new mm's uprobes state: see Kernel.exec_mm
        proc.mapped_files = []
        task.context = None
        if not shared:
            # mmput(old_mm) comes before the new image is mapped
            self.retire_mm(old_mem)
