// tools/stat/prometheus.cpp: the text exposition (prometheus.h). The pool's
// families come from policy/pool_stats.h's field table, so a new figure is
// exported without a second list to keep.
#include "tools/stat/prometheus.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "policy/config.h"

namespace pagefast::stat {
namespace {

using live::Listing;
using live::ReadStatus;

// Label values escape backslash, double quote and newline; HELP text
// backslash and newline (the format's rules).
std::string escaped(const std::string& text, bool quote) {
  std::string out;
  for (const char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"' && quote) out += "\\\"";
    else out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string number(uint64_t v) { return std::to_string(v); }

struct Sample {
  std::string labels;  // {a="b",...}
  std::string value;
};

struct Family {
  std::string name, type, help;
  std::vector<Sample> samples;
  bool from_ns = false;  // the figure is in nanoseconds, the family in seconds
};

void emit(std::string& out, const Family& f) {
  out += "# HELP " + f.name + " " + escaped(f.help, false) + "\n";
  out += "# TYPE " + f.name + " " + f.type + "\n";
  for (const Sample& s : f.samples) out += f.name + s.labels + " " + s.value + "\n";
}

std::string process_labels(const live::Snapshot& s, const std::string& default_host) {
  const std::string rank = s.local_rank == live::kNoRank ? "" : std::to_string(s.local_rank);
  return "pid=\"" + std::to_string(s.pid) + "\",pidns=\"" + std::to_string(s.pidns) + "\",rank=\"" + rank +
         "\",host=\"" + escaped(s.host.empty() ? default_host : s.host, true) + "\"";
}

// A pool figure's family: bytes are gauges; times in ns become seconds
// counters; the rest are event counts.
Family pool_family(const char* field, const char* meaning) {
  std::string name = field;
  Family f;
  f.help = meaning;
  if (name.size() > 6 && name.compare(name.size() - 6, 6, "_bytes") == 0) {
    f.type = "gauge";
  } else if (name.size() > 3 && name.compare(name.size() - 3, 3, "_ns") == 0) {
    name = name.substr(0, name.size() - 3) + "_seconds_total";
    f.type = "counter";
    f.from_ns = true;
  } else {
    name += "_total";
    f.type = "counter";
  }
  f.name = "pagefast_" + name;
  return f;
}

// A tag figure's family: named as the pool's, under pagefast_tag_.
Family tag_family(const char* field, const char* meaning) {
  Family f = pool_family(field, meaning);
  f.name = "pagefast_tag_" + f.name.substr(std::strlen("pagefast_"));
  return f;
}

// The per-tag families of one process (docs/STATS.md "Prometheus"), one
// series per tag and policy.
void add_tag_samples(const live::Snapshot& s, const std::string& labels, Family* asleep, std::vector<Family>* tag) {
  std::vector<std::pair<std::string, bool>> seen;  // one series per tag and policy, however a segment was altered
  for (const policy::TagStats& t : s.tags) {
    bool dup = false;
    for (const auto& x : seen) dup |= x.first == t.name && x.second == t.keep;
    if (dup) continue;
    seen.emplace_back(t.name, t.keep);
    const std::string tag_labels =
        "{" + labels + ",tag=\"" + escaped(t.name, true) + "\",policy=\"" + (t.keep ? "keep" : "discard") + "\"}";
    asleep->samples.push_back({tag_labels, t.asleep ? "1" : "0"});
    std::vector<uint64_t> values;  // in the field table's order, as tag[]
#define PF_PROM_TAG_VALUE(name, meaning) values.push_back(t.name);
    PAGEFAST_TAG_FIELDS(PF_PROM_TAG_VALUE)
#undef PF_PROM_TAG_VALUE
    for (size_t k = 0; k < tag->size(); ++k) (*tag)[k].samples.push_back({tag_labels, number(values[k])});
  }
}

}  // namespace

std::string prometheus_text(const std::vector<Listing>& listings, const std::string& default_host) {
  std::vector<const live::Snapshot*> live;
  for (const Listing& l : listings)
    if (l.status == ReadStatus::Ok && !l.stale && l.detail.empty()) live.push_back(&l.snapshot);

  Family processes{"pagefast_processes", "gauge", "processes with pagefast whose live segment was read", {}};
  processes.samples.push_back({"{host=\"" + escaped(default_host, true) + "\"}", number(uint64_t(live.size()))});
  Family started{
      "pagefast_process_start_time_seconds", "gauge", "when the process made its live segment (Unix time)", {}};
  Family updated{"pagefast_last_update_time_seconds",
                 "gauge",
                 "when the process last published its figures (Unix time; every 0.5 s while it runs)",
                 {}};
  Family allocs{"pagefast_alloc_calls_total", "counter", "cuMemAlloc_v2 calls seen", {}};
  Family frees{"pagefast_free_calls_total", "counter", "cuMemFree_v2 calls seen", {}};
  Family info{"pagefast_process_info",
              "gauge",
              "1 for each process; mode: active (the pool serves), off (PAGEFAST=0 or pool:off) or pass-through (a "
              "setting was refused: nothing served); reason: why not active",
              {}};
  Family active{"pagefast_active", "gauge", "1 when the pool serves the process (mode active), else 0", {}};
  Family asleep{"pagefast_asleep",
                "gauge",
                "1 while every pool of the device is asleep (pagefast-ctl sleep), else 0; a sleep of some tags "
                "only leaves it 0 and sets pagefast_partly_asleep",
                {}};
  Family partly{"pagefast_partly_asleep",
                "gauge",
                "1 while some of the device's pools are asleep (a tag's sleep) and others awake, else 0",
                {}};
  std::vector<Family> pool;
#define PF_PROM_FAMILY(name, meaning) pool.push_back(pool_family(#name, meaning));
  PAGEFAST_POOL_STATS_FIELDS(PF_PROM_FAMILY)
#undef PF_PROM_FAMILY
  Family tag_asleep{"pagefast_tag_asleep", "gauge", "1 while the tag is asleep (pagefast_sleep_tag), else 0", {}};
  std::vector<Family> tag;
#define PF_PROM_TAG_FAMILY(name, meaning) tag.push_back(tag_family(#name, meaning));
  PAGEFAST_TAG_FIELDS(PF_PROM_TAG_FAMILY)
#undef PF_PROM_TAG_FAMILY

  for (const live::Snapshot* s : live) {
    const std::string labels = process_labels(*s, default_host);
    started.samples.push_back({"{" + labels + "}", number(double(s->created_unix_ns) / 1e9)});
    updated.samples.push_back({"{" + labels + "}", number(double(s->updated_unix_ns) / 1e9)});
    allocs.samples.push_back({"{" + labels + "}", number(s->alloc_calls)});
    frees.samples.push_back({"{" + labels + "}", number(s->free_calls)});
    const char* mode = mode_name(s->mode <= uint64_t(Mode::PassThrough) ? Mode(s->mode) : Mode::PassThrough);
    info.samples.push_back({"{" + labels + ",mode=\"" + mode + "\",reason=\"" + escaped(s->reason, true) + "\"}", "1"});
    active.samples.push_back({"{" + labels + "}", s->mode == uint64_t(Mode::Active) ? "1" : "0"});
    std::vector<int> seen;  // one series per device, however a segment was altered
    for (const live::DeviceFigures& d : s->devices) {
      bool dup = false;
      for (int x : seen) dup |= x == d.device;
      if (dup) continue;
      seen.push_back(d.device);
      const std::string device_labels = "{" + labels + ",device=\"" + std::to_string(d.device) + "\"}";
      asleep.samples.push_back({device_labels, d.asleep && !d.partly ? "1" : "0"});
      partly.samples.push_back({device_labels, d.partly ? "1" : "0"});
      std::vector<uint64_t> values;  // in the field table's order, as pool[]
#define PF_PROM_VALUE(name, meaning) values.push_back(d.stats.name);
      PAGEFAST_POOL_STATS_FIELDS(PF_PROM_VALUE)
#undef PF_PROM_VALUE
      for (size_t k = 0; k < pool.size(); ++k)
        pool[k].samples.push_back(
            {device_labels, pool[k].from_ns ? number(double(values[k]) / 1e9) : number(values[k])});
    }
    add_tag_samples(*s, labels, &tag_asleep, &tag);
  }
  std::string out;
  for (const Family* f : {&processes, &info, &active, &started, &updated, &allocs, &frees, &asleep, &partly})
    emit(out, *f);
  for (const Family& f : pool) emit(out, f);
  emit(out, tag_asleep);
  for (const Family& f : tag) emit(out, f);
  return out;
}

bool write_textfile(const std::string& dir, const std::string& text, std::string* error) {
  const std::string final_path = dir + "/pagefast.prom";
  const std::string temp_path = dir + "/.pagefast.prom." + std::to_string(getpid()) + ".tmp";
  unlink(temp_path.c_str());  // a leftover of a killed pagefast-stat with this pid
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = temp_path + ": " + std::strerror(errno);
    return false;
  }
  fchmod(fd, 0644);  // the collector often runs as another user
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = temp_path + ": " + std::strerror(n < 0 ? errno : EIO);
      close(fd);
      unlink(temp_path.c_str());
      return false;
    }
    done += size_t(n);
  }
  if (close(fd) != 0 || rename(temp_path.c_str(), final_path.c_str()) != 0) {
    *error = final_path + ": " + std::strerror(errno);
    unlink(temp_path.c_str());
    return false;
  }
  return true;
}

}  // namespace pagefast::stat
