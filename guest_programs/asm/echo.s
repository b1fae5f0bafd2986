# echo: copy stdin to stdout until end of input, then exit 0
_start:
    sub rsp, 4096
again:
    xor eax, eax
    xor edi, edi
    mov rsi, rsp
    mov edx, 4096
    syscall
    test rax, rax
    jle done
    mov rdx, rax
    mov eax, 1
    mov edi, 1
    mov rsi, rsp
    syscall
    jmp again
done:
    mov eax, 231
    xor edi, edi
    syscall
