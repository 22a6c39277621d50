// resume.cpp — see resume.h.
#include "train/resume.h"

#include <algorithm>
#include <type_traits>

#include "kernels/common.h"
#include "train/train.h"

namespace {

template <typename V>
std::string show(V v) {
  if constexpr (std::is_same_v<V, std::string>) return v;
  else if constexpr (std::is_floating_point_v<V>) return flashgpt::strformat("%g", (double)v);
  else return std::to_string(v);
}

// Resolves one setting of `opt` against the checkpoint's: a flag not given takes `saved` (and
// is listed in *taken); one given with another value is refused with `why`.
class Resolver {
 public:
  Resolver(const TrainOptions& opt, const std::string& state_path) : opt_(opt), path_(state_path) {}

  template <typename V, typename S>
  void setting(const char* flag, V& value, S saved, const char* why) {
    const V want = static_cast<V>(saved);
    if (!opt_.given.count(flag)) {
      value = want;
    } else {
      CHECK(value == want, "--resume: --%s %s differs from the checkpoint's %s ('%s'): %s; drop "
            "--%s", flag, show(value).c_str(), show(want).c_str(), path_.c_str(), why, flag);
    }
    taken += flashgpt::strformat(" --%s %s", flag, show(value).c_str());
  }
  std::string taken;  // " --flag value" of each setting, as the run continues

 private:
  const TrainOptions& opt_;
  const std::string& path_;
};

// What a checkpoint records of its run's settings that --resume keeps.
enum class Kept { batches, schedule };

// The settings of a run that its checkpoint records, each with its flag: visit(flag, the
// option, the state's field, what it belongs to). Recording reads the options into the state;
// resuming reads the state into the options.
template <typename Opt, typename State, typename Visit>
void for_each_setting(Opt& o, State& s, Visit visit) {
  visit("seq-len", o.seq_len, s.T, Kept::batches);
  visit("batch", o.batch, s.B, Kept::batches);
  visit("total-batch", o.total_batch, s.total_batch, Kept::batches);
  visit("seed", o.seed, s.seed, Kept::batches);
  visit("lr", o.lr, s.lr, Kept::schedule);
  visit("warmup", o.warmup, s.warmup, Kept::schedule);
  visit("lr-final-frac", o.lr_final_frac, s.lr_final_frac, Kept::schedule);
  visit("weight-decay", o.weight_decay, s.weight_decay, Kept::schedule);
  visit("grad-clip", o.grad_clip, s.grad_clip, Kept::schedule);
}

}  // namespace

void record_settings(const TrainOptions& opt, TrainState& st) {
  for_each_setting(opt, st, [](const char*, const auto& o, auto& s, Kept) {
    s = static_cast<std::decay_t<decltype(s)>>(o);
  });
  st.data_order = opt.shuffle ? kDataShuffled : kDataInOrder;
  st.steps = opt.steps;
  st.schedule_steps = schedule_end(opt);
  st.attn = opt.attn;
}

