// bench_kernels.cu — `flashgpt bench-kernels`: GPU timings of everything but the attention
// backends (`flashgpt bench-attention` times those), in four sections (--only picks some):
//   kernels  each op at the GPT-2 124M (d12) shapes of a B=32, T=1024 step (N = 32768, C = 768,
//            Vp = 50304) on random data: per call the median of 20 timed calls after 3 warm-ups
//            (CUDA events), the minimum bytes it must move and the rate that gives, or TFLOP/s
//            for the products (2*N*C*OC each; backward = dinp + dweight (+ dbias))
//   rope     rope_forward / rope_backward at 131072 positions (and a d12-like B=8, T=1024)
//   decode   attention_decode over a KV cache of 131072 positions, MHA, GQA, MQA; the caches are
//            rotated over several copies so that reads come from HBM, not L2
//   step     one d12 training step through the CUDA model (--batch x 1024 tokens, --attn):
//            memory plan, measured peak, median ms per phase and per step, tokens/s, TFLOP/s
//   tensor   the wgmma rates of the attention kernels' product shapes and MUFU.EX2's, per SM and
//            clock against the peak (bench_sm90.cu): the ceilings the flash3 kernels run under
// The "Measured" notes in the kernel headers (kernels/*.cuh) quote these sections.
//
//   flashgpt bench-kernels                          all sections
//   flashgpt bench-kernels --only decode,rope
//   flashgpt bench-kernels --only step --attn flash --batch 16
//   flashgpt bench-kernels --only kernels --tune-matmul   the products with timed algorithms
// Options: BenchKernelsOptions, parsed by bench/options.cpp.
#include "bench/bench_kernels.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_sm90.h"
#include "bench/bench_util.cuh"
#include "kernels/adamw.cuh"
#include "kernels/attention/attention.cuh"
#include "kernels/attention/decode.cuh"
#include "kernels/classifier.cuh"
#include "kernels/cuda_timer.cuh"
#include "kernels/encoder.cuh"
#include "kernels/gelu.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/residual.cuh"
#include "kernels/rng.h"
#include "kernels/rope.cuh"
#include "kernels/rope.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/model.h"

