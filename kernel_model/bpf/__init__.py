"""eBPF: the instruction set, the verifier's safety rules, the interpreter, maps, BTF and
the helpers uprobe programs call, laid out as the kernel's ``kernel/bpf/`` is.

``insn`` holds what ``include/uapi/linux/bpf.h`` and ``bpf_common.h`` define (opcodes,
``struct bpf_insn``, helper ids), ``verifier`` what ``kernel/bpf/verifier.c`` checks
before a program may run, ``core`` the interpreter of ``kernel/bpf/core.c``
(``___bpf_prog_run``).  Programs are attached as uprobe consumers by
``kernel_model.trace.bpf_trace`` (``kernel/trace/bpf_trace.c``).
"""
