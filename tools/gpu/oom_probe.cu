// tools/gpu/oom_probe.cu: which driver calls refuse once an allocator has
// filled the device and freed it all again (docs/DRIVER-FACTS.md "After the
// card was full"). One call a process:
//
//   oom_probe OP [fill]
//
// fills the device with cudaMalloc (1 GiB, then 64 MiB, then 2 MiB pieces)
// until it refuses, frees every piece (with pagefast the memory is then idle
// in its pool), and tries OP once, printing one line:
//
//   OP module free_before=N result=CUDA_SUCCESS
//
// With "nofill" as the second argument it tries OP on a fresh context, for
// comparison. OP is one of: alloc (cudaMalloc 256 MiB), module (cuModuleLoadData
// of PTX), library (cuLibraryLoadData of PTX), lazy_kernel (the first launch
// of a kernel under lazy loading), malloc_async (cudaMallocAsync 256 MiB),
// mempool_create (cuMemPoolCreate, then 256 MiB from it), mem_create
// (cuMemCreate 2 MiB), graph_mem_node (a graph with a 256 MiB allocation
// node, instantiated and launched), malloc_host (cudaMallocHost 256 MiB),
// host_alloc_mapped (cudaHostAlloc, mapped), managed (cudaMallocManaged
// 256 MiB, touched), pitch (cudaMallocPitch), stream_create, event_create,
// cublas (cublasCreate and one SGEMM, libcublas opened with dlopen).
// Exit status 0 whatever OP answers: the line is the result.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kOpBytes = 256 * kMiB;

template <typename F>
F driver_fn(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess) return nullptr;
  return reinterpret_cast<F>(fn);
}

const char* name_of(CUresult r) {
  auto get_name = driver_fn<CUresult (*)(CUresult, const char**)>("cuGetErrorName");
  const char* s = "?";
  if (get_name) get_name(r, &s);
  return s;
}

const char* rt_name(cudaError_t e) { return cudaGetErrorName(e); }

__global__ void lazy_kernel(float* out) { out[threadIdx.x] = float(threadIdx.x) * 2.0f; }

const char* kPtx =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry probe_kernel(.param .u64 out)\n{\n"
    "  .reg .b64 %rd<3>;\n  .reg .b32 %r<2>;\n"
    "  ld.param.u64 %rd1, [out];\n  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mov.u32 %r1, 7;\n  st.global.u32 [%rd2], %r1;\n  ret;\n}\n";

// cuMemCreate of `bytes` of device 0 (released again when it succeeded):
// the driver's answer.
CUresult create_and_release(size_t bytes) {
  auto create =
      driver_fn<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long)>(
          "cuMemCreate");
  auto release = driver_fn<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  const CUresult r = create(&h, bytes, &prop, 0);
  if (r == CUDA_SUCCESS) release(h);
  return r;
}

size_t free_now() {
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  return f;
}

void fill_and_free() {
  std::vector<void*> held;
  size_t total = 0;
  for (size_t piece : {1024 * kMiB, 64 * kMiB, 2 * kMiB}) {
    while (true) {
      void* p = nullptr;
      if (cudaMalloc(&p, piece) != cudaSuccess) break;
      held.push_back(p);
      total += piece;
    }
    cudaGetLastError();
  }
  std::printf("filled %zu MiB in %zu pieces\n", total / kMiB, held.size());
  for (void* p : held) cudaFree(p);
  cudaDeviceSynchronize();
}

