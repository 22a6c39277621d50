// train.cpp — see train.h. Device-agnostic: the Model interface hides CPU vs CUDA.
#include "train/train.h"

#include <glob.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "data/dataloader.h"
#include "data/files.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "kernels/attention/context_parallel.h"
#include "kernels/common.h"
#include "model/checkpoint.h"
#include "model/hf_gpt2.h"
#include "model/dist_comm.h"
#include "model/layout.h"
#include "kernels/rng.h"
#include "train/dist.h"
#include "train/eval.h"
#include "train/run_files.h"
#include "train/sample.h"

namespace {

using Clock = std::chrono::steady_clock;

bool any_file_matches(const std::string& pattern) {
  glob_t g;
  bool any = glob(pattern.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
  globfree(&g);
  return any;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string human_bytes(size_t b) {
  double x = (double)b;
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (x >= 1024 && u < 4) { x /= 1024; u++; }
  return flashgpt::strformat("%.2f %s", x, unit[u]);
}

std::string human_time(double s) {
  int m = (int)(s / 60);
  return m >= 60 ? flashgpt::strformat("%dh%02dm", m / 60, m % 60) : flashgpt::strformat("%dm%02ds", m, (int)s % 60);
}

// SIGINT and SIGTERM while training: the handler only records the signal; the loop finishes
// its step, writes a checkpoint (with --out) and returns. SA_RESETHAND: a second Ctrl-C
// stops the process at once. A signal ignored when the run starts (a background job's SIGINT,
// nohup) stays ignored. The previous handlers come back when the run ends.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void record_stop_signal(int sig) { g_stop_signal = sig; }

class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa = {};
    sa.sa_handler = record_stop_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, nullptr, &old_int_);
    sigaction(SIGTERM, nullptr, &old_term_);
    if (old_int_.sa_handler != SIG_IGN) sigaction(SIGINT, &sa, nullptr);
    if (old_term_.sa_handler != SIG_IGN) sigaction(SIGTERM, &sa, nullptr);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  int received() const { return g_stop_signal; }

 private:
  struct sigaction old_int_, old_term_;
};

// Creates dir if needed and proves it writable before any long work starts.
void ensure_writable_dir(const std::string& dir, const char* flag) {
  mkdir(dir.c_str(), 0755);
  const std::string why = dir_write_error(dir);
  CHECK(why.empty(), "%s '%s' is not a writable directory (%s); pick another --out", flag,
        dir.c_str(), why.c_str());
}

// The model shape the flags ask for (preset + overrides).
GPTConfig config_from_flags(const TrainOptions& opt, int vocab_size) {
  int maxT = opt.max_seq_len > 0 ? opt.max_seq_len : opt.seq_len;
  GPTConfig c = gpt_preset(opt.model, vocab_size, maxT);
  if (opt.layers) c.num_layers = opt.layers;
  if (opt.heads) c.num_heads = c.num_kv_heads = opt.heads;
  if (opt.kv_heads) c.num_kv_heads = opt.kv_heads;
  if (opt.channels) c.channels = opt.channels;
  c.rope = opt.pos == PosEncoding::rope;
  c.rope_theta = opt.rope_theta;
  validate_config(c);
  return c;
}

void check_same_shape(const GPTConfig& ck, const GPTConfig& fl, const std::string& path) {
  bool same = ck.num_layers == fl.num_layers && ck.num_heads == fl.num_heads &&
              ck.num_kv_heads == fl.num_kv_heads && ck.channels == fl.channels &&
              ck.vocab_size == fl.vocab_size && ck.rope == fl.rope;
  CHECK(same, "checkpoint '%s' is L=%d NH=%d NKV=%d C=%d V=%d pos=%s but the flags ask for L=%d "
        "NH=%d NKV=%d C=%d V=%d pos=%s; drop --model/--layers/--heads/--channels/--pos or pass "
        "matching ones", path.c_str(), ck.num_layers, ck.num_heads, ck.num_kv_heads, ck.channels,
        ck.vocab_size, ck.rope ? "rope" : "learned", fl.num_layers, fl.num_heads, fl.num_kv_heads,
        fl.channels, fl.vocab_size, fl.rope ? "rope" : "learned");
}

double peak_flops(const std::string& device) {
  // Dense bf16 tensor-core peaks (vendor data sheets), for MFU.
  if (device.find("H100") != std::string::npos || device.find("H200") != std::string::npos)
    return 989e12;
  if (device.find("A100") != std::string::npos) return 312e12;
  return 0;
}

}  // namespace

