/* interpose/dlsym_trampoline.S: pagefast's exported dlsym.
 *
 * glibc's dlsym resolves RTLD_NEXT (and the scope of RTLD_DEFAULT) relative
 * to the object that called it, found from its return address. A C wrapper
 * that calls the real dlsym would make every lookup look as if libpagefast
 * made it. So this entry asks pf_dlsym_decide (C++) for a replacement and,
 * when there is none, jumps to the real dlsym with the caller's own return
 * address and arguments untouched: every name outside the table behaves
 * exactly as without pagefast. pf_dlsym_decide returns 1 when the answer
 * is NULL (a table name whose only definition is pagefast's own, while no
 * driver is loaded: without pagefast the lookup would find nothing).
 */
#if defined(__x86_64__)
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
        subq    $8, %rsp
        .cfi_adjust_cfa_offset 8
        call    pf_dlsym_decide
        addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        testq   %rax, %rax
        jnz     1f
        jmp     *pf_real_dlsym_ptr(%rip)
1:
        cmpq    $1, %rax        /* 1: the answer is NULL */
        jne     2f
        xorl    %eax, %eax
2:
        ret
        .cfi_endproc
        .size   dlsym, .-dlsym
#endif
        .section .note.GNU-stack,"",@progbits
