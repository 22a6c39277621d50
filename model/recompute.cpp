// recompute.cpp — see recompute.h.
#include "model/recompute.h"

#include "kernels/common.h"

namespace {

constexpr Recompute kAll[] = {Recompute::kNone, Recompute::kGelu, Recompute::kLayerButAttn,
                              Recompute::kLayer};

}  // namespace

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kGelu: return "gelu";
    case Recompute::kLayerButAttn: return "layer-but-attn";
    case Recompute::kLayer: return "layer";
  }
  return "?";
}

std::string recompute_names_list() {
  std::string s;
  for (Recompute r : kAll) s += std::string(s.empty() ? "" : ", ") + recompute_name(r);
  return s;
}

Recompute parse_recompute(const std::string& name) {
  for (Recompute r : kAll)
    if (name == recompute_name(r)) return r;
  THROW_ERROR("--recompute '%s' is unknown; use one of %s", name.c_str(), recompute_names_list().c_str());
}

RecomputeDepths recompute_depths(Recompute r, int L) {
  switch (r) {
    case Recompute::kNone: return {L, L, L};
    case Recompute::kGelu: return {L, L, 1};
    case Recompute::kLayerButAttn: return {1, L, 1};
    case Recompute::kLayer: return {1, 1, 1};
  }
  return {L, L, L};
}

int attention_forwards_per_step(Recompute r) { return r == Recompute::kLayer ? 2 : 1; }
