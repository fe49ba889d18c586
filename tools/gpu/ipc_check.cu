// tools/gpu/ipc_check.cu: CUDA IPC between processes, as a multi-process
// CUDA program uses it (docs/IPC.md). Run with and without
// LD_PRELOAD=libpagefast.so: the output must be the same, bar timings.
//
//   ipc_check [children]      the exporter: cudaMalloc buffers of several
//                             sizes (and offsets: small blocks sit side by
//                             side), fills them on the device, hands the
//                             cudaIpcGetMemHandle handles to `children`
//                             processes (this program, "child"), which open
//                             them, verify on the device, add their number,
//                             close; the exporter verifies the sum. Then a
//                             buffer freed by the exporter while a child
//                             holds it: the child keeps the bytes while the
//                             exporter writes new buffers.
//   ipc_check timing N        cost of cudaIpcGetMemHandle (first call per
//                             buffer) and of the child's first
//                             cudaIpcOpenMemHandle + cudaIpcCloseMemHandle,
//                             medians over N buffers per size; and the
//                             first open of the other buffers of a size
//                             while the child holds the first one open
//                             (held_open_us: with pagefast, buffers of a
//                             chunk already mapped).
//   ipc_check answers         what the driver (or pagefast) answers to an
//                             own handle opened in the same process and to
//                             a garbage handle.
//   ipc_check foreign         a handle opened by a child without pagefast
//                             (LD_PRELOAD removed): the driver's answer,
//                             and no crash.
//   ipc_check stall ROUNDS    for tools/gpu/ipc-stall-check, which stops
//                             this process (SIGSTOP) for a while mid-run:
//                             a child holds a buffer the exporter freed and
//                             opens, verifies and closes six others ROUNDS
//                             times, while the exporter allocates and fills
//                             new buffers and prints "round N" lines. An
//                             open may fail (the exporter does not answer
//                             while stopped); a wrong word never counts as
//                             right. Last line: STALL OK or STALL FAILED.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.cuh"

namespace {

__global__ void fill(unsigned* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = seed ^ unsigned(i * 2654435761u);
}

__global__ void add(unsigned* p, size_t n, unsigned v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] += v;
}

__global__ void verify(const unsigned* p, size_t n, unsigned seed, unsigned extra, unsigned long long* bad) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    if (p[i] != (seed ^ unsigned(i * 2654435761u)) + extra) ++mine;
  if (mine) atomicAdd(bad, mine);
}

unsigned long long count_bad(const void* p, size_t bytes, unsigned seed, unsigned extra) {
  unsigned long long* bad;
  CK(cudaMalloc(&bad, sizeof *bad));
  CK(cudaMemset(bad, 0, sizeof *bad));
  verify<<<256, 256>>>(static_cast<const unsigned*>(p), bytes / 4, seed, extra, bad);
  CK(cudaGetLastError());
  unsigned long long h = 0;
  CK(cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost));
  CK(cudaFree(bad));
  return h;
}

const size_t kSizes[] = {512, 4096, 100000, 3 << 20, 20 << 20, 64 << 20};
constexpr int kBuffers = sizeof kSizes / sizeof kSizes[0];

bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    const ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

bool write_all(int fd, const void* p, size_t n) { return write(fd, p, n) == ssize_t(n); }

struct ChildIo {
  pid_t pid;
  int to, from;
};

ChildIo spawn(const char* self, const char* mode, int number) {
  int a[2], b[2];
  if (pipe(a) || pipe(b)) std::exit(1);
  const pid_t pid = fork();
  if (pid == 0) {
    // Handles come on stdin; results go back on fd 3, so that an error
    // message on stdout is never read as a result.
    dup2(a[0], 0);
    dup2(b[1], 3);
    const std::string n = std::to_string(number);
    execl(self, self, mode, n.c_str(), (char*)nullptr);
    _exit(127);
  }
  close(a[0]);
  close(b[1]);
  return {pid, a[1], b[0]};
}

