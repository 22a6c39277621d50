// mask.cpp — the host parts of the mask description: names, checks, document starts and the
// work a mask leaves. Definitions and the EOT rule: mask.h.
#include "kernels/attention/mask.h"

#include "kernels/common.h"

const char* mask_kind_name(MaskKind k) { return k == MaskKind::kDocument ? "document" : "causal"; }

MaskKind mask_kind_from_name(const std::string& name) {
  for (MaskKind k : {MaskKind::kCausal, MaskKind::kDocument})
    if (name == mask_kind_name(k)) return k;
  THROW_ERROR("--mask '%s' is unknown; use one of: causal, document", name.c_str());
}

void validate_mask_spec(const MaskSpec& spec, int vocab_size) {
  CHECK(spec.window >= 0, "--window %d is negative; give the number of most recent keys a query "
        "sees, or 0 for no limit", spec.window);
  CHECK(spec.eot >= -1 && spec.eot < vocab_size, "the end-of-text token %d is outside the "
        "vocabulary (%d); the tokenizer does not match the model", spec.eot, vocab_size);
}

std::string describe_mask(const MaskSpec& spec) {
  std::string s = mask_kind_name(spec.kind);
  if (spec.window > 0) s += flashgpt::strformat(", window %d", spec.window);
  return s;
}

std::vector<int> document_starts(const int* tokens, int B, int T, int eot) {
  std::vector<int> start(size_t(B) * T);
  for (int b = 0; b < B; b++) {
    int s = 0;  // the rows before the first EOT continue a document that began before row 0
    for (int t = 0; t < T; t++) {
      if (tokens[size_t(b) * T + t] == eot) s = t;
      start[size_t(b) * T + t] = s;
    }
  }
  return start;
}

AttnMask batch_mask(const MaskSpec& spec, const int* tokens, int B, int T, int vocab_size,
                    std::vector<int>& doc_start) {
  if (spec.kind == MaskKind::kDocument)
    doc_start = document_starts(tokens, B, T, spec.eot_token(vocab_size));
  else
    doc_start.clear();
  return AttnMask{doc_start.empty() ? nullptr : doc_start.data(), spec.window};
}

void validate_mask(const AttnMask& m, int B, int T, const char* who) {
  CHECK(m.window >= 0, "%s: window %d is negative", who, m.window);
  if (!m.doc_start) return;
  for (int b = 0; b < B; b++) {
    const int* d = m.doc_start + size_t(b) * T;
    for (int t = 0; t < T; t++)
      CHECK(d[t] == (t == 0 ? 0 : d[t - 1]) || d[t] == t,
            "internal: %s: doc_start[%d][%d] = %d is not a document start (previous row's %d, "
            "or %d)", who, b, t, d[t], t == 0 ? 0 : d[t - 1], t);
  }
}

int64_t visible_pairs(const AttnMask& m, int B, int T) {
  int64_t pairs = 0;
  for (int b = 0; b < B; b++) {
    const SeqMask s = m.seq(b, T);
    for (int t = 0; t < T; t++) pairs += t - s.lo(t) + 1;
  }
  return pairs;
}

double visited_tile_area(const AttnMask& m, int B, int T, int Br, int Bc) {
  double tiles = 0;
  for (int b = 0; b < B; b++)
    for (int i = 0; i * Br < T; i++) {
      const TileRange r = kv_tiles_for_q_tile(m.seq(b, T), T, Br, Bc, i);
      tiles += r.end - r.begin;
    }
  return tiles * Br * Bc;
}
