// tests/pool/colocated_rl.cpp: a colocated RL step (docs/SLEEP.md "What it
// is for") against the fake driver, with libpagefast.so preloaded in both
// processes. colocated_cases.py runs it.
//
//   colocated_rl trainer STEPS   process A: a trainer and a rollout engine
//                                in one process; starts process B itself
//   colocated_rl receiver        process B: opens the weights A sends over
//                                CUDA IPC (commands on stdin, answers on
//                                stdout)
//
// Process A holds "weights" (a region that keeps its contents), a "kv"
// cache (a region that discards), a "graph" region (keeps) with the output
// of a captured kernel, and optimizer state outside any region. Each step:
//   1. training: a step-dependent pattern written into the weights, checked;
//   2. kv sleeps (discard), weights stay awake; B opens every weights block
//      with cuIpcOpenMemHandle, checks the step's pattern and closes it; a
//      kv block exported before its sleep does not open while kv sleeps;
//   3. kv wakes at the same address; a kernel fills it with the step's
//      byte ("rollout") and the host fills it with the step's words, both
//      checked;
//   4. weights and graph sleep (keep) and wake: the weights hold the step's
//      pattern, the optimizer state outside the regions is untouched;
//   5. the graph is replayed and its output checked.
//
// The captured graph: the fake driver captures a kernel launched on a
// capturing stream (it is recorded, not run) and ends the capture with a
// graph handle, but has no cuGraphInstantiate or cuGraphLaunch. The replay
// stands in for a graph launch: it launches the captured kernel again,
// from the record this program kept of the capture, at the captured
// device address with the captured arguments, after the graph region slept
// and woke. What it checks is what a graph replay needs of the memory: the
// captured address is the same live device memory after wake (the fake
// driver counts a violation otherwise), and the kernel's output is there.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fakecuda.h"
#include "interpose/pagefast.h"
#include "preload_program.h"

using namespace preload_program;

namespace {

constexpr size_t kKiB = 1u << 10;
constexpr size_t kMiB = 1u << 20;

using Api = RegionApi;

bool bytes_are(CUdeviceptr p, size_t bytes, unsigned char value) {
  const unsigned char* b = reinterpret_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i)
    if (b[i] != value) return false;
  return true;
}

