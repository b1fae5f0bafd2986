# bench_trigger: the trigger loops of the kernel's benchs/bench_trigger.c (BPF selftests),
# written for uprobe-emu.  Usage: bench_trigger LOOP N [WARMUP [N2]]
#
#   LOOP   0 usermode-count  call uprobe_target_nop, bump a user counter
#          1 syscall-count   syscall(getpgid), bump a user counter
#          2 nop    3 push   4 ret    5 nop5    6 nop10    call uprobe_target_<x>
#          7 usdt-nop  8 usdt-nop5  9 usdt-nop10             call usdt_<x>
#   N      measured iterations (decimal)
#   WARMUP iterations run first (default 0)
#   N2     iterations of a second measured phase (default 0)
#
# Three phases, WARMUP, N and N2 iterations, each followed by the marker syscall
# getppid (110); the phases execute the same instructions around the loop, so the
# difference of two phases is exactly (N2 - N) iterations.  Exits 0.
#
# The target bodies are the kernel's (no endbr64): nop;ret / push %rbp ... call
# opaque_noop_func; mov $1,%eax ... ret / ret / nop5;ret / nop10;ret.  USDT sites are the
# libbpf macro's instruction sequences (nop / nop,nop5 / nop,nop10) inside a function;
# there is no .note.stapsdt (keystone cannot emit notes): the bench probes the site address
# with libbpf's nop-combo rule.  The loop counter lives in r12 (callee-saved across the
# probed calls, untouched by the syscall instruction).  The bench's growth scenarios
# append a never-executed run of 50,000 nops (distinct probe sites) to this source.
_start:
    mov r8, [rsp]
    xor r14, r14
    xor r15, r15
    xor ebx, ebx
    xor r13, r13
    cmp r8, 2
    jb go
    mov rsi, [rsp + 16]
    call parse_dec
    mov r14, rax
    cmp r8, 3
    jb go
    mov rsi, [rsp + 24]
    call parse_dec
    mov r15, rax
    cmp r8, 4
    jb go
    mov rsi, [rsp + 32]
    call parse_dec
    mov rbx, rax
    cmp r8, 5
    jb go
    mov rsi, [rsp + 40]
    call parse_dec
    mov r13, rax
go:
    mov r12, rbx
    call phase
    mov r12, r15
    call phase
    mov r12, r13
    call phase
bench_done:
    mov eax, 231
    xor edi, edi
    syscall

# r12 iterations of the selected loop, then the marker
phase:
    call dispatch
    mov eax, 110
    syscall
    ret

# rsi -> decimal string; rax <- value
parse_dec:
    xor eax, eax
parse_next:
    movzx ecx, byte ptr [rsi]
    test cl, cl
    jz parse_end
    sub ecx, 48
    imul rax, rax, 10
    add rax, rcx
    inc rsi
    jmp parse_next
parse_end:
    ret

# r14 = loop number, r12 = iterations
dispatch:
    test r12, r12
    jz dispatch_none
    cmp r14, 0
    je loop_usermode
    cmp r14, 1
    je loop_syscall
    cmp r14, 2
    je loop_nop
    cmp r14, 3
    je loop_push
    cmp r14, 4
    je loop_ret
    cmp r14, 5
    je loop_nop5
    cmp r14, 6
    je loop_nop10
    cmp r14, 7
    je loop_usdt_nop
    cmp r14, 8
    je loop_usdt_nop5
    cmp r14, 9
    je loop_usdt_nop10
dispatch_none:
    ret

loop_usermode:
    call uprobe_target_nop
    inc qword ptr [rip + hits]
    dec r12
    jnz loop_usermode
    ret

loop_syscall:
    mov eax, 121
    xor edi, edi
    syscall
    inc qword ptr [rip + hits]
    dec r12
    jnz loop_syscall
    ret

loop_nop:
    call uprobe_target_nop
    dec r12
    jnz loop_nop
    ret

loop_push:
    call uprobe_target_push
    dec r12
    jnz loop_push
    ret

loop_ret:
    call uprobe_target_ret
    dec r12
    jnz loop_ret
    ret

loop_nop5:
    call uprobe_target_nop5
    dec r12
    jnz loop_nop5
    ret

loop_nop10:
    call uprobe_target_nop10
    dec r12
    jnz loop_nop10
    ret

loop_usdt_nop:
    call usdt_nop
    dec r12
    jnz loop_usdt_nop
    ret

loop_usdt_nop5:
    call usdt_nop5
    dec r12
    jnz loop_usdt_nop5
    ret

loop_usdt_nop10:
    call usdt_nop10
    dec r12
    jnz loop_usdt_nop10
    ret

# ---------------------------------------------------------------- targets
uprobe_target_nop:
    nop
    ret

opaque_noop_func:
    ret

uprobe_target_push:
    push rbp
    mov rbp, rsp
    call opaque_noop_func
    mov eax, 1
    pop rbp
    ret

uprobe_target_ret:
    ret

uprobe_target_nop5:
    .byte 0x0f, 0x1f, 0x44, 0x00, 0x00
    ret

uprobe_target_nop10:
    .byte 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00
    ret

# USDT sites: the site label is the note's pc (the first byte of the macro's sequence)
usdt_nop:
usdt_site_nop:
    nop
    ret

usdt_nop5:
usdt_site_nop5:
    nop
    .byte 0x0f, 0x1f, 0x44, 0x00, 0x00
    ret

usdt_nop10:
usdt_site_nop10:
    nop
    .byte 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00
    ret

.data
hits:
    .quad 0
