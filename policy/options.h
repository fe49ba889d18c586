// policy/options.h: the one table of everything a user can set: every
// environment variable pagefast reads and every PAGEFAST_CONF key, one row
// each (name, parser, default, path or not, who reads it, one-line
// meaning), in the style of mimalloc's options table. Readers name a
// variable by its index (Opt::LiveDir), never by a string of their own;
// config.cpp parses through the rows; docs/OPTIONS.md's tables and
// pagefast-run --help are generated from them (tools/options, checked by
// the test `options docs`).
//
// Pure C++, no CUDA. The table is constant-initialised (no constructor
// runs), so the library's constructor may read it before any dynamic
// initialiser: runtime.cpp's env lookup does. The lookups below allocate
// nothing; parse_value takes std::string as the parsers always did.
#pragma once

#include <cstdint>
#include <string>

#include "policy/parsers.h"

namespace pagefast {

// One index per row, in table order: the variables, then the keys of
// PAGEFAST_CONF (whose order is also the order of the accepted-keys list
// in an error message).
enum class Opt : int {
  // Variables of pagefast's own.
  Pagefast,
  Conf,
  Strict,
  Log,
  LogFile,
  Stats,
  Report,
  Trace,
  LiveDir,
  IpcDir,
  IpcIdle,
  Sysroot,
  Library,
  Commit,
  Said,
  NumaBound,
  // Variables set by launchers and CUDA, read as they set them.
  LocalRank,
  SlurmLocalId,
  OmpiLocalRank,
  MpiLocalRankId,
  CudaVisibleDevices,
  CudaDeviceOrder,
  Columns,
  // PAGEFAST_CONF keys.
  KeyPool,
  KeyChunkSize,
  KeyReleaseThreshold,
  KeyLimit,
  KeyHeadroom,
  KeyPrewarm,
  KeyReserve,
  KeyVmmCache,
  KeyVmmGrowAhead,
  KeyReleaseDelay,
  KeySlack,
  KeyBigChunks,
  KeyIdleShare,
  KeyGrowAhead,
  KeyKeepIdle,
  KeyControl,
  KeySleepHostKeep,
  KeySleepPrelock,
  KeyNuma,
  KeyReport,
  KeyStats,
  Count
};

// What a value is, for the parser and for the docs.
enum class Kind : uint8_t {
  OnOff,      // the one on/off parser (on, 1, true / off, 0, false)
  Size,       // the one size parser (K/M/G/T) under a SizeRule
  Time,       // parse_delay: 5s, 500ms, 250us, 2m, off
  Count,      // a decimal number up to Parser::max
  Choice,     // the one enum parser: a word from Parser::choices
  Keys,       // PAGEFAST_CONF's key:value list
  Path,       // a file; %p, %r, %h expanded (interpose/files.h)
  Directory,  // a directory, taken as given
  Text,       // taken as given
};

// Where a row is set.
enum class Scope : uint8_t {
  Own,      // an environment variable of pagefast's
  Foreign,  // an environment variable of a launcher or of CUDA
  ConfKey,  // a key of PAGEFAST_CONF
};

// Who reads a row (a bit set), for the docs.
enum Reader : uint8_t {
  kReadByLibrary = 1,      // libpagefast.so
  kReadByLauncher = 2,     // pagefast-run (and its helpers pagefast-enabled, pagefast-numa-report)
  kReadByStat = 4,         // pagefast-stat
  kReadByCtl = 8,          // pagefast-ctl
  kReadByGpuScripts = 16,  // tools/gpu-check, tools/bench
};

// A row's parser: its kind and, per kind, the rule (parse_value uses them).
struct Parser {
  Kind kind;
  SizeRule size{};                  // Size
  const Choice* choices = nullptr;  // Choice
  int choice_count = 0;
  bool fold_case = false;  // Choice: any case
  uint64_t max = 0;        // Count
};

struct OptionRow {
  Opt index;         // its own position: checked at compile time
  const char* name;  // the variable, or the key
  Scope scope;
  const Parser* parser;
  const char* accepts;  // what the parser takes: the words of a bad value's message
  // As the parser takes it ("" when the default is "unset"); the test
  // `options` checks that it gives the built-in value (config.h).
  const char* default_value;
  bool path;            // names a file or directory: ignored in secure execution
  uint8_t readers;      // Reader bits
  const char* meaning;  // one line (markdown backticks allowed; stripped for --help)
  const char* notes;    // more for docs/OPTIONS.md, appended after "; " ("" when none)
};

// The row of `o`, and its name (the variable or key).
const OptionRow& option(Opt o);
inline const char* option_name(Opt o) { return option(o).name; }

// Every row, in table order.
const OptionRow* option_rows(int* count);

// The row of variable `name` / of PAGEFAST_CONF key `key`, or nullptr.
const OptionRow* find_variable(const char* name);
const OptionRow* find_conf_key(const std::string& key);

// Whether variable `name` must read as unset in a process whose AT_SECURE
// is `at_secure`: a path variable in secure execution. Pure.
bool hidden_in_secure_execution(const char* name, unsigned long at_secure);
bool hidden_in_secure_execution(Opt o, unsigned long at_secure);

// A parsed value. OnOff and Choice: choice (the Choice's value) and arg
// (its number, or -1); Size, Time, Count: number.
struct Value {
  int choice = 0;
  int arg = -1;
  uint64_t number = 0;
};

// Parses `text` (already trimmed where the reader trims) with the row's
// parser. Path, Directory, Text and Keys rows take any text.
bool parse_value(Opt o, const std::string& text, Value* out);

// The one message for a bad value of `o`: "NAME: bad value 'V' (accepted:
// ...)" for a variable, "PAGEFAST_CONF: bad value 'V' for key 'K'
// (accepted: ...)" for a key.
std::string bad_value_message(Opt o, const std::string& value);

// The values of Opt::Log's Choice: LogLevel's, and off.
constexpr int kLogOff = -1;
// The values of Opt::KeyNuma's Choice: NumaMode's (config.h), and gpu=<n>.
constexpr int kNumaGpu = 4;

}  // namespace pagefast
