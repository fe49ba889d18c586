// tools/bench/ipc_calls.cpp: what CUDA IPC of pool blocks costs a call, in
// driver calls and system calls, for tools/bench/ipc-calls (which runs it
// under strace and callgrind on the fake driver, tests/fakecuda). The
// driver is reached by dlopen("libcuda.so.1") and dlsym, as in hit_pairs.cpp,
// so that under LD_PRELOAD=libpagefast.so the calls go through pagefast.
//
// Usage: ipc_calls [BLOCKS [BYTES]]
//   The exporter (this process) allocates BLOCKS blocks of BYTES (default
//   10 of 1000 bytes: one pool chunk), gets each one's handle twice
//   (get_first, get_again), and starts the importer (itself, --importer),
//   which for each block opens it and closes it again (open_first: the
//   chunk is mapped for it; close_last: and unmapped), then holds block 0
//   open while it opens and closes the others (open_held, close_held: a
//   chunk mapped already), opens block 0 a second time (open_same,
//   close_same: a reference more and less), and closes block 0.
//   Prints one line per kind and side: "calls KIND SIDE ops=N name=count
//   ..." with the driver calls counted by the fake driver
//   (fakecuda_call_count; none on another driver) over the N calls, and
//   "time KIND SIDE median_us=T", the median time of one, as this machine
//   gave it (informative only: on the fake driver, and nothing checks it).
//   Every call is bracketed by markers for strace, write(-1,
//   "pf:begin:KIND") and write(-1, "pf:end"), 30 ms after the call so that
//   the exporter's thread has served what the call sent; at the end each
//   process names its threads: write(-1, "pf:thread:PID:TID:NAME").
// Usage: ipc_calls gets BLOCKS [BYTES]
//   The exporter alone: BLOCKS first gets, then BLOCKS repeated ones, in
//   measured_first_gets and measured_again_gets (callgrind's
//   --toggle-collect); prints "gets ok" when every get succeeded.
#include <cuda.h>
#include <dirent.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

using GetFn = CUresult (*)(CUipcMemHandle*, CUdeviceptr);
using OpenFn = CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned);
using CloseFn = CUresult (*)(CUdeviceptr);
using CountFn = int (*)(const char*);

// The driver calls IPC can make, on either side.
const char* const kCalls[] = {"cuCtxGetCurrent",
                              "cuCtxGetDevice",
                              "cuCtxSynchronize",
                              "cuMemExportToShareableHandle",
                              "cuMemImportFromShareableHandle",
                              "cuMemAddressReserve",
                              "cuMemAddressFree",
                              "cuMemMap",
                              "cuMemUnmap",
                              "cuMemSetAccess",
                              "cuMemRelease",
                              "cuMemCreate",
                              "cuStreamIsCapturing",
                              "cuGetErrorName"};
constexpr int kCallCount = int(sizeof kCalls / sizeof kCalls[0]);

struct Driver {
  void* lib = nullptr;
  GetFn get = nullptr;
  OpenFn open = nullptr;
  CloseFn close = nullptr;
  CountFn count = nullptr;  // the fake driver's, else NULL
};
Driver g;

struct Counts {
  long n[kCallCount] = {};
};

Counts snapshot() {
  Counts c;
  for (int i = 0; g.count && i < kCallCount; ++i) c.n[i] = g.count(kCalls[i]);
  return c;
}

// Driver calls per kind of call, and how many calls of that kind.
struct Tally {
  long ops = 0;
  Counts calls;
  std::vector<double> us;  // each call's time (informative: never checked)
};
std::map<std::string, Tally> g_tally;

double now_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) * 1e6 + double(t.tv_nsec) / 1e3;
}

void add(const std::string& kind, const Counts& before, const Counts& after, long ops, double us) {
  Tally& t = g_tally[kind];
  t.ops += ops;
  t.us.push_back(us);
  for (int i = 0; i < kCallCount; ++i) t.calls.n[i] += after.n[i] - before.n[i];
}

void print_tally(const char* side) {
  for (const auto& [kind, t] : g_tally) {
    std::printf("calls %s %s ops=%ld", kind.c_str(), side, t.ops);
    for (int i = 0; g.count && i < kCallCount; ++i)
      if (t.calls.n[i]) std::printf(" %s=%ld", kCalls[i], t.calls.n[i]);
    std::printf("\n");
    std::vector<double> us = t.us;
    std::sort(us.begin(), us.end());
    if (!us.empty() && us[0] >= 0) std::printf("time %s %s median_us=%.1f\n", kind.c_str(), side, us[us.size() / 2]);
  }
  std::fflush(stdout);
}

