# segv: store to address 0x10, which is never mapped -> SIGSEGV at 0x10
_start:
    mov rax, 0x10
    mov qword ptr [rax], 1
    mov eax, 231
    xor edi, edi
    syscall