TrainOptions resume_options(const TrainOptions& opt, int64_t step, const TrainState& saved,
                            const std::string& state_path, std::string* line) {
  TrainOptions r = opt;
  Resolver res(r, state_path);
  const bool has_schedule = saved.schedule_steps > 0;  // older files do not record it
  for_each_setting(r, saved, [&](const char* flag, auto& o, const auto& s, Kept kept) {
    if (kept == Kept::batches)
      res.setting(flag, o, s, "a resumed run reads the batches its checkpoint's run would have read");
    else if (has_schedule)
      res.setting(flag, o, s, "a resumed run keeps its optimizer and schedule (to train on with "
                  "another, start a new run from the weights with --init)");
  });
  // The mask is the model's (model_N.bin records it; older files: causal, no window).
  const MaskSpec model_mask = read_model_mask(model_checkpoint_path(opt.out_dir, step));
  std::string kind = r.mask.kind ? mask_kind_name(*r.mask.kind) : "";
  int window = r.mask.window.value_or(0);
  const char* why_mask = "a resumed run keeps the mask its model was trained with (to train on "
                         "with another, start a new run from the weights with --init)";
  res.setting("mask", kind, std::string(mask_kind_name(model_mask.kind)), why_mask);
  res.setting("window", window, model_mask.window, why_mask);
  r.mask = MaskFlags{mask_kind_from_name(kind), window};
  if (saved.data_order != 0) {  // older files do not say
    const bool in_order = saved.data_order == kDataInOrder;
    CHECK(!opt.given.count("no-shuffle") || in_order, "--resume: the checkpoint ('%s') was "
          "trained on shuffled data; drop --no-shuffle so the data order goes on as it was",
          state_path.c_str());
    r.shuffle = !in_order;
    if (in_order) res.taken += " --no-shuffle";
  }
  r.schedule_steps = (int)saved.schedule_steps;
  const std::string schedule =
      has_schedule ? ""
                   : flashgpt::strformat("; the checkpoint records no schedule: the flags' --lr %g "
                                         "--warmup %d --lr-final-frac %g --weight-decay %g "
                                         "--grad-clip %g", r.lr, r.warmup, r.lr_final_frac,
                                         r.weight_decay, r.grad_clip);
  // --attn may change (rounding only); not given, the checkpoint's.
  std::string attn = " --attn " + r.attn;
  if (!saved.attn.empty()) {
    if (!opt.given.count("attn")) r.attn = saved.attn;
    attn = " --attn " + r.attn;
    if (r.attn != saved.attn) attn += " (given; the checkpoint's: " + saved.attn + ")";
  }
  // --steps may change: where the run stops. Not given: where the checkpoint's run was to.
  if (!opt.given.count("steps") && saved.steps > 0) {
    CHECK(saved.steps > step, "--resume: the checkpoint in --out '%s' is at step %lld, the last "
          "of its run (--steps %lld); give a larger --steps to train on", opt.out_dir.c_str(),
          (long long)step, (long long)saved.steps);
    r.steps = (int)saved.steps;
  }
  CHECK(r.steps > step, "--resume: the checkpoint in --out '%s' is at step %lld, and --steps %d "
        "asks for no more; raise --steps", opt.out_dir.c_str(), (long long)step, r.steps);
  const int end = schedule_end(r);
  const std::string past =
      r.steps > end ? flashgpt::strformat("; the cosine ends at step %d, steps %d-%d run at lr %g",
                                          end, std::max(end + 1, (int)step + 1), r.steps,
                                          r.lr * r.lr_final_frac)
                    : "";
  *line = flashgpt::strformat("resume: step %lld of %s to step %d, with the checkpoint's "
                              "settings:%s%s%s%s", (long long)step, opt.out_dir.c_str(), r.steps,
                              res.taken.c_str(), attn.c_str(), schedule.c_str(), past.c_str());
  return r;
}

void check_resumed_model(const TrainOptions& opt, const GPTConfig& cfg,
                         const std::string& model_path) {
  auto keep = [&](const char* flag, auto given, auto model) {
    CHECK(!opt.given.count(flag) || given == model, "--resume: --%s %s differs from the model's "
          "%s ('%s'): a resumed run keeps its model; drop --%s", flag, show(given).c_str(),
          show(model).c_str(), model_path.c_str(), flag);
  };
  keep("layers", opt.layers, cfg.num_layers);
  keep("heads", opt.heads, cfg.num_heads);
  keep("kv-heads", opt.kv_heads, cfg.num_kv_heads);
  keep("channels", opt.channels, cfg.channels);
  keep("max-seq-len", opt.max_seq_len, cfg.max_seq_len);
  keep("pos", std::string(pos_name(opt.pos)), std::string(cfg.rope ? "rope" : "learned"));
  if (cfg.rope) keep("rope-theta", opt.rope_theta, cfg.rope_theta);
}