// A marker strace shows: write(-1, "...") fails with EBADF and does nothing.
void mark(const std::string& text) {
  if (::write(-1, text.data(), text.size()) < 0) {
  }
}

void settle() {
  timespec t{0, 30 * 1000 * 1000};
  nanosleep(&t, nullptr);
}

// Every thread of this process by name, for the strace reader.
void name_threads() {
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/task/") + e->d_name + "/comm";
    char name[64] = "";
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      if (!std::fgets(name, sizeof name, f)) name[0] = 0;
      std::fclose(f);
    }
    name[std::strcspn(name, "\n")] = 0;
    mark("pf:thread:" + std::to_string(getpid()) + ":" + e->d_name + ":" + name);
  }
  closedir(dir);
}

template <typename Fn>
Fn resolve(const char* name) {
  void* symbol = dlsym(g.lib, name);
  if (!symbol) {
    std::fprintf(stderr, "ipc_calls: %s not found\n", name);
    std::exit(2);
  }
  return reinterpret_cast<Fn>(symbol);
}

bool start_driver() {
  g.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!g.lib) {
    std::fprintf(stderr, "ipc_calls: %s\n", dlerror());
    return false;
  }
  auto init = resolve<CUresult (*)(unsigned)>("cuInit");
  auto retain = resolve<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain");
  auto set_current = resolve<CUresult (*)(CUcontext)>("cuCtxSetCurrent");
  g.get = resolve<GetFn>("cuIpcGetMemHandle");
  g.open = resolve<OpenFn>("cuIpcOpenMemHandle_v2");
  g.close = resolve<CloseFn>("cuIpcCloseMemHandle");
  g.count = reinterpret_cast<CountFn>(dlsym(g.lib, "fakecuda_call_count"));
  CUcontext context = nullptr;
  return init(0) == CUDA_SUCCESS && retain(&context, 0) == CUDA_SUCCESS && set_current(context) == CUDA_SUCCESS;
}

