// profile — `flashgpt profile`: sweeps the context length T for one model (default d12) and a
// list of attention backends (default flash3, flash and naive), runs real training steps at
// every (backend, T) and sets what it measured beside what the host-side models predict.
//
//   flashgpt profile                                  the sweep on the GPU (minutes)
//   flashgpt profile --plan-only                      the predicted table only; no GPU needed
//   flashgpt profile --attn flash,naive,flash1 --seq-lens 1024,4096,16384 --tokens 16384
//
// Options (flashgpt profile --help; ProfileOptions and its parser are in bench/options.h):
//   --model d12            preset (model/config.h); --vocab 50257
//   --attn flash3,flash,naive  backends, comma-separated (registry names, backends.h)
//   --seq-lens 1024,...,131072   T values (default: powers of two 1K..128K)
//   --tokens 16384         tokens per step: B = max(1, tokens / T);  --batch B overrides it
//   --warmup 1 --steps 3   untimed steps, then timed steps (median wall time reported)
//   --recompute none       none | gelu | layer (ModelOptions.recompute, model/recompute.h)
//   --mask causal --window 0   the attention mask (kernels/attention/mask.h); the document mask
//                          takes its documents from --data DIR (the first windows of its
//                          training shards) or --doc-len N (random tokens, an end-of-text token
//                          at each position with probability 1/N). The predicted FLOPs and
//                          roofline count what the mask leaves (ProfilePoint::mask_*_share).
//   --pos rope             rope | learned. Default rope: learned positions would add a
//                          (maxT, C) table per point (T*C parameters, with gradients and AdamW
//                          state: 16 bytes each, 6 GiB at T = 128K for d12), which mixes a
//                          position-table effect into a sweep about attention.
//   --out runs/profile     writes profile.csv and profile.json (--plan-only: plan.csv and
//                          plan.json, so a plan never overwrites measurements) and, through
//                          scripts/plot_profile.py, the PNG plots (--plot=false: none)
//   --plan-only            predicted memory table and attention cost only: no GPU is touched
//                          (works in a CPU-only build)
//   --gpu-memory GiB       capacity for --plan-only (default: the GPU's when one is present,
//                          else 80)
//   --max-step-seconds 60  skip a backend's larger T once the step time predicted from its last
//                          measured point exceeds this (reported "skipped: ~X s/step")
//   --seed 1337            parameters and the random tokens
//
// Each point, in this order:
//   1. predict: ModelOptions (gpt_preset(model, vocab, T), rope per --pos, B, T, attn,
//      recompute, time_attention), plan = plan_memory(memory_plan_inputs(mo)) (the same plan
//      the CUDA model allocates from), and per layer the attention FLOPs and minimum HBM bytes
//      (kernels/attention/backends.h); roofline attention ms per step = L x (forward +
//      backward) roofline, plus L more forwards where the backward re-runs attention
//      (attention_forwards_per_step: --recompute layer), with the ceilings
//      measured once at the start (bench/ceilings.h); predicted flash-over-naive speedup =
//      naive's roofline attention time / the backend's at the same T.
//   2. fit: plan.total + 256 MiB (cuBLAS handles, allocator slack) > free device memory ->
//      "OOM: needs X GiB, Y GiB free", no model is made, the sweep goes on.
//   3. time budget: after a measured point at T0 the step time at T is predicted as
//      (ms - attn ms) x tokens(T)/tokens(T0) + attn ms x roofline(T)/roofline(T0) (flash1
//      also x the drop in busy SMs: its grid is B*NH blocks); over --max-step-seconds ->
//      "skipped: ~X s/step" (so that flash1, very slow at long T, does not stall the sweep).
//   4. run: make_cuda_model, --warmup steps, then --steps timed steps of forward + backward(1)
//      + grad_norm + adamw_step + zero_grad on random tokens. ms/step is the median wall time
//      of a step (forward and grad_norm wait for the device, so in the steady state a step's
//      wall time is its device time); tokens/s = B*T / that; attention ms per step from the
//      model's CUDA events (attention_ms(), reset after the warm-up) / steps, and its share of
//      the step; measured peak = model->peak_memory_bytes() (cudaMemGetInfo based, includes
//      cuBLAS handles), its ratio to the plan (|ratio - 1| > 5% is flagged in the status), the
//      breakdown from model->memory_plan(). Any flashgpt::Error (a CUDA error, cuBLAS, an
//      allocation the model refuses) becomes the point's "error: ..." status; when the device
//      is unusable afterwards (a sticky CUDA error) the remaining points are reported skipped.
//      The model is destroyed before the next point.
// Output: a table on the terminal as the points finish, the flash-over-naive speedups
// (predicted and measured, attention time), one summary line; profile.csv (one row per point,
// "# key: value" metadata lines first: command, date, GPU, ceilings, capacity) and
// profile.json (the same plus both breakdowns by line name), rewritten after every point so
// that an interrupted sweep keeps what it measured.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/attention/backends.h"
#include "model/model.h"
#include "bench/ceilings.h"
#include "bench/options.h"  // ProfileOptions, parse_profile_options

