// dlsym(handle, name) for x86-64. See dlsym_hook.cc. The pass-through path restores the
// argument registers and the stack exactly as the caller left them and jumps to libc's dlsym,
// whose __builtin_return_address then is the original caller.
        .text
        .globl  dlsym
        .type   dlsym, @function
        .p2align 4
dlsym:
        .cfi_startproc
        endbr64
        pushq   %rdi
        .cfi_adjust_cfa_offset 8
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        subq    $8, %rsp                    // 16-byte alignment for the call
        .cfi_adjust_cfa_offset 8
        movq    24(%rsp), %rdx              // the caller's return address
        call    fragscope_dlsym_decide
        addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        testq   %rax, %rax
        jz      1f
        ret                                 // answered with our wrapper
1:      jmp     *fragscope_real_dlsym(%rip)
        .cfi_endproc
        .size   dlsym, .-dlsym
        .section .note.GNU-stack,"",@progbits
