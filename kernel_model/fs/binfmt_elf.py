"""Load an ELF into a process the way the kernel's binfmt_elf (``load_elf_binary``) does.

PT_LOAD segments become file-backed private mappings (the uprobes model keys probes by
(file, offset), so every text mapping remembers its file and pgoff).  A program with a
PT_INTERP is loaded as the kernel loads one with ASLR off (``setarch -R``): a PIE at
``ELF_ET_DYN_BASE``, the interpreter (read from the sysroot) top-down below
``mmap_base`` (``load_elf_interp``), the vDSO below it (``map_vdso``), brk just past the
program, the stack at ``STACK_TOP_MAX``, and the run starts at the interpreter's entry;
ld.so then maps the libraries itself through mmap.  Static images keep the emulator's
historic layout (static-pie at ``ELF_ET_DYN_BASE``, the stack below the XOL hint page).
Then the initial stack: argc, argv, envp, auxv in ``create_elf_tables``' order, the
AT_RANDOM bytes and the strings, 16-byte aligned as the psABI requires.
"""

from __future__ import annotations

import functools
import os
import stat
import struct

from kernel_model.arch.x86.entry.vdso import map_vdso
from kernel_model.arch.x86.kernel.signal import MAX_FRAME_SIZE
from kernel_model.errors import ElfError, InputError
from kernel_model.fs.elf import MAX_ELF_FILE_SIZE, PF_R, PF_W, PF_X, ElfImage, parse_elf
from kernel_model.mm.mm_types import (
    PAGE_SIZE,
    PROT_EXEC,
    PROT_READ,
    PROT_WRITE,
    MappedFile,
    MemoryLimitExceeded,
    page_down,
    page_up,
)

STACK_TOP = 0x7FFFFFFDE000  # static guests: leaves the XOL hint page (0x7fffffffe000) free
STACK_TOP_MAX = 0x7FFFFFFFF000  # the kernel's stack top without randomization
STACK_EXPAND = 128 << 10  # setup_arg_pages' stack_expand
ET_DYN_BASE = 0x555555554000  # ELF_ET_DYN_BASE (DEFAULT_MAP_WINDOW / 3 * 2), page aligned
DEFAULT_ENV = ["PATH=/usr/bin:/bin", "HOME=/root", "LANG=C"]
HWCAP, HWCAP2 = 0x178BFBFF, 2  # the emulated CPU's CPUID.1:EDX, HWCAP2_FSGSBASE
RSEQ_FEATURE_SIZE, RSEQ_ALIGN = 0x1C, 0x20  # offsetof(struct rseq, end), its alignment

AT = dict(
    AT_NULL=0,
    AT_PHDR=3,
    AT_PHENT=4,
    AT_PHNUM=5,
    AT_PAGESZ=6,
    AT_BASE=7,
    AT_FLAGS=8,
    AT_ENTRY=9,
    AT_UID=11,
    AT_EUID=12,
    AT_GID=13,
    AT_EGID=14,
    AT_PLATFORM=15,
    AT_HWCAP=16,
    AT_CLKTCK=17,
    AT_SECURE=23,
    AT_RANDOM=25,
    AT_HWCAP2=26,
    AT_RSEQ_FEATURE_SIZE=27,
    AT_RSEQ_ALIGN=28,
    AT_EXECFN=31,
    AT_SYSINFO_EHDR=33,
    AT_MINSIGSTKSZ=51,
)


def _prot(flags: int) -> int:
    return (PROT_READ if flags & PF_R else 0) | (PROT_WRITE if flags & PF_W else 0) | (PROT_EXEC if flags & PF_X else 0)


