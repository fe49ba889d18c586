// tools/stat/pagefast-stat.cpp: lists this user's processes running with
// pagefast and their live figures (per device: reserved, mapped, in use,
// idle, peak; hits, growths, stitches, releases, synchronisations,
// pass-throughs; per tag: state, resident, asleep, kept, in-use bytes, sleeps,
// wakes), from their segments (interpose/live/segment.h), as a table, JSON
// or Prometheus text (tools/stat/prometheus.h). Needs no GPU, calls no CUDA
// function. A segment is input from another process: every string printed
// is valid UTF-8 and escaped, and the NUMA report goes into JSON only when
// it is a JSON value (tools/stat/json_check.h).
//
//   pagefast-stat [--json | --prometheus [--textfile DIR]] [--watch SECONDS] [--count N]
//                 [--pid PID] [--all] [--dir DIR]
#include <getopt.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "interpose/live/segment.h"
#include "policy/config.h"
#include "policy/format.h"
#include "policy/json.h"
#include "policy/options.h"
#include "policy/summary.h"
#include "tools/stat/json_check.h"
#include "tools/stat/prometheus.h"

namespace {

constexpr int kExitNoMatch = 3;  // --pid: no listed process has it

using pagefast::append_json_string;
using pagefast::live::DeviceFigures;
using pagefast::live::Listing;
using pagefast::live::ReadStatus;

struct Options {
  bool json = false;
  bool prometheus = false;
  std::string textfile_dir;  // --textfile: write DIR/pagefast.prom instead of stdout
  double watch_s = 0;        // 0: once
  long count = -1;           // rounds with --watch; -1: until interrupted
  long pid = -1;
  bool all = false;  // also list segments that could not be read
  std::string dir;
};

void usage(FILE* out) {
  std::fprintf(out,
               "usage: pagefast-stat [--json | --prometheus [--textfile DIR]] [--watch SECONDS] [--count N]\n"
               "                     [--pid PID] [--all] [--dir DIR]\n"
               "Lists this user's processes running with pagefast and their pool figures\n"
               "(each column and word: docs/GLOSSARY.md).\n"
               "  --json        one JSON document per round instead of a table\n"
               "  --prometheus  Prometheus text exposition format instead of a table\n"
               "  --textfile D  with --prometheus: write D/pagefast.prom atomically each round\n"
               "                (node exporter's textfile collector), not stdout\n"
               "  --watch S     print again every S seconds (like nvidia-smi -l)\n"
               "  --count N     with --watch: stop after N rounds\n"
               "  --pid PID     only this process\n"
               "  --all         also list segments that could not be read, and stale ones removed\n"
               "  --dir DIR     where the segments are (default $PAGEFAST_LIVE_DIR or /dev/shm)\n"
               "  --version     print the version\n"
               "A process marked * runs in another pid namespace (a container): its pid is that\n"
               "namespace's, and its segment is never removed from here.\n"
               "Exit status: 0 done, 1 --textfile could not be written, 2 usage error,\n"
               "3 --pid: no process with pagefast has that pid (in the last round).\n");
}

std::string human(uint64_t bytes) { return pagefast::format_bytes(bytes, pagefast::ByteStyle::Table); }

std::string count(uint64_t n) {
  char buf[32];
  if (n < 100000) std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n));
  else if (n < 100000000) std::snprintf(buf, sizeof buf, "%.1fk", double(n) / 1e3);
  else std::snprintf(buf, sizeof buf, "%.1fM", double(n) / 1e6);
  return buf;
}

uint64_t now_unix_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

std::string age(uint64_t then_ns, uint64_t now_ns) {
  const double s = now_ns > then_ns ? double(now_ns - then_ns) / 1e9 : 0;
  char buf[32];
  if (s < 120) std::snprintf(buf, sizeof buf, "%.1fs", s);
  else if (s < 7200) std::snprintf(buf, sizeof buf, "%.0fm", s / 60);
  else std::snprintf(buf, sizeof buf, "%.1fh", s / 3600);
  return buf;
}

const char* mode_word(uint64_t mode) {
  return pagefast::mode_name(mode <= uint64_t(pagefast::Mode::PassThrough) ? pagefast::Mode(mode)
                                                                           : pagefast::Mode::PassThrough);
}

std::vector<pagefast::policy::PoolStats> pool_figures(const pagefast::live::Snapshot& s) {
  std::vector<pagefast::policy::PoolStats> out;
  for (const DeviceFigures& d : s.devices) out.push_back(d.stats);
  return out;
}

