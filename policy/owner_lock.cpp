// policy/owner_lock.cpp: the asymmetric barrier of the thread caches'
// owner locks (owner_lock.h) and their slow halves.
#include "policy/owner_lock.h"

#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "policy/state.h"

namespace pagefast::policy {
namespace {

__attribute__((tls_model("initial-exec"))) thread_local char t_token;

constexpr int kUndecided = 0, kMembarrier = 1, kShootdown = 2;

long membarrier(int command) { return syscall(__NR_membarrier, command, 0, 0); }

bool register_expedited() { return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0; }

// Taking write access from a page that the process maps makes the kernel
// interrupt every processor that may run it (a TLB shootdown), which
// fences each of them as the barrier would. The page is written first, so
// that the change of access has a mapping to take away.
void shootdown(void* page) {
  mprotect(page, 1, PROT_READ | PROT_WRITE);
  *static_cast<volatile char*>(page) = 0;
  mprotect(page, 1, PROT_READ);
}

// The page of the shootdown, made once (racing first callers: one keeps
// theirs, the others unmap).
void* shootdown_page() {
  void* page = g_state.barrier_page.load(std::memory_order_acquire);
  if (page) return page;
  void* made = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (made == MAP_FAILED) return nullptr;
  if (g_state.barrier_page.compare_exchange_strong(page, made, std::memory_order_acq_rel)) return made;
  munmap(made, 4096);
  return page;
}

int decide() {
  int kind = g_state.barrier.load(std::memory_order_acquire);
  if (kind != kUndecided) return kind;
  const long offered = membarrier(MEMBARRIER_CMD_QUERY);
  const bool expedited = offered > 0 && (offered & MEMBARRIER_CMD_PRIVATE_EXPEDITED) && register_expedited();
  int undecided = kUndecided;
  g_state.barrier.compare_exchange_strong(undecided, expedited ? kMembarrier : kShootdown, std::memory_order_acq_rel);
  return g_state.barrier.load(std::memory_order_acquire);
}

}  // namespace

void asymmetric_barrier() {
  g_state.barriers_run.fetch_add(1, std::memory_order_relaxed);
  if (decide() == kMembarrier) {
    if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
    // A child of fork may have to register again.
    if (errno == EPERM && register_expedited() && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  }
  if (void* page = shootdown_page()) {
    shootdown(page);
    return;
  }
  // No page for the shootdown either (the host out of memory): a
  // membarrier of the global kind, which waits for every processor to
  // pass a scheduling point, the slowest barrier there is.
  membarrier(MEMBARRIER_CMD_GLOBAL);
}

uint64_t barriers_run() { return g_state.barriers_run.load(std::memory_order_relaxed); }

BarrierKind barrier_kind() { return decide() == kMembarrier ? BarrierKind::Membarrier : BarrierKind::Shootdown; }

BarrierKind set_barrier_kind_for_test(BarrierKind kind) {
  const BarrierKind before = barrier_kind();
  g_state.barrier.store(kind == BarrierKind::Membarrier ? kMembarrier : kShootdown, std::memory_order_release);
  return before;
}

const void* owner_token() { return &t_token; }

bool OwnerLock::owner_idle() {
  asymmetric_barrier();
  return busy_.load(std::memory_order_acquire) == 0;
}

void OwnerLock::wait_for_owner() {
  asymmetric_barrier();
  // The owner's quick section is a few dozen instructions; it may have
  // been switched out inside one.
  for (int spins = 0; busy_.load(std::memory_order_acquire) != 0;) {
    if (++spins > kSpinsBeforeYield) sched_yield();
    else cpu_relax();
  }
}

}  // namespace pagefast::policy
