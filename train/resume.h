// resume — what `train --resume` continues with. A checkpoint records its run's settings:
// model_N.bin the model, state_N.bin the rest (model/checkpoint.h). Each flag of the resumed
// command either
//   takes the checkpoint's value when it is not given, and is refused (one line naming the flag,
//   its value and the checkpoint's) when it is given with another value:
//     --seq-len --batch --total-batch --seed --no-shuffle       a step's tokens and the data order
//     --lr --warmup --lr-final-frac --weight-decay --grad-clip  the optimizer and its schedule
//     --layers --heads --kv-heads --channels --pos --max-seq-len --rope-theta, and --model
//                                                               the model (model_N.bin)
//     --mask --window                                           the mask it is trained with
//                                                               (model_N.bin)
//   or may change:
//     --steps   where the run stops; not given: where the checkpoint's run was to stop. The
//               schedule stays the first run's: its cosine ends at the step where that run's
//               --steps put it, and steps past it run at the final lr (lr x --lr-final-frac),
//               as nanoGPT runs on past its lr_decay_iters
//     --attn    not given: the checkpoint's; another backend changes only the rounding
//     --device --deterministic --tune-matmul --no-cuda-graphs --recompute --classifier-chunk,
//               and what only writes or prints
//               (--eval-*, --sample-*, --checkpoint-every, --log, --quiet)
// World size, --zero and --cp must be the checkpoint's (train/dist.h check_resume_world). To
// train on with another schedule, start a new run from the weights (--init model_N.bin: a fresh
// optimizer). A checkpoint written before the schedule was recorded resumes with the flags'
// schedule, and the line says so.
#pragma once
#include <string>

#include "model/checkpoint.h"
#include "model/config.h"
#include "train/options.h"

// Into the state a checkpoint writes: the run's settings that --resume keeps.
void record_settings(const TrainOptions& opt, TrainState& st);
// opt with the settings of the checkpoint at `step` whose rank-0 state header is `saved` (read
// from state_path); throws naming the first given flag that differs. *line: the one line that
// says what the run continues with.
TrainOptions resume_options(const TrainOptions& opt, int64_t step, const TrainState& saved,
                            const std::string& state_path, std::string* line);
// Each model flag given (--layers --heads --kv-heads --channels --max-seq-len --pos
// --rope-theta) must be the model's; else one line naming it. (--model: train.cpp compares the
// preset with the model, as for --init.)
void check_resumed_model(const TrainOptions& opt, const GPTConfig& cfg,
                         const std::string& model_path);
