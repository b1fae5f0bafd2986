"""Load a static ELF into a process the way the kernel's binfmt_elf does.

PT_LOAD segments become file-backed private mappings (the uprobes model keys probes by
(file, offset), so every text mapping remembers its file and pgoff); static-PIE images get
the kernel's default load bias; then the initial stack: argc, argv, envp, auxv, the
AT_RANDOM bytes and the strings, 16-byte aligned as the psABI requires.
"""

from __future__ import annotations

import struct

from .elf import PF_R, PF_W, PF_X
from .errors import ElfError
from .memory import (PAGE_SIZE, PROT_EXEC, PROT_READ, PROT_WRITE, MemoryLimitExceeded, page_down,
                     page_up)
from .signal_frames import MAX_FRAME_SIZE

STACK_TOP = 0x7FFFFFFDE000           # leaves the XOL hint page (0x7fffffffe000) free
STACK_SIZE = 8 << 20
ET_DYN_BASE = 0x555555554000         # ELF_ET_DYN_BASE without randomization
DEFAULT_ENV = ["PATH=/usr/bin:/bin", "HOME=/root", "LANG=C"]

AT = dict(AT_NULL=0, AT_PHDR=3, AT_PHENT=4, AT_PHNUM=5, AT_PAGESZ=6, AT_BASE=7, AT_FLAGS=8,
          AT_ENTRY=9, AT_UID=11, AT_EUID=12, AT_GID=13, AT_EGID=14, AT_PLATFORM=15,
          AT_HWCAP=16, AT_CLKTCK=17, AT_SECURE=23, AT_RANDOM=25, AT_HWCAP2=26, AT_EXECFN=31,
          AT_MINSIGSTKSZ=51)


def _prot(flags: int) -> int:
    return (PROT_READ if flags & PF_R else 0) | (PROT_WRITE if flags & PF_W else 0) | \
           (PROT_EXEC if flags & PF_X else 0)


def load_image(machine, image, mfile, argv: list[str], env: list[str] | None) -> None:
    """Map ``image`` into ``machine``'s process and set up the initial registers.

    An image whose segments and stack do not fit the machine's memory limit is refused
    (an :class:`ElfError`), as execve fails with ENOMEM."""
    try:
        _load_image(machine, image, mfile, argv, env)
    except MemoryLimitExceeded as e:
        raise ElfError(f"{image.path}: cannot be loaded: {e} (see --max-memory)") from None


def _load_image(machine, image, mfile, argv: list[str], env: list[str] | None) -> None:
    if not image.segments:
        raise ElfError(f"{image.path}: no PT_LOAD segments")
    mem = machine.mem
    bias = ET_DYN_BASE if image.etype == "DYN" else 0
    mfile.load_bias = bias
    proc = machine.process
    proc.exe, proc.exe_path = mfile, image.path
    proc.files.append(mfile)
    end_of_bss = 0
    for seg in image.segments:
        start = page_down(seg.vaddr + bias)
        file_start = page_down(seg.offset)
        file_end = seg.offset + seg.filesz
        map_end = page_up(seg.vaddr + bias + seg.memsz)
        prot = _prot(seg.flags)
        file_backed_end = page_up(seg.vaddr + bias + seg.filesz)
        # whole file pages are mapped, as mmap does; bss is zeroed below
        data = image.data[file_start:file_start + (file_backed_end - start)]
        if seg.filesz:
            mem.map(start, file_backed_end - start, prot, image.path, file=mfile, pgoff=file_start,
                    data=data)
        if map_end > file_backed_end:
            mem.map(file_backed_end, map_end - file_backed_end, prot, "")
        # a partially file-backed last page is zero past filesz (bss start)
        tail_start = seg.vaddr + bias + seg.filesz
        if seg.memsz > seg.filesz and tail_start < file_backed_end:
            mem.write(tail_start, b"\0" * (file_backed_end - tail_start))
        end_of_bss = max(end_of_bss, seg.vaddr + bias + seg.memsz)
    proc.brk_start = proc.brk = page_up(end_of_bss)
    machine.symbols = {name: s.value + bias for name, s in image.symbols.items()}

    phdr = _phdr_vaddr(image) + bias
    env = DEFAULT_ENV if env is None else env
    sp = _setup_stack(machine, argv, env, image, phdr, bias)
    regs = machine.read_regs()
    for name in ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r9", "r10", "r11",
                 "r12", "r13", "r14", "r15", "fs_base", "gs_base"):
        setattr(regs, name, 0)
    regs.rsp = sp
    regs.rip = image.entry + bias
    regs.eflags = 0x202
    machine.write_regs(regs)


def _phdr_vaddr(image) -> int:
    for seg in image.segments:
        if seg.offset <= image.phoff < seg.offset + seg.filesz:
            return seg.vaddr + image.phoff - seg.offset
    return 0


def _setup_stack(machine, argv, env, image, phdr, bias) -> int:
    mem = machine.mem
    mem.map(STACK_TOP - STACK_SIZE, STACK_SIZE, PROT_READ | PROT_WRITE, "[stack]")
    rng = machine.syscalls.rng
    strings = bytearray()
    top = STACK_TOP - 8          # the kernel leaves a NULL word at the very top

    def put(data: bytes) -> int:
        nonlocal strings
        strings = bytearray(data) + strings
        return top - len(strings)

    execfn = put(image.path.encode() + b"\0")
    env_ptrs = [put(e.encode() + b"\0") for e in reversed(env)][::-1]
    arg_ptrs = [put(a.encode() + b"\0") for a in reversed(argv)][::-1]
    platform = put(b"x86_64\0")
    random_at = put(rng.randbytes(16))
    strings_start = top - len(strings)
    cred = machine.task.cred                  # create_elf_tables: the exec'ing task's ids
    auxv = [
        (AT["AT_HWCAP"], 0x178BFBFF), (AT["AT_MINSIGSTKSZ"], MAX_FRAME_SIZE), (AT["AT_PAGESZ"], PAGE_SIZE),
        (AT["AT_CLKTCK"], 100), (AT["AT_PHDR"], phdr), (AT["AT_PHENT"], image.phentsize),
        (AT["AT_PHNUM"], image.phnum), (AT["AT_BASE"], 0), (AT["AT_FLAGS"], 0),
        (AT["AT_ENTRY"], image.entry + bias), (AT["AT_UID"], cred.uid), (AT["AT_EUID"], cred.euid),
        (AT["AT_GID"], cred.gid), (AT["AT_EGID"], cred.egid), (AT["AT_SECURE"], 0),
        (AT["AT_RANDOM"], random_at), (AT["AT_HWCAP2"], 2), (AT["AT_EXECFN"], execfn),
        (AT["AT_PLATFORM"], platform), (AT["AT_NULL"], 0),
    ]
    words = [len(argv), *arg_ptrs, 0, *env_ptrs, 0]
    for k, v in auxv:
        words += [k, v]
    table = struct.pack(f"<{len(words)}Q", *words)
    sp = (strings_start - len(table)) & ~0xF
    mem.write(sp, table)
    mem.write(strings_start, bytes(strings))
    machine.auxv = dict(auxv)
    proc = machine.process                    # what /proc/PID/{cmdline,environ,stat} read
    proc.start_stack = sp
    proc.arg_start = arg_ptrs[0] if arg_ptrs else (env_ptrs[0] if env_ptrs else execfn)
    proc.arg_end = proc.env_start = env_ptrs[0] if env_ptrs else execfn
    proc.env_end = execfn
    return sp
