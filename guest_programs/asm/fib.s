# fib: N iterations of a fibonacci step (N = argv[1] in decimal, default 10000000);
# exits with the low byte of the result.  Compute-bound: no syscalls in the loop.
_start:
    mov rcx, 10000000
    mov r8, [rsp]
    cmp r8, 2
    jb run
    mov rsi, [rsp + 16]
    xor rcx, rcx
parse:
    movzx eax, byte ptr [rsi]
    test al, al
    jz run
    sub eax, 48
    imul rcx, rcx, 10
    add rcx, rax
    inc rsi
    jmp parse
run:
    xor eax, eax
    mov ebx, 1
fib_loop:
    lea rdx, [rax + rbx]
    mov rax, rbx
    mov rbx, rdx
    dec rcx
    jnz fib_loop
    mov edi, eax
    and edi, 255
    mov eax, 231
    syscall
