// profile.cpp — `flashgpt profile`: the predicted half of each point (memory plan, attention
// cost, roofline) and the measured half (training steps on the GPU); profile.h says what each
// is. Its options: bench/options.cpp. The files and tables it writes: profile_report.cpp.
#include "bench/profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "bench/profile_report.h"
#include "data/dataloader.h"
#include "data/files.h"
#include "data/tokenizer.h"
#include "kernels/attention/backends.h"
#include "kernels/common.h"
#include "kernels/rng.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/memory_plan.h"
#include "model/output_files.h"

namespace {

using flashgpt::strformat;

constexpr double kGiB = double(1ull << 30);
double gib(double bytes) { return bytes / kGiB; }

// ---------------------------------------------------------------------------------------------
// Points

// The mask of every point: --mask and --window, documents ending at the end-of-text token of
// --data's tokenizer (when it has one), else the vocabulary's last id.
MaskSpec profile_mask(const ProfileOptions& opt) {
  MaskSpec m = opt.mask;
  const std::string tok = opt.data_dir + "/tokenizer.bin";
  if (!opt.data_dir.empty() && file_exists(tok)) m.eot = Tokenizer::load(tok).eot_token();
  validate_mask_spec(m, opt.vocab);
  return m;
}

// The (B, T) batch a point trains on and its document starts: random tokens (seeded by --seed
// and T; with --doc-len N an end-of-text token at each position with probability 1/N), or with
// --data the first B windows of its training shards, in order.
struct PointBatch {
  std::vector<int> inputs, targets, doc_start;  // doc_start: (B, T) with the document mask
  int window = 0;
  AttnMask mask() const { return AttnMask{doc_start.empty() ? nullptr : doc_start.data(), window}; }
};
PointBatch point_batch(const ProfileOptions& opt, int B, int T) {
  const MaskSpec m = profile_mask(opt);
  const size_t n = (size_t)B * T;
  PointBatch pb;
  pb.inputs.resize(n);
  pb.targets.resize(n);
  pb.window = m.window;
  if (!opt.data_dir.empty()) {
    DataLoader loader(opt.data_dir + "/train_*.bin", "--data", B, T, opt.vocab, false, opt.seed);
    loader.next_batch(pb.inputs.data(), pb.targets.data());
  } else {
    Rng rng(opt.seed * 1000003ull + (uint64_t)T);
    const int eot = m.eot_token(opt.vocab);
    for (size_t i = 0; i < n; i++) {
      pb.inputs[i] = (int)rng.below((uint64_t)opt.vocab);
      pb.targets[i] = (int)rng.below((uint64_t)opt.vocab);
    }
    if (opt.doc_len > 0)  // an EOT with probability 1/doc_len, else a token that is not one
      for (int& t : pb.inputs)
        t = rng.uniform() * opt.doc_len < 1.0 ? eot : t == eot ? (eot + 1) % opt.vocab : t;
  }
  if (m.kind == MaskKind::kDocument)
    pb.doc_start = document_starts(pb.inputs.data(), B, T, m.eot_token(opt.vocab));
  return pb;
}

// The work a point's mask leaves, as shares of causal attention's: its visible (query, key)
// pairs (exact) and the area of the 128 x 128 tiles it leaves (the flash backends' key tile; an
// approximation of each backend's own tiles). Both 1 for the causal mask.
void mask_shares(const AttnMask& m, int B, int T, ProfilePoint& p) {
  if (m.is_causal()) return;
  p.mask_pairs_share = (double)visible_pairs(m, B, T) / (double(B) * T * (T + 1.0) / 2);
  p.mask_tiles_share = visited_tile_area(m, B, T, 128, 128) / (double(B) * causal_tile_area(T, 128, 128));
}

// One layer's attention cost under the point's mask: the backend's causal cost, the
// convention FLOPs scaled by the visible pairs' share and the executed matrix FLOPs by the
// tiles' share; the minimum bytes unchanged (each input is still read once).
AttnCost masked_cost(AttnCost c, const ProfilePoint& p) {
  for (AttnPassCost* pass : {&c.fwd, &c.bwd}) {
    pass->flops *= p.mask_pairs_share;
    pass->mma_flops *= p.mask_tiles_share;
  }
  return c;
}

ModelOptions model_options(const ProfileOptions& opt, const std::string& backend, int T) {
  ModelOptions mo;
  mo.config = gpt_preset(opt.model, opt.vocab, T);
  mo.config.rope = opt.pos == PosEncoding::rope ? 1 : 0;
  validate_config(mo.config);
  mo.B = profile_batch(opt, T);
  mo.T = T;
  mo.attn = backend;
  mo.seed = opt.seed;
  mo.recompute = opt.recompute;
  mo.mask = profile_mask(opt);
  mo.time_attention = true;
  // --cp (with --plan-only): the plan of one GPU of a cp group, cp rank 0's (the ranks' local
  // lengths differ by at most 2 rows: context_parallel.h).
  mo.cp = opt.cp;
  mo.cp_rank = 0;
  return mo;
}

double roof_step_ms(const ProfileOptions& opt, const GPTConfig& cfg, const AttnCost& c,
                    const DeviceCeilings* ceil) {
  if (!ceil) return 0;
  const double f = roofline_seconds(c.fwd, ceil->bf16_flops, ceil->copy_bytes_per_s) * 1e3;
  const double b = roofline_seconds(c.bwd, ceil->bf16_flops, ceil->copy_bytes_per_s) * 1e3;
  const int nf = attention_forwards_per_step(opt.recompute);
  return cfg.num_layers * (nf * f + b);
}

std::string oom_status(size_t need, size_t free_b) {
  return strformat("OOM: needs %.2f GiB, %.2f GiB free", gib((double)need), gib((double)free_b));
}

bool mentions_oom(const std::string& msg) {
  std::string m = msg;
  std::transform(m.begin(), m.end(), m.begin(), ::tolower);
  // cudaErrorMemoryAllocation, or the CUDA model's own check ("... GiB free on ...")
  return m.find("out of memory") != std::string::npos || m.find("gib free") != std::string::npos ||
         m.find("memoryallocation") != std::string::npos;
}

// Runs the training steps of one point; throws on any error.
void measure_point(const ProfileOptions& opt, ProfilePoint& p) {
  const ModelOptions mo = model_options(opt, p.backend, p.T);
  std::unique_ptr<Model> model = make_cuda_model(mo);
  const size_t n = (size_t)p.B * p.T;
  const PointBatch batch = point_batch(opt, p.B, p.T);
  int step = 0;
  auto train_step = [&]() {
    p.loss = model->forward(batch.inputs.data(), batch.targets.data(), p.B, p.T);
    model->backward(1.0f);
    model->optimizer_step(AdamWHyper{}, 0.0f, ++step);
    model->zero_grad();
  };
  for (int i = 0; i < opt.warmup; i++) train_step();
  model->attention_ms();  // waits; resets the attention timer
  std::vector<double> ms;
  for (int i = 0; i < opt.steps; i++) {
    const auto t0 = std::chrono::steady_clock::now();
    train_step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const double attn_total = model->attention_ms();  // waits for the device
  std::sort(ms.begin(), ms.end());
  p.ms_step = ms[ms.size() / 2];
  p.tokens_per_s = p.ms_step > 0 ? (double)n / (p.ms_step * 1e-3) : 0;
  p.attn_ms = attn_total >= 0 ? attn_total / opt.steps : -1;
  p.attn_share = p.attn_ms >= 0 && p.ms_step > 0 ? p.attn_ms / p.ms_step : 0;
  p.peak_bytes = model->peak_memory_bytes();
  p.lines = model->memory_plan();
  p.mem_ratio = p.pred_bytes ? (double)p.peak_bytes / (double)p.pred_bytes : 0;
  p.ran = true;
  p.status = "ok";
  if (std::fabs(p.mem_ratio - 1) > 0.05)
    p.status += strformat(", memory %+.1f%% off the plan", (p.mem_ratio - 1) * 100);
  if (!std::isfinite(p.loss)) p.status += ", loss is not finite";
  // model (and its device memory) is released here, before the next point.
}

void fill_speedups(const ProfileOptions& opt, const DeviceCeilings* ceil, ProfileReport& r) {
  for (ProfilePoint& p : r.points) {
    if (ceil && p.ran && p.attn_ms > 0)
      p.gemm_fraction = p.attn_flops_step / (p.attn_ms * 1e-3) / ceil->bf16_flops;
    if (p.backend == "naive") continue;
    if (ceil && p.roof_attn_ms > 0) {
      const ModelOptions mo = model_options(opt, "naive", p.T);
      const GPTConfig& c = mo.config;
      const AttnShape s{p.B, p.T, c.num_heads, c.num_kv_heads, c.head_size()};
      const double naive_ms =
          roof_step_ms(opt, c, masked_cost(attention_cost("naive", s, memory_plan_inputs_host(mo).es), p), ceil);
      p.pred_speedup = naive_ms / p.roof_attn_ms;
    }
    for (const ProfilePoint& q : r.points)
      if (q.backend == "naive" && q.T == p.T && q.B == p.B && q.ran && p.ran && q.attn_ms > 0 &&
          p.attn_ms > 0)
        p.meas_speedup = q.attn_ms / p.attn_ms;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

ProfilePoint predict_profile_point(const ProfileOptions& opt, const std::string& backend, int T,
                                   const DeviceCeilings* ceil) {
  ProfilePoint p;
  p.backend = backend;
  p.T = T;
  p.B = profile_batch(opt, T);
  const ModelOptions mo = model_options(opt, backend, T);
  // --plan-only touches no GPU: the host estimate of the kernels' scratch (memory_plan.h).
  const MemoryPlanInputs in = opt.plan_only ? memory_plan_inputs_host(mo) : memory_plan_inputs(mo);
  const MemoryPlan plan = plan_memory(in);
  p.pred_bytes = plan.total;
  p.pred_lines = plan.lines;
  for (const MemoryLine& l : plan.lines) {
    if (l.what == "attention saved") p.attn_saved_bytes = l.bytes;
    if (l.what == "attention scratch") p.attn_scratch_bytes = l.bytes;
  }
  const GPTConfig& c = mo.config;
  p.shape = AttnShape{p.B, T, c.num_heads, c.num_kv_heads, c.head_size()};
  mask_shares(point_batch(opt, p.B, T).mask(), p.B, T, p);
  p.cost = masked_cost(attention_cost(backend, p.shape, in.es), p);
  const int nf = attention_forwards_per_step(opt.recompute);
  p.attn_flops_step = c.num_layers * (nf * p.cost.fwd.flops + p.cost.bwd.flops);
  p.attn_bytes_step = c.num_layers * (nf * p.cost.fwd.bytes + p.cost.bwd.bytes);
  if (ceil) {
    p.roof_fwd_ms = roofline_seconds(p.cost.fwd, ceil->bf16_flops, ceil->copy_bytes_per_s) * 1e3;
    p.roof_bwd_ms = roofline_seconds(p.cost.bwd, ceil->bf16_flops, ceil->copy_bytes_per_s) * 1e3;
    p.roof_attn_ms = roof_step_ms(opt, c, p.cost, ceil);
  }
  return p;
}

ProfileReport run_profile(const ProfileOptions& opt, std::FILE* out) {
  ProfileReport r;
  ProfileMeta meta;
  meta.command = opt.command_line;
  meta.date = utc_now();
  meta.model_desc = model_description(opt);
  const std::string prefix = opt.plan_only ? "plan" : "profile";
  r.csv_path = opt.out_dir + "/" + prefix + ".csv";
  r.json_path = opt.out_dir + "/" + prefix + ".json";
  check_output_path(r.csv_path, "--out", OutputKind::ProfileTable);
  check_output_path(r.json_path, "--out", OutputKind::ProfileJson);

  if (opt.plan_only) {
    std::string cap_src = "--gpu-memory";
    if (opt.gpu_memory_gib > 0) {
      r.capacity_bytes = (size_t)(opt.gpu_memory_gib * kGiB);
    } else {
      size_t free_b = 0, total_b = 0;
      std::string name;
      if (cuda_memory_info(free_b, total_b, name)) {
        r.capacity_bytes = total_b;
        cap_src = name;
        meta.gpu = name;
      } else {
        r.capacity_bytes = size_t(80) << 30;
        cap_src = "no GPU found: 80 GiB assumed, set --gpu-memory";
      }
    }
    make_profile_dir(opt.out_dir);
    for (const std::string& be : opt.attn)
      for (int T : opt.seq_lens) {
        ProfilePoint p;
        try {
          p = predict_profile_point(opt, be, T, nullptr);
        } catch (const flashgpt::Error& e) {  // e.g. a plan past 2^64 bytes: that point only
          p = ProfilePoint{};
          p.backend = be, p.T = T, p.B = profile_batch(opt, T);
          p.status = std::string("error: ") + e.what();
          r.points.push_back(p);
          continue;
        }
        p.free_bytes = r.capacity_bytes;
        const std::string why = attention_unsupported_reason(
            attention_spec(be), p.shape, 2);
        p.fits = why.empty() && p.pred_bytes + kProfileMarginBytes <= r.capacity_bytes;
        p.status = !why.empty() ? "unsupported: " + why
                   : p.fits     ? std::string("fits")
                                : strformat("OOM: needs %.2f GiB, %.2f GiB capacity",
                                            gib((double)p.pred_bytes), gib((double)r.capacity_bytes));
        r.points.push_back(p);
      }
    write_profile_outputs(opt, r, meta);
    print_plan(opt, r, cap_src, out);
    if (opt.plot) run_plot_script(r.csv_path, opt.out_dir, out);
    return r;
  }

  // ---- the sweep on the GPU ----
  CHECK(cuda_device_available(),
        "profile: no CUDA GPU found (or this flashgpt was built without CUDA); `flashgpt profile "
        "--plan-only` prints the predicted table without one");
  make_profile_dir(opt.out_dir);
  try {
    r.have_ceilings = measure_device_ceilings(r.ceilings);
  } catch (const std::exception& e) {
    std::fprintf(out, "ceilings: not measured (%s); roofline columns stay empty\n", e.what());
    const std::string bad = cuda_clear_error();
    CHECK(bad.empty(), "profile: the GPU failed while measuring its ceilings: %s", bad.c_str());
  }
  const DeviceCeilings* ceil = r.have_ceilings && r.ceilings.bf16_flops > 0 &&
                                       r.ceilings.copy_bytes_per_s > 0
                                   ? &r.ceilings
                                   : nullptr;
  if (r.ceilings.name.empty() || r.ceilings.total_bytes == 0) {
    size_t f = 0, t = 0;
    std::string name;
    if (cuda_memory_info(f, t, name)) {
      r.ceilings.name = name;
      r.ceilings.total_bytes = t;
    }
  }
  meta.gpu = r.ceilings.name;
  r.capacity_bytes = r.ceilings.total_bytes;
  std::fprintf(out, "flashgpt profile: %s on %s (%.1f GiB)\n", meta.model_desc.c_str(),
               r.ceilings.name.c_str(), gib((double)r.ceilings.total_bytes));
  if (ceil)
    std::fprintf(out, "ceilings: device copy %.0f GB/s (read + write, %.2f GiB copies), bf16 GEMM "
                      "%.0f TFLOP/s (cuBLAS %d^3); roofline = max(FLOPs / rate, bytes / bandwidth)\n",
                 ceil->copy_bytes_per_s / 1e9, gib((double)ceil->copy_bytes), ceil->bf16_flops / 1e12,
                 ceil->gemm_n);
  std::fprintf(out, "%s per point: %d warm-up + %d timed steps (median); pred = memory plan, "
                    "ratio = measured peak / pred, roof = roofline attention ms per step\n\n",
               opt.batch > 0 ? strformat("batch %d", opt.batch).c_str()
                             : strformat("%d tokens", opt.tokens).c_str(),
               opt.warmup, opt.steps);
  print_sweep_header(out);

  std::string lost;  // the device error that ended the sweep
  for (const std::string& be : opt.attn) {
    bool have_last = false;  // the backend's last measured point: r.points[last_index]
    size_t last_index = 0;
    for (int T : opt.seq_lens) {
      ProfilePoint p;
      try {
        p = predict_profile_point(opt, be, T, ceil);
      } catch (const std::exception& e) {
        p.backend = be, p.T = T, p.B = profile_batch(opt, T);
        p.status = std::string("error: ") + e.what();
        r.points.push_back(p);
        print_sweep_row(r.points.back(), out);
        continue;
      }
      size_t free_b = 0, total_b = 0;
      std::string name;
      if (!lost.empty()) {
        p.status = "skipped: the GPU is unusable after an earlier error (" + lost + ")";
      } else if (!cuda_memory_info(free_b, total_b, name)) {
        p.status = "error: cannot read the device's free memory";
      } else if (p.pred_bytes + kProfileMarginBytes > free_b) {
        p.free_bytes = free_b;
        p.status = oom_status(p.pred_bytes, free_b);
      } else {
        p.free_bytes = free_b;
        p.fits = true;
        double predicted_ms = 0;
        if (have_last) {
          const ProfilePoint& q = r.points[last_index];
          const double attn = std::max(0.0, q.attn_ms);
          double growth = 1;
          if (q.roof_attn_ms > 0 && p.roof_attn_ms > 0) growth = p.roof_attn_ms / q.roof_attn_ms;
          else if (q.cost.fwd.mma_flops > 0)
            growth = (p.cost.fwd.mma_flops + p.cost.bwd.mma_flops) /
                     (q.cost.fwd.mma_flops + q.cost.bwd.mma_flops);
          // flash1's grid is one thread block per (b, h): below one block per SM, fewer sequences
          // (B = tokens / T) also mean proportionally fewer busy SMs, which no roofline sees.
          if (attention_spec(be).grid_per_head && r.ceilings.sms > 0) {
            const int NH = gpt_preset(opt.model, opt.vocab, 1).num_heads;
            growth *= double(std::min(q.B * NH, r.ceilings.sms)) /
                      double(std::min(p.B * NH, r.ceilings.sms));
          }
          predicted_ms = (q.ms_step - attn) * double(p.B) * p.T / (double(q.B) * q.T) + attn * growth;
        }
        if (predicted_ms > opt.max_step_seconds * 1e3) {
          p.status = strformat("skipped: ~%.0f s/step predicted (over --max-step-seconds %g)",
                               predicted_ms / 1e3, opt.max_step_seconds);
        } else {
          try {
            measure_point(opt, p);
          } catch (const std::exception& e) {
            p.ran = false;
            p.status = mentions_oom(e.what())
                           ? oom_status(p.pred_bytes, free_b) + " (" + e.what() + ")"
                           : std::string("error: ") + e.what();
            lost = cuda_clear_error();
          }
        }
      }
      r.points.push_back(p);
      if (r.points.back().ran) {
        have_last = true;
        last_index = r.points.size() - 1;
      }
      fill_speedups(opt, ceil, r);  // before the row: its gemm% column comes from here
      print_sweep_row(r.points.back(), out);
      write_profile_outputs(opt, r, meta);
    }
  }
  fill_speedups(opt, ceil, r);
  write_profile_outputs(opt, r, meta);
  print_sweep_summary(opt, r, out);
  if (opt.plot) run_plot_script(r.csv_path, opt.out_dir, out);
  return r;
}
