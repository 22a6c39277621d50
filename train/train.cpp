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
#include "data/documents.h"
#include "data/files.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "kernels/common.h"
#include "model/checkpoint.h"
#include "model/context_parallel.h"
#include "model/hf_gpt2.h"
#include "model/dist_comm.h"
#include "model/layout.h"
#include "kernels/rng.h"
#include "train/dist.h"
#include "train/eval.h"
#include "train/resume.h"
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

int schedule_end(const TrainOptions& opt) {
  return opt.schedule_steps > 0 ? opt.schedule_steps : opt.steps;
}

float lr_at_step(const TrainOptions& opt, int step) {
  if (step <= opt.warmup) return opt.lr * step / std::max(1, opt.warmup);
  const int decay_steps = schedule_end(opt) - opt.warmup;
  if (decay_steps <= 0) return opt.lr;
  // (0, 1], and 1 past the schedule's end: the final lr from there on
  const double progress = std::min(1.0, (double)(step - opt.warmup) / decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));  // 1 -> 0
  const double lo = opt.lr * opt.lr_final_frac;
  return (float)(lo + (opt.lr - lo) * cosine);
}

namespace {

// The process group's communicators: the world's (gradient all-reduce, loss, barriers) and,
// with --cp > 1, the cp group's (the ring attention's send/recv; model/dist_comm.h split()).
struct Comms {
  std::unique_ptr<DistComm> world, cp;
};

// The data a run reads, validated before the model is built.
struct DataSources {
  std::string train_pattern, val_pattern, tok_path;
  bool val_optional = false;  // --data's val_*.bin may be absent; an explicit --val-pattern not
  std::unique_ptr<Tokenizer> tok;
};

// Where the weights come from: the checkpoint --resume continues (resume_step >= 0), the model
// of --init, or neither (model_path empty: initialised from the seed).
struct StartPoint {
  int64_t resume_step = -1;
  std::string model_path;
  GPTConfig cfg;
  MaskSpec mask;  // the model file's (model/checkpoint.h); causal for a fresh model
  std::vector<float> params;
};

// Everything the loop and the report use; set_up() makes it.
struct Run {
  explicit Run(const TrainOptions& o) : opt(o) {}
  TrainOptions opt;  // the flags, and with --resume the checkpoint's settings (train/resume.h)
  int rank = 0, world = 1, zero = 0;
  bool lead = true;  // rank 0: only it prints, logs, samples and writes the model file
  CpGrid grid;
  DataSources data;
  GPTConfig cfg;
  MaskSpec mask;  // --mask, --window (or the model's), eot the tokenizer's
  int B = 0, T = 0, accum = 1;  // micro-batch, sequence length, micro-steps per step
  std::unique_ptr<OutDirLock> out_lock;
  std::unique_ptr<DataLoader> train_loader, val_loader;
  std::unique_ptr<FILE, int (*)(FILE*)> log{nullptr, fclose};
  DistComm* comm = nullptr;  // the world's communicator; null in one process
  std::unique_ptr<Model> model;
  int first_step = 1;