std::string hex(const CUipcMemHandle& h) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (unsigned char c : h.reserved) {
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

bool unhex(const char* s, CUipcMemHandle* h) {
  if (std::strlen(s) < 2 * sizeof(h->reserved)) return false;
  for (size_t i = 0; i < sizeof(h->reserved); ++i) {
    unsigned v = 0;
    if (std::sscanf(s + 2 * i, "%2x", &v) != 1) return false;
    h->reserved[i] = static_cast<char>(v);
  }
  return true;
}

// --- process B ------------------------------------------------------------------

// Commands, one a line:
//   open SIZE SEED HEX    open, check SIZE bytes of words of SEED, close
//   refuse HEX            the open must fail (its pool sleeps)
//   quit
// Answers: "ok ..." or "FAIL ...", one line each.
int receiver() {
  if (dlsym(RTLD_DEFAULT, "pagefast_region_begin") == nullptr) return fail("receiver: runs without pagefast");
  char line[512];
  while (std::fgets(line, sizeof line, stdin)) {
    char what[16] = {0}, handle_hex[200] = {0};
    unsigned long long size = 0, seed = 0;
    CUipcMemHandle h;
    if (std::sscanf(line, "%15s", what) != 1) return fail("receiver: empty command");
    if (std::strcmp(what, "quit") == 0) {
      std::printf("ok quit\n");
      std::fflush(stdout);
      return 0;
    }
    if (std::strcmp(what, "open") == 0) {
      if (std::sscanf(line, "open %llu %llu %199s", &size, &seed, handle_hex) != 3 || !unhex(handle_hex, &h))
        return fail("receiver: bad open command");
      CUdeviceptr p = 0;
      const CUresult r = cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      if (r != CUDA_SUCCESS) {
        std::printf("FAIL receiver: cuIpcOpenMemHandle -> %d\n", int(r));
      } else {
        const bool intact = words_intact(p, size, seed);
        const CUresult c = cuIpcCloseMemHandle(p);
        if (!intact) std::printf("FAIL receiver: the weights opened over IPC do not hold the step's pattern\n");
        else if (c != CUDA_SUCCESS) std::printf("FAIL receiver: cuIpcCloseMemHandle -> %d\n", int(c));
        else std::printf("ok open\n");
      }
    } else if (std::strcmp(what, "refuse") == 0) {
      if (std::sscanf(line, "refuse %199s", handle_hex) != 1 || !unhex(handle_hex, &h))
        return fail("receiver: bad refuse command");
      CUdeviceptr p = 0;
      const CUresult r = cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      if (r == CUDA_SUCCESS) {
        cuIpcCloseMemHandle(p);
        std::printf("FAIL receiver: a block of the asleep kv cache opened\n");
      } else {
        std::printf("ok refuse\n");
      }
    } else {
      return fail("receiver: unknown command");
    }
    std::fflush(stdout);
  }
  return fail("receiver: stdin closed before quit");
}

// --- process A ------------------------------------------------------------------

struct Receiver {
  pid_t pid = -1;
  FILE* to = nullptr;
  FILE* from = nullptr;
};

int start_receiver(Receiver* b) {
  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0) return fail("pipe");
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return fail("fork");
  if (pid == 0) {
    dup2(down[0], 0);
    dup2(up[1], 1);
    close(down[0]), close(down[1]), close(up[0]), close(up[1]);
    execl("/proc/self/exe", "colocated_rl", "receiver", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(down[0]);
  close(up[1]);
  b->pid = pid;
  b->to = fdopen(down[1], "w");
  b->from = fdopen(up[0], "r");
  return b->to && b->from ? 0 : fail("fdopen");
}

// Sends one command and reads B's answer; 0 when it is `expect`.
int ask(Receiver& b, const std::string& command, const char* expect, int step) {
  std::fprintf(b.to, "%s\n", command.c_str());
  std::fflush(b.to);
  char line[512];
  if (!std::fgets(line, sizeof line, b.from)) {
    std::printf("FAIL step %d: the receiver exited without an answer\n", step);
    return 1;
  }
  if (std::strncmp(line, expect, std::strlen(expect)) != 0) {
    std::printf("FAIL step %d: the receiver answered: %s", step, line);
    return 1;
  }
  return 0;
}

struct Block {
  CUdeviceptr p;
  size_t bytes;
  CUipcMemHandle handle;
};

uint64_t weights_seed(int step, size_t i) { return uint64_t(step) * 16 + i + 1; }

constexpr size_t kKv = 8 * kMiB;
constexpr size_t kGraph = 512 * kKiB;
constexpr size_t kOptimizer = 3 * kMiB;
constexpr unsigned char kGraphValue = 0x5A;

// The kernel launches of the capture, as the graph holds them.
struct Captured {
  CUdeviceptr dst;
  size_t bytes;
  unsigned char value;
};

// The graph replayed (see the head of this file): its output cleared from
// the host, written by the captured kernel, checked on the device and from
// the host.
int replay(const std::vector<Captured>& graph, CUdeviceptr graph_out, CUstream stream, int step) {
  std::memset(reinterpret_cast<void*>(graph_out), 0, kGraph);
  for (const Captured& c : graph) CHECK_CU(fakecuda_launch_delayed_fill(stream, c.dst, c.bytes, c.value, 0));
  int ok = -1;
  CHECK_CU(fakecuda_launch_delayed_check(stream, graph_out, kGraph, kGraphValue, 0, &ok));
  CHECK_CU(cuStreamSynchronize(stream));
  if (ok != 1 || !bytes_are(graph_out, kGraph, kGraphValue)) {
    std::printf("FAIL step %d: the graph's replay did not write its output\n", step);
    return 1;
  }
  return 0;
}

int step_once(Api& api, Receiver& b, int step, std::vector<Block>& weights, const Block& kv, CUdeviceptr graph_out,
              const std::vector<Captured>& graph, CUstream stream, CUdeviceptr optimizer, int* kept_resident) {
  char what[160];
  // 1. training
  for (size_t i = 0; i < weights.size(); ++i) fill_words(weights[i].p, weights[i].bytes, weights_seed(step, i));
  for (size_t i = 0; i < weights.size(); ++i)
    if (!words_intact(weights[i].p, weights[i].bytes, weights_seed(step, i))) {
      std::snprintf(what, sizeof what, "step %d: weights block %zu does not hold what training wrote", step, i);
      return fail(what);
    }
  // 2. kv sleeps (discard); the weights go to B over CUDA IPC meanwhile.
  const unsigned long long free_before = fakecuda_free_bytes(0);
  int r = api.sleep_tag("kv", 0);
  if (r != 0) {
    std::snprintf(what, sizeof what, "step %d: sleep kv answered %d, not 0", step, r);
    return fail(what);
  }
  if (api.tag_asleep("kv") != 1 || api.tag_asleep("weights") != 0 || api.tag_asleep("graph") != 0) {
    std::snprintf(what, sizeof what, "step %d: tag states while kv sleeps (kv %d weights %d graph %d)", step,
                  api.tag_asleep("kv"), api.tag_asleep("weights"), api.tag_asleep("graph"));
    return fail(what);
  }
  if (fakecuda_free_bytes(0) < free_before + kKv) {
    std::snprintf(what, sizeof what, "step %d: the driver did not get kv's memory back", step);
    return fail(what);
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    CUipcMemHandle h;
    CHECK_CU(cuIpcGetMemHandle(&h, weights[i].p));
    if (std::memcmp(&h, &weights[i].handle, sizeof h) != 0) {
      std::snprintf(what, sizeof what, "step %d: weights block %zu's handle changed", step, i);
      return fail(what);
    }
    const std::string command =
        "open " + std::to_string(weights[i].bytes) + " " + std::to_string(weights_seed(step, i)) + " " + hex(h);
    if (ask(b, command, "ok open", step)) return 1;
  }
  if (ask(b, "refuse " + hex(kv.handle), "ok refuse", step)) return 1;
  if (!words_intact(optimizer, kOptimizer, 7)) {
    std::snprintf(what, sizeof what, "step %d: the sleep of kv touched the optimizer state", step);
    return fail(what);
  }
  // 3. rollout: kv wakes at the same address and is written.
  r = api.wake_tag("kv");
  if (r != 0 || api.tag_asleep("kv") != 0) {
    std::snprintf(what, sizeof what, "step %d: wake kv answered %d", step, r);
    return fail(what);
  }
  const unsigned char kv_byte = static_cast<unsigned char>(step * 7 + 1);
  CHECK_CU(fakecuda_launch_delayed_fill(stream, kv.p, kv.bytes, kv_byte, 0));
  CHECK_CU(cuStreamSynchronize(stream));
  if (!bytes_are(kv.p, kv.bytes, kv_byte)) {
    std::snprintf(what, sizeof what, "step %d: the rollout kernel's bytes are not in kv", step);
    return fail(what);
  }
  fill_words(kv.p, kv.bytes, 1000 + step);
  if (!words_intact(kv.p, kv.bytes, 1000 + step)) {
    std::snprintf(what, sizeof what, "step %d: kv does not hold the rollout's words", step);
    return fail(what);
  }
  // 4. weights and graph sleep too (keep) and wake.
  const unsigned long long awake_free = fakecuda_free_bytes(0);
  const int resident_before = *kept_resident;
  size_t weights_bytes = 0;
  for (const Block& w : weights) weights_bytes += w.bytes;
  for (const char* tag : {"weights", "graph"}) {
    r = api.sleep_tag(tag, 0);
    // 1: a chunk of the weights still resident, B's close not yet seen by
    // A (it sends no answer); the contents stay and are checked alike.
    if (r == 1 && std::strcmp(tag, "weights") == 0) {
      ++*kept_resident;
    } else if (r != 0) {
      std::snprintf(what, sizeof what, "step %d: sleep %s answered %d", step, tag, r);
      return fail(what);
    }
    if (api.tag_asleep(tag) != 1) {
      std::snprintf(what, sizeof what, "step %d: %s does not read asleep", step, tag);
      return fail(what);
    }
  }
  if (*kept_resident == resident_before && fakecuda_free_bytes(0) < awake_free + weights_bytes + kGraph) {
    std::snprintf(what, sizeof what, "step %d: the driver did not get the memory of weights and graph back", step);
    return fail(what);
  }
  if (!words_intact(optimizer, kOptimizer, 7)) {
    std::snprintf(what, sizeof what, "step %d: the sleep of weights touched the optimizer state", step);
    return fail(what);
  }
  for (const char* tag : {"weights", "graph"}) {
    r = api.wake_tag(tag);
    if (r != 0 || api.tag_asleep(tag) != 0) {
      std::snprintf(what, sizeof what, "step %d: wake %s answered %d", step, tag, r);
      return fail(what);
    }
  }
  for (size_t i = 0; i < weights.size(); ++i)
    if (!words_intact(weights[i].p, weights[i].bytes, weights_seed(step, i))) {
      std::snprintf(what, sizeof what, "step %d: weights block %zu lost its contents over sleep and wake", step, i);
      return fail(what);
    }
  if (!bytes_are(graph_out, kGraph, kGraphValue)) {
    std::snprintf(what, sizeof what, "step %d: the graph's output lost its contents over sleep and wake", step);
    return fail(what);
  }
  // 5. the graph replayed, its output checked.
  if (replay(graph, graph_out, stream, step)) return 1;
  if (fakecuda_violations() != 0) {
    std::snprintf(what, sizeof what, "step %d: the fake driver saw a violation", step);
    return fail(what);
  }
  return 0;
}

int trainer(int steps) {
  Api api;
  if (!api.load()) return fail("the region API is not exported");
  // The trainer's optimizer state: outside any region.
  CUdeviceptr optimizer = 0;
  CHECK_CU(cuMemAlloc_v2(&optimizer, kOptimizer));
  fill_words(optimizer, kOptimizer, 7);
  // The weights: blocks of several sizes, one not a multiple of a granule.
  std::vector<Block> weights;
  for (size_t bytes : {4 * kMiB, 1 * kMiB + 64 * kKiB, 256 * kKiB}) {
    Block w{};
    w.bytes = bytes;
    if (alloc_in(api, "weights", PAGEFAST_REGION_KEEP, bytes, &w.p)) return 1;
    CHECK_CU(cuIpcGetMemHandle(&w.handle, w.p));
    weights.push_back(w);
  }
  Block kv{};
  kv.bytes = kKv;
  if (alloc_in(api, "kv", 0, kKv, &kv.p)) return 1;
  CHECK_CU(cuIpcGetMemHandle(&kv.handle, kv.p));  // exported while awake; must not open while it sleeps
  CUdeviceptr graph_out = 0;
  if (alloc_in(api, "graph", PAGEFAST_REGION_KEEP, kGraph, &graph_out)) return 1;
  std::memset(reinterpret_cast<void*>(graph_out), 0, kGraph);

  // The capture: the kernel is recorded, not run; a sleep meanwhile refuses.
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::vector<Captured> graph;
  CHECK_CU(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CHECK_CU(fakecuda_launch_delayed_fill(stream, graph_out, kGraph, kGraphValue, 0));
  graph.push_back({graph_out, kGraph, kGraphValue});
  const int during_capture = api.sleep_tag("kv", 0);
  CUgraph captured = nullptr;
  CHECK_CU(cuStreamEndCapture(stream, &captured));
  if (captured == nullptr) return fail("the capture ended without a graph");
  if (during_capture != -1) {
    std::printf("FAIL a sleep during a stream capture answered %d, not -1\n", during_capture);
    return 1;
  }
  if (api.tag_asleep("kv") != 0) return fail("kv reads asleep after a sleep refused during a capture");
  if (!bytes_are(graph_out, kGraph, 0)) return fail("the captured kernel ran at capture");
  if (replay(graph, graph_out, stream, -1)) return 1;  // the first replay, before the steps

  Receiver b;
  if (start_receiver(&b)) return 1;
  int kept_resident = 0;
  for (int step = 0; step < steps; ++step)
    if (step_once(api, b, step, weights, kv, graph_out, graph, stream, optimizer, &kept_resident)) {
      std::fclose(b.to);
      waitpid(b.pid, nullptr, 0);
      return 1;
    }
  if (ask(b, "quit", "ok quit", steps)) return 1;
  std::fclose(b.to);
  std::fclose(b.from);
  int status = 0;
  if (waitpid(b.pid, &status, 0) != b.pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail("the receiver did not exit 0");
  CHECK_CU(cuStreamDestroy_v2(stream));
  for (const Block& w : weights) CHECK_CU(cuMemFree_v2(w.p));
  CHECK_CU(cuMemFree_v2(kv.p));
  CHECK_CU(cuMemFree_v2(graph_out));
  CHECK_CU(cuMemFree_v2(optimizer));
  if (fakecuda_violations() != 0) return fail("the fake driver saw a violation");
  std::printf("ok colocated %d steps (weights sleeps with a chunk still held by the receiver: %d)\n", steps,
              kept_resident);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: colocated_rl trainer STEPS | receiver");
  if (start()) return 1;
  const std::string what = argv[1];
  if (what == "trainer") return trainer(argc > 2 ? std::atoi(argv[2]) : 100);
  if (what == "receiver") return receiver();
  return fail("unknown subcommand");
}
