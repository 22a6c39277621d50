// export.cpp — see export.h.
#include "train/export.h"

#include "data/files.h"
#include "data/tokenizer.h"
#include "kernels/common.h"
#include "model/checkpoint.h"
#include "model/hf_gpt2.h"
#include "train/run_files.h"

void run_export(const ExportOptions& opt, FILE* out) {
  GPTConfig cfg;
  std::vector<float> params;
  load_any_model(opt.checkpoint, cfg, params);
  const MaskSpec mask = read_any_model_mask(opt.checkpoint);
  CHECK(mask.is_causal(), "export --format hf: '%s' was trained with the mask '%s' (--mask, "
        "--window); GPT2LMHeadModel attends causally over its whole context and would compute "
        "another model; only a causal model without a window exports", opt.checkpoint.c_str(), describe_mask(mask).c_str());
  std::string tok_path = tokenizer_beside(opt.checkpoint);
  int eot = -1;
  if (file_exists(tok_path)) {
    const Tokenizer tok = Tokenizer::load(tok_path);
    CHECK(tok.vocab_size() == cfg.vocab_size, "export: '%s' has %d tokens but the checkpoint's "
          "vocabulary is %d", tok_path.c_str(), tok.vocab_size(), cfg.vocab_size);
    eot = tok.eot_token();
  } else {
    tok_path.clear();
  }
  // Every output is checked before the first is written.
  check_output_path(opt.out_dir + "/model.safetensors", "--out", OutputKind::HfModel);
  check_output_path(opt.out_dir + "/config.json", "--out", OutputKind::HfConfig);
  check_out_tokenizer(opt.out_dir, tok_path, false);
  export_hf_gpt2(opt.out_dir, cfg, params, eot);
  copy_tokenizer_to_out(opt.out_dir, tok_path);
  std::fprintf(out, "export: %s -> %s/model.safetensors + config.json (GPT2LMHeadModel: L=%d C=%d "
               "NH=%d V=%d n_positions=%d, fp32)%s\n", opt.checkpoint.c_str(), opt.out_dir.c_str(),
               cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size, cfg.max_seq_len,
               tok_path.empty() ? "" : " + tokenizer.bin");
}