  void say(const std::string& s) const {
    if (!opt.quiet && lead) std::printf("%s\n", s.c_str());
  }
  double mean_over_ranks(double x) const { return comm ? (double)comm->all_reduce_mean((float)x) : x; }
};

// ---- setup ----

DataSources find_data(const TrainOptions& opt) {
  DataSources d;
  d.train_pattern = opt.train_pattern;
  d.val_pattern = opt.val_pattern;
  d.tok_path = opt.tokenizer_path;
  if (!opt.data_dir.empty()) {
    CHECK(file_exists(opt.data_dir), "--data '%s' does not exist; run `flashgpt prepare` first",
          opt.data_dir.c_str());
    if (d.train_pattern.empty()) d.train_pattern = opt.data_dir + "/train_*.bin";
    if (d.val_pattern.empty()) {
      d.val_pattern = opt.data_dir + "/val_*.bin";
      d.val_optional = true;
    }
    const std::string data_tok = opt.data_dir + "/tokenizer.bin";
    if (file_exists(data_tok)) {
      if (d.tok_path.empty()) d.tok_path = data_tok;
      CHECK(same_contents(d.tok_path, data_tok), "--tokenizer '%s' is not the tokenizer --data '%s' "
            "was prepared with (%s); drop --tokenizer", d.tok_path.c_str(), opt.data_dir.c_str(),
            data_tok.c_str());
    }
  }
  if (!d.tok_path.empty()) d.tok = std::make_unique<Tokenizer>(Tokenizer::load(d.tok_path));
  if (d.tok && opt.vocab_size > 0)
    CHECK(opt.vocab_size == d.tok->vocab_size(), "--vocab-size %d disagrees with the tokenizer '%s' "
          "(%d tokens); drop --vocab-size", opt.vocab_size, d.tok_path.c_str(), d.tok->vocab_size());
  return d;
}

// The --out directory: one run at a time, never two runs' checkpoints mixed.
void claim_out_dir(Run& run) {
  const TrainOptions& opt = run.opt;
  if (!opt.out_dir.empty() && !opt.bench) {
    if (run.lead) run.out_lock = std::make_unique<OutDirLock>(opt.out_dir);
    if (!opt.resume) check_fresh_out(opt.out_dir);
    check_out_tokenizer(opt.out_dir, run.data.tok_path, opt.resume);
  }
  if (!opt.log_path.empty() && run.lead)
    check_output_path(opt.log_path, "--log", OutputKind::TrainLog);
}

// --resume: the latest checkpoint in --out, and the run's settings from it (train/resume.h);
// returns its step.
int64_t continue_run(Run& run) {
  const TrainOptions& opt = run.opt;
  CHECK(opt.init_path.empty(), "--resume continues from the checkpoints in --out '%s'; --init "
        "'%s' would be ignored: drop --init (or --resume)", opt.out_dir.c_str(),
        opt.init_path.c_str());
  const int64_t step = latest_checkpoint_step(opt.out_dir);
  CHECK(step >= 0, "--resume: no checkpoint (model_*.bin + state_*.bin) in --out '%s'",
        opt.out_dir.c_str());
  // rank 0's file: the world size, ZeRO stage and --cp it was written at (a mismatch is
  // refused before any work), and the run's settings.
  const std::string state0 = state_checkpoint_path(opt.out_dir, step, 0);
  const TrainState saved = load_state_header(state0);
  check_resume_world(saved.world_size, saved.zero, saved.cp, run.world, run.zero, run.grid.cp,
                     state0);
  std::string line;
  run.opt = resume_options(opt, step, saved, state0, &line);
  run.say(line);
  return step;
}

// The model --resume continues or the one of --init, with its shape; or the flags' shape.
StartPoint find_start(const Run& run, int64_t resume_step) {
  const TrainOptions& opt = run.opt;
  StartPoint sp;
  sp.resume_step = resume_step;
  sp.model_path = sp.resume_step >= 0 ? model_checkpoint_path(opt.out_dir, sp.resume_step)
                                      : opt.init_path;
  int vocab = run.data.tok ? run.data.tok->vocab_size() : opt.vocab_size;
  if (!sp.model_path.empty()) {
    load_any_model(sp.model_path, sp.cfg, sp.params);  // --init: ours, llm.c's or Hugging Face's
    sp.mask = read_any_model_mask(sp.model_path);
    if (vocab == 0) vocab = sp.cfg.vocab_size;
    CHECK(vocab == sp.cfg.vocab_size, "checkpoint '%s' has a vocabulary of %d but the tokenizer / "
          "--vocab-size says %d; use the matching tokenizer", sp.model_path.c_str(),
          sp.cfg.vocab_size, vocab);
    // --init: the flags' model as a whole; --resume: each model flag given, and --model's preset.
    if (sp.resume_step >= 0) check_resumed_model(opt, sp.cfg, sp.model_path);
    if (opt.model_given && (sp.resume_step < 0 || opt.given.count("model")))
      check_same_shape(sp.cfg, config_from_flags(opt, vocab), sp.model_path);
    CHECK(opt.seq_len <= sp.cfg.max_seq_len, "--seq-len %d is larger than the model's maximum %d "
          "(from '%s'); lower --seq-len", opt.seq_len, sp.cfg.max_seq_len, sp.model_path.c_str());
  } else {
    if (opt.bench && vocab == 0) vocab = 50257;  // GPT-2's vocabulary
    CHECK(vocab > 0, "train: the vocabulary size is unknown; give --tokenizer FILE (or --data with "
          "a tokenizer.bin) or --vocab-size N");
    sp.cfg = config_from_flags(opt, vocab);
    CHECK(opt.seq_len <= sp.cfg.max_seq_len, "--seq-len %d is larger than --max-seq-len %d",
          opt.seq_len, sp.cfg.max_seq_len);
  }
  if (run.data.tok)
    CHECK(run.data.tok->vocab_size() == sp.cfg.vocab_size, "tokenizer '%s' has %d tokens, the "
          "model %d", run.data.tok_path.c_str(), run.data.tok->vocab_size(), sp.cfg.vocab_size);
  return sp;
}

// The data loaders and the --log file.
void open_data_and_log(Run& run, int64_t resume_step) {
  const TrainOptions& opt = run.opt;
  const int dp = run.grid.dp;
  if (!opt.bench) {
    // Each dp group reads its own B of every dp*B windows; its cp ranks read the same ones.
    run.train_loader = std::make_unique<DataLoader>(run.data.train_pattern, "--train-pattern",
                                                    run.B, run.T, run.cfg.vocab_size, opt.shuffle,
                                                    opt.seed, run.grid.dp_index, dp);
    if (!run.data.val_pattern.empty() &&
        (!run.data.val_optional || any_file_matches(run.data.val_pattern)))
      run.val_loader = std::make_unique<DataLoader>(run.data.val_pattern, "--val-pattern", run.B,
                                                    run.T, run.cfg.vocab_size, false, opt.seed,
                                                    run.grid.dp_index, dp);
  }
  // Every rank writes its optimizer state into --out.
  if (!opt.out_dir.empty() && !run.lead) ensure_writable_dir(opt.out_dir, "--out");
  if (!opt.log_path.empty() && run.lead) {
    if (resume_step >= 0) trim_log(opt.log_path, resume_step);  // steps after it come again
    run.log.reset(fopen(opt.log_path.c_str(), resume_step >= 0 ? "a" : "w"));
    CHECK(run.log, "--log '%s' cannot be written: %s", opt.log_path.c_str(), strerror(errno));
  }
}

// The process group (world > 1 only: one process needs no NCCL).
void join_process_group(Run& run, Comms& comms) {
  const TrainOptions& opt = run.opt;
  if (run.world == 1) return;
  CHECK(opt.device != "cpu", "--device cpu trains in one process only");
  DistInit init = parse_dist_init(opt.dist.init);
  DistConfig dc = opt.dist;
  double timeout = opt.dist_timeout;
  const int rank = run.rank, world = run.world;
  comms.world = make_nccl_comm(
      rank, world, opt.dist.local_rank,
      [&](unsigned char* id) { exchange_dist_id(init, rank, world, id, timeout); },
      [dc]() { return read_failure_marker(dc); }, timeout);
  run.comm = comms.world.get();
  // A cp group's own communicator, even when it is the whole world: the ring's send/recv
  // then never interleave with the gradient all-reduce on the world's. It lives in `comms`,
  // past the model that holds it, and is aborted with the world's on a failure.
  if (run.grid.cp > 1) comms.cp = comms.world->split(run.grid.dp_index, run.grid.cp_index);
}

std::unique_ptr<Model> make_run_model(const Run& run, const Comms& comms) {
  const TrainOptions& opt = run.opt;
  const int cp = run.grid.cp;
  ModelOptions mo;
  mo.config = run.cfg;
  mo.seed = opt.seed;  // its initial weights, unless a checkpoint's replace them
  mo.B = run.B;
  mo.T = run.T;  // the sequence's length: with --cp the model keeps its zigzag share of it
  mo.cp = cp;
  mo.cp_rank = run.grid.cp_index;
  mo.attn = opt.attn;
  mo.recompute = opt.recompute;
  mo.deterministic = opt.deterministic;
  mo.tune_matmul = opt.tune_matmul;
  mo.cuda_graphs = !opt.no_cuda_graphs;
  mo.mask = run.mask;
  mo.classifier_chunk = opt.classifier_chunk;
  // With --cp the gradient all-reduce waits for the end of the backward: overlapped, it would run
  // on the world communicator while the ring's hops run on the cp one, two NCCL kernels that
  // must both be resident on every GPU to progress (NCCL's warning about concurrent
  // communicators); on one node the overlap bought nothing measurable anyway.
  mo.overlap_comm = opt.overlap_comm && cp == 1;
  mo.comm = run.comm;
  mo.zero = run.zero;
  mo.cp_comm = comms.cp.get();
  // --bench with --cp: time each ring step's attention and the compute stream's waits for the
  // ring (Model::cp_times); every rank prints its own at the end. CUDA events around the
  // attention calls cost well under 1%.
  mo.time_attention = opt.bench && cp > 1;
  return make_model(opt.device, mo);
}

// The optimizer state and the data position of the checkpoint --resume continues.
void restore_state(Run& run, int64_t resume_step) {
  const TrainOptions& opt = run.opt;
  std::string state_path = state_checkpoint_path(opt.out_dir, resume_step, run.rank);
  CHECK(file_exists(state_path), "--resume: rank %d's optimizer state '%s' for step %lld is "
        "missing; was the checkpoint written by a run of world size %d?", run.rank,
        state_path.c_str(), (long long)resume_step, run.world);
  TrainState st = load_state_file(state_path, run.model->adam_state_size());
  CHECK(st.step == resume_step, "--resume: '%s' says it holds step %lld, but its name says step "
        "%lld; the file was renamed or is corrupt: remove that checkpoint pair to resume from "
        "the one before", state_path.c_str(), (long long)st.step, (long long)resume_step);
  run.model->set_adam_state(st.m, st.v);
  if (run.train_loader) run.train_loader->restore({st.loader_epoch, st.loader_shard, st.loader_window});
  run.first_step = (int)st.step + 1;
}

// Tokens of the training shards the start line reads for its document statistics: a fraction
// of a second on a large corpus.
constexpr size_t kDocumentStatsTokens = 10'000'000;

// With --cp and a mask that is not causal: how the mask's work falls on the zigzag ranks, over
// the first windows of T tokens of the first shard (at most kDocumentStatsTokens of them, at
// least one window). "" when the shard holds no whole window.
std::string cp_balance(const Run& run, const std::string& first_shard) {
  const std::vector<uint16_t> stream = read_shard(first_shard);
  const size_t T = run.T;
  const int windows = (int)std::min(stream.size() / T, std::max<size_t>(1, kDocumentStatsTokens / T));
  if (windows == 0) return "";
  const std::vector<int> tokens(stream.begin(), stream.begin() + windows * T);
  const std::vector<int> starts = run.mask.kind == MaskKind::kDocument
      ? document_starts(tokens.data(), windows, run.T, run.mask.eot_token(run.cfg.vocab_size))
      : std::vector<int>();
  const AttnMask m{starts.empty() ? nullptr : starts.data(), run.mask.window};
  const CpLayout layout(run.grid.cp, run.T);
  std::vector<int64_t> pairs(run.grid.cp, 0);
  for (int w = 0; w < windows; w++) {
    const std::vector<int64_t> p = cp_rank_visible_pairs(layout, m.seq(w, run.T));
    for (int r = 0; r < run.grid.cp; r++) pairs[r] += p[r];
  }
  int64_t total = 0, most = 0;
  for (int64_t p : pairs) total += p, most = std::max(most, p);
  std::string shares;
  for (int64_t p : pairs) shares += flashgpt::strformat(" %.1f%%", 100.0 * p / std::max<int64_t>(total, 1));
  const double imbalance = total > 0 ? double(most) * run.grid.cp / double(total) : 1.0;
  return flashgpt::strformat("context parallel under the %s mask: the ranks' shares of its "
                             "attention work over %d window%s:%s (busiest / mean %.2f%s)",
                             describe_mask(run.mask).c_str(), windows, windows > 1 ? "s" : "",
                             shares.c_str(), imbalance,
                             imbalance > 1.1 ? flashgpt::strformat(": the others wait %.0f%% of "
                                 "the ring's attention time", 100 * (1 - 1 / imbalance)).c_str()
                                             : "");
}

// The training shards' documents, and what the mask leaves of causal attention's work (with
// --cp, how it falls on the ranks). --bench reads no shards: only a window's share is said.
void describe_documents(const Run& run) {
  if (run.opt.quiet || !run.lead) return;
  const MaskSpec& m = run.mask;
  const double window_share = double(window_pairs(run.T, m.window)) / double(window_pairs(run.T, 0));
  if (run.opt.bench) {
    if (m.window > 0 && m.window < run.T)
      run.say(flashgpt::strformat("attention: --window %d leaves %.1f%% of causal attention's "
                                  "work at T %d", m.window, 100 * window_share, run.T));
    return;
  }
  const std::vector<std::string> files = glob_files(run.data.train_pattern, "--train-pattern");
  const DocumentLengths docs = shard_document_lengths(files, m.eot_token(run.cfg.vocab_size),
                                                      kDocumentStatsTokens);
  std::string line = "documents: " + format_document_stats(docs.stats());
  if (docs.stats().tokens >= kDocumentStatsTokens)
    line += flashgpt::strformat(" (the first %zu tokens of the training shards)", kDocumentStatsTokens);
  if (m.kind == MaskKind::kDocument)
    line += flashgpt::strformat("; the %s mask leaves %.1f%% of causal attention's work at T %d",
                                describe_mask(m).c_str(),
                                100 * document_mask_work_fraction(docs.lengths(), run.T, m.window),
                                run.T);
  else if (m.window > 0 && m.window < run.T)
    line += flashgpt::strformat("; --window %d leaves %.1f%% of causal attention's work at T %d",
                                m.window, 100 * window_share, run.T);
  run.say(line);
  if (run.grid.cp > 1 && !m.is_causal()) {
    const std::string balance = cp_balance(run, files.front());
    if (!balance.empty()) run.say(balance);
  }
}

// The lines that open a run: the model, the device and batch, the process grid, the memory plan.
void describe_run(const Run& run) {
  const TrainOptions& opt = run.opt;
  const GPTConfig& cfg = run.cfg;
  const Model& model = *run.model;
  const int cp = run.grid.cp, dp = run.grid.dp;
  run.say(flashgpt::strformat("model: L=%d C=%d NH=%d NKV=%d HS=%d V=%d (padded %d) maxT=%d, %s "
                "positions, %.2fM parameters", cfg.num_layers, cfg.channels, cfg.num_heads,
                cfg.num_kv_heads, cfg.head_size(), cfg.vocab_size, cfg.padded_vocab_size,
                cfg.max_seq_len, cfg.rope ? "rotary" : "learned", model.num_parameters() / 1e6));
  run.say(flashgpt::strformat("device: %s | attention: %s, %s mask | recompute: %s | batch %d x "
                "%d, %d micro-steps -> %lld tokens/step", model.device_name(),
                model.attention_name(), describe_mask(run.mask).c_str(),
                recompute_name(opt.recompute), run.B, run.T, run.accum, (long long)opt.total_batch));
  describe_documents(run);
  if (run.world > 1)
    run.say(flashgpt::strformat("data parallel: %d processes (NCCL)%s, %d x %d per %s per micro-step, %s",
                                run.world, cp > 1 ? flashgpt::strformat(" = dp %d x cp %d", dp, cp).c_str() : "",
                                run.B, run.T, cp > 1 ? "dp group" : "rank", run.zero ? "ZeRO-1 (AdamW state sharded)"
                                : opt.overlap_comm && cp == 1 ? "gradient all-reduce per layer, overlapped with the backward"
                                                              : "one gradient all-reduce per step"));
  if (cp > 1) {
    const CpLayout layout(cp, run.T);
    const CpChunk c0 = layout.chunk(run.grid.cp_index, 0), c1 = layout.chunk(run.grid.cp_index, 1);
    run.say(flashgpt::strformat("context parallel: cp=%d dp=%d (rank %d: cp index %d, chunks %d and "
                                "%d of each sequence, ~T/%d = %d tokens each)", cp, dp, run.rank,
                                run.grid.cp_index, c0.index, c1.index, cp,
                                layout.local_len(run.grid.cp_index)));
  }
  if (!opt.quiet && run.lead) {
    size_t total = 0, width = 5;
    std::vector<MemoryLine> plan = model.memory_plan();
    for (const MemoryLine& m : plan) width = std::max(width, m.what.size());
    std::printf("memory plan:\n");
    for (const MemoryLine& m : plan) {
      std::printf("  %-*s %12s\n", (int)width, m.what.c_str(), human_bytes(m.bytes).c_str());
      total += m.bytes;
    }
    std::printf("  %-*s %12s\n", (int)width, "total", human_bytes(total).c_str());
  }
}

void set_up(Run& run, Comms& comms) {
  const TrainOptions& opt = run.opt;
  run.rank = opt.dist.rank;
  run.world = opt.dist.world_size;
  run.zero = run.world > 1 ? opt.zero : 0;
  run.lead = run.rank == 0;
  // Context parallelism (train/dist.h): the rank grid.
  run.grid = cp_grid(run.rank, run.world, opt.cp);
  const int cp = run.grid.cp;
  CHECK(cp == 1 || cuda_device_available(), "--cp %d splits each sequence over %d GPUs (CUDA "
        "only), but %s; run it on a machine with GPUs and the CUDA build", cp, cp,
        opt.device == "cuda" ? "no CUDA GPU is usable here" : "--device auto found no CUDA GPU");
  run.data = find_data(opt);
  claim_out_dir(run);
  const int64_t resume_step = opt.resume ? continue_run(run) : -1;
  StartPoint start = find_start(run, resume_step);
  run.cfg = start.cfg;
  run.mask = opt.mask.over(start.mask);
  run.mask.eot = run.data.tok ? run.data.tok->eot_token() : -1;
  validate_mask_spec(run.mask, run.cfg.vocab_size);
  run.B = opt.batch;
  run.T = opt.seq_len;
  // Tokens per micro-step over all ranks: B*T per dp group (its cp ranks share the sequences).
  const int64_t micro = (int64_t)run.B * run.T * run.grid.dp;
  CHECK(opt.total_batch % micro == 0, "--total-batch %lld is not a multiple of --batch x "
        "--seq-len x dp = %lld", (long long)opt.total_batch, (long long)micro);
  run.accum = (int)(opt.total_batch / micro);
  open_data_and_log(run, start.resume_step);
  join_process_group(run, comms);
  run.model = make_run_model(run, comms);
  if (!start.params.empty()) run.model->set_params(start.params);
  if (start.resume_step >= 0) restore_state(run, start.resume_step);
  // Beside the checkpoints, so `flashgpt sample` finds it (a byte copy: llm.c's file too).
  if (run.lead && !opt.out_dir.empty() && !opt.bench)
    copy_tokenizer_to_out(opt.out_dir, run.data.tok_path);
  describe_run(run);
}

// ---- the loop ----

float evaluate(Run& run) {
  run.val_loader->reset();
  EvalSums sums;  // the same loss as `flashgpt eval` (train/eval.h)
  eval_batches(*run.model, *run.val_loader, run.opt.eval_steps, run.B, run.T, nullptr, sums);
  return (float)run.mean_over_ranks(sums.mean_loss());
}

void print_sample(const Run& run, int step) {
  const int eot = run.data.tok ? run.data.tok->eot_token() : run.cfg.vocab_size - 1;
  std::vector<int> out = generate(*run.model, {eot}, run.opt.sample_tokens, 1.0f, 0,
                                  run.opt.seed + (uint64_t)step, run.T);
  std::string text;
  if (run.data.tok) {
    text = run.data.tok->decode(out);
  } else {
    for (int t : out) text += flashgpt::strformat("%d ", t);
  }
  std::printf("---- sample at step %d ----\n%s\n---------------------------\n", step, text.c_str());
}

void save_checkpoint(Run& run, int step) {
  const TrainOptions& opt = run.opt;
  std::vector<float> params;
  run.model->get_params(params);
  for (float p : params)  // e.g. an absurd --weight-decay: never write a diverged model
    CHECK(std::isfinite(p), "training diverged at step %d: the weights hold NaN or infinity "
          "after the update; no checkpoint was written for it; lower --lr or --weight-decay",
          step);
  TrainState st;
  st.step = step;
  if (run.train_loader) {
    DataLoader::State ls = run.train_loader->state();
    st.loader_epoch = ls.epoch;
    st.loader_shard = ls.shard;
    st.loader_window = ls.window;
  }
  st.world_size = run.world;
  st.zero = run.zero;
  st.cp = run.grid.cp;
  record_settings(opt, st);
  run.model->get_adam_state(st.m, st.v);
  // State first (every rank its own), model second (rank 0, after all states are on disk):
  // latest_checkpoint_step() needs both, so a crash between the two leaves the previous
  // pair as the latest.
  save_state_file(state_checkpoint_path(opt.out_dir, step, run.rank), st);
  if (run.comm) run.mean_over_ranks(0.0);  // barrier: every rank's state is written
  if (run.lead)
    save_model_file(model_checkpoint_path(opt.out_dir, step), run.cfg, params, run.mask);
  run.say(flashgpt::strformat("checkpoint: %s", model_checkpoint_path(opt.out_dir, step).c_str()));
}

// One step's numbers.
struct StepResult {
  double loss = 0;
  float norm = 0, lr = 0;
  double ms = 0;
};

// The micro-batches of one optimizer step: forward and backward each, gradients averaged over
// the ranks, clipped, one AdamW update.
StepResult train_step(Run& run, int step, Rng& bench_rng, std::vector<int>& inputs,
                      std::vector<int>& targets) {
  const TrainOptions& opt = run.opt;
  Model& model = *run.model;
  const auto t0 = Clock::now();
  StepResult r;
  r.lr = opt.bench ? opt.lr : lr_at_step(opt, step);
  model.zero_grad();
  for (int micro = 0; micro < run.accum; micro++) {
    if (opt.bench) {
      for (int i = 0; i < run.B * run.T; i++) {
        inputs[i] = (int)(bench_rng.next_u64() % run.cfg.vocab_size);
        targets[i] = (int)(bench_rng.next_u64() % run.cfg.vocab_size);
      }
    } else {
      run.train_loader->next_batch(inputs.data(), targets.data());
    }
    r.loss += model.forward(inputs.data(), targets.data(), run.B, run.T) / run.accum;
    if (micro == run.accum - 1) model.mark_last_micro_step();
    model.backward(1.0f / run.accum);
  }
  model.reduce_grads();  // multi-GPU: average over the ranks
  r.loss = run.mean_over_ranks(r.loss);  // the loss of the global batch, for printing and the log
  CHECK(std::isfinite(r.loss),
        "training diverged at step %d (loss %g); lower --lr or raise --warmup", step, r.loss);
  AdamWHyper h;
  h.lr = r.lr;
  h.weight_decay = opt.weight_decay;
  r.norm = model.optimizer_step(h, opt.grad_clip, step);  // skips the update on a non-finite norm
  CHECK(std::isfinite(r.norm),
        "training diverged at step %d (grad norm %g, update skipped); lower --lr or raise --warmup",
        step, r.norm);
  r.ms = seconds_since(t0) * 1e3;
  return r;
}

void log_step(Run& run, int step, const StepResult& r, float val, double tok_s) {
  FILE* log = run.log.get();
  std::fprintf(log, "{\"step\": %d, \"loss\": %.6f, ", step, r.loss);
  if (!std::isnan(val)) std::fprintf(log, "\"val_loss\": %.6f, ", val);
  std::fprintf(log, "\"lr\": %.6g, \"grad_norm\": %.6f, \"ms\": %.3f, \"tokens_per_s\": %.1f, "
               "\"peak_mem_bytes\": %zu}\n", r.lr, r.norm, r.ms, tok_s, run.model->peak_memory_bytes());
  CHECK(std::fflush(log) == 0 && !std::ferror(log), "--log '%s': writing step %d failed (%s); is "
        "the disk full? (checkpoints so far are intact)", run.opt.log_path.c_str(), step,
        strerror(errno));
}

// What the loop measured, for the report.
struct LoopStats {
  int last_step = 0;       // the loop's planned end
  int last_step_run = 0;   // where it ended (a signal stops it early)
  double timed_s = 0;      // the steps after the first
  int64_t timed_tokens = 0;
  std::vector<double> step_ms;
  RingStepTimes ring_times;  // summed over the timed steps, --bench with --cp
  int ring_timed_steps = 0;

