# uprobe_targets: N rounds (N = argv[1] in decimal, default 3) over small functions whose
# first instruction is of each uprobe class: nop, nop5, push, call, jmp, jcc, rip-relative
# load/store, ret.  target_lock (a lock-prefixed add, which the kernel refuses to probe)
# is never called.  Exits with the low byte of a checksum that depends on every called
# function having run.
_start:
    mov r12, 3
    mov r8, [rsp]
    cmp r8, 2
    jb rounds
    mov rsi, [rsp + 16]
    xor r12, r12
parse:
    movzx eax, byte ptr [rsi]
    test al, al
    jz rounds
    sub eax, 48
    imul r12, r12, 10
    add r12, rax
    inc rsi
    jmp parse
rounds:
    xor r13, r13
    test r12, r12
    jz finish
round:
    call target_nop
    call target_nop5
    call target_push
    call target_call
    call target_jmp
    call target_jcc
    call target_riprel
    call target_ret
    dec r12
    jnz round
finish:
    mov rax, qword ptr [rip + counter]
    add rax, r13
    mov edi, eax
    and edi, 255
    mov eax, 231
    syscall

target_nop:
    .byte 0x90
    add r13, 1
    ret
target_nop5:
    .byte 0x0f, 0x1f, 0x44, 0x00, 0x00
    add r13, 2
    ret
target_push:
    push rbp
    mov rbp, rsp
    add r13, 3
    pop rbp
    ret
target_call:
    call leaf
    ret
leaf:
    add r13, 4
    ret
target_jmp:
    .byte 0xeb, 0x04
    add r13, 100
    add r13, 5
    ret
target_jcc:
    cmp r13, 0
    .byte 0x75, 0x04
    add r13, 100
    add r13, 6
    ret
target_riprel:
    mov rax, qword ptr [rip + counter]
    add rax, 7
    mov qword ptr [rip + counter], rax
    ret
target_ret:
    ret
target_lock:
    lock add qword ptr [rip + counter], 1
    ret
.data
counter:
    .quad 0