bool read_full(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes) {
    const ssize_t n = ::read(fd, p, bytes);
    if (n <= 0) return false;
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

bool write_full(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n <= 0) return false;
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

// Two loops under two names (noipa: never folded), so that callgrind can
// count each alone.
__attribute__((noipa)) long measured_first_gets(const std::vector<CUdeviceptr>& blocks,
                                                std::vector<CUipcMemHandle>* handles) {
  long failures = 0;
  for (size_t i = 0; i < blocks.size(); ++i) failures += g.get(&(*handles)[i], blocks[i]) != CUDA_SUCCESS;
  return failures;
}
__attribute__((noipa)) long measured_again_gets(const std::vector<CUdeviceptr>& blocks,
                                                std::vector<CUipcMemHandle>* handles) {
  long failures = 0;
  for (size_t i = 0; i < blocks.size(); ++i) failures += g.get(&(*handles)[i], blocks[i]) != CUDA_SUCCESS;
  return failures;
}

// ---- the importer -----------------------------------------------------------------

struct Importer {
  int to_exporter, from_exporter;
  long failures = 0;

  // The exporter counts its driver calls over the same call (it answers
  // once it has read its counters).
  void exporter_mark(char what, const std::string& kind) {
    std::string msg(1, what);
    msg += kind;
    msg.resize(32, '\0');
    char ok = 0;
    if (!write_full(to_exporter, msg.data(), msg.size()) || !read_full(from_exporter, &ok, 1)) std::exit(3);
  }

  template <typename Call>
  void one(const std::string& kind, Call call) {
    exporter_mark('s', kind);
    const Counts before = snapshot();
    mark("pf:begin:" + kind);
    const double t0 = now_us();
    failures += !call();
    const double us = now_us() - t0;
    settle();
    mark("pf:end");
    add(kind, before, snapshot(), 1, us);
    exporter_mark('e', kind);
  }

  bool open(const CUipcMemHandle& h, CUdeviceptr* p) {
    return g.open(p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS;
  }

  void run(const std::vector<CUipcMemHandle>& handles) {
    for (const CUipcMemHandle& h : handles) {
      CUdeviceptr p = 0;
      one("open_first", [&] { return open(h, &p); });
      one("close_last", [&] { return g.close(p) == CUDA_SUCCESS; });
    }
    CUdeviceptr first = 0;
    one("open_first", [&] { return open(handles[0], &first); });
    for (size_t i = 1; i < handles.size(); ++i) {
      CUdeviceptr p = 0;
      one("open_held", [&] { return open(handles[i], &p); });
      one("close_held", [&] { return g.close(p) == CUDA_SUCCESS; });
    }
    CUdeviceptr again = 0;
    one("open_same", [&] { return open(handles[0], &again) && again == first; });
    one("close_same", [&] { return g.close(again) == CUDA_SUCCESS; });
    one("close_last", [&] { return g.close(first) == CUDA_SUCCESS; });
  }
};

int importer_main(int from_exporter, int to_exporter) {
  if (!start_driver()) return 2;
  uint32_t n = 0;
  if (!read_full(from_exporter, &n, sizeof n) || n == 0) return 2;
  std::vector<CUipcMemHandle> handles(n);
  if (!read_full(from_exporter, handles.data(), n * sizeof(CUipcMemHandle))) return 2;
  Importer imp{to_exporter, from_exporter};
  imp.run(handles);
  name_threads();
  print_tally("importer");
  std::printf("importer failures=%ld\n", imp.failures);
  std::fflush(stdout);
  const char quit[32] = {'q'};
  write_full(to_exporter, quit, sizeof quit);
  return imp.failures == 0 ? 0 : 1;
}

// ---- the exporter -------------------------------------------------------------------

bool allocate(uint32_t n, size_t bytes, std::vector<CUdeviceptr>* blocks) {
  auto alloc = resolve<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
  blocks->resize(n);
  for (CUdeviceptr& b : *blocks)
    if (alloc(&b, bytes) != CUDA_SUCCESS) return false;
  return true;
}

// Serves the importer's marks until it is done: its driver calls per kind.
void serve_marks(int from_importer, int to_importer) {
  Counts before;
  for (;;) {
    char msg[32];
    if (!read_full(from_importer, msg, sizeof msg) || msg[0] == 'q') return;
    msg[sizeof msg - 1] = 0;
    if (msg[0] == 's') before = snapshot();
    else add(msg + 1, before, snapshot(), 1, -1);  // timed by the importer
    const char ok = 'k';
    if (!write_full(to_importer, &ok, 1)) return;
  }
}

int exporter_main(const char* self, uint32_t n, size_t bytes) {
  std::vector<CUdeviceptr> blocks;
  if (!start_driver() || !allocate(n, bytes, &blocks)) return 2;
  std::vector<CUipcMemHandle> handles(n);
  long failures = 0;
  for (const char* kind : {"get_first", "get_again"})
    for (uint32_t i = 0; i < n; ++i) {
      const Counts before = snapshot();
      mark(std::string("pf:begin:") + kind);
      const double t0 = now_us();
      failures += g.get(&handles[i], blocks[i]) != CUDA_SUCCESS;
      const double us = now_us() - t0;
      mark("pf:end");
      add(kind, before, snapshot(), 1, us);
    }
  int down[2], up[2];
  if (failures || pipe(down) != 0 || pipe(up) != 0) return 2;
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string in = std::to_string(down[0]), out = std::to_string(up[1]);
    execl(self, self, "--importer", in.c_str(), out.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(down[0]);
  close(up[1]);
  const bool sent = write_full(down[1], &n, sizeof n) && write_full(down[1], handles.data(), n * sizeof handles[0]);
  if (sent) serve_marks(up[0], down[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  name_threads();
  print_tally("exporter");
  const bool ok = sent && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("ipc_calls blocks=%u bytes=%zu %s\n", n, bytes, ok ? "ok" : "failed");
  return ok ? 0 : 1;
}

int gets_main(uint32_t n, size_t bytes) {
  std::vector<CUdeviceptr> blocks;
  if (!start_driver() || !allocate(n, bytes, &blocks)) return 2;
  std::vector<CUipcMemHandle> handles(n);
  const long failures = measured_first_gets(blocks, &handles) + measured_again_gets(blocks, &handles);
  std::printf("gets %s\n", failures == 0 ? "ok" : "failed");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--importer") == 0)
    return importer_main(std::atoi(argv[2]), std::atoi(argv[3]));
  const bool gets = argc >= 2 && std::strcmp(argv[1], "gets") == 0;
  const int at = gets ? 2 : 1;
  const uint32_t n = argc > at ? uint32_t(std::strtoul(argv[at], nullptr, 10)) : 10;
  const size_t bytes = argc > at + 1 ? size_t(std::strtoull(argv[at + 1], nullptr, 10)) : 1000;
  if (n == 0 || bytes == 0 || argc > at + 2) {
    std::fprintf(stderr, "usage: ipc_calls [BLOCKS [BYTES]] | ipc_calls gets BLOCKS [BYTES]\n");
    return 2;
  }
  return gets ? gets_main(n, bytes) : exporter_main("/proc/self/exe", n, bytes);
}