std::string run_op(const std::string& op) {
  char line[256];
  if (op == "alloc") {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, kOpBytes);
    if (e == cudaSuccess) cudaFree(p);
    return rt_name(e);
  }
  if (op == "module" || op == "library") {
    CUresult r;
    if (op == "module") {
      auto load = driver_fn<CUresult (*)(CUmodule*, const void*)>("cuModuleLoadData");
      CUmodule m = nullptr;
      r = load ? load(&m, kPtx) : CUDA_ERROR_NOT_FOUND;
    } else {
      auto load = driver_fn<CUresult (*)(CUlibrary*, const void*, CUjit_option*, void**, unsigned, CUlibraryOption*,
                                         void**, unsigned)>("cuLibraryLoadData");
      CUlibrary l = nullptr;
      r = load ? load(&l, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0) : CUDA_ERROR_NOT_FOUND;
      if (r == CUDA_SUCCESS) {
        // Under lazy loading the library's code reaches the device at its
        // first use: ask for the kernel's function.
        auto get_kernel = driver_fn<CUresult (*)(CUkernel*, CUlibrary, const char*)>("cuLibraryGetKernel");
        auto get_function = driver_fn<CUresult (*)(CUfunction*, CUkernel)>("cuKernelGetFunction");
        CUkernel k = nullptr;
        CUfunction f = nullptr;
        r = get_kernel(&k, l, "probe_kernel");
        if (r == CUDA_SUCCESS) r = get_function(&f, k);
      }
    }
    return name_of(r);
  }
  if (op == "lazy_kernel") {
    float* out = nullptr;
    cudaError_t e = cudaMalloc(&out, 4096);
    if (e != cudaSuccess) return std::string("alloc ") + rt_name(e);
    lazy_kernel<<<1, 32>>>(out);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    return rt_name(e);
  }
  if (op == "malloc_async") {
    void* p = nullptr;
    cudaError_t e = cudaMallocAsync(&p, kOpBytes, 0);
    if (e == cudaSuccess) e = cudaFreeAsync(p, 0);
    if (e == cudaSuccess) e = cudaStreamSynchronize(0);
    return rt_name(e);
  }
  if (op == "mempool_create") {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    cudaError_t e = cudaMemPoolCreate(&pool, &props);
    if (e != cudaSuccess) return std::string("create ") + rt_name(e);
    void* p = nullptr;
    e = cudaMallocFromPoolAsync(&p, kOpBytes, pool, 0);
    if (e == cudaSuccess) e = cudaFreeAsync(p, 0);
    if (e == cudaSuccess) e = cudaStreamSynchronize(0);
    return rt_name(e);
  }
  if (op == "mem_create") {
    const CUresult r = create_and_release(2 * kMiB);
    return name_of(r);
  }
  if (op == "graph_mem_node") {
    cudaGraph_t graph;
    cudaGraphCreate(&graph, 0);
    cudaMemAllocNodeParams params{};
    params.poolProps.allocType = cudaMemAllocationTypePinned;
    params.poolProps.location.type = cudaMemLocationTypeDevice;
    params.poolProps.location.id = 0;
    params.bytesize = kOpBytes;
    cudaGraphNode_t alloc_node, free_node;
    cudaError_t e = cudaGraphAddMemAllocNode(&alloc_node, graph, nullptr, 0, &params);
    if (e != cudaSuccess) return std::string("add ") + rt_name(e);
    e = cudaGraphAddMemFreeNode(&free_node, graph, &alloc_node, 1, params.dptr);
    if (e != cudaSuccess) return std::string("add free ") + rt_name(e);
    cudaGraphExec_t exec;
    e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) return std::string("instantiate ") + rt_name(e);
    e = cudaGraphLaunch(exec, 0);
    if (e == cudaSuccess) e = cudaStreamSynchronize(0);
    return std::string("launch ") + rt_name(e);
  }
  if (op == "malloc_host" || op == "host_alloc_mapped") {
    void* p = nullptr;
    cudaError_t e =
        op == "malloc_host" ? cudaMallocHost(&p, kOpBytes) : cudaHostAlloc(&p, kOpBytes, cudaHostAllocMapped);
    if (e == cudaSuccess) cudaFreeHost(p);
    return rt_name(e);
  }
  if (op == "managed") {
    char* p = nullptr;
    cudaError_t e = cudaMallocManaged(&p, kOpBytes);
    if (e == cudaSuccess) {
      e = cudaMemset(p, 1, kOpBytes);
      if (e == cudaSuccess) e = cudaDeviceSynchronize();
      cudaFree(p);
    }
    return rt_name(e);
  }
  if (op == "pitch") {
    void* p = nullptr;
    size_t pitch = 0;
    cudaError_t e = cudaMallocPitch(&p, &pitch, 16384, 16384);
    if (e == cudaSuccess) cudaFree(p);
    return rt_name(e);
  }
  if (op == "stream_create") {
    cudaStream_t s;
    cudaError_t e = cudaStreamCreate(&s);
    if (e == cudaSuccess) cudaStreamDestroy(s);
    return rt_name(e);
  }
  if (op == "event_create") {
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreate(&ev);
    if (e == cudaSuccess) cudaEventDestroy(ev);
    return rt_name(e);
  }
  if (op == "cublas") {
    void* lib = dlopen("libcublas.so.13", RTLD_NOW);
    if (!lib) lib = dlopen("libcublas.so", RTLD_NOW);
    if (!lib) return "no libcublas";
    using Create = int (*)(void**);
    using Sgemm = int (*)(void*, int, int, int, int, int, const float*, const float*, int, const float*, int,
                          const float*, float*, int);
    auto create = reinterpret_cast<Create>(dlsym(lib, "cublasCreate_v2"));
    auto sgemm = reinterpret_cast<Sgemm>(dlsym(lib, "cublasSgemm_v2"));
    void* handle = nullptr;
    int s = create(&handle);
    if (s != 0) {
      std::snprintf(line, sizeof line, "cublasCreate status %d", s);
      return line;
    }
    float* m = nullptr;
    cudaError_t e = cudaMalloc(&m, 3 * 1024 * 1024 * sizeof(float));
    if (e != cudaSuccess) return std::string("alloc ") + rt_name(e);
    const float one = 1.0f, zero = 0.0f;
    s = sgemm(handle, 0, 0, 1024, 1024, 1024, &one, m, 1024, m + 1024 * 1024, 1024, &zero, m + 2 * 1024 * 1024, 1024);
    e = cudaDeviceSynchronize();
    std::snprintf(line, sizeof line, "sgemm status %d sync %s", s, rt_name(e));
    return line;
  }
  if (op == "mempool_then_malloc" || op == "mempool_then_create") {
    // 70% of the device from the stream-ordered pool, freed to it without
    // a synchronisation, then 30% through cudaMalloc or cuMemCreate: does
    // the driver take memory back from its pool for either (CuPy's
    // TestMemoryAsyncPool::test_free_all_blocks_large_chunk expects
    // cudaMalloc to fail)?
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    void* big = nullptr;
    cudaError_t e = cudaMallocAsync(&big, size_t(0.7 * double(total)), 0);
    if (e != cudaSuccess) return std::string("async ") + rt_name(e);
    e = cudaFreeAsync(big, 0);
    if (e != cudaSuccess) return std::string("free async ") + rt_name(e);
    const size_t rest = size_t(0.3 * double(total)) & ~(2 * kMiB - 1);
    if (op == "mempool_then_malloc") {
      void* p = nullptr;
      e = cudaMalloc(&p, rest);
      if (e == cudaSuccess) cudaFree(p);
      cudaGetLastError();
      return rt_name(e);
    }
    const CUresult r = create_and_release(rest);
    return name_of(r);
  }
  if (op == "free_async_of_malloc") {
    // A cudaMalloc block freed through cudaFreeAsync (cuSPARSE does so).
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, 4096);
    if (e != cudaSuccess) return std::string("alloc ") + rt_name(e);
    e = cudaFreeAsync(p, 0);
    if (e == cudaSuccess) e = cudaStreamSynchronize(0);
    return rt_name(e);
  }
  return "unknown op";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: oom_probe OP [nofill]\n");
    return 2;
  }
  const std::string op = argv[1];
  const bool fill = !(argc > 2 && std::strcmp(argv[2], "nofill") == 0);
  cudaFree(nullptr);  // the context
  if (fill) fill_and_free();
  const size_t before = free_now();
  const std::string result = run_op(op);
  std::printf("OP %s %s free_before_mib=%zu result=%s\n", op.c_str(), fill ? "filled" : "fresh", before / kMiB,
              result.c_str());
  return 0;
}
