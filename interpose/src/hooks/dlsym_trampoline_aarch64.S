// dlsym(handle, name) for aarch64. See dlsym_hook.cc. The pass-through path restores x0, x1,
// the frame and the link register exactly as the caller left them and branches (no link) to
// libc's dlsym, whose __builtin_return_address then is the original caller.
        .text
        .globl  dlsym
        .type   dlsym, %function
        .p2align 4
dlsym:
        .cfi_startproc
        hint    #34                         // bti c (a no-op where BTI is off)
        stp     x29, x30, [sp, #-32]!
        .cfi_def_cfa_offset 32
        .cfi_offset 29, -32
        .cfi_offset 30, -24
        mov     x29, sp
        stp     x0, x1, [sp, #16]
        mov     x2, x30                     // the caller's return address
        bl      fragscope_dlsym_decide
        mov     x9, x0
        ldp     x0, x1, [sp, #16]
        ldp     x29, x30, [sp], #32
        .cfi_restore 29
        .cfi_restore 30
        .cfi_def_cfa_offset 0
        cbz     x9, 1f
        mov     x0, x9                      // answered with our wrapper
        ret
1:      adrp    x16, fragscope_real_dlsym
        ldr     x16, [x16, :lo12:fragscope_real_dlsym]
        br      x16
        .cfi_endproc
        .size   dlsym, .-dlsym
        .section .note.GNU-stack,"",%progbits