int wait_child(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A child: opens every handle, verifies it holds seed + earlier children's
// additions, adds its number, closes.
int child(int number) {
  CK(cudaSetDevice(0));
  cudaIpcMemHandle_t handles[kBuffers];
  if (!read_all(0, handles, sizeof handles)) return 2;
  unsigned long long bad = 0;
  for (int b = 0; b < kBuffers; ++b) {
    void* p = nullptr;
    CK(cudaIpcOpenMemHandle(&p, handles[b], cudaIpcMemLazyEnablePeerAccess));
    bad += count_bad(p, kSizes[b], 1000 + b, unsigned(number * (number - 1) / 2));
    add<<<256, 256>>>(static_cast<unsigned*>(p), kSizes[b] / 4, unsigned(number));
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaIpcCloseMemHandle(p));
  }
  return write_all(3, &bad, sizeof bad) ? 0 : 3;
}

// The child of the freed-while-held case.
int holder() {
  CK(cudaSetDevice(0));
  cudaIpcMemHandle_t h;
  if (!read_all(0, &h, sizeof h)) return 2;
  void* p = nullptr;
  CK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
  char step = 'o';
  if (!write_all(3, &step, 1) || !read_all(0, &step, 1)) return 3;
  const unsigned long long bad = count_bad(p, 20 << 20, 77, 0);
  CK(cudaIpcCloseMemHandle(p));
  return write_all(3, &bad, sizeof bad) ? 0 : 4;
}

int exporter(const char* self, int children) {
  CK(cudaSetDevice(0));
  void* bufs[kBuffers];
  cudaIpcMemHandle_t handles[kBuffers];
  for (int b = 0; b < kBuffers; ++b) {
    CK(cudaMalloc(&bufs[b], kSizes[b]));
    fill<<<256, 256>>>(static_cast<unsigned*>(bufs[b]), kSizes[b] / 4, 1000 + b);
    CK(cudaGetLastError());
    CK(cudaIpcGetMemHandle(&handles[b], bufs[b]));
  }
  CK(cudaDeviceSynchronize());
  unsigned long long child_bad = 0;
  int failed = 0;
  for (int c = 1; c <= children; ++c) {  // one after another: each adds its number
    ChildIo io = spawn(self, "child", c);
    write_all(io.to, handles, sizeof handles);
    unsigned long long bad = ~0ull;
    if (!read_all(io.from, &bad, sizeof bad)) failed++;
    child_bad += bad;
    close(io.to);
    close(io.from);
    if (wait_child(io.pid) != 0) failed++;
  }
  const unsigned total = unsigned(children * (children + 1) / 2);
  unsigned long long bad = 0;
  for (int b = 0; b < kBuffers; ++b) bad += count_bad(bufs[b], kSizes[b], 1000 + b, total);
  std::printf(
      "ipc %d children x %d buffers (512 B .. 64 MiB): children saw %llu bad words, exporter sees %llu "
      "bad words after their additions, %d child failures\n",
      children, kBuffers, child_bad, bad, failed);
  for (int b = 0; b < kBuffers; ++b) CK(cudaFree(bufs[b]));

  // Freed while held.
  void* held;
  CK(cudaMalloc(&held, 20 << 20));
  fill<<<256, 256>>>(static_cast<unsigned*>(held), (20 << 20) / 4, 77);
  CK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h;
  CK(cudaIpcGetMemHandle(&h, held));
  ChildIo io = spawn(self, "holder", 0);
  write_all(io.to, &h, sizeof h);
  char step = 0;
  read_all(io.from, &step, 1);
  CK(cudaFree(held));
  std::vector<void*> fresh(8);
  for (void*& f : fresh) {
    CK(cudaMalloc(&f, 20 << 20));
    fill<<<256, 256>>>(static_cast<unsigned*>(f), (20 << 20) / 4, 99);
  }
  CK(cudaDeviceSynchronize());
  write_all(io.to, &step, 1);
  unsigned long long held_bad = ~0ull;
  read_all(io.from, &held_bad, sizeof held_bad);
  const int rc = wait_child(io.pid);
  std::printf(
      "freed while held: the holder saw %llu bad words after the exporter freed it and wrote 8 new "
      "buffers (child rc %d)\n",
      held_bad, rc);
  for (void* f : fresh) CK(cudaFree(f));
  const bool ok = child_bad == 0 && bad == 0 && failed == 0 && held_bad == 0 && rc == 0;
  std::printf("%s\n", ok ? "IPC OK" : "IPC FAILED");
  return ok ? 0 : 1;
}