struct ProfilePoint {
  std::string backend;
  int T = 0, B = 0;
  AttnShape shape{};  // one layer's attention call
  // predicted
  size_t pred_bytes = 0;               // plan total
  std::vector<MemoryLine> pred_lines;  // plan breakdown
  size_t attn_saved_bytes = 0;         // "attention saved" line (all layers kept)
  size_t attn_scratch_bytes = 0;       // "attention scratch" line
  // The mask's share of causal attention's work (1, 1 for causal): its visible (query, key)
  // pairs, and the area of the 128 x 128 tiles it leaves; cost is the backend's causal cost
  // scaled by them (FLOPs by the first, executed matrix FLOPs by the second).
  double mask_pairs_share = 1, mask_tiles_share = 1;
  AttnCost cost;                       // one layer's attention call
  double attn_flops_step = 0;          // convention FLOPs per step (all layers, fwd + bwd [+ fwd])
  double attn_bytes_step = 0;          // minimum HBM bytes per step
  double roof_fwd_ms = 0, roof_bwd_ms = 0;  // one layer; 0 without ceilings
  double roof_attn_ms = 0;                  // per step
  double pred_speedup = 0;                  // naive roofline / this one at this T; 0: n/a
  bool fits = false;                        // plan + margin <= free memory (or capacity)
  // measured
  bool ran = false;
  std::string status;  // ok | fits | OOM: ... | skipped: ... | error: ... (| flags after "ok")
  size_t free_bytes = 0;                // free device memory before the point (capacity w/ plan-only)
  size_t peak_bytes = 0;
  std::vector<MemoryLine> lines;        // model->memory_plan()
  double mem_ratio = 0;                 // peak / plan
  double ms_step = 0, tokens_per_s = 0, attn_ms = -1, attn_share = 0, loss = 0;
  double meas_speedup = 0;              // naive attention ms / this one's at this T; 0: n/a
  // Measured attention rate (attn_flops_step / attn_ms) over the measured bf16 GEMM ceiling
  // (cuBLAS on wgmma): how much of the tensor cores' rate attention reaches; 0: n/a.
  double gemm_fraction = 0;
};

struct ProfileReport {
  std::vector<ProfilePoint> points;
  DeviceCeilings ceilings;
  bool have_ceilings = false;
  size_t capacity_bytes = 0;  // --plan-only
  std::string csv_path, json_path;
};

// Margin the fit check keeps beside the plan (cuBLAS handles, allocator slack).
constexpr size_t kProfileMarginBytes = size_t(256) << 20;

// The predicted half of a point (no GPU). ceilings may be null (no roofline times).
ProfilePoint predict_profile_point(const ProfileOptions& opt, const std::string& backend, int T,
                                   const DeviceCeilings* ceilings);

// Runs the sweep (or the plan with opt.plan_only), printing to `out`, writing the CSV/JSON
// into opt.out_dir (and the plots when opt.plot). Throws only for bad options, an unwritable
// --out, or no GPU without --plan-only; every per-point failure is that point's status.
ProfileReport run_profile(const ProfileOptions& opt, std::FILE* out = stdout);
