# exit42: exit(42) through the plain exit syscall
_start:
    mov eax, 60
    mov edi, 42
    syscall