// ---- stall: opens while the exporter may be stopped --------------------------------

struct StallResult {
  unsigned long long opens_ok, opens_failed, bad, held_bad;
  int first_error;  // cudaError_t of the first failed open
  int rounds_done;
};

int stall_child(int rounds) {
  CK(cudaSetDevice(0));
  cudaIpcMemHandle_t handles[kBuffers], held_handle;
  if (!read_all(0, handles, sizeof handles) || !read_all(0, &held_handle, sizeof held_handle)) return 2;
  void* held = nullptr;
  CK(cudaIpcOpenMemHandle(&held, held_handle, cudaIpcMemLazyEnablePeerAccess));
  char step = 'o';
  if (!write_all(3, &step, 1)) return 3;
  StallResult r{};
  for (int round = 0; round < rounds; ++round) {
    for (int b = 0; b < kBuffers; ++b) {
      void* p = nullptr;
      const cudaError_t e = cudaIpcOpenMemHandle(&p, handles[b], cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        cudaGetLastError();
        if (!r.opens_failed++) r.first_error = int(e);
        continue;
      }
      ++r.opens_ok;
      r.bad += count_bad(p, kSizes[b], 1000 + b, 0);
      CK(cudaIpcCloseMemHandle(p));
    }
    r.held_bad += count_bad(held, 20 << 20, 77, 0);
    r.rounds_done = round + 1;
  }
  CK(cudaIpcCloseMemHandle(held));
  return write_all(3, &r, sizeof r) ? 0 : 4;
}

