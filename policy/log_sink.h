// policy/log_sink.h: the one logging hook that pure code (policy/, numa/)
// may call. It carries no dependency on spdlog: interpose/ installs a sink
// that forwards to the real logger; tests install one that records lines.
// Never call it on an allocation hot path.
#pragma once

namespace pagefast {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

// REQUIRES: message is a complete line without the "pagefast:" prefix.
using LogSink = void (*)(LogLevel level, const char* message);

}  // namespace pagefast
