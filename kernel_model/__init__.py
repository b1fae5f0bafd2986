"""The modeled Linux kernel: uprobes core, the x86 arch part, uprobes syscalls, trace events."""