namespace {

template <class Fn>
double median_us(Fn fn) {
  return 1e3 * median_ms(fn, 3, 20);
}

void report_bw(const char* what, double us, double bytes) {
  std::printf("  %-44s %9.1f us  %7.0f GB/s   (%.0f MB moved at least)\n", what, us,
              bytes / (us * 1e-6) / 1e9, bytes / 1e6);
}
void report_flops(const char* what, double us, double flops) {
  std::printf("  %-44s %9.1f us  %7.0f TFLOP/s\n", what, us, flops / (us * 1e-6) / 1e12);
}

std::vector<int> random_tokens(size_t n, int V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> v(n);
  for (int& x : v) x = (int)rng.below((uint64_t)V);
  return v;
}

int* upload_tokens(DeviceAllocs& mem, const std::vector<int>& tok) {
  int* d = mem.alloc<int>(tok.size());
  CUDA_CHECK(cudaMemcpy(d, tok.data(), tok.size() * sizeof(int), cudaMemcpyHostToDevice));
  return d;
}

void bench_d12_kernels(bool tune_matmul) {
  const int B = 32, T = 1024, N = B * T, C = 768, V = 50257, Vp = 50304, L = 12;
  const size_t NC = (size_t)N * C, P = 124475904;
  const double es = sizeof(floatX);
  std::printf("kernels at d12 shapes, N=%d C=%d Vp=%d:\n", N, C, Vp);
  DeviceAllocs mem;
  floatX *x = mem.random<floatX>(NC, 1), *y = mem.random<floatX>(NC, 2),
         *z = mem.random<floatX>(NC, 3);
  floatX *h4 = mem.random<floatX>(4 * NC, 4), *g4 = mem.random<floatX>(4 * NC, 5);
  floatX *w = mem.random<floatX>(4 * (size_t)C * C, 6, -0.02f, 0.02f),
         *bias = mem.random<floatX>(4 * C, 7);
  floatX *wte = mem.random<floatX>((size_t)Vp * C, 8, -0.02f, 0.02f),
         *wpe = mem.random<floatX>((size_t)T * C, 9);
  floatX* logits = mem.random<floatX>((size_t)N * Vp, 10, -4.f, 4.f);
  float *fw = mem.random<float>(4 * (size_t)C * C, 11), *fb = mem.random<float>(4 * C, 12);
  float *mean = mem.random<float>(N, 13), *rstd = mem.random<float>(N, 14);
  float* losses = mem.random<float>(N, 15);
  float *master = mem.random<float>(P, 16), *grads = mem.random<float>(P, 17, -1e-3f, 1e-3f),
        *m = mem.random<float>(P, 18, -1e-3f, 1e-3f), *v = mem.random<float>(P, 19, 0.f, 1e-6f);
  floatX* params = mem.random<floatX>(P, 20);
  int* d_tok = upload_tokens(mem, random_tokens(N, V, 1));
  int* d_tg = upload_tokens(mem, random_tokens(N, V, 2));
  const size_t sb = std::max({layernorm_backward_scratch_bytes(C),
                              matmul_backward_scratch_bytes(N, 4 * C),
                              encoder_backward_scratch_bytes(B, T, encoder_sort_temp_bytes(B, T)),
                              global_norm_scratch_bytes()});
  char* scratch = mem.alloc(sb);
  float* ks = reinterpret_cast<float*>(scratch);
  double* dnorm = mem.alloc<double>(1);
  float *dwte = mem.random<float>((size_t)Vp * C, 21), *dwpe = mem.random<float>((size_t)T * C, 22);
  void* workspace = mem.alloc(matmul_workspace_bytes());
  matmul_init(workspace, matmul_workspace_bytes(), tune_matmul);
  CUDA_CHECK(cudaDeviceSynchronize());

  std::printf("memory-bound ops (per call; a d12 step has L=%d of each per-layer op):\n", L);
  report_bw("encoder_forward", median_us([&] { encoder_forward(x, d_tok, wte, wpe, B, T, C, 0); }),
            3 * NC * es);
  report_bw("encoder_backward (sort + dwte + dwpe)",
            median_us([&] { encoder_backward(dwte, dwpe, y, d_tok, B, T, C, scratch, 0); }),
            NC * es + 2 * NC * 4.0 / 64);
  report_bw("layernorm_forward",
            median_us([&] { layernorm_forward(z, mean, rstd, x, w, bias, N, C, 0); }),
            2 * NC * es + 2 * N * 4.0);
  report_bw("layernorm_backward (dinp +=, dw/db partials)",
            median_us([&] { layernorm_backward(z, fw, fb, y, x, w, mean, rstd, N, C, ks, 0); }),
            4 * NC * es + 2 * N * 4.0);
  report_bw("residual_forward", median_us([&] { residual_forward(z, x, y, NC, 0); }), 3 * NC * es);
  report_bw("gelu_forward (N x 4C)", median_us([&] { gelu_forward(g4, h4, 4 * NC, 0); }),
            2 * 4 * NC * es);
  report_bw("gelu_backward (N x 4C)", median_us([&] { gelu_backward(g4, h4, g4, 4 * NC, 0); }),
            3 * 4 * NC * es);
  report_bw("classifier losses only", median_us([&] {
              classifier(losses, nullptr, logits, d_tg, 1.0f / N, N, V, Vp, 0);
            }), (double)N * Vp * es);
  // In place over the same logits every call: the values change but the work does not.
  report_bw("classifier losses + dlogits in place", median_us([&] {
              classifier(losses, logits, logits, d_tg, 1.0f / N, N, V, Vp, 0);
            }), 2.0 * N * Vp * es);
  {  // the d12 model's 16 tensors in one launch, clipped by a norm on the device
    const ParamLayout layout(gpt_preset("d12", V, T));
    CHECK(layout.total == P, "internal: d12 has %zu parameters, not %zu", layout.total, P);
    std::vector<AdamWPiece> pieces;
    for (int i = 0; i < kNumParamTensors; i++)
      pieces.push_back({layout.offsets[i], layout.sizes[i], layout.offsets[i],
                        ParamLayout::decayed(i) ? 0.1f : 0.0f});
    global_norm_squared(dnorm, grads, P, (double*)scratch, 0);
    report_bw("adamw (124M params in 16 tensors, fp32 + floatX copy)", median_us([&] {
                adamw_update(master, params, grads, m, v, pieces.data(), (int)pieces.size(), dnorm,
                             1.0f, 1e-4f, 0.9f, 0.95f, 1e-8f, 3, 0);
              }), P * (4.0 * 4 + 3 * 4 + es));
  }
  report_bw("global_norm_squared (124M fp32)",
            median_us([&] { global_norm_squared(dnorm, grads, P, (double*)scratch, 0); }), P * 4.0);

  std::printf("matrix products (2*N*C*OC flops each; backward = dinp + dweight (+ dbias)):\n");
  struct Shape {
    const char* name;
    int Cin, OC;
  };
  const Shape shapes[] = {{"qkv     C->3C", C, 3 * C}, {"attproj C->C", C, C},
                          {"fc      C->4C", C, 4 * C}, {"fcproj 4C->C", 4 * C, C}};
  for (const Shape& sh : shapes) {
    const double f = 2.0 * N * sh.Cin * sh.OC;
    floatX* in = sh.Cin == C ? x : h4;
    floatX* out = sh.OC == C ? z : g4;
    const std::string name = sh.name;
    report_flops((name + " forward (bias epilogue)").c_str(),
                 median_us([&] { matmul_forward(out, in, w, bias, N, sh.Cin, sh.OC, 0); }), f);
    if (sh.OC == 4 * C)
      report_flops((name + " forward (GELU_AUX_BIAS epilogue)").c_str(), median_us([&] {
                     matmul_forward_gelu(g4, h4, x, w, bias, N, C, 4 * C, 0);
                   }), f);
    if (sh.OC == C)
      report_flops((name + " forward (bias + residual)").c_str(), median_us([&] {
                     matmul_forward_residual(z, in, w, bias, y, N, sh.Cin, C, 0);
                   }), f);
    floatX* dinp = sh.Cin == C ? y : g4;
    report_flops((name + " backward").c_str(), median_us([&] {
                   matmul_backward(dinp, fw, fb, out, in, w, N, sh.Cin, sh.OC, ks, 0);
                 }), 2 * f);
    if (sh.Cin == 4 * C)
      report_flops((name + " backward (DGELU epilogue)").c_str(), median_us([&] {
                     matmul_backward(g4, fw, fb, z, h4, w, N, 4 * C, C, ks, 0, 1.0f, h4);
                   }), 2 * f);
  }
  const double f = 2.0 * N * C * Vp;
  report_flops("lm-head C->Vp forward",
               median_us([&] { matmul_forward(logits, x, wte, nullptr, N, C, Vp, 0); }), f);
  report_flops("lm-head C->Vp backward", median_us([&] {
                 matmul_backward(y, dwte, nullptr, logits, x, wte, N, C, Vp, ks, 0);
               }), 2 * f);
  CUDA_CHECK(cudaDeviceSynchronize());
  matmul_init(nullptr, 0);
}

void bench_rope() {
  struct S {
    int B, T, NH, NKV, HS;
  };
  std::printf("rope (in place on Q and K; table of T x HS/2 (cos, sin) fp32):\n");
  for (const S s : {S{1, 131072, 12, 12, 64}, S{1, 131072, 12, 4, 128}, S{8, 1024, 12, 12, 64}}) {
    DeviceAllocs mem;
    const size_t n = (size_t)s.B * s.T * (s.NH + 2 * s.NKV) * s.HS;
    std::vector<float> table((size_t)s.T * s.HS);
    rope_table_ref(table.data(), s.T, s.HS, 10000.0f);
    float* d_table = mem.alloc<float>(table.size());
    CUDA_CHECK(cudaMemcpy(d_table, table.data(), table.size() * sizeof(float),
                          cudaMemcpyHostToDevice));
    floatX* d_qkv = mem.random<floatX>(n, 1);
    const double us_f = median_us([&] {
      rope_forward(d_qkv, d_table, s.B, s.T, s.NH, s.NKV, s.HS, 0, 0);
    });
    const double us_b = median_us([&] {
      rope_backward(d_qkv, d_table, s.B, s.T, s.NH, s.NKV, s.HS, 0, 0);
    });
    // Minimum bytes: q and k heads read and written once, the table read once.
    const double bytes = 2.0 * s.B * s.T * (s.NH + s.NKV) * s.HS * sizeof(floatX) +
                         (double)s.T * s.HS * sizeof(float);
    std::printf("  B=%d T=%d NH=%d NKV=%d HS=%d: forward %8.1f us %6.0f GB/s, backward %8.1f us "
                "%6.0f GB/s (%.0f MB moved at least)\n",
                s.B, s.T, s.NH, s.NKV, s.HS, us_f, bytes / (us_f * 1e3), us_b,
                bytes / (us_b * 1e3), bytes / 1e6);
  }
}

void bench_decode() {
  std::printf("attention_decode over a KV cache; caches rotated over several copies so reads "
              "come from HBM, not L2:\n");
  const int n = 131072;
  const int heads[4][3] = {{12, 12, 64}, {12, 4, 128}, {32, 8, 128}, {12, 1, 64}};
  for (const auto& h : heads) {
    DeviceAllocs mem;
    const int NH = h[0], NKV = h[1], HS = h[2];
    const size_t nkv = (size_t)n * NKV * HS;
    const size_t bytes = 2 * nkv * sizeof(floatX);
    const int copies = (int)std::max<size_t>(1, std::min<size_t>(8, (200u << 20) / bytes + 1));
    std::vector<floatX*> ks, vs;
    for (int i = 0; i < copies; i++) {
      ks.push_back(mem.random<floatX>(nkv, 2 * i + 1));
      vs.push_back(mem.random<floatX>(nkv, 2 * i + 2));
    }
    floatX *d_q = mem.random<floatX>((size_t)NH * HS, 99), *d_out = mem.alloc<floatX>((size_t)NH * HS);
    char* scratch = mem.alloc(attention_decode_scratch_bytes(n, NH, HS));
    int it = 0;
    const double us = median_us([&] {
      const int i = it++ % copies;
      attention_decode(d_out, d_q, ks[i], vs[i], n, NH, NKV, HS, scratch, 0);
    });
    std::printf("  n=%d NH=%d NKV=%d HS=%d: %8.1f us  %6.0f GB/s  (K+V %.0f MB, %d copies)\n", n,
                NH, NKV, HS, us, bytes / (us * 1e3), bytes / 1e6, copies);
  }
}

// A d12 training step through the CUDA model at B x 1024: the plan, the measured peak, the
// median of 10 steps after 3 (forward + loss, backward, grad norm + AdamW, whole step).
void bench_step(const std::string& attn, int B, bool tune_matmul) {
  ModelOptions o;
  o.config = gpt_preset("d12", 50257, 1024);
  o.B = B;
  o.T = 1024;
  o.attn = attn;
  o.tune_matmul = tune_matmul;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Model> m = make_cuda_model(o);
  const auto t1 = std::chrono::steady_clock::now();
  std::printf("d12 step B=%d T=%d attn=%s, model made in %.1f s; memory plan:\n", o.B, o.T,
              o.attn.c_str(), std::chrono::duration<double>(t1 - t0).count());
  size_t total = 0;
  for (const MemoryLine& l : m->memory_plan()) {
    std::printf("  %-52s %9.3f GiB\n", l.what.c_str(), l.bytes / (1024.0 * 1024 * 1024));
    total += l.bytes;
  }
  std::printf("  %-52s %9.3f GiB\n", "total planned", total / (1024.0 * 1024 * 1024));
  const int N = o.B * o.T;
  const std::vector<int> inp = random_tokens(N, 50257, 1), tgt = random_tokens(N, 50257, 2);
  AdamWHyper h;
  std::vector<double> ms, fwd, bwd, opt;
  float loss = 0;
  auto since = [](std::chrono::steady_clock::time_point a) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
  };
  for (int step = 1; step <= 13; step++) {
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto a = std::chrono::steady_clock::now();
    m->zero_grad();
    loss = m->forward(inp.data(), tgt.data(), o.B, o.T);  // waits for the loss
    const double t_f = since(a);
    m->backward(1.0f);
    CUDA_CHECK(cudaDeviceSynchronize());
    const double t_b = since(a);
    m->optimizer_step(h, 1.0f, step);
    CUDA_CHECK(cudaDeviceSynchronize());
    const double t = since(a);
    if (step > 3) {
      ms.push_back(t);
      fwd.push_back(t_f);
      bwd.push_back(t_b - t_f);
      opt.push_back(t - t_b);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double med = median(ms);
  std::printf("phases (median ms): forward + loss %.2f, backward %.2f, grad norm + AdamW %.2f\n",
              median(fwd), median(bwd), median(opt));
  // nanoGPT/llm.c convention: 6 * params + 12 * L * C * T per token (attention not halved).
  const double flops = (6.0 * m->num_parameters() + 12.0 * 12 * 768 * o.T) * N;
  std::printf("step: median %.2f ms (min %.2f, max %.2f) over %zu steps, %.0f tokens/s, "
              "%.1f TFLOP/s (loss %.4f)\n",
              med, *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end()),
              ms.size(), N / (med / 1000), flops / (med / 1000) / 1e12, loss);
  std::printf("peak memory (measured): %.3f GiB\n", m->peak_memory_bytes() / (1024.0 * 1024 * 1024));
}

}  // namespace

void run_bench_kernels(const BenchKernelsOptions& opt) {
  CHECK(cuda_device_available(), "bench-kernels: no CUDA GPU found");
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("bench-kernels on %s (%d SMs), %s\n", prop.name, prop.multiProcessorCount,
              PRECISION_NAME);
  auto want = [&](const char* s) {
    return std::find(opt.only.begin(), opt.only.end(), s) != opt.only.end();
  };
  if (want("kernels")) bench_d12_kernels(opt.tune_matmul);
  if (want("rope")) bench_rope();
  if (want("decode")) bench_decode();
  if (want("step")) bench_step(opt.attn, opt.batch, opt.tune_matmul);
  if (want("tensor")) bench_sm90_rates();
}