  // Step `step`'s time (the first step warms caches and allocators: not timed); with --bench
  // --cp, its ring times too.
  void add(Run& run, int step, double ms) {
    if (step > run.first_step) {
      timed_s += ms / 1e3;
      timed_tokens += run.opt.total_batch;
    }
    step_ms.push_back(ms);
    if (run.opt.bench && run.grid.cp > 1) {
      const RingStepTimes t = run.model->cp_times();  // read every step: the events are reused
      if (step > run.opt.bench_warmup) {
        ring_times.add(t);
        ring_timed_steps++;
      }
    }
    last_step_run = step;
  }
  // Seconds to the end at the pace so far.
  double eta_s(int step, double ms, int64_t total_batch) const {
    return (last_step - step) * (timed_s > 0 ? timed_s / (timed_tokens / total_batch) : ms / 1e3);
  }
};

// Test hooks, read once per run: FLASHGPT_TEST_FAIL=R:S makes rank R throw at the start of
// step S (scripts/test_multigpu.sh: the failure handling); FLASHGPT_TEST_SIGNAL=S:N raises
// signal N in this process at the start of step S (tests/cpu/test_train.cpp: the signal
// handling).
struct TestHooks {
  int fail_rank = -1, fail_step = -1, signal_step = -1, signal_number = 0;
  TestHooks() {
    if (const char* f = std::getenv("FLASHGPT_TEST_FAIL")) std::sscanf(f, "%d:%d", &fail_rank, &fail_step);
    if (const char* f = std::getenv("FLASHGPT_TEST_SIGNAL"))
      std::sscanf(f, "%d:%d", &signal_step, &signal_number);
  }
  void at_step_start(int rank, int step) const {
    CHECK(!(rank == fail_rank && step == fail_step),
          "injected failure at step %d (FLASHGPT_TEST_FAIL=%d:%d)", step, fail_rank, fail_step);
    if (step == signal_step) std::raise(signal_number);
  }
};

// SIGINT or SIGTERM after step `step` (not the last): every rank stops there (one rank's signal
// is everyone's: one collective), after a checkpoint of it (with --out).
bool stop_on_signal(Run& run, const StopSignals& stop, int step, bool saving, int& last_saved,
                    TrainResult& result) {
  const bool stop_now = run.world > 1 ? run.mean_over_ranks(stop.received() != 0 ? 1.0 : 0.0) > 0
                                      : stop.received() != 0;
  if (!stop_now) return false;
  const int signo = stop.received() != 0 ? stop.received() : SIGTERM;  // a peer's signal
  result.interrupted = signo;
  if (saving && last_saved != step) {
    save_checkpoint(run, step);
    last_saved = step;
  }
  if (run.lead)
    std::printf("stopped by %s after step %d%s\n", signo == SIGINT ? "SIGINT" : "SIGTERM", step,
                last_saved == step ? flashgpt::strformat("; continue with --resume --out %s",
                                                         run.opt.out_dir.c_str()).c_str()
                                   : " (no --out: nothing saved)");
  return true;
}

LoopStats run_loop(Run& run, TrainResult& result) {
  const TrainOptions& opt = run.opt;
  LoopStats ls;
  ls.last_step = opt.bench ? opt.bench_warmup + opt.bench_steps : opt.steps;
  ls.last_step_run = run.first_step - 1;
  std::vector<int> inputs((size_t)run.B * run.T), targets((size_t)run.B * run.T);
  Rng bench_rng(opt.seed + (uint64_t)run.grid.dp_index);  // a dp group's cp ranks: the same tokens
  if (!run.val_loader && !opt.bench) run.say("no validation shards: evaluation is off");
  // Sampling runs the model on rank 0 alone, and a cp model's forward needs its whole cp group.
  const bool sampling = opt.sample_every > 0 && run.grid.cp == 1 && !opt.bench && run.lead;
  if (opt.sample_every > 0 && run.grid.cp > 1 && !opt.bench)
    run.say("samples are off with --cp > 1 (sample from a checkpoint with `flashgpt sample`)");
  const bool saving = !opt.out_dir.empty() && !opt.bench;
  const TestHooks hooks;
  StopSignals stop;  // SIGINT / SIGTERM: finish the step, checkpoint, stop
  int last_saved = -1;
  for (int step = run.first_step; step <= ls.last_step; step++) {
    hooks.at_step_start(run.rank, step);
    const StepResult r = train_step(run, step, bench_rng, inputs, targets);
    result.losses.push_back((float)r.loss);
    ls.add(run, step, r.ms);
    const double tok_s = opt.total_batch / (r.ms / 1e3);
    if (!opt.quiet && run.lead)
      std::printf("step %5d/%d | loss %.4f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s | ETA %s\n",
                  step, ls.last_step, r.loss, r.lr, r.norm, r.ms, tok_s,
                  human_time(ls.eta_s(step, r.ms, opt.total_batch)).c_str());
    const bool last = step == ls.last_step;
    float val = NAN;
    if (run.val_loader && ((opt.eval_every > 0 && step % opt.eval_every == 0) || last)) {
      val = evaluate(run);
      result.val_losses.push_back(val);
      if (run.lead) std::printf("step %5d | val loss %.4f\n", step, val);
    }
    if (run.log) log_step(run, step, r, val, tok_s);
    if (sampling && (step % opt.sample_every == 0 || last)) print_sample(run, step);
    if (saving && ((opt.checkpoint_every > 0 && step % opt.checkpoint_every == 0) || last)) {
      save_checkpoint(run, step);
      last_saved = step;
    }
    if (!last && stop_on_signal(run, stop, step, saving, last_saved, result)) break;
  }
  return ls;
}

// ---- the report ----

// --bench: the median step time, tokens/s, MFU and peak memory (and, with --cp, each rank's
// ring times).
void report_bench(const Run& run, const LoopStats& ls, TrainResult& result) {
  const TrainOptions& opt = run.opt;
  const Model& model = *run.model;
  std::vector<double> timed(ls.step_ms.begin() + std::min<size_t>(opt.bench_warmup, ls.step_ms.size()),
                            ls.step_ms.end());
  if (timed.empty()) timed = ls.step_ms;  // stopped by a signal during the warm-up
  std::sort(timed.begin(), timed.end());
  const double med = timed[timed.size() / 2];
  const double tps = opt.total_batch / (med / 1e3);
  // FLOPs per token, as llm.c: 6N for the matrices + 6*L*C*T for causal attention, times the
  // share a --window leaves (the random tokens of --bench hold almost no end-of-text tokens, so
  // the document mask leaves them whole).
  const double window_share = double(window_pairs(run.T, run.mask.window)) /
                              double(window_pairs(run.T, 0));
  const double flops_tok = 6.0 * model.num_parameters() +
                           6.0 * run.cfg.num_layers * run.cfg.channels * run.T * window_share;
  const double peak = peak_flops(model.device_name());
  // Rank 0's median: the ranks meet in the collectives every step, so all run at one pace.
  const double tps_gpu = tps / run.world;
  if (run.lead)
    std::printf("bench: %s %s attn=%s B=%d T=%d world=%d cp=%d dp=%d | median %.2f ms/step | "
                "%.0f tokens/s (%.0f per GPU) | MFU %s | peak memory %s%s\n", model.device_name(),
                opt.model.c_str(), model.attention_name(), run.B, run.T, run.world, run.grid.cp,
                run.grid.dp, med, tps, tps_gpu,
                peak > 0 ? flashgpt::strformat("%.1f%%", 100 * tps_gpu * flops_tok / peak).c_str() : "n/a",
                human_bytes(model.peak_memory_bytes()).c_str(),
                ls.ring_timed_steps == 0 ? ""
                    : flashgpt::strformat(" | comm_wait_ms=%.1f per step (rank 0)",
                                          ls.ring_times.wait_ms() / ls.ring_timed_steps).c_str());
  // Every rank: where its step went in the ring (the ranks' skew shows as the other's waits).
  if (ls.ring_timed_steps > 0) {
    std::fflush(stdout);
    std::printf("ring: rank %d (cp index %d of %d), per step: %s\n", run.rank, run.grid.cp_index,
                run.grid.cp, ring_times_summary(ls.ring_times, ls.ring_timed_steps).c_str());
    std::fflush(stdout);
  }
  result.tokens_per_s = tps;
}

void report(const Run& run, const LoopStats& ls, TrainResult& result) {
  result.tokens_per_s = ls.timed_s > 0 ? ls.timed_tokens / ls.timed_s : 0;
  result.peak_mem_bytes = run.model->peak_memory_bytes();
  if (run.opt.bench) {
    report_bench(run, ls, result);
  } else if (run.lead) {
    std::printf("done: %d steps, %.0f tokens/s, peak memory %s\n",
                ls.last_step_run - run.first_step + 1, result.tokens_per_s,
                human_bytes(result.peak_mem_bytes).c_str());
  }
}

TrainResult run_train_impl(const TrainOptions& opt, Comms& comms) {
  Run run(opt);
  set_up(run, comms);
  TrainResult result;
  result.first_step = run.first_step;
  const LoopStats ls = run_loop(run, result);
  report(run, ls, result);
  return result;
}

}  // namespace

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
