// export — `flashgpt export --checkpoint M --out DIR --format hf`: the checkpoint as a Hugging
// Face GPT2LMHeadModel (DIR/model.safetensors + DIR/config.json; the layout and what is
// refused: model/hf_gpt2.h), plus the checkpoint's tokenizer.bin copied into DIR so that
// `flashgpt sample --checkpoint DIR` and `train --init DIR` find it. (The tokenizer is ours,
// not a Hugging Face tokenizer.json: transformers gets token ids, not text.)
#pragma once
#include <cstdio>

#include "train/options.h"

void run_export(const ExportOptions& opt, FILE* out = stdout);