def file_identity(path: str) -> tuple[int, int, str]:
    """(st_dev, st_ino, d_path) of a host file; (0, 0, path) if it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return 0, 0, path
    return st.st_dev, st.st_ino, os.path.realpath(path)


def load_image(
    machine,
    image,
    mfile,
    argv: list[str],
    env: list[str] | None,
    *,
    execfn: str | None = None,
    exe_path: str | None = None,
) -> None:
    """Map ``image`` into ``machine``'s process and set up the initial registers.

    ``execfn``: the name AT_EXECFN points at (execve's filename; default the image's
    path); ``exe_path``: the host path /proc/PID/exe shows (default the image's path).
    An image whose segments and stack do not fit the machine's memory limit is refused
    (an :class:`ElfError`), as execve fails with ENOMEM; so is a program whose
    interpreter is not in the sysroot (execve's ENOENT)."""
    try:
        _load_image(machine, image, mfile, argv, env, execfn, exe_path)
    except MemoryLimitExceeded as e:
        raise ElfError(f"{image.path}: cannot be loaded: {e} (see --max-memory)") from None


def _load_interp(machine, image) -> tuple[ElfImage, MappedFile]:
    """open_exec(elf_interpreter): the interpreter opened through the guest's file view
    (the sysroot, its symlinks followed in the guest's namespace, the first task's
    permissions), as an ELF without an interpreter of its own (the kernel does not
    chain them)."""

    def refuse(reason: str):
        return ElfError(f"{image.path}: cannot load its interpreter {image.interp}: {reason}")

    f = machine.syscalls.open_guest_path(machine.task, image.interp, os.O_RDONLY)
    if isinstance(f, int):
        raise refuse(os.strerror(-f).lower())
    try:
        st = os.fstat(f.fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse("not a regular file")
        if st.st_size > MAX_ELF_FILE_SIZE:
            raise refuse(f"too large ({st.st_size} bytes)")
        data = b"".join(iter(lambda: os.read(f.fd, 1 << 20), b""))
    finally:
        f.get().put()  # the loader's reference was the only one
    try:
        interp = parse_elf(data, image.interp)
    except InputError as e:
        raise refuse(str(e).split(": ", 1)[-1]) from None
    if interp.interp is not None:
        raise ElfError(f"{image.path}: its interpreter {image.interp} has an interpreter itself")
    return interp, MappedFile(image.interp, interp.data, interp, dev=st.st_dev, ino=st.st_ino, d_path=f.guest_path)


def _total_mapping_size(image) -> int:
    first, last = image.segments[0], image.segments[-1]
    return page_up(last.vaddr + last.memsz) - page_down(first.vaddr)


def _maximum_alignment(image) -> int:
    """maximum_alignment(): the largest power-of-two p_align of the PT_LOADs, at least a page."""
    align = max((s.align for s in image.segments if s.align and not s.align & (s.align - 1)), default=0)
    return page_up(align) or PAGE_SIZE


def _map_segments(mem, image, mfile, bias: int, mmap_hook=None) -> int:
    """elf_load() of every PT_LOAD at ``bias``; returns the end of the last bss.
    ``mmap_hook(vma)`` sees each file mapping, as uprobe_mmap does from elf_map."""
    end_of_bss = 0
    for seg in image.segments:
        start = page_down(seg.vaddr + bias)
        file_start = page_down(seg.offset)
        map_end = page_up(seg.vaddr + bias + seg.memsz)
        prot = _prot(seg.flags)
        file_backed_end = page_up(seg.vaddr + bias + seg.filesz)
        # whole file pages are mapped, as mmap does; bss is zeroed below
        data = image.data[file_start : file_start + (file_backed_end - start)]
        if seg.filesz:
            vma = mem.map(
                start,
                file_backed_end - start,
                prot,
                mfile.d_path or mfile.path,
                file=mfile,
                pgoff=file_start,
                data=data,
            )
            if mmap_hook is not None:
                mmap_hook(vma)
        if map_end > file_backed_end:
            mem.map(file_backed_end, map_end - file_backed_end, prot, "")
        # a partially file-backed last page is zero past filesz (padzero)
        tail_start = seg.vaddr + bias + seg.filesz
        if seg.memsz > seg.filesz and tail_start < file_backed_end:
            mem.write(tail_start, b"\0" * (file_backed_end - tail_start))
        end_of_bss = max(end_of_bss, seg.vaddr + bias + seg.memsz)
    return end_of_bss


def _program_bias(image) -> int:
    """load_bias of the main program: ELF_ET_DYN_BASE aligned down to its largest
    segment alignment for a PIE (ET_DYN with PT_INTERP), the same base for a
    static-pie (the emulator's historic choice), nothing for ET_EXEC."""
    if image.etype != "DYN":
        return 0
    if image.interp is None:
        return ET_DYN_BASE
    return page_down((ET_DYN_BASE & ~(_maximum_alignment(image) - 1)) - image.segments[0].vaddr)


def _interp_bias(mem, interp) -> int:
    """load_elf_interp: an ET_DYN interpreter goes where mmap(NULL, total_size) would
    put it (top-down below mmap_base); an ET_EXEC one at its own addresses."""
    if interp.etype != "DYN":
        return 0
    size = _total_mapping_size(interp)
    first = page_down(interp.segments[0].vaddr)
    where = mem.get_unmapped_area(size, hint=first or None)  # elf_map's address is a hint
    if where is None:
        raise MemoryLimitExceeded(f"no room for the interpreter ({size:#x} bytes)")
    return where - first


def _load_image(
    machine,
    image,
    mfile,
    argv: list[str],
    env: list[str] | None,
    execfn: str | None = None,
    exe_path: str | None = None,
) -> None:
    if not image.segments:
        raise ElfError(f"{image.path}: no PT_LOAD segments")
    interp = _load_interp(machine, image) if image.interp is not None else None
    mem = machine.mem
    bias = _program_bias(image)
    mfile.load_bias = bias
    proc = machine.process
    proc.exe, proc.exe_path = mfile, exe_path or image.path
    cache = machine.page_cache
    proc.mapped_files.append(cache.add(mfile))
    hook = functools.partial(machine.kernel.uprobe_mmap, proc)
    end_of_bss = _map_segments(mem, image, mfile, bias, hook)
    proc.brk_start = proc.brk = page_up(end_of_bss)
    machine.symbols = {name: s.value + bias for name, s in image.symbols.items()}
    entry, interp_base, vdso_base = image.entry + bias, 0, 0
    if interp is not None:
        iimage, ifile = interp
        ibias = _interp_bias(mem, iimage)
        ifile = cache.add(ifile)
        ifile.load_bias = ibias
        proc.mapped_files.append(ifile)
        _map_segments(mem, iimage, ifile, ibias, hook)
        interp_base, entry = ibias, iimage.entry + ibias  # AT_BASE: load_elf_interp's load_addr
        vdso_base = map_vdso(mem, machine.kernel.profile.release)
    phdr = _phdr_vaddr(image) + bias
    env = DEFAULT_ENV if env is None else env
    top = STACK_TOP_MAX if interp is not None else STACK_TOP
    sp = _setup_stack(
        machine,
        argv,
        env,
        image,
        dict(top=top, phdr=phdr, bias=bias, base=interp_base, vdso=vdso_base, execfn=execfn or image.path),
    )
    regs = machine.read_regs()
    for name in (
        "rax",
        "rbx",
        "rcx",
        "rdx",
        "rsi",
        "rdi",
        "rbp",
        "r8",
        "r9",
        "r10",
        "r11",
        "r12",
        "r13",
        "r14",
        "r15",
        "fs_base",
        "gs_base",
    ):
        setattr(regs, name, 0)
    regs.rsp = sp
    regs.rip = entry
    regs.eflags = 0x202
    machine.write_regs(regs)


def _phdr_vaddr(image) -> int:
    for seg in image.segments:
        if seg.offset <= image.phoff < seg.offset + seg.filesz:
            return seg.vaddr + image.phoff - seg.offset
    return 0


def _auxv(machine, image, at: dict, random_at: int, execfn: int, platform: int) -> list[tuple[int, int]]:
    """create_elf_tables' auxiliary vector, in its order (ARCH_DLINFO first)."""
    cred = machine.task.cred  # the exec'ing task's ids
    vdso = [(AT["AT_SYSINFO_EHDR"], at["vdso"])] if at["vdso"] else []
    return vdso + [
        (AT["AT_MINSIGSTKSZ"], MAX_FRAME_SIZE),
        (AT["AT_HWCAP"], HWCAP),
        (AT["AT_PAGESZ"], PAGE_SIZE),
        (AT["AT_CLKTCK"], 100),
        (AT["AT_PHDR"], at["phdr"]),
        (AT["AT_PHENT"], image.phentsize),
        (AT["AT_PHNUM"], image.phnum),
        (AT["AT_BASE"], at["base"]),
        (AT["AT_FLAGS"], 0),
        (AT["AT_ENTRY"], image.entry + at["bias"]),
        (AT["AT_UID"], cred.uid),
        (AT["AT_EUID"], cred.euid),
        (AT["AT_GID"], cred.gid),
        (AT["AT_EGID"], cred.egid),
        (AT["AT_SECURE"], 0),
        (AT["AT_RANDOM"], random_at),
        (AT["AT_HWCAP2"], HWCAP2),
        (AT["AT_EXECFN"], execfn),
        (AT["AT_PLATFORM"], platform),
        (AT["AT_RSEQ_FEATURE_SIZE"], RSEQ_FEATURE_SIZE),
        (AT["AT_RSEQ_ALIGN"], RSEQ_ALIGN),
        (AT["AT_NULL"], 0),
    ]


def _setup_stack(machine, argv, env, image, at: dict) -> int:
    mem = machine.mem
    stack_top = at["top"]
    rng = machine.syscalls.rng
    strings = bytearray()
    top = stack_top - 8  # the kernel leaves a NULL word at the very top

    def put(data: bytes) -> int:
        nonlocal strings
        strings = bytearray(data) + strings
        return top - len(strings)

    execfn = put(os.fsencode(at["execfn"]) + b"\0")
    env_ptrs = [put(os.fsencode(e) + b"\0") for e in reversed(env)][::-1]
    arg_ptrs = [put(os.fsencode(a) + b"\0") for a in reversed(argv)][::-1]
    p = top - len(strings)  # bprm->p after copy_strings
    put(b"\0" * ((top - len(strings)) & 0xF))  # create_elf_tables: arch_align_stack(p)
    platform = put(b"x86_64\0")
    random_at = put(rng.randbytes(16))
    strings_start = top - len(strings)
    auxv = _auxv(machine, image, at, random_at, execfn, platform)
    words = [len(argv), *arg_ptrs, 0, *env_ptrs, 0]
    for k, v in auxv:
        words += [k, v]
    table = struct.pack(f"<{len(words)}Q", *words)
    sp = (strings_start - len(table)) & ~0xF
    # setup_arg_pages: the pages of the strings, expanded by stack_expand (128 KiB)
    # below them; a VM_GROWSDOWN mapping that faults grow further (expand_stack)
    low = min(page_down(p) - STACK_EXPAND, page_down(sp))
    stack = mem.map(low, stack_top - low, PROT_READ | PROT_WRITE, "[stack]")
    stack.flags.add("growsdown")
    mem.write(sp, table)
    mem.write(strings_start, bytes(strings))
    machine.auxv = dict(auxv)
    proc = machine.process  # what /proc/PID/{cmdline,environ,stat} read
    proc.start_stack = sp
    proc.arg_start = arg_ptrs[0] if arg_ptrs else (env_ptrs[0] if env_ptrs else execfn)
    proc.arg_end = proc.env_start = env_ptrs[0] if env_ptrs else execfn
    proc.env_end = execfn
    return sp
