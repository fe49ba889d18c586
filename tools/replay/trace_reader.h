// tools/replay/trace_reader.h: reads and checks a PAGEFAST_TRACE file
// (interpose/trace_format.h, docs/TRACE.md). Pure C++, no CUDA.
#pragma once

#include <string>
#include <vector>

#include "interpose/trace_format.h"

namespace pagefast::replay {

struct Trace {
  trace_format::Header header;
  std::vector<trace_format::Record> records;  // in file order
};

// Reads `path` into *out. false: *error says what is wrong, naming the
// file and the byte offset ("FILE: byte offset N: ..."). Never throws.
bool read_trace(const std::string& path, Trace* out, std::string* error);

const char* op_name(uint8_t op);

}  // namespace pagefast::replay
