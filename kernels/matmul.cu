// matmul.cu — see matmul.cuh.
#include "kernels/matmul.cuh"

#include <array>
#include <algorithm>
#include <map>
#include <vector>

#include "kernels/gelu.cuh"
#include "kernels/residual.cuh"

namespace {

struct LtState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // A second stream's own workspace of the same size (matmul_init): products on two streams at
  // once must not share one, cuBLASLt's split-K partials live there.
  cudaStream_t second_stream = nullptr;
  void* second_workspace = nullptr;
  // matmul_init's tuning scratch: where an accumulating product's candidates write (nullptr:
  // allocated for the timing and freed)
  void* tune_scratch = nullptr;
  size_t tune_scratch_bytes = 0;
  void* workspace_for(cudaStream_t st) const {
    return second_stream != nullptr && st == second_stream ? second_workspace : workspace;
  }
  // key -> algorithm (or "none found", has = false)
  struct Entry { bool has; cublasLtMatmulAlgo_t algo; };
  std::map<std::array<long long, 17>, Entry> cache;
  bool tune = false;  // matmul_init's: time kTuneCandidates on a cache miss, else take the first
};

// One per host thread: the cp and DP tests run their virtual ranks as threads of one process,
// each rank's model attaching its own workspace (matmul_init) and running on its own stream. A
// process-wide state let one rank's matmuls use the other's workspace and raced on the cache
// (CudaModelCp failed once, 2026-11-25: "cuBLASLt has no algorithm for N=45 C=128 OC=128").
// A trainer process drives its GPU from one thread, so it keeps one state as before.
LtState& lt() {
  thread_local LtState s;
  if (s.handle == nullptr) CUBLAS_CHECK(cublasLtCreate(&s.handle));
  return s;
}

// cuBLASLt's heuristic ranks algorithms by a model, not by a clock. With tuning, the first
// kTuneCandidates it returns are timed on the real operands, kTuneRounds launches each,
// interleaved (one launch of each candidate per round, so clock drift under a long product
// does not favour the early ones), and the fastest minimum wins if it beats the heuristic's
// first choice by kTuneMargin (two launches of one kernel differ by ~1%).
constexpr int kTuneCandidates = 8;
constexpr int kTuneRounds = 3;
constexpr float kTuneMargin = 0.98f;

template <class T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)));
}

// Index of the fastest of res[0, count) on these operands (0 when none beats res[0] by
// kTuneMargin). An in-place accumulation (C = D, beta != 0) must reach D once only: there the
// candidates write a scratch D that reads C: matmul_init's tuning scratch, or without one a
// stream-ordered allocation (cudaFree would wait for the whole device, and so for another
// thread's rank on the same GPU whose stream waits for this one: the cp tests' virtual ranks).
// None is timed where neither can be had.
int fastest_candidate(LtState& s, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                      cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld,
                      const cublasLtMatmulHeuristicResult_t* res, int count, void* D,
                      cudaDataType_t dtype, int n, int ldd, float alpha, float beta,
                      const floatX* A, const floatX* B, const void* Cm, cudaStream_t stream) {
  void* Dt = D;
  const bool accumulates = beta != 0.0f && Cm == D;
  bool allocated = false;
  if (accumulates) {
    const size_t bytes = (size_t)ldd * n * (dtype == CUDA_R_32F ? sizeof(float) : sizeof(floatX));
    if (s.tune_scratch) {
      if (bytes > s.tune_scratch_bytes) return 0;
      Dt = s.tune_scratch;
    } else if (cudaMallocAsync(&Dt, bytes, stream) == cudaSuccess) {
      allocated = true;
    } else {
      (void)cudaGetLastError();
      return 0;
    }
  }
  auto launch = [&](int i) {
    return cublasLtMatmul(s.handle, op, &alpha, A, la, B, lb, &beta, Cm, ld, Dt, ld, &res[i].algo,
                          s.workspace_for(stream), s.workspace_bytes, stream);
  };
  std::vector<bool> runs(count);
  for (int i = 0; i < count; i++)  // warm-up; a candidate that fails to launch drops out
    runs[i] = res[i].state == CUBLAS_STATUS_SUCCESS && launch(i) == CUBLAS_STATUS_SUCCESS;
  std::vector<cudaEvent_t> ev(count + 1);
  for (auto& x : ev) CUDA_CHECK(cudaEventCreate(&x));
  std::vector<float> best_ms(count, 1e30f);
  for (int r = 0; r < kTuneRounds; r++) {
    CUDA_CHECK(cudaEventRecord(ev[0], stream));
    for (int i = 0; i < count; i++) {
      if (runs[i]) CUBLAS_CHECK(launch(i));
      CUDA_CHECK(cudaEventRecord(ev[i + 1], stream));
    }
    CUDA_CHECK(cudaEventSynchronize(ev[count]));
    for (int i = 0; i < count; i++) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
      if (runs[i]) best_ms[i] = std::min(best_ms[i], ms);
    }
  }
  for (auto& x : ev) CUDA_CHECK(cudaEventDestroy(x));
  if (allocated) CUDA_CHECK(cudaFreeAsync(Dt, stream));
  int best = 0;
  for (int i = 1; i < count; i++)
    if (best_ms[i] < best_ms[best] && best_ms[i] < kTuneMargin * best_ms[0]) best = i;
  return best;
}