float lr_at_step(const TrainOptions& opt, int step) {
  if (step <= opt.warmup) return opt.lr * step / std::max(1, opt.warmup);
  int decay_steps = opt.steps - opt.warmup;
  if (decay_steps <= 0) return opt.lr;
  double progress = (double)(step - opt.warmup) / decay_steps;  // (0, 1]
  double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));     // 1 -> 0
  double lo = opt.lr * opt.lr_final_frac;
  return (float)(lo + (opt.lr - lo) * cosine);
}

namespace {
// The process group's communicators: the world's (gradient all-reduce, loss, barriers) and,
// with --cp > 1, the cp group's (the ring attention's send/recv; model/dist_comm.h split()).
struct Comms {
  std::unique_ptr<DistComm> world, cp;
};
TrainResult run_train_impl(const TrainOptions& opt, Comms& comms);
}

// Multi-GPU: an error on one rank must not leave the others hanging in a collective. The
// failing rank leaves a marker (file:// init), aborts its communicators (its pending NCCL work
// ends, and the peers' collectives and ring transfers with it fail or time out) and reports
// "rank R: cause".
TrainResult run_train(const TrainOptions& opt) {
  Comms comms;
  try {
    return run_train_impl(opt, comms);
  } catch (const std::exception& e) {
    if (opt.dist.world_size <= 1) throw;
    std::string msg = e.what();
    write_failure_marker(opt.dist, msg);
    if (comms.cp) comms.cp->abort();
    if (comms.world) comms.world->abort();
    THROW_ERROR("rank %d: %s", opt.dist.rank, msg.c_str());
  }
}

