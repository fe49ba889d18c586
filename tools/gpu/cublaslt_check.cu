// tools/gpu/cublaslt_check.cu: a cuBLASLt program for the library check
// (tools/gpu/library-samples), which NVIDIA's samples do not cover. Each
// case runs cublasLtMatmul with a workspace from cudaMalloc on a stream,
// once for every algorithm the heuristic offers (up to 8), and compares the
// result with a CPU reference. Inputs are small integers, so every product
// and sum is exact in FP32 and FP16: the result must match the reference
// bit for bit whatever algorithm or split the library picks, and the
// checksum printed is the same on every run. Exit status 0 means every
// result matched.
#include <cublasLt.h>
#include <cuda_fp16.h>

#include "check.cuh"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CKL(call)                                                               \
  do {                                                                          \
    cublasStatus_t s_ = (call);                                                 \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                          \
      std::printf("cublasLt error %d at %s:%d\n", int(s_), __FILE__, __LINE__); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;
constexpr int kMaxAlgorithms = 8;

struct Case {
  int m, n, k;
  bool half_inputs;  // A and B in FP16, C and D in FP32
  bool bias;         // epilogue adds a per-row bias
};

// Deterministic small integers in [-2, 2].
float small_int(uint32_t i, uint32_t seed) {
  uint32_t x = i * 2654435761u ^ seed * 40503u;
  x ^= x >> 13;
  return float(int(x % 5u) - 2);
}

// Runs one case for every algorithm offered; returns the checksum of the
// last result, or exits on a mismatch.
int64_t run_case(cublasLtHandle_t lt, cudaStream_t stream, const Case& c) {
  const size_t a_count = size_t(c.m) * c.k, b_count = size_t(c.k) * c.n, d_count = size_t(c.m) * c.n;
  std::vector<float> a(a_count), b(b_count), cin(d_count), bias(c.m), ref(d_count), out(d_count);
  for (size_t i = 0; i < a_count; ++i) a[i] = small_int(uint32_t(i), 1);
  for (size_t i = 0; i < b_count; ++i) b[i] = small_int(uint32_t(i), 2);
  for (size_t i = 0; i < d_count; ++i) cin[i] = small_int(uint32_t(i), 3);
  for (int i = 0; i < c.m; ++i) bias[i] = small_int(uint32_t(i), 4);
  // Column-major reference: D = A * B + C (+ bias per row).
  for (int col = 0; col < c.n; ++col)
    for (int row = 0; row < c.m; ++row) {
      double sum = cin[size_t(col) * c.m + row] + (c.bias ? bias[row] : 0.0f);
      for (int i = 0; i < c.k; ++i) sum += double(a[size_t(i) * c.m + row]) * b[size_t(col) * c.k + i];
      ref[size_t(col) * c.m + row] = float(sum);
    }

  const size_t in_elem_bytes = c.half_inputs ? sizeof(__half) : sizeof(float);
  void *da, *db;
  float *dc, *dd, *dbias;
  CK(cudaMalloc(&da, a_count * in_elem_bytes));
  CK(cudaMalloc(&db, b_count * in_elem_bytes));
  CK(cudaMalloc(&dc, d_count * sizeof(float)));
  CK(cudaMalloc(&dd, d_count * sizeof(float)));
  CK(cudaMalloc(&dbias, c.m * sizeof(float)));
  if (c.half_inputs) {
    std::vector<__half> ah(a_count), bh(b_count);
    for (size_t i = 0; i < a_count; ++i) ah[i] = __float2half(a[i]);
    for (size_t i = 0; i < b_count; ++i) bh[i] = __float2half(b[i]);
    CK(cudaMemcpy(da, ah.data(), a_count * sizeof(__half), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, bh.data(), b_count * sizeof(__half), cudaMemcpyHostToDevice));
  } else {
    CK(cudaMemcpy(da, a.data(), a_count * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), b_count * sizeof(float), cudaMemcpyHostToDevice));
  }
  CK(cudaMemcpy(dc, cin.data(), d_count * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbias, bias.data(), c.m * sizeof(float), cudaMemcpyHostToDevice));
  // A workspace per case, freed at its end: the library sees a new address
  // each time, as it does in a program that frees and allocates between calls.
  void* workspace;
  CK(cudaMalloc(&workspace, kWorkspaceBytes));

  const cudaDataType_t in_type = c.half_inputs ? CUDA_R_16F : CUDA_R_32F;
  cublasLtMatmulDesc_t op;
  CKL(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (c.bias) {
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    CKL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    CKL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));
  }
  cublasLtMatrixLayout_t la, lb, lc;
  CKL(cublasLtMatrixLayoutCreate(&la, in_type, c.m, c.k, c.m));
  CKL(cublasLtMatrixLayoutCreate(&lb, in_type, c.k, c.n, c.k));
  CKL(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, c.m, c.n, c.m));
  cublasLtMatmulPreference_t pref;
  CKL(cublasLtMatmulPreferenceCreate(&pref));
  size_t workspace_bytes = kWorkspaceBytes;
  CKL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                           sizeof workspace_bytes));
  cublasLtMatmulHeuristicResult_t heuristics[kMaxAlgorithms];
  int found = 0;
  CKL(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, kMaxAlgorithms, heuristics, &found));
  if (found == 0) {
    std::printf("case %dx%dx%d: no algorithm offered\n", c.m, c.n, c.k);
    std::exit(1);
  }

  const float alpha = 1.0f, beta = 1.0f;
  int64_t checksum = 0;
  for (int h = 0; h < found; ++h) {
    CK(cudaMemsetAsync(dd, 0xff, d_count * sizeof(float), stream));  // NaN: a skipped write shows
    CKL(cublasLtMatmul(lt, op, &alpha, da, la, db, lb, &beta, dc, lc, dd, lc, &heuristics[h].algo, workspace,
                       kWorkspaceBytes, stream));
    CK(cudaStreamSynchronize(stream));
    CK(cudaMemcpy(out.data(), dd, d_count * sizeof(float), cudaMemcpyDeviceToHost));
    checksum = 0;
    for (size_t i = 0; i < d_count; ++i) {
      if (out[i] != ref[i]) {
        std::printf("case %dx%dx%d%s%s algorithm %d: element %zu is %g, expected %g\n", c.m, c.n, c.k,
                    c.half_inputs ? " fp16" : "", c.bias ? " bias" : "", h, i, double(out[i]), double(ref[i]));
        std::exit(1);
      }
      checksum += int64_t(out[i]);
    }
  }

  CKL(cublasLtMatmulPreferenceDestroy(pref));
  CKL(cublasLtMatrixLayoutDestroy(lc));
  CKL(cublasLtMatrixLayoutDestroy(lb));
  CKL(cublasLtMatrixLayoutDestroy(la));
  CKL(cublasLtMatmulDescDestroy(op));
  CK(cudaFree(workspace));
  CK(cudaFree(dbias));
  CK(cudaFree(dd));
  CK(cudaFree(dc));
  CK(cudaFree(db));
  CK(cudaFree(da));
  return checksum;
}

}  // namespace

int main() {
  const Case cases[] = {
      {256, 128, 64, false, false},  {1000, 77, 333, false, false}, {64, 64, 4096, false, false},
      {1024, 512, 256, false, true}, {512, 256, 128, true, false},  {129, 65, 2000, true, false},
  };
  cublasLtHandle_t lt;
  CKL(cublasLtCreate(&lt));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int64_t total = 0;
  int cases_run = 0;
  for (const Case& c : cases) {
    const int64_t sum = run_case(lt, stream, c);
    std::printf("case %dx%dx%d%s%s: checksum %lld\n", c.m, c.n, c.k, c.half_inputs ? " fp16" : "",
                c.bias ? " bias" : "", (long long)sum);
    total += sum;
    ++cases_run;
  }
  CK(cudaStreamDestroy(stream));
  CKL(cublasLtDestroy(lt));
  std::printf("cublaslt_check: %d cases, checksum %lld\nok\n", cases_run, (long long)total);
  return 0;
}
