// export — `flashgpt export --checkpoint M --out DIR --format hf`: the checkpoint as a Hugging
// Face GPT2LMHeadModel (DIR/model.safetensors + DIR/config.json; the layout and what is
// refused: model/hf_gpt2.h), plus the checkpoint's tokenizer.bin copied into DIR so that
// `flashgpt sample --checkpoint DIR` and `train --init DIR` find it. (The tokenizer is ours,
// not a Hugging Face tokenizer.json: transformers gets token ids, not text.)
// It writes over nothing it did not make: an existing model.safetensors must be an earlier
// export's (config.json goes with it), an existing tokenizer.bin must hold the same bytes;
// anything else is refused, naming the file, before the first file is written
// (model/output_files.h, train/run_files.h).
#pragma once
#include <cstdio>

#include "train/options.h"

void run_export(const ExportOptions& opt, FILE* out = stdout);
