// interpose/trace_format.h: the on-disk format of a PAGEFAST_TRACE file,
// shared by the recorder (interpose/trace.cpp) and the tools that read it
// (tools/replay). Pure C++17, no CUDA header. Byte-by-byte description:
// docs/TRACE.md.
//
// A file is one 64-byte header followed by 32-byte records, all
// little-endian. Records are in the order the writer drained them (per
// thread in call order, threads interleaved in batches): readers sort by
// t_ns, stably, to get the process-wide order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pagefast::trace_format {

inline constexpr char kMagic[8] = {'P', 'F', 'T', 'R', 'A', 'C', 'E', '1'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kHeaderBytes = 64;
inline constexpr uint32_t kRecordBytes = 32;

// The device byte when the device is not known (no current context, a
// free, the lookup failed).
inline constexpr uint8_t kUnknownDevice = 255;

enum class Op : uint8_t {
  Alloc = 1,  // cuMemAlloc_v2: bytes requested, address returned (0 if none)
  Free = 2,   // cuMemFree_v2: address given, bytes 0
  Lost = 3,   // a marker: `bytes` records of thread `thread` were dropped
};
inline constexpr uint8_t kMaxOp = 3;

// Offsets of the header fields (docs/TRACE.md "Header").
struct Header {
  char magic[8];           // 0: "PFTRACE1"
  uint32_t version;        // 8: kVersion
  uint32_t header_bytes;   // 12: kHeaderBytes
  uint32_t record_bytes;   // 16: kRecordBytes
  uint32_t pid;            // 20: the traced process
  uint64_t start_wall_ns;  // 24: CLOCK_REALTIME at trace start, ns since the epoch
  uint64_t start_mono_ns;  // 32: CLOCK_MONOTONIC at trace start (t_ns = 0)
  uint32_t ring_records;   // 40: per-thread ring capacity, in records
  uint32_t flags;          // 44: 0 (reserved)
  uint8_t reserved[16];    // 48: zero
};
static_assert(sizeof(Header) == kHeaderBytes, "header layout");
static_assert(offsetof(Header, start_wall_ns) == 24 && offsetof(Header, ring_records) == 40, "header layout");

struct Record {
  uint64_t t_ns;     // 0: ns since the trace start, CLOCK_MONOTONIC
  uint64_t address;  // 8: pointer returned (alloc) or given (free); 0 for lost
  uint64_t bytes;    // 16: bytes requested (alloc), 0 (free), records dropped (lost)
  uint32_t thread;   // 24: per-process thread index, 0 = the first thread that traced
  uint16_t result;   // 28: the CUresult returned (0xffff if it does not fit)
  uint8_t op;        // 30: Op
  uint8_t device;    // 31: device ordinal of the current context, kUnknownDevice if none
};
static_assert(sizeof(Record) == kRecordBytes, "record layout");
static_assert(offsetof(Record, thread) == 24 && offsetof(Record, op) == 30, "record layout");

// The formats are written with memcpy of these structs: little-endian hosts
// only (x86-64, aarch64), which is what pagefast runs on.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "trace files are little-endian");

inline bool magic_ok(const void* bytes) { return std::memcmp(bytes, kMagic, sizeof kMagic) == 0; }

}  // namespace pagefast::trace_format