namespace {

TrainResult run_train_impl(const TrainOptions& opt, Comms& comms) {
  TrainResult result;
  std::unique_ptr<DistComm>& comm = comms.world;
  const int rank = opt.dist.rank, world = opt.dist.world_size;
  const int zero = world > 1 ? opt.zero : 0;
  const bool lead = rank == 0;  // only rank 0 prints, logs, samples and writes the model file
  auto say = [&](const std::string& s) { if (!opt.quiet && lead) std::printf("%s\n", s.c_str()); };
  // Context parallelism (train/dist.h): the rank grid, and the zigzag layout of one sequence.
  const CpGrid grid = cp_grid(rank, world, opt.cp);
  const int cp = grid.cp, dp = grid.dp;
  CHECK(cp == 1 || cuda_device_available(), "--cp %d splits each sequence over %d GPUs (CUDA "
        "only), but %s; run it on a machine with GPUs and the CUDA build", cp, cp,
        opt.device == "cuda" ? "no CUDA GPU is usable here" : "--device auto found no CUDA GPU");
  const CpLayout cp_layout(cp, opt.seq_len);  // --seq-len >= 2 x --cp (checked when parsed)

  // ---- data and tokenizer (all validated before the model is built) ----
  std::string train_pattern = opt.train_pattern, val_pattern = opt.val_pattern;
  std::string tok_path = opt.tokenizer_path;
  bool val_optional = false;  // --data's val_*.bin may be absent; an explicit --val-pattern not
  if (!opt.data_dir.empty()) {
    CHECK(file_exists(opt.data_dir), "--data '%s' does not exist; run `flashgpt prepare` first",
          opt.data_dir.c_str());
    if (train_pattern.empty()) train_pattern = opt.data_dir + "/train_*.bin";
    if (val_pattern.empty()) {
      val_pattern = opt.data_dir + "/val_*.bin";
      val_optional = true;
    }
    const std::string data_tok = opt.data_dir + "/tokenizer.bin";
    if (file_exists(data_tok)) {
      if (tok_path.empty()) tok_path = data_tok;
      CHECK(same_contents(tok_path, data_tok), "--tokenizer '%s' is not the tokenizer --data '%s' "
            "was prepared with (%s); drop --tokenizer", tok_path.c_str(), opt.data_dir.c_str(),
            data_tok.c_str());
    }
  }
  std::unique_ptr<Tokenizer> tok;
  if (!tok_path.empty()) tok = std::make_unique<Tokenizer>(Tokenizer::load(tok_path));
  if (tok && opt.vocab_size > 0)
    CHECK(opt.vocab_size == tok->vocab_size(), "--vocab-size %d disagrees with the tokenizer '%s' "
          "(%d tokens); drop --vocab-size", opt.vocab_size, tok_path.c_str(), tok->vocab_size());

  // ---- the --out directory: one run at a time, never two runs' checkpoints mixed ----
  std::unique_ptr<OutDirLock> out_lock;
  if (!opt.out_dir.empty() && !opt.bench) {
    if (lead) out_lock = std::make_unique<OutDirLock>(opt.out_dir);
    if (!opt.resume) check_fresh_out(opt.out_dir);
    check_out_tokenizer(opt.out_dir, tok_path, opt.resume);
  }
  if (!opt.log_path.empty() && lead) check_output_path(opt.log_path, "--log", OutputKind::TrainLog);

  // ---- model shape: checkpoint (resume / --init) or flags ----
  int64_t resume_step = -1;
  if (opt.resume) {
    CHECK(opt.init_path.empty(), "--resume continues from the checkpoints in --out '%s'; --init "
          "'%s' would be ignored: drop --init (or --resume)", opt.out_dir.c_str(),
          opt.init_path.c_str());
    resume_step = latest_checkpoint_step(opt.out_dir);
    CHECK(resume_step >= 0, "--resume: no checkpoint (model_*.bin + state_*.bin) in --out '%s'",
          opt.out_dir.c_str());
    CHECK(opt.steps > resume_step, "--resume: the checkpoint in --out '%s' is at step %lld, and "
          "--steps %d asks for no more; raise --steps", opt.out_dir.c_str(),
          (long long)resume_step, opt.steps);
    // rank 0's file first: it says the world size, ZeRO stage and --cp the checkpoint was
    // written at (before any work: a mismatch is refused at once).
    const std::string state0 = state_checkpoint_path(opt.out_dir, resume_step, 0);
    const TrainState h0 = load_state_header(state0);
    check_resume_world(h0.world_size, h0.zero, h0.cp, world, zero, cp, state0);
  }
  std::string ckpt_path = resume_step >= 0 ? model_checkpoint_path(opt.out_dir, resume_step)
                                           : opt.init_path;
  int vocab = tok ? tok->vocab_size() : opt.vocab_size;
  GPTConfig cfg;
  std::vector<float> ckpt_params;
  if (!ckpt_path.empty()) {
    load_any_model(ckpt_path, cfg, ckpt_params);  // --init: ours, llm.c's or Hugging Face's
    if (vocab == 0) vocab = cfg.vocab_size;
    CHECK(vocab == cfg.vocab_size, "checkpoint '%s' has a vocabulary of %d but the tokenizer / "
          "--vocab-size says %d; use the matching tokenizer", ckpt_path.c_str(), cfg.vocab_size, vocab);
    if (opt.model_given || resume_step >= 0) check_same_shape(cfg, config_from_flags(opt, vocab), ckpt_path);
    CHECK(opt.seq_len <= cfg.max_seq_len, "--seq-len %d is larger than the model's maximum %d "
          "(from '%s'); lower --seq-len", opt.seq_len, cfg.max_seq_len, ckpt_path.c_str());
  } else {
    if (opt.bench && vocab == 0) vocab = 50257;  // GPT-2's vocabulary
    CHECK(vocab > 0, "train: the vocabulary size is unknown; give --tokenizer FILE (or --data with "
          "a tokenizer.bin) or --vocab-size N");
    cfg = config_from_flags(opt, vocab);
    CHECK(opt.seq_len <= cfg.max_seq_len, "--seq-len %d is larger than --max-seq-len %d",
          opt.seq_len, cfg.max_seq_len);
  }
  if (tok) CHECK(tok->vocab_size() == cfg.vocab_size, "tokenizer '%s' has %d tokens, the model %d",
                 tok_path.c_str(), tok->vocab_size(), cfg.vocab_size);

  const int B = opt.batch, T = opt.seq_len;
  // Tokens per micro-step over all ranks: B*T per dp group (its cp ranks share the sequences).
  CHECK(opt.total_batch % ((int64_t)B * T * dp) == 0,
        "--total-batch %lld is not a multiple of --batch x --seq-len x dp = %lld",
        (long long)opt.total_batch, (long long)B * T * dp);
  const int accum = (int)(opt.total_batch / ((int64_t)B * T * dp));
  std::unique_ptr<DataLoader> train_loader, val_loader;
  if (!opt.bench) {
    // Each dp group reads its own B of every dp*B windows; its cp ranks read the same ones.
    train_loader = std::make_unique<DataLoader>(train_pattern, "--train-pattern", B, T,
                                                cfg.vocab_size, opt.shuffle, opt.seed,
                                                grid.dp_index, dp);
    if (!val_pattern.empty() && (!val_optional || any_file_matches(val_pattern)))
      val_loader = std::make_unique<DataLoader>(val_pattern, "--val-pattern", B, T, cfg.vocab_size,
                                                false, opt.seed, grid.dp_index, dp);
  }
  // Every rank writes its optimizer state into --out.
  if (!opt.out_dir.empty() && !lead) ensure_writable_dir(opt.out_dir, "--out");
  std::unique_ptr<FILE, int (*)(FILE*)> log(nullptr, fclose);
  if (!opt.log_path.empty() && lead) {
    if (resume_step >= 0) trim_log(opt.log_path, resume_step);  // steps after it come again
    log.reset(fopen(opt.log_path.c_str(), resume_step >= 0 ? "a" : "w"));
    CHECK(log, "--log '%s' cannot be written: %s", opt.log_path.c_str(), strerror(errno));
  }

  // ---- process group (world > 1 only: one process needs no NCCL) ----
  if (world > 1) {
    CHECK(opt.device != "cpu", "--device cpu trains in one process only");
    DistInit init = parse_dist_init(opt.dist.init);
    DistConfig dc = opt.dist;
    double timeout = opt.dist_timeout;
    comm = make_nccl_comm(
        rank, world, opt.dist.local_rank,
        [&](unsigned char* id) { exchange_dist_id(init, rank, world, id, timeout); },
        [dc]() { return read_failure_marker(dc); }, timeout);
    // A cp group's own communicator, even when it is the whole world: the ring's send/recv
    // then never interleave with the gradient all-reduce on `comm`. It lives in `comms`, past
    // the model that holds it, and is aborted with `comm` on a failure.
    if (cp > 1) comms.cp = comm->split(grid.dp_index, grid.cp_index);
  }

  // ---- model ----
  ModelOptions mo;
  mo.comm = comm.get();
  mo.zero = zero;
  // With --cp the gradient all-reduce waits for the end of the backward: overlapped, it would run
  // on the world communicator while the ring's hops run on the cp one, two NCCL kernels that
  // must both be resident on every GPU to progress (NCCL's warning about concurrent
  // communicators); on one node the overlap bought nothing measurable anyway (README, issue 6).
  mo.overlap_comm = opt.overlap_comm && cp == 1;
  mo.config = cfg;
  mo.B = B;
  mo.T = T;
  mo.attn = opt.attn;
  mo.seed = opt.seed;
  mo.recompute = opt.recompute;
  mo.deterministic = opt.deterministic;
  mo.classifier_chunk = opt.classifier_chunk;
  mo.cp = cp;
  mo.cp_rank = grid.cp_index;
  // --bench with --cp: time each ring step's attention and the compute stream's waits for the
  // ring (Model::cp_times); every rank prints its own at the end. CUDA events around the
  // attention calls cost well under 1%.
  mo.time_attention = opt.bench && cp > 1;
  mo.cp_comm = comms.cp.get();
  std::unique_ptr<Model> model = make_model(opt.device, mo);
  if (!ckpt_params.empty()) model->set_params(ckpt_params);
  int first_step = 1;
  if (resume_step >= 0) {
    std::string state_path = state_checkpoint_path(opt.out_dir, resume_step, rank);
    CHECK(file_exists(state_path), "--resume: rank %d's optimizer state '%s' for step %lld is "
          "missing; was the checkpoint written by a run of world size %d?", rank,
          state_path.c_str(), (long long)resume_step, world);
    TrainState st = load_state_file(state_path, model->adam_state_size());
    CHECK(st.step == resume_step, "--resume: '%s' says it holds step %lld, but its name says step "
          "%lld; the file was renamed or is corrupt: remove that checkpoint pair to resume from "
          "the one before", state_path.c_str(), (long long)st.step, (long long)resume_step);
    const int64_t order = opt.shuffle ? kDataShuffled : kDataInOrder;
    CHECK(st.data_order == 0 || st.data_order == order, "--resume: the checkpoint was trained %s; "
          "resume %s so the data order goes on as it was", st.data_order == kDataInOrder ?
          "with --no-shuffle" : "with shuffled data", st.data_order == kDataInOrder ?
          "with --no-shuffle" : "without --no-shuffle");
    CHECK(st.B == B && st.T == T && st.total_batch == opt.total_batch,
          "--resume: the checkpoint was written with --batch %lld --seq-len %lld --total-batch %lld; "
          "resume with the same values", (long long)st.B, (long long)st.T, (long long)st.total_batch);
    CHECK((uint64_t)st.seed == opt.seed, "--resume: the checkpoint was written with --seed %lld; "
          "resume with the same seed", (long long)st.seed);
    model->set_adam_state(st.m, st.v);
    if (train_loader) train_loader->restore({st.loader_epoch, st.loader_shard, st.loader_window});
    first_step = (int)st.step + 1;
    say(flashgpt::strformat("resumed from step %lld in %s", (long long)st.step, opt.out_dir.c_str()));
  }
  // Beside the checkpoints, so `flashgpt sample` finds it (a byte copy: llm.c's file too).
  if (lead && !opt.out_dir.empty() && !opt.bench) copy_tokenizer_to_out(opt.out_dir, tok_path);
  result.first_step = first_step;

  say(flashgpt::strformat("model: L=%d C=%d NH=%d NKV=%d HS=%d V=%d (padded %d) maxT=%d, %s "
                "positions, %.2fM parameters", cfg.num_layers, cfg.channels, cfg.num_heads,
                cfg.num_kv_heads, cfg.head_size(), cfg.vocab_size, cfg.padded_vocab_size,
                cfg.max_seq_len, cfg.rope ? "rotary" : "learned", model->num_parameters() / 1e6));
  say(flashgpt::strformat("device: %s | attention: %s | recompute: %s | batch %d x %d, %d "
                "micro-steps -> %lld tokens/step", model->device_name(), model->attention_name(),
                recompute_name(opt.recompute), B, T, accum, (long long)opt.total_batch));
  if (world > 1)
    say(flashgpt::strformat("data parallel: %d processes (NCCL)%s, %d x %d per %s per micro-step, %s",
                            world, cp > 1 ? flashgpt::strformat(" = dp %d x cp %d", dp, cp).c_str() : "",
                            B, T, cp > 1 ? "dp group" : "rank", zero ? "ZeRO-1 (AdamW state sharded)"
                            : mo.overlap_comm ? "gradient all-reduce per layer, overlapped with the backward"
                                               : "one gradient all-reduce per step"));
  if (cp > 1) {
    const CpChunk c0 = cp_layout.chunk(grid.cp_index, 0), c1 = cp_layout.chunk(grid.cp_index, 1);
    say(flashgpt::strformat("context parallel: cp=%d dp=%d (rank %d: cp index %d, chunks %d and %d "
                            "of each sequence, ~T/%d = %d tokens each)", cp, dp, rank,
                            grid.cp_index, c0.index, c1.index, cp,
                            cp_layout.local_len(grid.cp_index)));
  }
  if (!opt.quiet && lead) {
    size_t total = 0, width = 5;
    std::vector<MemoryLine> plan = model->memory_plan();
    for (const MemoryLine& m : plan) width = std::max(width, m.what.size());
    std::printf("memory plan:\n");
    for (const MemoryLine& m : plan) {
      std::printf("  %-*s %12s\n", (int)width, m.what.c_str(), human_bytes(m.bytes).c_str());
      total += m.bytes;
    }
    std::printf("  %-*s %12s\n", (int)width, "total", human_bytes(total).c_str());
  }

  std::vector<int> inputs((size_t)B * T), targets((size_t)B * T);
  AdamWHyper h;
  h.weight_decay = opt.weight_decay;
  // The cp ranks of a dp group train on the same random tokens.
  Rng bench_rng(opt.seed + (uint64_t)grid.dp_index);
  // Forward of one (B, T) batch; with --cp > 1 this rank's zigzag rows of it (cp_scatter), and
  // the model returns the mean loss over all B*T tokens of the sequence (its cp group's).
  const size_t local_rows = (size_t)B * cp_layout.local_len(grid.cp_index);
  std::vector<int> local_inputs(cp > 1 ? local_rows : 0), local_targets(cp > 1 ? local_rows : 0);
  auto forward = [&](const int* in, const int* tg) -> double {
    if (cp == 1) return model->forward(in, tg, B, T);
    cp_scatter<int>(local_inputs.data(), in, cp_layout, grid.cp_index, B, 1);
    cp_scatter<int>(local_targets.data(), tg, cp_layout, grid.cp_index, B, 1);
    return model->forward(local_inputs.data(), local_targets.data(), B, T);
  };

  auto mean_over_ranks = [&](double x) { return comm ? (double)comm->all_reduce_mean((float)x) : x; };
  auto evaluate = [&]() -> float {
    val_loader->reset();
    EvalSums sums;  // the same loss as `flashgpt eval` (train/eval.h)
    if (cp == 1) {
      eval_batches(*model, *val_loader, opt.eval_steps, B, T, nullptr, sums);
    } else {  // eval_batches' sums, with the batches through `forward`
      for (int i = 0; i < opt.eval_steps; i++) {
        val_loader->next_batch(inputs.data(), targets.data());
        sums.loss_sum += forward(inputs.data(), targets.data()) * B * T;
        sums.tokens += (int64_t)B * T;
      }
    }
    return (float)mean_over_ranks(sums.mean_loss());
  };
  auto print_sample = [&](int step) {
    int eot = tok ? tok->eot_token() : cfg.vocab_size - 1;
    std::vector<int> out = generate(*model, {eot}, opt.sample_tokens, 1.0f, 0,
                                    opt.seed + (uint64_t)step, T);
    std::string text;
    if (tok) {
      text = tok->decode(out);
    } else {
      for (int t : out) text += flashgpt::strformat("%d ", t);
    }
    std::printf("---- sample at step %d ----\n%s\n---------------------------\n", step, text.c_str());
  };
  auto save_checkpoint = [&](int step) {
    std::vector<float> params;
    model->get_params(params);
    for (float p : params)  // e.g. an absurd --weight-decay: never write a diverged model
      CHECK(std::isfinite(p), "training diverged at step %d: the weights hold NaN or infinity "
            "after the update; no checkpoint was written for it; lower --lr or --weight-decay",
            step);
    TrainState st;
    st.step = step;
    if (train_loader) {
      DataLoader::State ls = train_loader->state();
      st.loader_epoch = ls.epoch;
      st.loader_shard = ls.shard;
      st.loader_window = ls.window;
    }
    st.B = B;
    st.T = T;
    st.total_batch = opt.total_batch;
    st.seed = (int64_t)opt.seed;
    st.world_size = world;
    st.zero = zero;
    st.cp = cp;
    st.data_order = opt.shuffle ? kDataShuffled : kDataInOrder;
    model->get_adam_state(st.m, st.v);
    // State first (every rank its own), model second (rank 0, after all states are on disk):
    // latest_checkpoint_step() needs both, so a crash between the two leaves the previous
    // pair as the latest.
    save_state_file(state_checkpoint_path(opt.out_dir, step, rank), st);
    if (comm) mean_over_ranks(0.0);  // barrier: every rank's state is written
    if (lead) save_model_file(model_checkpoint_path(opt.out_dir, step), cfg, params);
    say(flashgpt::strformat("checkpoint: %s", model_checkpoint_path(opt.out_dir, step).c_str()));
  };

  // ---- the loop ----
  const int last_step = opt.bench ? opt.bench_warmup + opt.bench_steps : opt.steps;
  double timed_s = 0;
  int64_t timed_tokens = 0;
  std::vector<double> step_ms;
  RingStepTimes ring_times;  // summed over the timed steps, --bench with --cp
  int ring_timed_steps = 0;
  if (!val_loader && !opt.bench) say("no validation shards: evaluation is off");
  // Sampling runs the model on rank 0 alone, and a cp model's forward needs its whole cp group.
  const bool sampling = opt.sample_every > 0 && cp == 1;
  if (opt.sample_every > 0 && cp > 1 && !opt.bench)
    say("samples are off with --cp > 1 (sample from a checkpoint with `flashgpt sample`)");
  // Test hook for the failure handling (scripts/test_multigpu.sh): FLASHGPT_TEST_FAIL=R:S
  // makes rank R throw at the start of step S.
  int fail_rank = -1, fail_step = -1;
  if (const char* f = std::getenv("FLASHGPT_TEST_FAIL")) std::sscanf(f, "%d:%d", &fail_rank, &fail_step);
  // Test hook for the signal handling (tests/cpu/test_train.cpp): FLASHGPT_TEST_SIGNAL=S:N
  // raises signal N in this process at the start of step S.
  int signal_step = -1, signal_number = 0;
  if (const char* f = std::getenv("FLASHGPT_TEST_SIGNAL"))
    std::sscanf(f, "%d:%d", &signal_step, &signal_number);
  StopSignals stop;  // SIGINT / SIGTERM: finish the step, checkpoint, stop
  int last_saved = -1, last_step_run = first_step - 1;
  for (int step = first_step; step <= last_step; step++) {
    auto t0 = Clock::now();
    CHECK(!(rank == fail_rank && step == fail_step),
          "injected failure at step %d (FLASHGPT_TEST_FAIL=%d:%d)", step, fail_rank, fail_step);
    if (step == signal_step) std::raise(signal_number);
    float lr = opt.bench ? opt.lr : lr_at_step(opt, step);
    h.lr = lr;
    model->zero_grad();
    double loss = 0;
    for (int micro = 0; micro < accum; micro++) {
      if (opt.bench) {
        for (int i = 0; i < B * T; i++) {
          inputs[i] = (int)(bench_rng.next_u64() % cfg.vocab_size);
          targets[i] = (int)(bench_rng.next_u64() % cfg.vocab_size);
        }
      } else {
        train_loader->next_batch(inputs.data(), targets.data());
      }
      loss += forward(inputs.data(), targets.data()) / accum;
      if (micro == accum - 1) model->mark_last_micro_step();
      model->backward(1.0f / accum);
    }
    model->reduce_grads();  // multi-GPU: average over the ranks
    float norm = model->grad_norm();
    loss = mean_over_ranks(loss);  // the loss of the global batch, for printing and the log
    CHECK(std::isfinite(loss) && std::isfinite(norm),
          "training diverged at step %d (loss %g, grad norm %g); lower --lr or raise --warmup",
          step, loss, norm);
    float scale = (opt.grad_clip > 0 && norm > opt.grad_clip) ? opt.grad_clip / norm : 1.0f;
    model->adamw_step(h, scale, step);
    double ms = seconds_since(t0) * 1e3;
    result.losses.push_back((float)loss);
    if (step > first_step) {  // the first step warms caches and allocators
      timed_s += ms / 1e3;
      timed_tokens += opt.total_batch;
    }
    step_ms.push_back(ms);
    if (mo.time_attention) {
      const RingStepTimes t = model->cp_times();  // read every step: the events are reused
      if (step > opt.bench_warmup) {
        ring_times.add(t);
        ring_timed_steps++;
      }
    }
    double tok_s = opt.total_batch / (ms / 1e3);
    double eta = (last_step - step) * (timed_s > 0 ? timed_s / (timed_tokens / opt.total_batch) : ms / 1e3);
    if (!opt.quiet && lead)
      std::printf("step %5d/%d | loss %.4f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s | ETA %s\n",
                  step, last_step, loss, lr, norm, ms, tok_s, human_time(eta).c_str());
    float val = NAN;
    bool last = step == last_step;
    if (val_loader && ((opt.eval_every > 0 && step % opt.eval_every == 0) || last)) {
      val = evaluate();
      result.val_losses.push_back(val);
      if (lead) std::printf("step %5d | val loss %.4f\n", step, val);
    }
    if (log) {
      std::fprintf(log.get(), "{\"step\": %d, \"loss\": %.6f, ", step, loss);
      if (!std::isnan(val)) std::fprintf(log.get(), "\"val_loss\": %.6f, ", val);
      std::fprintf(log.get(), "\"lr\": %.6g, \"grad_norm\": %.6f, \"ms\": %.3f, \"tokens_per_s\": %.1f, "
                   "\"peak_mem_bytes\": %zu}\n", lr, norm, ms, tok_s, model->peak_memory_bytes());
      CHECK(std::fflush(log.get()) == 0 && !std::ferror(log.get()), "--log '%s': writing step %d "
            "failed (%s); is the disk full? (checkpoints so far are intact)", opt.log_path.c_str(),
            step, strerror(errno));
    }
    if (lead && !opt.bench && sampling && (step % opt.sample_every == 0 || last))
      print_sample(step);
    if (!opt.out_dir.empty() && !opt.bench &&
        ((opt.checkpoint_every > 0 && step % opt.checkpoint_every == 0) || last)) {
      save_checkpoint(step);
      last_saved = step;
    }
    // Every rank stops at the same step: one rank's signal is everyone's (one collective).
    const bool stop_now = world > 1 ? mean_over_ranks(stop.received() != 0 ? 1.0 : 0.0) > 0
                                    : stop.received() != 0;
    if (stop_now && !last) {
      const int signo = stop.received() != 0 ? stop.received() : SIGTERM;  // a peer's signal
      result.interrupted = signo;
      if (!opt.out_dir.empty() && !opt.bench && last_saved != step) {
        save_checkpoint(step);
        last_saved = step;
      }
      if (lead)
        std::printf("stopped by %s after step %d%s\n", signo == SIGINT ? "SIGINT" : "SIGTERM", step,
                    last_saved == step ? flashgpt::strformat("; continue with --resume --out %s",
                                                             opt.out_dir.c_str()).c_str()
                                       : " (no --out: nothing saved)");
      last_step_run = step;
      break;
    }
    last_step_run = step;
  }
  result.tokens_per_s = timed_s > 0 ? timed_tokens / timed_s : 0;
  result.peak_mem_bytes = model->peak_memory_bytes();
  if (opt.bench) {
    std::vector<double> timed(step_ms.begin() + std::min<size_t>(opt.bench_warmup, step_ms.size()),
                              step_ms.end());
    if (timed.empty()) timed = step_ms;  // stopped by a signal during the warm-up
    std::sort(timed.begin(), timed.end());
    double med = timed[timed.size() / 2];
    double tps = opt.total_batch / (med / 1e3);
    // FLOPs per token, as llm.c: 6N for the matrices + 6*L*C*T for causal attention.
    double flops_tok = 6.0 * model->num_parameters() + 6.0 * cfg.num_layers * cfg.channels * T;
    double peak = peak_flops(model->device_name());
    // Rank 0's median: the ranks meet in the collectives every step, so all run at one pace.
    double tps_gpu = tps / world;
    if (lead)
      std::printf("bench: %s %s attn=%s B=%d T=%d world=%d cp=%d dp=%d | median %.2f ms/step | "
                  "%.0f tokens/s (%.0f per GPU) | MFU %s | peak memory %s%s\n", model->device_name(),
                  opt.model.c_str(), model->attention_name(), B, T, world, cp, dp, med, tps, tps_gpu,
                  peak > 0 ? flashgpt::strformat("%.1f%%", 100 * tps_gpu * flops_tok / peak).c_str() : "n/a",
                  human_bytes(model->peak_memory_bytes()).c_str(),
                  ring_timed_steps == 0 ? ""
                      : flashgpt::strformat(" | comm_wait_ms=%.1f per step (rank 0)",
                                            ring_times.wait_ms() / ring_timed_steps).c_str());
    // Every rank: where its step went in the ring (the ranks' skew shows as the other's waits).
    if (ring_timed_steps > 0) {
      std::fflush(stdout);
      std::printf("ring: rank %d (cp index %d of %d), per step: %s\n", rank, grid.cp_index, cp,
                  ring_times_summary(ring_times, ring_timed_steps).c_str());
      std::fflush(stdout);
    }
    result.tokens_per_s = tps;
  } else {
    if (lead)
      std::printf("done: %d steps, %.0f tokens/s, peak memory %s\n", last_step_run - first_step + 1,
                  result.tokens_per_s, human_bytes(result.peak_mem_bytes).c_str());
  }
  return result;
}

}  // namespace
