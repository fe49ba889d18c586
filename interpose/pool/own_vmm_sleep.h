// interpose/pool/own_vmm_sleep.h: what sleep by slot of the program's own
// VMM memory (own_vmm_sleep.cpp) and the translation of its handle values
// (own_vmm_translate.cpp) share: the book (policy/own_vmm/sleep_book.h)
// and the one mutex that guards it, held across sleep, wake and every
// translated call (the book, then the cache's lock, then the ledger's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "policy/own_vmm/sleep_book.h"

namespace pagefast::pool::own_vmm {

std::mutex& book_mutex();
// REQUIRES: book_mutex() held.
policy::own_vmm::SleepBook& book();
// A host copy sleep made (page-locked; null: nothing).
void free_host_copy(void* host);
// REQUIRES: book_mutex() held. The aliases of those of `driver` (the
// driver's values) the program holds nothing of any more (the ledger
// says) go.
void prune_aliases(const uint64_t* driver, size_t count);
// REQUIRES: book_mutex() held. After the book changed (sleep, wake, a
// handle asleep released or unmapped for good): the per-slot figures that
// slot_bytes reads without the lock (status and stats never wait for a
// sleep's copy) are set from it.
void mirror_figures();

}  // namespace pagefast::pool::own_vmm