int stall(const char* self, int rounds) {
  CK(cudaSetDevice(0));
  void* bufs[kBuffers];
  cudaIpcMemHandle_t handles[kBuffers], held_handle;
  for (int b = 0; b < kBuffers; ++b) {
    CK(cudaMalloc(&bufs[b], kSizes[b]));
    fill<<<256, 256>>>(static_cast<unsigned*>(bufs[b]), kSizes[b] / 4, 1000 + b);
    CK(cudaGetLastError());
    CK(cudaIpcGetMemHandle(&handles[b], bufs[b]));
  }
  void* held;
  CK(cudaMalloc(&held, 20 << 20));
  fill<<<256, 256>>>(static_cast<unsigned*>(held), (20 << 20) / 4, 77);
  CK(cudaDeviceSynchronize());
  CK(cudaIpcGetMemHandle(&held_handle, held));
  std::fflush(stdout);
  ChildIo io = spawn(self, "stall-child", rounds);
  write_all(io.to, handles, sizeof handles);
  write_all(io.to, &held_handle, sizeof held_handle);
  char step = 0;
  if (!read_all(io.from, &step, 1)) {
    std::printf("stall: the child could not open the held buffer (rc %d)\nSTALL FAILED\n", wait_child(io.pid));
    return 1;
  }
  // Freed while the child holds it: its memory must not come back to the
  // new buffers below, stopped or not.
  CK(cudaFree(held));
  std::vector<void*> fresh;
  StallResult r{};
  bool got = false;
  for (int round = 0; !got; ++round) {
    for (void* f : fresh) CK(cudaFree(f));
    fresh.assign(2, nullptr);
    for (void*& f : fresh) {
      CK(cudaMalloc(&f, 20 << 20));
      fill<<<256, 256>>>(static_cast<unsigned*>(f), (20 << 20) / 4, 99);
    }
    CK(cudaDeviceSynchronize());
    std::printf("round %d\n", round);
    std::fflush(stdout);
    pollfd pfd{io.from, POLLIN, 0};
    if (poll(&pfd, 1, 10) > 0) {
      read_all(io.from, &r, sizeof r);  // a child that died leaves r zero: rounds_done 0 fails below
      got = true;
    }
  }
  const int rc = wait_child(io.pid);
  for (void* f : fresh) CK(cudaFree(f));
  bool exporter_ok = true;
  for (int b = 0; b < kBuffers; ++b) exporter_ok &= count_bad(bufs[b], kSizes[b], 1000 + b, 0) == 0;
  for (int b = 0; b < kBuffers; ++b) CK(cudaFree(bufs[b]));
  std::printf(
      "stall: %d of %d rounds, %llu opens ok, %llu failed (first: %s), bad words %llu, held buffer bad words "
      "%llu, exporter's buffers intact %d, child rc %d\n",
      r.rounds_done, rounds, r.opens_ok, r.opens_failed,
      r.opens_failed ? cudaGetErrorName(cudaError_t(r.first_error)) : "none", r.bad, r.held_bad, int(exporter_ok), rc);
  const bool ok = rc == 0 && r.rounds_done == rounds && r.bad == 0 && r.held_bad == 0 && exporter_ok;
  std::printf("%s\n", ok ? "STALL OK" : "STALL FAILED");
  return ok ? 0 : 1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

int timing_child(int n) {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  std::vector<cudaIpcMemHandle_t> hs(size_t(n) * kBuffers);
  if (!read_all(0, hs.data(), hs.size() * sizeof hs[0])) return 2;
  std::vector<double> open_us[kBuffers], close_us[kBuffers];
  for (int b = 0; b < kBuffers; ++b)
    for (int i = 0; i < n; ++i) {
      void* p = nullptr;
      auto t = Clock::now();
      CK(cudaIpcOpenMemHandle(&p, hs[size_t(b) * n + i], cudaIpcMemLazyEnablePeerAccess));
      open_us[b].push_back(us_since(t));
      t = Clock::now();
      CK(cudaIpcCloseMemHandle(p));
      close_us[b].push_back(us_since(t));
    }
  std::vector<double> held_us[kBuffers];
  for (int b = 0; b < kBuffers; ++b) {
    void* first = nullptr;
    CK(cudaIpcOpenMemHandle(&first, hs[size_t(b) * n], cudaIpcMemLazyEnablePeerAccess));
    for (int i = 1; i < n; ++i) {
      void* p = nullptr;
      auto t = Clock::now();
      CK(cudaIpcOpenMemHandle(&p, hs[size_t(b) * n + i], cudaIpcMemLazyEnablePeerAccess));
      held_us[b].push_back(us_since(t));
      CK(cudaIpcCloseMemHandle(p));
    }
    CK(cudaIpcCloseMemHandle(first));
    if (held_us[b].empty()) held_us[b].push_back(0);
  }
  double out[3 * kBuffers];
  for (int b = 0; b < kBuffers; ++b) {
    out[3 * b] = median(open_us[b]);
    out[3 * b + 1] = median(close_us[b]);
    out[3 * b + 2] = median(held_us[b]);
  }
  return write_all(3, out, sizeof out) ? 0 : 3;
}

int timing(const char* self, int n) {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  std::vector<void*> bufs(size_t(n) * kBuffers);
  std::vector<cudaIpcMemHandle_t> hs(bufs.size());
  std::vector<double> get_us[kBuffers];
  for (int b = 0; b < kBuffers; ++b)
    for (int i = 0; i < n; ++i) {
      void*& p = bufs[size_t(b) * n + i];
      CK(cudaMalloc(&p, kSizes[b]));
      auto t = Clock::now();
      CK(cudaIpcGetMemHandle(&hs[size_t(b) * n + i], p));
      get_us[b].push_back(us_since(t));
    }
  ChildIo io = spawn(self, "timing-child", n);
  write_all(io.to, hs.data(), hs.size() * sizeof hs[0]);
  double out[3 * kBuffers] = {};
  const bool got = read_all(io.from, out, sizeof out);
  const int rc = wait_child(io.pid);
  if (!got) std::printf("timing: the child failed (rc %d)\n", rc);
  for (int b = 0; b < kBuffers; ++b)
    std::printf("timing size %zu get_us %.2f open_us %.2f close_us %.2f held_open_us %.2f\n", kSizes[b],
                median(get_us[b]), out[3 * b], out[3 * b + 1], out[3 * b + 2]);
  for (void* p : bufs) CK(cudaFree(p));
  return got && rc == 0 ? 0 : 1;
}

int try_open() {
  CK(cudaSetDevice(0));
  cudaIpcMemHandle_t h;
  if (!read_all(0, &h, sizeof h)) return 2;
  void* p = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  std::printf("foreign: a child without pagefast opening the handle -> %s\n", cudaGetErrorName(e));
  if (e == cudaSuccess) CK(cudaIpcCloseMemHandle(p));
  return 0;
}

int foreign(const char* self) {
  CK(cudaSetDevice(0));
  void* p;
  CK(cudaMalloc(&p, 4 << 20));
  cudaIpcMemHandle_t h;
  CK(cudaIpcGetMemHandle(&h, p));
  std::fflush(stdout);
  int a[2];
  if (pipe(a)) return 1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(a[0], 0);
    unsetenv("LD_PRELOAD");
    execl(self, self, "try-open", (char*)nullptr);
    _exit(127);
  }
  close(a[0]);
  write_all(a[1], &h, sizeof h);
  close(a[1]);
  const int rc = wait_child(pid);
  std::printf("foreign: child exit status %d\n", rc);
  CK(cudaFree(p));
  return rc == 0 ? 0 : 1;
}