// What pagefast did, in one line: the pool's summary when it serves; for
// pool:off, the calls forwarded; else the state's word and why.
std::string summary(const pagefast::live::Snapshot& s) {
  if (s.mode == uint64_t(pagefast::Mode::Active)) return pagefast::summary_line(s.alloc_calls, pool_figures(s));
  if (s.reason == "pool:off")
    return std::string(mode_word(s.mode)) + ": " + pagefast::forwarded_summary_line(s.alloc_calls);
  return std::string(mode_word(s.mode)) + ": " + s.reason;
}

// The process's sleep in words (policy/summary.h sleep_words).
std::string sleep_of(const pagefast::live::Snapshot& s) {
  bool any = false, partly = false;
  for (const DeviceFigures& d : s.devices) {
    any = any || d.asleep;
    partly = partly || d.partly;
  }
  int asleep_tags = 0;
  for (const pagefast::policy::TagStats& t : s.tags) asleep_tags += t.asleep ? 1 : 0;
  return pagefast::sleep_words(any, partly, asleep_tags, int(s.tags.size()));
}

const char* device_sleep(const DeviceFigures& d) { return d.partly ? "partly" : (d.asleep ? "asleep" : "awake"); }

// The terminal's width: COLUMNS when set, else the terminal's own; 0 when
// neither is known (a pipe): then nothing is cut.
size_t terminal_columns() {
  if (const char* c = std::getenv(pagefast::option_name(pagefast::Opt::Columns))) {
    const long n = std::strtol(c, nullptr, 10);
    if (n > 0) return size_t(n);
  }
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

// Text for one line of the table: control characters (which would move
// the terminal's cursor) as '?', cut to `room` characters when known.
std::string cut_text(std::string text, size_t room) {
  for (char& ch : text)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  if (room == 0 || text.size() <= room) return text;
  return pagefast::live::utf8_cut(text, room > 3 ? room - 3 : 0) + "...";
}

// The command as a user tells jobs apart: the program's name without its
// directory (/root/.pyenv/versions/3.11.7/bin/python is "python"), then
// its script and arguments, cut to `room` characters when room is known.
std::string shown_command(const std::string& command, size_t room) {
  const size_t space = command.find(' ');
  const std::string program = command.substr(0, space);
  const size_t slash = program.rfind('/');
  std::string out = slash == std::string::npos ? program : program.substr(slash + 1);
  if (space != std::string::npos) out += command.substr(space);
  return cut_text(out, room);
}

// Shown as a process: read whole, not stale, and its name agrees with it.
bool listed(const Listing& l) { return l.status == ReadStatus::Ok && !l.stale && l.detail.empty(); }

void print_json(const std::vector<Listing>& listings, const Options& o) {
  const uint64_t now = now_unix_ns();
  std::string out = "{\"time_unix_ns\": " + std::to_string(now) + ", \"processes\": [";
  bool first = true;
  for (const Listing& l : listings) {
    if (!listed(l)) continue;
    const auto& s = l.snapshot;
    out += first ? "\n  " : ",\n  ";
    first = false;
    out += "{\"pid\": " + std::to_string(s.pid) + ", \"pidns\": " + std::to_string(s.pidns) +
           ", \"foreign\": " + (l.foreign ? "true" : "false") + ", \"local_rank\": " +
           (s.local_rank == pagefast::live::kNoRank ? std::string("null") : std::to_string(s.local_rank)) +
           ", \"host\": ";
    append_json_string(out, s.host);
    out += ", \"command\": ";
    append_json_string(out, s.command);
    out += std::string(", \"mode\": \"") + mode_word(s.mode) + "\", \"reason\": ";
    append_json_string(out, s.reason);
    out += ", \"summary\": ";
    append_json_string(out, summary(s));
    out += ", \"config\": ";
    append_json_string(out, s.config);
    out += ", \"started_unix_ns\": " + std::to_string(s.created_unix_ns) +
           ", \"updated_unix_ns\": " + std::to_string(s.updated_unix_ns) +
           ", \"publishes\": " + std::to_string(s.publishes) +
           ", \"calls\": {\"cuMemAlloc_v2\": " + std::to_string(s.alloc_calls) +
           ", \"cuMemFree_v2\": " + std::to_string(s.free_calls) + "}, \"numa\": ";
    out += pagefast::stat::is_json_value(s.numa) ? s.numa : "null";
    out += ", \"devices\": {";
    for (size_t i = 0; i < s.devices.size(); ++i) {
      out += i ? ", \"" : "\"";
      const std::string fields = pagefast::policy::stats_json_object(s.devices[i].stats, false);
      const DeviceFigures& d = s.devices[i];
      out += std::to_string(d.device) + "\": {\"asleep\": " + (d.asleep && !d.partly ? "true" : "false") +
             ", \"sleep\": \"" + device_sleep(d) + "\", " + fields.substr(1);
    }
    out += "}, \"sleep\": \"" + sleep_of(s) + "\", \"tags\": " + pagefast::policy::tags_json_array(s.tags) + "}";
  }
  out += first ? "]" : "\n]";
  if (o.all) {
    out += ", \"other_segments\": [";
    bool f = true;
    for (const Listing& l : listings) {
      if (listed(l)) continue;
      out += f ? "" : ", ";
      f = false;
      out += "{\"path\": ";
      append_json_string(out, l.path);
      out += std::string(", \"status\": \"") + pagefast::live::status_name(l.status) +
             "\", \"stale\": " + (l.stale ? "true" : "false") + ", \"foreign\": " + (l.foreign ? "true" : "false") +
             ", \"removed\": " + (l.removed ? "true" : "false") + ", \"detail\": ";
      append_json_string(out, l.detail);
      out += "}";
    }
    out += "]";
  }
  out += "}\n";
  std::fputs(out.c_str(), stdout);
}

// One line per tag under the process's rows (docs/STATS.md "Tags"),
// after the words of a partial sleep.
void print_tags(const pagefast::live::Snapshot& s) {
  const std::string sleep = sleep_of(s);
  if (sleep.rfind("partly", 0) == 0) std::printf("%7s   %s\n", "", sleep.c_str());
  for (const pagefast::policy::TagStats& t : s.tags)
    std::printf("%7s   tag %s (%s): %s, resident %s, asleep %s, kept %s, in use %s, %s sleeps, %s wakes\n", "",
                cut_text(t.name, 0).c_str(), t.keep ? "keep" : "discard", t.asleep ? "asleep" : "awake",
                human(t.resident_bytes).c_str(), human(t.asleep_bytes).c_str(), human(t.kept_bytes).c_str(),
                human(t.in_use_bytes).c_str(), count(t.sleeps).c_str(), count(t.wakes).c_str());
}

// The row's figures before COMMAND, one format for the header and the rows.
#define PF_ROW "%7s %6s %-12s %3s %6s %8s %8s %8s %8s %8s %8s %7s %7s %7s %7s %7s  %s\n"

void print_table(const std::vector<Listing>& listings, const Options& o) {
  const uint64_t now = now_unix_ns();
  char stamp[64];
  const time_t t = time(nullptr);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  std::printf("pagefast-stat  %s\n", stamp);
  const int header = std::printf(PF_ROW, "PID", "AGE", "MODE", "GPU", "SLEEP", "RESERVED", "MAPPED", "IN USE", "IDLE",
                                 "PEAK", "HITS", "GROWTHS", "STITCH", "RELEASE", "SYNCS", "PASS", "COMMAND");
  const size_t before_command = header > 8 ? size_t(header) - 8 : 0;  // less "COMMAND\n"
  const size_t columns = terminal_columns();
  // At least 20 characters of the command, whatever the width.
  const size_t room = columns == 0 ? 0 : (columns > before_command + 20 ? columns - before_command : 20);
  int shown = 0, foreign = 0;
  for (const Listing& l : listings) {
    if (!listed(l)) continue;
    const auto& s = l.snapshot;
    ++shown;
    foreign += l.foreign;
    const std::string command = shown_command(s.command, room);
    const std::string pid = std::to_string(s.pid) + (l.foreign ? "*" : "");
    const std::string started = age(s.created_unix_ns, now);
    if (s.devices.empty())
      std::printf(PF_ROW, pid.c_str(), started.c_str(), mode_word(s.mode), "-", "-", "-", "-", "-", "-", "-", "-", "-",
                  "-", "-", "-", "-", command.c_str());
    for (size_t i = 0; i < s.devices.size(); ++i) {
      const DeviceFigures& d = s.devices[i];
      const std::string gpu = std::to_string(d.device);
      std::printf(PF_ROW, pid.c_str(), started.c_str(), mode_word(s.mode), gpu.c_str(), device_sleep(d),
                  human(d.stats.reserved_bytes).c_str(), human(d.stats.mapped_bytes).c_str(),
                  human(d.stats.in_use_bytes).c_str(), human(d.stats.idle_bytes).c_str(),
                  human(d.stats.peak_in_use_bytes).c_str(), count(d.stats.hits).c_str(), count(d.stats.growths).c_str(),
                  count(d.stats.stitches).c_str(), count(d.stats.releases).c_str(),
                  count(d.stats.synchronizations).c_str(), count(d.stats.passthroughs).c_str(),
                  i == 0 ? command.c_str() : "");
    }
    print_tags(s);
    // Why a process is not served, or what pagefast did for it: one line.
    std::printf("%7s   %s\n", "", cut_text(summary(s), columns > 10 ? columns - 10 : 0).c_str());
  }
  if (!shown) std::printf("(no process with pagefast%s)\n", o.pid >= 0 ? " with that pid" : "");
  if (foreign) std::printf("* in another pid namespace: the pid is that namespace's\n");
  if (o.all)
    for (const Listing& l : listings) {
      if (listed(l)) continue;
      std::printf("  %s: %s%s%s%s%s\n", l.path.c_str(), pagefast::live::status_name(l.status), l.stale ? ", stale" : "",
                  l.foreign ? ", other pid namespace" : "", l.removed ? ", removed" : "",
                  l.detail.empty() ? "" : (" (" + l.detail + ")").c_str());
    }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const char* d = std::getenv(pagefast::option_name(pagefast::Opt::LiveDir))) o.dir = d;
  static const option longs[] = {{"json", no_argument, nullptr, 'j'},
                                 {"prometheus", no_argument, nullptr, 'P'},
                                 {"textfile", required_argument, nullptr, 't'},
                                 {"watch", required_argument, nullptr, 'w'},
                                 {"count", required_argument, nullptr, 'c'},
                                 {"pid", required_argument, nullptr, 'p'},
                                 {"all", no_argument, nullptr, 'a'},
                                 {"dir", required_argument, nullptr, 'd'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {"version", no_argument, nullptr, 'V'},
                                 {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "jw:c:p:ad:h", longs, nullptr)) != -1) {
    char* end = nullptr;
    switch (c) {
      case 'j': o.json = true; break;
      case 'P': o.prometheus = true; break;
      case 't': o.textfile_dir = optarg; break;
      case 'V': std::printf("pagefast-stat %s\n", PAGEFAST_VERSION); return 0;
      case 'w':
        o.watch_s = std::strtod(optarg, &end);
        if (!end || *end || o.watch_s <= 0) {
          std::fprintf(stderr, "pagefast-stat: --watch takes a positive number of seconds, not '%s'\n", optarg);
          return 2;
        }
        break;
      case 'c':
        o.count = std::strtol(optarg, &end, 10);
        if (!end || *end || o.count <= 0) {
          std::fprintf(stderr, "pagefast-stat: --count takes a positive integer, not '%s'\n", optarg);
          return 2;
        }
        break;
      case 'p':
        o.pid = std::strtol(optarg, &end, 10);
        if (!end || *end || o.pid <= 0) {
          std::fprintf(stderr, "pagefast-stat: --pid takes a process id, not '%s'\n", optarg);
          return 2;
        }
        break;
      case 'a': o.all = true; break;
      case 'd': o.dir = optarg; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    usage(stderr);
    return 2;
  }
  if (o.json && o.prometheus) {
    std::fprintf(stderr, "pagefast-stat: --json and --prometheus: choose one\n");
    return 2;
  }
  if (!o.textfile_dir.empty() && !o.prometheus) {
    std::fprintf(stderr, "pagefast-stat: --textfile writes the --prometheus text: give both\n");
    return 2;
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string default_host = pagefast::live::utf8_valid(host);
  int status = 0;
  for (long round = 0; o.count < 0 || round < (o.watch_s > 0 ? o.count : 1); ++round) {
    if (round) {
      timespec ts{time_t(o.watch_s), long((o.watch_s - double(time_t(o.watch_s))) * 1e9)};
      nanosleep(&ts, nullptr);
    }
    std::vector<Listing> listings = pagefast::live::list_segments(o.dir, uint64_t(getuid()), true);
    if (o.pid >= 0) {
      std::vector<Listing> kept;
      for (Listing& l : listings)
        if (l.name.pid == uint64_t(o.pid)) kept.push_back(std::move(l));
      listings.swap(kept);
      // Nothing to show for that pid: said by the exit status too.
      bool any = false;
      for (const Listing& l : listings) any = any || listed(l);
      if (!any) status = status == 1 ? 1 : kExitNoMatch;
      else if (status == kExitNoMatch) status = 0;
    }
    if (o.prometheus) {
      const std::string text = pagefast::stat::prometheus_text(listings, default_host);
      std::string error;
      if (o.textfile_dir.empty()) {
        std::fputs(text.c_str(), stdout);
      } else if (!pagefast::stat::write_textfile(o.textfile_dir, text, &error)) {
        // With --watch, a full disk now may be free at the next round.
        std::fprintf(stderr, "pagefast-stat: cannot write the textfile: %s\n", error.c_str());
        status = 1;
      }
    } else if (o.json) {
      print_json(listings, o);
    } else {
      print_table(listings, o);
    }
    std::fflush(stdout);
    if (o.watch_s <= 0) break;
  }
  return status;
}