// D (m x n, column-major, ldd) = alpha * op(A) op(B) + beta * D, with an optional epilogue.
// A: column-major, op(A) is m x k; B: op(B) is k x n. Returns false when cuBLASLt has no
// algorithm for this configuration (the caller falls back); throws on execution errors.
// Cm: the C matrix (same type and layout as D) when beta != 0; nullptr means D itself.
bool lt_matmul(void* D, cudaDataType_t dtype, const floatX* A, bool transA, const floatX* B,
               bool transB, int m, int n, int k, int lda, int ldb, int ldd, float alpha,
               float beta, cublasLtEpilogue_t epi, const void* bias, const void* aux, int aux_ld,
               cudaStream_t stream, const void* Cm = nullptr) {
  LtState& s = lt();
  CHECK(s.workspace != nullptr, "matmul: matmul_init() was not called");
  if (Cm == nullptr) Cm = D;
  const int alA = ptr_alignment(A), alB = ptr_alignment(B), alD = ptr_alignment(D),
            alC = ptr_alignment(Cm);
  const std::array<long long, 17> key = {transA, transB, m, n, k, lda, ldb, ldd, (long long)dtype,
                                         (long long)epi, beta != 0.0f, alA, alB, alD, alC,
                                         aux ? ptr_alignment(aux) : 0, aux_ld};

  cublasLtMatmulDesc_t op;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attr(op, CUBLASLT_MATMUL_DESC_TRANSA, opA);
  set_attr(op, CUBLASLT_MATMUL_DESC_TRANSB, opB);
  set_attr(op, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  if (bias) set_attr(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (aux) {
    set_attr(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, const_cast<void*>(aux));
    set_attr(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)aux_ld);
  }
  cublasLtMatrixLayout_t la, lb, ld;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, kCudaFloatX, transA ? k : m, transA ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, kCudaFloatX, transB ? n : k, transB ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, dtype, m, n, ldd));

  auto it = s.cache.find(key);
  if (it == s.cache.end()) {
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = s.workspace_bytes;
    const uint32_t a32 = alA, b32 = alB, c32 = alC, d32 = alD;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ws, sizeof(ws)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a32, sizeof(a32)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b32, sizeof(b32)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c32, sizeof(c32)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d32, sizeof(d32)));
    const int wanted = s.tune ? kTuneCandidates : 1;
    std::vector<cublasLtMatmulHeuristicResult_t> res(wanted);
    int count = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(s.handle, op, la, lb, ld, ld, pref, wanted,
                                                       res.data(), &count);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (st != CUBLAS_STATUS_SUCCESS) count = 0;
    LtState::Entry e;
    e.has = count > 0;
    if (e.has) e.algo = res[0].algo;
    if (count > 1) {
      const int best = fastest_candidate(s, op, la, lb, ld, res.data(), count, D, dtype, n, ldd,
                                         alpha, beta, A, B, Cm, stream);
      e.algo = res[best].algo;
    }
    it = s.cache.emplace(key, e).first;
  }
  bool ok = it->second.has;
  if (ok)
    CUBLAS_CHECK(cublasLtMatmul(s.handle, op, &alpha, A, la, B, lb, &beta, Cm, ld, D, ld,
                                &it->second.algo, s.workspace_for(stream), s.workspace_bytes,
                                stream));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(ld));
  CUBLAS_CHECK(cublasLtMatmulDescDestroy(op));
  return ok;
}

