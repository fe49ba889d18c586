// policy/grow_ahead.h: growth ahead of the pool (docs/POOL.md "Growth
// ahead"). A program that grows (a first pass, PyTorch's caching allocator
// filling its cache) makes the pool grow on its own thread, a driver
// create, map and access of a chunk each time (about 70 us for 256 MiB on
// an H100, more while the device is busy). Growth ahead maps the next
// chunk on a service thread while the program still allocates from what
// is free, bounded by what the program has needed: the pool never grows
// ahead beyond `percent` over the peak of what was in use.
//
// Pure: the caller reads the figures (lock-free mirrors) on its slow path
// and, for a step, asks the service thread.
#pragma once

#include <cstdint>

#include "policy/units.h"

namespace pagefast::policy {

// A step of growth ahead is at least this (smaller ones would be chunks
// whose access call costs more per byte than they save).
constexpr Granules kMinAheadGranules = Granules(8);

// What growth ahead may take the pool's mapped memory to: the peak in use
// plus `percent` of it (0 with percent 0), but for a program whose peak
// fits in the device's idle bound (keep_idle, policy/device_budget.h;
// kNoLimit: none) no more than that bound, so that such a program, freed
// whole, is not taken over it by memory it never used (which would then
// go back at once, and be grown again by its next round).
uint64_t grow_ahead_ceiling(uint64_t peak_in_use_bytes, int percent, uint64_t idle_bound_bytes);
// The granules to map ahead now, or 0: what the ceiling leaves over what
// is mapped, at most a chunk, when what is free is less than that step
// (the program would soon need it); no step at all when the ceiling leaves
// less than kMinAheadGranules, or when the step and what is free together
// could not hold `request` (the size the program asked for last: a step it
// cannot use would only be grown past by a growth on demand).
Granules grow_ahead_step(uint64_t ceiling_bytes, uint64_t mapped_bytes, uint64_t free_bytes, Granules chunk,
                         Granules request);

}  // namespace pagefast::policy
