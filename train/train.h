// train — the training loop of `flashgpt train`, the same for the CPU and CUDA models.
//
//   for step in 1..steps:
//     lr = warm-up then cosine schedule
//     for each of total_batch / (B*T*dp) micro-batches: forward, backward(1 / micro-batches)
//     reduce_grads (multi-GPU: average over the ranks; the model may start it during the
//     last backward); loss averaged over the ranks
//     norm = global grad norm; scale = min(1, grad_clip / norm); AdamW(lr, scale)
//     print a line (loss, lr, norm, ms, tok/s, ETA); log JSON; eval / sample / checkpoint
//   SIGINT / SIGTERM: the step in progress finishes, a checkpoint is written (with --out) and
//   run_train returns with TrainResult.interrupted set (`flashgpt train` exits 128 + signal).
//   Files around the run (the --out lock, fresh runs, the tokenizer copy, --log): run_files.h.
//   --resume continues the latest checkpoint in --out with its run's settings: resume.h.
//   Multi-GPU (opt.dist.world_size > 1, train/dist.h): only rank 0 prints, logs, samples and
//   writes the model file; every rank writes its optimizer state; an error on any rank is
//   reported as "rank R: cause" after aborting the communicators (the others stop too).
//   Context parallel (--cp N > 1, CUDA only): world = dp x cp (train/dist.h cp_grid); the cp
//   ranks of a dp group read the same (B, T) batch and each model keeps its zigzag rows of it
//   (model/context_parallel.h); micro-batches and tokens/s count each token once (B*T*dp per
//   micro-step); the ring runs on a communicator of its own (split of the world's by dp index);
//   sampling during training is off (the model needs its cp group).
#pragma once
#include <vector>

#include "train/options.h"

struct TrainResult {
  std::vector<float> losses;      // training loss of each step run (resumed runs: from there)
  std::vector<float> val_losses;  // each evaluation
  double tokens_per_s = 0;        // over the run, excluding the first step
  size_t peak_mem_bytes = 0;
  int first_step = 1;
  int interrupted = 0;  // SIGINT or SIGTERM when the run stopped early on a signal, else 0
};

// The step where the cosine decay ends: schedule_steps, or --steps.
int schedule_end(const TrainOptions& opt);
// Learning rate at step (1-based): linear warm-up to lr over `warmup` steps, then cosine decay
// to lr * lr_final_frac at schedule_end(opt), and that final lr after it (a resumed run that
// goes past its first --steps).
float lr_at_step(const TrainOptions& opt, int step);
TrainResult run_train(const TrainOptions& opt);