// out[n, oc] += bias[oc] (fallback when the bias epilogue is unavailable).
__global__ void add_bias_kernel(floatX* out, const floatX* bias, int N, int OC) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (size_t)N * OC) out[i] = from_f32<floatX>(to_f32(out[i]) + to_f32(bias[i % OC]));
}

// Stage 1 of dbias: partials[blockIdx.y][c] = sum over this block-row's rows of dout[:, c].
// Block (32, 8): lane x owns columns [blockIdx.x*32*W + x*W, +W); warp y takes rows
// y + 8*blockIdx.y, stepping by 8*gridDim.y.
template <int W>
__global__ void bias_partials_kernel(float* partials, const floatX* dout, int N, int OC) {
  __shared__ float s[8][32 * W + 1];
  const int c0 = blockIdx.x * 32 * W + threadIdx.x * W;
  float acc[W] = {};
  if (c0 < OC) {
    for (int r = blockIdx.y * 8 + threadIdx.y; r < N; r += gridDim.y * 8) {
      const floatX* d = dout + (size_t)r * OC + c0;
      if constexpr (W == x128::size) {
        x128 v = load128cs(d);
#pragma unroll
        for (int k = 0; k < W; k++) acc[k] += to_f32(v[k]);
      } else {
        acc[0] += to_f32(d[0]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < W; k++) s[threadIdx.y][threadIdx.x * W + k] = acc[k];
  __syncthreads();
  const int tid = threadIdx.y * 32 + threadIdx.x;
  for (int j = tid; j < 32 * W; j += 256) {
    const int c = blockIdx.x * 32 * W + j;
    if (c >= OC) continue;
    float r = 0.0f;
#pragma unroll
    for (int y = 0; y < 8; y++) r += s[y][j];
    partials[(size_t)blockIdx.y * OC + c] = r;
  }
}

// Row blocks of the dbias reduction: enough for ~4 blocks per SM at GPT-2 sizes (OC = 768:
// 3 x 256 blocks), capped by N/8 so that small N has no empty blocks.

__global__ void scale_kernel(float* x, float s, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

}  // namespace

void matmul_init(void* workspace, size_t bytes, bool tune, cudaStream_t second_stream,
                 void* second_workspace, void* tune_scratch, size_t tune_scratch_bytes) {
  LtState& s = lt();
  // algorithms were chosen for the old workspace size, or by the other rule
  if (bytes != s.workspace_bytes || tune != s.tune) s.cache.clear();
  s.workspace = workspace;
  s.workspace_bytes = bytes;
  s.tune = tune;
  s.second_stream = second_workspace ? second_stream : nullptr;
  s.second_workspace = second_workspace;
  s.tune_scratch = tune_scratch;
  s.tune_scratch_bytes = tune_scratch ? tune_scratch_bytes : 0;
}

void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                    int N, int C, int OC, cudaStream_t stream) {
  if (bias && aligned16(bias) &&
      lt_matmul(out, kCudaFloatX, weight, true, inp, false, OC, N, C, C, C, OC, 1.0f, 0.0f,
                CUBLASLT_EPILOGUE_BIAS, bias, nullptr, 0, stream))
    return;
  CHECK(lt_matmul(out, kCudaFloatX, weight, true, inp, false, OC, N, C, C, C, OC, 1.0f, 0.0f,
                  CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0, stream),
        "matmul_forward: cuBLASLt has no algorithm for N=%d C=%d OC=%d", N, C, OC);
  if (bias) {
    add_bias_kernel<<<ceil_div((size_t)N * OC, (size_t)256), 256, 0, stream>>>(out, bias, N, OC);
    CUDA_CHECK_LAUNCH();
  }
}

void matmul_forward_residual(floatX* out, const floatX* inp, const floatX* weight,
                             const floatX* bias, const floatX* residual, int N, int C, int OC,
                             cudaStream_t stream) {
  if (bias && aligned16(bias) &&
      lt_matmul(out, kCudaFloatX, weight, true, inp, false, OC, N, C, C, C, OC, 1.0f, 1.0f,
                CUBLASLT_EPILOGUE_BIAS, bias, nullptr, 0, stream, residual))
    return;
  matmul_forward(out, inp, weight, bias, N, C, OC, stream);
  residual_forward(out, out, residual, (size_t)N * OC, stream);
}

void matmul_forward_gelu(floatX* out, floatX* pre_gelu, const floatX* inp, const floatX* weight,
                         const floatX* bias, int N, int C, int OC, cudaStream_t stream) {
  const bool epi_ok = aligned16(pre_gelu) && OC % 8 == 0 && (bias == nullptr || aligned16(bias));
  if (epi_ok &&
      lt_matmul(out, kCudaFloatX, weight, true, inp, false, OC, N, C, C, C, OC, 1.0f, 0.0f,
                bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, bias,
                pre_gelu, OC, stream))
    return;
  matmul_forward(pre_gelu, inp, weight, bias, N, C, OC, stream);
  gelu_forward(out, pre_gelu, (size_t)N * OC, stream);
}

void matmul_backward_dinp(floatX* dinp, const floatX* dout, const floatX* weight, int N, int C,
                          int OC, cudaStream_t stream, float dout_scale,
                          const floatX* dinp_pre_gelu) {
  // dinp^T (C x N) = weight^T-as-colmajor (C x OC) * dout^T (OC x N)
  const bool fused = dinp_pre_gelu && aligned16(dinp_pre_gelu) && C % 8 == 0 &&
                     lt_matmul(dinp, kCudaFloatX, weight, false, dout, false, C, N, OC, C, OC, C,
                               dout_scale, 0.0f, CUBLASLT_EPILOGUE_DGELU, nullptr, dinp_pre_gelu,
                               C, stream);
  if (!fused) {
    CHECK(lt_matmul(dinp, kCudaFloatX, weight, false, dout, false, C, N, OC, C, OC, C, dout_scale,
                    0.0f, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0, stream),
          "matmul_backward (dinp): cuBLASLt has no algorithm for N=%d C=%d OC=%d", N, C, OC);
    if (dinp_pre_gelu) gelu_backward(dinp, dinp_pre_gelu, dinp, (size_t)N * C, stream);
  }
}

void matmul_backward_dweight(float* dweight, float* dbias, const floatX* dout, const floatX* inp,
                             int N, int C, int OC, float* scratch, cudaStream_t stream,
                             float dout_scale) {
  // dweight^T-as-colmajor (C x OC) += inp^T (C x N) * dout (N x OC)
  CHECK(lt_matmul(dweight, CUDA_R_32F, inp, false, dout, true, C, OC, N, C, OC, C, dout_scale,
                  1.0f, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0, stream),
        "matmul_backward (dweight): cuBLASLt has no algorithm for N=%d C=%d OC=%d", N, C, OC);
  if (dbias) {
    const bool vec = OC % x128::size == 0 && aligned16(dout);
    const int W = vec ? x128::size : 1, G = matmul_bias_row_blocks(N);
    dim3 grid(ceil_div(OC, 32 * W), G);
    if (vec)
      bias_partials_kernel<x128::size><<<grid, dim3(32, 8), 0, stream>>>(scratch, dout, N, OC);
    else
      bias_partials_kernel<1><<<grid, dim3(32, 8), 0, stream>>>(scratch, dout, N, OC);
    CUDA_CHECK_LAUNCH();
    if (dout_scale != 1.0f) {
      scale_kernel<<<ceil_div(G * OC, 256), 256, 0, stream>>>(scratch, dout_scale, G * OC);
      CUDA_CHECK_LAUNCH();
    }
    reduce_partials(dbias, nullptr, scratch, G, OC, OC, stream);
  }
}

void matmul_backward(floatX* dinp, float* dweight, float* dbias, const floatX* dout,
                     const floatX* inp, const floatX* weight, int N, int C, int OC, float* scratch,
                     cudaStream_t stream, float dout_scale, const floatX* dinp_pre_gelu) {
  if (dinp) matmul_backward_dinp(dinp, dout, weight, N, C, OC, stream, dout_scale, dinp_pre_gelu);
  matmul_backward_dweight(dweight, dbias, dout, inp, N, C, OC, scratch, stream, dout_scale);
}
