// policy/spin.h: the spin-wait hint of every busy-wait in pagefast (the
// thread caches' owner lock, the quarantine's sync waiters, the trace
// recorder's full-ring wait).
#pragma once

namespace pagefast::policy {

// A spin-wait hint to the processor (x86 pause, Arm yield).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace pagefast::policy