int answers() {
  CK(cudaSetDevice(0));
  void* p;
  CK(cudaMalloc(&p, 1 << 20));
  cudaIpcMemHandle_t h;
  CK(cudaIpcGetMemHandle(&h, p));
  void* q = nullptr;
  cudaError_t own = cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess);
  cudaGetLastError();
  cudaIpcMemHandle_t garbage;
  for (size_t i = 0; i < sizeof garbage; ++i) garbage.reserved[i] = char(i * 37 + 11);
  cudaError_t junk = cudaIpcOpenMemHandle(&q, garbage, cudaIpcMemLazyEnablePeerAccess);
  cudaGetLastError();
  std::printf("answers: own handle in the same process -> %s; garbage handle -> %s\n", cudaGetErrorName(own),
              cudaGetErrorName(junk));
  CK(cudaFree(p));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);  // a child that died is reported, not fatal
  const std::string mode = argc > 1 ? argv[1] : "4";
  if (mode == "child") return child(argc > 2 ? std::atoi(argv[2]) : 1);
  if (mode == "holder") return holder();
  if (mode == "timing-child") return timing_child(argc > 2 ? std::atoi(argv[2]) : 20);
  if (mode == "timing") return timing("/proc/self/exe", argc > 2 ? std::atoi(argv[2]) : 20);
  if (mode == "answers") return answers();
  if (mode == "foreign") return foreign("/proc/self/exe");
  if (mode == "try-open") return try_open();
  if (mode == "stall-child") return stall_child(argc > 2 ? std::atoi(argv[2]) : 200);
  if (mode == "stall") return stall("/proc/self/exe", argc > 2 ? std::atoi(argv[2]) : 200);
  return exporter("/proc/self/exe", std::atoi(mode.c_str()));
}
