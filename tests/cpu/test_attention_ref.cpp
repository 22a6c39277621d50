// test_attention_ref — the CPU attention oracles (kernels/attention/attention_ref.{h,cpp}).
//
//   AttentionRef.NaiveForwardMatchesBruteForce   naive out and P vs a direct triple loop (double),
//                                                causal and masked
//   AttentionRef.NaiveBackwardFiniteDifferences  naive dq, dk, dv vs central differences (double)
//   AttentionRef.FlashBackwardFiniteDifferences  flash dq, dk, dv vs central differences (double)
//   AttentionRef.FlashLseIsLogSumExp             flash and flash1 out and LSE vs the brute force,
//                                                causal and masked
//   AttentionRef.NaiveVsFlashDouble/Float        out and dqkv over many shapes and tile sizes
//   AttentionRef.Flash1*                         the same checks for flash1 (FA1 loop order), plus
//                                                flash1 vs flash (causal and masked)
//   AttentionRef.Masked*                         under document masks and sliding windows
//                                                (mask.h): every order's backward vs central
//                                                differences, naive vs flash vs flash1
//   AttentionRef.MaskThatHidesNothingIsCausal    no EOT and a window >= T equal the causal {}
//   AttentionRef.FlashAllocatesNothingTxT        heap bytes of flash at T = 256 vs T = 4096
//   AttentionRef.Registry, BadShapeThrows        make_cpu_attention, names, errors
// Masks: documents of length 1, one document spanning the window, documents that start
// mid-window and cross or fill tile boundaries, random documents; windows of 1, tile size +- 1,
// > T and random; ragged T; GQA.
//
// Every check prints its error and its tolerance. Outputs are poisoned with NaN before each
// run, so an element left unwritten fails the check. Inputs are random from the base seed
// (tests/test_common.h: FLASHGPT_SEED=<n> repeats a run).
// One file of over 600 lines: every check shares the helpers below (inputs, poisoning, the
// finite-difference and sweep drivers), and the heap probe replaces the binary's global
// operator new, which can be defined only once.
//
// Run: make test-cpu, or alone:
//   g++ -std=c++17 -O2 -fopenmp -Wall -Wextra -I. kernels/attention/attention_ref.cpp
//       tests/cpu/test_attention_ref.cpp tests/main.cpp -lgtest -lpthread -o /tmp/test_attn
//   /tmp/test_attn --gtest_filter='AttentionRef*'
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention_ref.h"
#include "kernels/attention/mask.h"
#include "kernels/common.h"
#include "tests/cpu/ref_check.h"
#include "tests/test_common.h"

// ---------------------------------------------------------------------------------------------
// Heap probe: global operator new/delete replaced by malloc/free, counting the bytes requested
// while `on`. Used only by FlashAllocatesNothingTxT; off, it is a plain malloc wrapper.
// (operator new[] and the nothrow forms forward to these by default.)
namespace heap_probe {
std::atomic<bool> on{false};
std::atomic<size_t> total{0}, largest{0};
void reset() { total = 0, largest = 0; }
}  // namespace heap_probe

// noinline: inlined into gtest's new/delete pairs, GCC's -Wmismatched-new-delete misfires.
__attribute__((noinline)) void* operator new(std::size_t n) {
  if (heap_probe::on.load(std::memory_order_relaxed)) {
    heap_probe::total += n;
    size_t cur = heap_probe::largest.load();
    while (n > cur && !heap_probe::largest.compare_exchange_weak(cur, n)) {
    }
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

// ---------------------------------------------------------------------------------------------
// helpers

size_t qkv_size(const AttnShape& s) { return size_t(s.B) * s.T * (s.NH + 2 * s.NKV) * s.HS; }
size_t out_size(const AttnShape& s) { return size_t(s.B) * s.T * s.NH * s.HS; }
size_t lse_size(const AttnShape& s) { return size_t(s.B) * s.NH * s.T; }
size_t p_size(const AttnShape& s) { return lse_size(s) * s.T; }

std::string str(const AttnShape& s) {
  return flashgpt::strformat("B=%d T=%d NH=%d NKV=%d HS=%d", s.B, s.T, s.NH, s.NKV, s.HS);
}

// Fresh inputs for every check: one generator for the file, from the base seed.
std::mt19937_64& rng() {
  return iteration_rng(0x61747472ull);
}

// N(0, 1) everywhere; query and key heads scaled by `amp` (amp = 3 gives scores with std ~9,
// so the softmax is peaked and the running max m_i changes from tile to tile).
template <typename real>
std::vector<real> random_qkv(const AttnShape& s, double amp) {
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<real> x(qkv_size(s));
  const size_t H3 = s.NH + 2 * s.NKV;
  for (size_t i = 0; i < x.size(); i++) {
    const size_t head = (i / s.HS) % H3;
    x[i] = real(n(rng()) * (head < size_t(s.NH + s.NKV) ? amp : 1.0));
  }
  return x;
}
template <typename real>
std::vector<real> random_vec(size_t count) {
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<real> x(count);
  for (auto& v : x) v = real(n(rng()));
  return x;
}
template <typename real>
std::vector<real> poisoned(size_t count) {
  return std::vector<real>(count, std::numeric_limits<real>::quiet_NaN());
}
template <typename to, typename from>
std::vector<to> convert(const std::vector<from>& x) {
  return std::vector<to>(x.begin(), x.end());
}

// Relative L2 error ||got - ref|| / max(||ref||, floor sqrt(n)) and max |got - ref|. NaN
// anywhere gives NaN, which fails every `<=` check. floor: the magnitude below which an element's
// rounding error no longer shrinks with it (0: a plain relative error).
struct Err {
  double rel = 0, max_abs = 0;
};
template <typename A, typename B>
Err compare(const A* got, const B* ref, size_t n, double floor = 0) {
  double num = 0, den = 0, mx = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
    mx = std::isnan(d) ? d : std::max(mx, std::fabs(d));
    if (std::isnan(d)) break;
  }
  Err e;
  e.rel = std::isnan(mx) ? mx : std::sqrt(num / std::max({den, double(n) * floor * floor, 1e-300}));
  e.max_abs = mx;
  return e;
}

// Prints one line and checks rel <= tol.
void expect_close(const char* what, const std::string& ctx, Err e, double tol) {
  std::printf("  %-8s %-44s rel %.2e  max %.2e  tol %.0e (%5.1f%% of tol)\n", what, ctx.c_str(),
              e.rel, e.max_abs, tol, 100.0 * e.rel / tol);
  EXPECT_LE(e.rel, tol) << what << " " << ctx << " (max abs " << e.max_abs << ")";
}

// A mask with the storage for its document starts.
struct MaskCase {
  std::string name;            // "causal", "len-1 docs W=0", ...
  std::vector<int> doc_start;  // (B, T); empty: no documents
  int window = 0;
  AttnMask mask() const { return AttnMask{doc_start.empty() ? nullptr : doc_start.data(), window}; }
  // The definition, from the document starts: key u visible to query t of sequence b.
  bool visible(int b, int T, int t, int u) const {
    const int d = doc_start.empty() ? 0 : doc_start[size_t(b) * T + t];
    return u <= t && u >= d && (window == 0 || t - u < window);
  }
};

// Document layouts of B sequences of T rows (EOT rows marked 1 in a token window), each
// sequence drawn afresh: "one" (no EOT: one document spans the window), "len1" (every row an
// EOT: documents of length 1), "mid" (a few EOTs, none at row 0: the window starts
// mid-document), "edges" (EOTs at and around multiples of Bc: documents crossing and filling
// tile boundaries), "dense" (an EOT at every row with probability 0.3).
const char* const kLayouts[] = {"one", "len1", "mid", "edges", "dense"};
MaskCase mask_case(const std::string& layout, int window, int B, int T, int Bc) {
  std::vector<int> tok(size_t(B) * T, 0);
  for (int b = 0; b < B; b++) {
    int* row = &tok[size_t(b) * T];
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int t = 0; t < T; t++) {
      if (layout == "len1") row[t] = 1;
      if (layout == "mid") row[t] = t > 0 && u(rng()) < 2.5 / T;
      if (layout == "dense") row[t] = u(rng()) < 0.3;
    }
    if (layout == "edges")  // the k-th boundary's EOT one row before, at, or one row after it
      for (int k = 1; k * Bc - 1 < T; k++) {
        const int r = k * Bc + (k + b) % 3 - 1;
        if (r > 0 && r < T) row[r] = 1;
      }
  }
  MaskCase m;
  m.name = flashgpt::strformat("%s docs W=%d", layout.c_str(), window);
  m.doc_start = document_starts(tok.data(), B, T, 1);
  m.window = window;
  return m;
}

// Independent reference, written as directly as possible: out and lse by the formula, over the
// keys the mask case's definition makes visible (mc == nullptr: causal).
void brute_force(std::vector<double>& out, std::vector<double>& lse, std::vector<double>& P,
                 const std::vector<double>& qkv, const AttnShape& s,
                 const MaskCase* mc = nullptr) {
  const int H3 = s.NH + 2 * s.NKV;
  auto at = [&](int b, int t, int head, int d) {
    return qkv[((size_t(b) * s.T + t) * H3 + head) * s.HS + d];
  };
  out.assign(out_size(s), 0.0);
  lse.assign(lse_size(s), 0.0);
  P.assign(p_size(s), 0.0);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.NH; h++) {
      const int kv = h / (s.NH / s.NKV);
      for (int t = 0; t < s.T; t++) {
        auto visible = [&](int u) { return mc ? mc->visible(b, s.T, t, u) : u <= t; };
        std::vector<double> sc(t + 1, -INFINITY);
        double mx = -INFINITY;
        for (int u = 0; u <= t; u++) {
          if (!visible(u)) continue;
          double acc = 0;
          for (int d = 0; d < s.HS; d++) acc += at(b, t, h, d) * at(b, u, s.NH + kv, d);
          sc[u] = acc / std::sqrt(double(s.HS));
          mx = std::max(mx, sc[u]);
        }
        double sum = 0;
        for (int u = 0; u <= t; u++) sum += visible(u) ? std::exp(sc[u] - mx) : 0.0;
        const double L = mx + std::log(sum);
        const size_t row = (size_t(b) * s.NH + h) * s.T + t;
        lse[row] = L;
        for (int u = 0; u <= t; u++) {
          if (!visible(u)) continue;
          const double p = std::exp(sc[u] - L);
          P[row * s.T + u] = p;
          for (int d = 0; d < s.HS; d++)
            out[((size_t(b) * s.T + t) * s.NH + h) * s.HS + d] +=
                p * at(b, u, s.NH + s.NKV + kv, d);
        }
      }
    }
}

// ---------------------------------------------------------------------------------------------
// running any of the oracles

struct Tiles {
  int Br, Bc;                           // Br = 0: naive
  FlashOrder order = FlashOrder::kFA2;  // kFA1: flash1's loop order
  std::string name() const {
    const char* fa = order == FlashOrder::kFA1 ? "fa1" : "fa2";
    return Br == 0 ? "naive" : flashgpt::strformat("%s Br=%d Bc=%d", fa, Br, Bc);
  }
};

// saved: P (naive) or LSE.
template <typename real>
void forward_any(std::vector<real>& out, std::vector<real>& saved, const std::vector<real>& qkv,
                 const AttnShape& s, Tiles tl, const AttnMask& mask) {
  if (tl.Br == 0)
    attention_naive_forward_ref(out.data(), saved.data(), qkv.data(), s, mask);
  else
    attention_flash_forward_ref(out.data(), saved.data(), qkv.data(), s, tl.Br, tl.Bc, mask,
                                tl.order);
}
template <typename real>
void backward_any(std::vector<real>& dqkv, const std::vector<real>& dout,
                  const std::vector<real>& qkv, const std::vector<real>& out,
                  const std::vector<real>& saved, const AttnShape& s, Tiles tl,
                  const AttnMask& mask) {
  if (tl.Br == 0)
    attention_naive_backward_ref(dqkv.data(), dout.data(), qkv.data(), saved.data(), s, mask);
  else
    attention_flash_backward_ref(dqkv.data(), dout.data(), qkv.data(), out.data(), saved.data(),
                                 s, tl.Br, tl.Bc, mask, tl.order);
}
size_t saved_size(const AttnShape& s, Tiles tl) {
  return tl.Br == 0 ? p_size(s) : lse_size(s);
}

// ---------------------------------------------------------------------------------------------
// finite differences (double): loss = sum(out o W), so dL/dqkv is backward with dout = W.

void finite_difference_check(const AttnShape& s, Tiles tl, const MaskCase* mc = nullptr) {
  const AttnMask mask = mc ? mc->mask() : AttnMask{};
  std::vector<double> qkv = random_qkv<double>(s, 1.5), W = random_vec<double>(out_size(s));
  std::vector<double> out = poisoned<double>(out_size(s));
  std::vector<double> saved = poisoned<double>(saved_size(s, tl));
  std::vector<double> dqkv = poisoned<double>(qkv_size(s));
  forward_any(out, saved, qkv, s, tl, mask);
  backward_any(dqkv, W, qkv, out, saved, s, tl, mask);

  // d(sum(out o W))/dqkv by central differences (ref_check.h, eps 1e-6).
  const std::vector<double> num = ref_check::numerical_grad(qkv, W, [&] {
    std::vector<double> o(out_size(s)), sv(saved.size());
    forward_any(o, sv, qkv, s, tl, mask);
    return o;
  });
  // Split into the q, k and v parts of dqkv so each gradient is checked on its own.
  const int H3 = s.NH + 2 * s.NKV;
  const char* names[3] = {"dq", "dk", "dv"};
  const int lo[3] = {0, s.NH, s.NH + s.NKV}, hi[3] = {s.NH, s.NH + s.NKV, H3};
  for (int part = 0; part < 3; part++) {
    std::vector<double> got, ref;
    for (size_t i = 0; i < qkv.size(); i++) {
      const int head = int((i / s.HS) % H3);
      if (head >= lo[part] && head < hi[part]) got.push_back(dqkv[i]), ref.push_back(num[i]);
    }
    // Central differences with eps = 1e-6 in double: truncation ~eps^2 = 1e-12, rounding
    // ~1e-16 / eps = 1e-10 (relative). 1e-7 leaves room, and any real bug is O(1).
    const std::string ctx = str(s) + " " + tl.name() + (mc ? " " + mc->name : "");
    double ref_max = 0;
    for (double r : ref) ref_max = std::max(ref_max, std::fabs(r));
    if (ref_max == 0) {
      // Every row sees only itself (T = 1, documents of length 1, window 1): a softmax over one
      // key is constant, so dq and dk are exactly zero; relative error is meaningless, check
      // the absolute (rounding, with FMA contraction, gives ~1e-16).
      Err e = compare(got.data(), ref.data(), got.size());
      std::printf("  %-8s %-44s max %.2e  tol 1e-12 (expected 0)\n", names[part], ctx.c_str(),
                  e.max_abs);
      EXPECT_LE(e.max_abs, 1e-12) << names[part] << " " << ctx;
      continue;
    }
    expect_close(names[part], ctx, compare(got.data(), ref.data(), got.size()), 1e-7);
  }
}

const AttnShape kFdShapes[] = {
    {1, 1, 2, 1, 4},  // T = 1, multi-query
    {2, 5, 4, 2, 3},  // GQA 2:1, odd HS
    {1, 7, 4, 1, 4},  // multi-query 4:1, ragged T
    {2, 6, 3, 3, 5},  // NH not a power of two, plain MHA
};

// ---------------------------------------------------------------------------------------------
// naive vs flash over many shapes and tile sizes

struct Case {
  AttnShape s;
  int Br, Bc;
  double amp;
};

// Every T x tile pair x HS (7 x 6 x 4 = 168 cases). B, the GQA ratio NH/NKV and NKV rotate, so
// each ratio (1, 2, 4), B (1, 2, 3) and NH that is not a power of two (3, 6) meets many of
// them; every other case has peaked scores (amp = 3).
std::vector<Case> sweep_cases() {
  const int Ts[] = {1, 2, 17, 100, 127, 128, 256};
  const int HSs[] = {8, 16, 32, 64};
  const int tiles[][2] = {{1, 1}, {4, 7}, {16, 16}, {32, 64}, {64, 32}, {64, 64}};
  const int groups[] = {1, 2, 4};
  const int nkvs[] = {3, 1, 2, 1, 3};
  std::vector<Case> cases;
  int n = 0;
  for (int T : Ts)
    for (const auto& tl : tiles)
      for (int HS : HSs) {
        int group = groups[n % 3], NKV = nkvs[n % 5], B = 1 + n % 3;
        // Runtime (2-core CI): B * NH <= 8 at T >= 100 and <= 4 at T = 256; the work is T^2.
        const int cap = T >= 200 ? 4 : T >= 100 ? 8 : 1 << 20;
        while (B > 1 && B * NKV * group > cap) B--;
        while (NKV > 1 && B * NKV * group > cap) NKV--;
        cases.push_back({{B, T, NKV * group, NKV, HS}, tl[0], tl[1], n % 2 ? 3.0 : 1.0});
        n++;
      }
  return cases;
}

// Tolerances, relative L2. Both paths compute in double, so in double they differ only by the
// order of summation: ~1e-15 observed, 1e-12 allowed. In float they differ by the fp32 rounding
// of what they store and reload: naive stores P in fp32; flash stores out and LSE in fp32 and
// recomputes P = exp(S - LSE) in the backward (|LSE| up to ~40 with amp = 3: ~40 fp32 ulps in
// the exponent). Observed: out bit-identical (both round the same double), dqkv <= ~6e-7
// (5 ulps relative); 1e-5 allowed. A real bug (mask off by one, a skipped tile, a missing
// rescale, a wrong kv head) gives >= 1e-3.
template <typename real>
struct Tol;
template <>
struct Tol<double> {
  static constexpr double out = 1e-12, dqkv = 1e-12;
  static constexpr const char* name = "double";
};
template <>
struct Tol<float> {
  static constexpr double out = 1e-5, dqkv = 1e-5;
  static constexpr const char* name = "float";
};

// The mask of sweep case n (masked sweeps): the layouts rotate, and the windows 0, 1, Bc - 1,
// Bc + 1, > T and a random one rotate against them.
MaskCase sweep_mask(int n, const Case& c) {
  const int T = c.s.T;
  const int windows[] = {0, 1, c.Bc - 1, c.Bc + 1, T + 3,
                         1 + int(rng()() % uint64_t(T + 1))};
  return mask_case(kLayouts[n % 5], windows[(n / 5) % 6], c.s.B, T, c.Bc);
}

// naive against the flash references of `orders`, case by case (failures name the case); the
// output is one line per T and order with the worst case of that T, to keep the log short.
// masked: each case under sweep_mask; else causal.
template <typename real>
void naive_vs_flash_sweep(const std::vector<FlashOrder>& orders, bool masked) {
  struct Worst {
    Err e;
    std::string ctx;
  };
  std::vector<Case> cases = sweep_cases();
  for (size_t k = 0; k < cases.size();) {
    const int T = cases[k].s.T;
    std::vector<Worst> w_out(orders.size()), w_dqkv(orders.size());
    int count = 0;
    for (; k < cases.size() && cases[k].s.T == T; k++, count++) {
      const Case& c = cases[k];
      const AttnShape& s = c.s;
      const MaskCase mc = masked ? sweep_mask(int(k), c) : MaskCase{"causal", {}, 0};
      const AttnMask mask = mc.mask();
      std::vector<real> qkv = random_qkv<real>(s, c.amp), dout = random_vec<real>(out_size(s));
      std::vector<real> out_n = poisoned<real>(out_size(s)), P = poisoned<real>(p_size(s));
      std::vector<real> dqkv_n = poisoned<real>(qkv_size(s));
      forward_any(out_n, P, qkv, s, Tiles{0, 0}, mask);
      backward_any(dqkv_n, dout, qkv, out_n, P, s, Tiles{0, 0}, mask);
      for (size_t o = 0; o < orders.size(); o++) {
        const Tiles tl{c.Br, c.Bc, orders[o]};
        const std::string ctx = str(s) + " " + tl.name() + flashgpt::strformat(" amp=%g", c.amp) +
                                (masked ? " " + mc.name : "");
        std::vector<real> out_f = poisoned<real>(out_size(s)), lse = poisoned<real>(lse_size(s));
        std::vector<real> dqkv_f = poisoned<real>(qkv_size(s));
        forward_any(out_f, lse, qkv, s, tl, mask);
        backward_any(dqkv_f, dout, qkv, out_f, lse, s, tl, mask);
        const Err eo = compare(out_f.data(), out_n.data(), out_f.size());
        const Err ed = compare(dqkv_f.data(), dqkv_n.data(), dqkv_f.size());
        EXPECT_LE(eo.rel, Tol<real>::out) << Tol<real>::name << " out " << ctx;
        EXPECT_LE(ed.rel, Tol<real>::dqkv) << Tol<real>::name << " dqkv " << ctx;
        // NaN: worst
        if (w_out[o].ctx.empty() || !(eo.rel <= w_out[o].e.rel)) w_out[o] = {eo, ctx};
        if (w_dqkv[o].ctx.empty() || !(ed.rel <= w_dqkv[o].e.rel)) w_dqkv[o] = {ed, ctx};
      }
    }
    for (size_t o = 0; o < orders.size(); o++)
      std::printf("  %s T=%d, %d cases: worst out rel %.2e (%.1f%% of tol %.0e) [%s]\n"
                  "  %*s worst dqkv rel %.2e (%.1f%% of tol %.0e) [%s]\n",
                  Tol<real>::name, T, count, w_out[o].e.rel, 100 * w_out[o].e.rel / Tol<real>::out,
                  Tol<real>::out, w_out[o].ctx.c_str(), int(std::strlen(Tol<real>::name)) + 15, "",
                  w_dqkv[o].e.rel, 100 * w_dqkv[o].e.rel / Tol<real>::dqkv, Tol<real>::dqkv,
                  w_dqkv[o].ctx.c_str());
  }
}

// ---------------------------------------------------------------------------------------------
// tests

TEST(AttentionRef, NaiveBackwardFiniteDifferences) {
  for (const AttnShape& s : kFdShapes) finite_difference_check(s, {0, 0});
}

TEST(AttentionRef, FlashBackwardFiniteDifferences) {
  // Ragged tiles (T not a multiple of Br or Bc, Br != Bc) and single-row tiles.
  for (const AttnShape& s : kFdShapes) {
    finite_difference_check(s, {2, 3});
    finite_difference_check(s, {1, 1});
  }
}

// out and LSE of flash (both orders) against the brute force, in double and in float, causal
// or under the mask of each layout (mc == nullptr: causal).
// The LSE is compared with a floor of 1: a score s = scale q.k carries a rounding error of eps
// times its terms (scale sum |q_i k_i|, about 10 here), not of eps |s|, so an LSE near 0 has no
// relative accuracy to check. At T = 1 the LSE is that one score; with no floor, |s| = 1e-3 on
// one seed in ~25 read 3.0e-13 > 1e-13 from an error of 3.5e-16.
void check_lse_against_brute_force(const AttnShape& s, int Br, int Bc, const MaskCase* mc) {
  const AttnMask mask = mc ? mc->mask() : AttnMask{};
  std::vector<double> qkv = random_qkv<double>(s, 3.0);
  std::vector<double> out_b, lse_b, P_b;
  brute_force(out_b, lse_b, P_b, qkv, s, mc);
  // float: inputs rounded to fp32 first, so the brute force sees the same numbers.
  std::vector<float> qkv_f = convert<float>(qkv);
  std::vector<double> out_bf, lse_bf, P_bf;
  brute_force(out_bf, lse_bf, P_bf, convert<double>(qkv_f), s, mc);
  for (FlashOrder order : {FlashOrder::kFA2, FlashOrder::kFA1}) {
    const Tiles tl{Br, Bc, order};
    const std::string ctx = str(s) + " " + tl.name() + (mc ? " " + mc->name : "");
    std::vector<double> out = poisoned<double>(out_size(s)), lse = poisoned<double>(lse_size(s));
    forward_any(out, lse, qkv, s, tl, mask);
    expect_close("lse f64", ctx, compare(lse.data(), lse_b.data(), lse.size(), 1.0), 1e-13);
    expect_close("out f64", ctx, compare(out.data(), out_b.data(), out.size()), 1e-13);
    std::vector<float> out_f = poisoned<float>(out_size(s)), lse_f = poisoned<float>(lse_size(s));
    forward_any(out_f, lse_f, qkv_f, s, tl, mask);
    expect_close("lse f32", ctx, compare(lse_f.data(), lse_bf.data(), lse_f.size(), 1.0), 1e-6);
    expect_close("out f32", ctx, compare(out_f.data(), out_bf.data(), out_f.size()), 1e-6);
  }
}

TEST(AttentionRef, NaiveVsFlashDouble) { naive_vs_flash_sweep<double>({FlashOrder::kFA2}, false); }
TEST(AttentionRef, NaiveVsFlashFloat) { naive_vs_flash_sweep<float>({FlashOrder::kFA2}, false); }

// flash1 (FA1 loop order): the same checks as flash. Same arithmetic per element in a different
// loop order, so the same tolerances.
TEST(AttentionRef, Flash1BackwardFiniteDifferences) {
  for (const AttnShape& s : kFdShapes) {
    finite_difference_check(s, {2, 3, FlashOrder::kFA1});
    finite_difference_check(s, {3, 2, FlashOrder::kFA1});
    finite_difference_check(s, {1, 1, FlashOrder::kFA1});
  }
}
TEST(AttentionRef, Flash1VsNaiveDouble) { naive_vs_flash_sweep<double>({FlashOrder::kFA1}, false); }
TEST(AttentionRef, Flash1VsNaiveFloat) { naive_vs_flash_sweep<float>({FlashOrder::kFA1}, false); }

// flash1 and flash compute each output element with the same double arithmetic in a different
// tile order: out and LSE agree to double rounding (observed bit-identical in float), and
// flash1 saves LSE exactly as flash does, so either's LSE feeds either backward. Causal and
// under a document mask with a window.
TEST(AttentionRef, Flash1MatchesFlash) {
  struct {
    AttnShape s;
    int Br, Bc;
  } cases[] = {{{1, 1, 1, 1, 8}, 4, 4},      {{2, 45, 6, 2, 16}, 8, 5},
               {{1, 130, 4, 4, 32}, 32, 64}, {{3, 64, 4, 1, 16}, 64, 16},
               {{1, 99, 2, 2, 8}, 7, 32}};
  for (const auto& c : cases)
    for (bool masked : {false, true}) {
      const AttnShape& s = c.s;
      const MaskCase mc = masked ? mask_case("dense", c.Bc + 1, s.B, s.T, c.Bc)
                                 : MaskCase{"causal", {}, 0};
      const AttnMask mask = mc.mask();
      const std::string ctx = str(s) + flashgpt::strformat(" Br=%d Bc=%d ", c.Br, c.Bc) + mc.name;
      const Tiles fa1{c.Br, c.Bc, FlashOrder::kFA1}, fa2{c.Br, c.Bc, FlashOrder::kFA2};
      std::vector<float> qkv = random_qkv<float>(s, 3.0), dout = random_vec<float>(out_size(s));
      std::vector<float> out1 = poisoned<float>(out_size(s)), lse1 = poisoned<float>(lse_size(s));
      std::vector<float> out2 = poisoned<float>(out_size(s)), lse2 = poisoned<float>(lse_size(s));
      std::vector<float> d1 = poisoned<float>(qkv_size(s)), d2 = poisoned<float>(qkv_size(s));
      forward_any(out1, lse1, qkv, s, fa1, mask);
      forward_any(out2, lse2, qkv, s, fa2, mask);
      // Cross-feed the saved LSE: flash1's backward on flash's forward state and vice versa.
      backward_any(d1, dout, qkv, out2, lse2, s, fa1, mask);
      backward_any(d2, dout, qkv, out1, lse1, s, fa2, mask);
      expect_close("out", ctx, compare(out1.data(), out2.data(), out1.size()), 1e-6);
      expect_close("lse", ctx, compare(lse1.data(), lse2.data(), lse1.size()), 1e-6);
      expect_close("dqkv", ctx, compare(d1.data(), d2.data(), d1.size()), 1e-5);
    }
}

// ---------------------------------------------------------------------------------------------
// masks (mask.h)

// The masks of the finite-difference checks, on sequences of T rows with K/V tiles of Bc:
// documents of length 1 (every row sees only itself), one document spanning the window under
// windows 2 and > T, documents starting mid-window under windows 0, 1, Bc - 1 and Bc + 1,
// documents at tile edges, dense documents.
std::vector<MaskCase> fd_masks(int B, int T, int Bc) {
  return {mask_case("len1", 0, B, T, Bc),      mask_case("one", 2, B, T, Bc),
          mask_case("one", T + 3, B, T, Bc),   mask_case("mid", 0, B, T, Bc),
          mask_case("mid", 1, B, T, Bc),       mask_case("mid", Bc - 1, B, T, Bc),
          mask_case("mid", Bc + 1, B, T, Bc),  mask_case("edges", 0, B, T, Bc),
          mask_case("dense", 3, B, T, Bc)};
}

// Shapes with room for several documents: ragged T, GQA 2:1 and 4:1, odd HS.
const AttnShape kMaskedFdShapes[] = {{2, 9, 4, 2, 3}, {1, 11, 4, 1, 4}};

// Causal and under every mask of the finite-difference checks.
TEST(AttentionRef, NaiveForwardMatchesBruteForce) {
  for (const AttnShape& s : {AttnShape{1, 1, 1, 1, 8}, AttnShape{2, 19, 6, 3, 8},
                             AttnShape{1, 33, 4, 1, 16}}) {
    std::vector<MaskCase> masks = fd_masks(s.B, s.T, 4);
    masks.insert(masks.begin(), MaskCase{"causal", {}, 0});
    for (const MaskCase& mc : masks) {
      const std::string ctx = str(s) + " " + mc.name;
      std::vector<double> qkv = random_qkv<double>(s, 2.0);
      std::vector<double> out = poisoned<double>(out_size(s)), P = poisoned<double>(p_size(s));
      attention_naive_forward_ref(out.data(), P.data(), qkv.data(), s, mc.mask());
      std::vector<double> out_b, lse_b, P_b;
      brute_force(out_b, lse_b, P_b, qkv, s, &mc);
      expect_close("out", ctx, compare(out.data(), out_b.data(), out.size()), 1e-13);
      // P includes the zeros outside each row's visible keys (poisoned before, so they must be
      // written).
      expect_close("P", ctx, compare(P.data(), P_b.data(), P.size()), 1e-13);
    }
  }
}

// Causal and under every layout with windows 0, 1, Bc - 1, Bc + 1 and > T.
TEST(AttentionRef, FlashLseIsLogSumExp) {
  struct {
    AttnShape s;
    int Br, Bc;
  } cases[] = {{{1, 1, 1, 1, 8}, 4, 4},
               {{2, 45, 6, 2, 16}, 8, 5},
               {{1, 130, 4, 4, 32}, 32, 64},
               {{1, 130, 4, 4, 32}, 32, 16},
               {{1, 64, 2, 1, 8}, 16, 16}};
  for (const auto& c : cases) {
    check_lse_against_brute_force(c.s, c.Br, c.Bc, nullptr);
    for (const char* layout : kLayouts)
      for (int W : {0, 1, c.Bc - 1, c.Bc + 1, c.s.T + 1}) {
        const MaskCase mc = mask_case(layout, W, c.s.B, c.s.T, c.Bc);
        check_lse_against_brute_force(c.s, c.Br, c.Bc, &mc);
      }
  }
}

TEST(AttentionRef, MaskedBackwardFiniteDifferences) {
  // naive; FA2 with ragged tiles (Br != Bc) and single rows; FA1 with ragged tiles.
  const Tiles tiles[] = {{0, 0}, {2, 3}, {1, 1}, {3, 2, FlashOrder::kFA1}};
  for (const AttnShape& s : kMaskedFdShapes)
    for (const Tiles& tl : tiles)
      for (const MaskCase& mc : fd_masks(s.B, s.T, tl.Br == 0 ? 3 : tl.Bc))
        finite_difference_check(s, tl, &mc);
}

TEST(AttentionRef, MaskedNaiveVsFlashDouble) {
  naive_vs_flash_sweep<double>({FlashOrder::kFA2, FlashOrder::kFA1}, true);
}
TEST(AttentionRef, MaskedNaiveVsFlashFloat) {
  naive_vs_flash_sweep<float>({FlashOrder::kFA2, FlashOrder::kFA1}, true);
}

// A mask that changes nothing is the causal mask: documents that never start (no EOT) and a
// window >= T give exactly the results of {}, in every oracle.
TEST(AttentionRef, MaskThatHidesNothingIsCausal) {
  const AttnShape s{2, 37, 4, 2, 8};
  const std::vector<float> qkv = random_qkv<float>(s, 2.0), dout = random_vec<float>(out_size(s));
  const MaskCase none = mask_case("one", s.T, s.B, s.T, 8);
  for (const Tiles& tl : {Tiles{0, 0}, Tiles{8, 8}, Tiles{5, 8, FlashOrder::kFA1}}) {
    std::vector<float> out[2], saved[2], dqkv[2];
    int k = 0;
    for (const AttnMask& mask : {AttnMask{}, none.mask()}) {
      out[k] = poisoned<float>(out_size(s));
      saved[k] = poisoned<float>(saved_size(s, tl));
      dqkv[k] = poisoned<float>(qkv_size(s));
      forward_any(out[k], saved[k], qkv, s, tl, mask);
      backward_any(dqkv[k], dout, qkv, out[k], saved[k], s, tl, mask);
      k++;
    }
    EXPECT_EQ(out[0], out[1]) << tl.name();
    EXPECT_EQ(saved[0], saved[1]) << tl.name();
    EXPECT_EQ(dqkv[0], dqkv[1]) << tl.name();
  }
}

// flash1's working memory is the per-head accumulators (O, m, l: T x (HS + 2) doubles forward;
// dQ, D: group x T x (HS + 1) backward) plus tiles: linear in T, never T x T.
TEST(AttentionRef, Flash1AllocatesNothingTxT) {
  size_t bytes[2][2];
  const int Ts[2] = {256, 4096};
  for (int k = 0; k < 2; k++) {
    const AttnShape s{1, Ts[k], 1, 1, 16};
    std::vector<float> qkv = random_qkv<float>(s, 2.0), dout = random_vec<float>(out_size(s));
    std::vector<float> out = poisoned<float>(out_size(s)), lse = poisoned<float>(lse_size(s));
    std::vector<float> dqkv = poisoned<float>(qkv_size(s));
    heap_probe::reset();
    heap_probe::on = true;
    attention_flash_forward_ref(out.data(), lse.data(), qkv.data(), s, kCpuFlashBr, kCpuFlashBc,
                                {}, FlashOrder::kFA1);
    heap_probe::on = false;
    bytes[k][0] = heap_probe::total;
    heap_probe::reset();
    heap_probe::on = true;
    attention_flash_backward_ref(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s,
                                 kCpuFlashBr, kCpuFlashBc, {}, FlashOrder::kFA1);
    heap_probe::on = false;
    bytes[k][1] = heap_probe::total;
    std::printf("  %s flash1: forward allocated %zu B, backward %zu B; T x T fp32 would be %zu B\n",
                str(s).c_str(), bytes[k][0], bytes[k][1], size_t(s.T) * s.T * sizeof(float));
    EXPECT_GT(bytes[k][0], 0u);
  }
  for (int w = 0; w < 2; w++) {
    EXPECT_LE(bytes[1][w], 16 * bytes[0][w]) << "flash1 memory grows faster than T";
    EXPECT_LT(bytes[1][w], size_t(4096) * 4096 * sizeof(float) / 16);
  }
}

// The flash path must never hold anything T x T. Checked on the heap: every byte the flash
// forward and backward request through operator new (the std::vectors of all OpenMP threads)
// is counted, at T = 256 and T = 4096 (B = NH = 1, HS = 16, float).
//  - forward: tile buffers only, so the bytes must be identical at both T;
//  - backward: tiles plus O(T x HS) for dQ and D, so at most linear growth (x16 for x16 T);
//    a T x T buffer would grow x256 and at T = 4096 alone be 64 MB;
//  - and the T = 4096 results match naive.
TEST(AttentionRef, FlashAllocatesNothingTxT) {
  // The probe itself must see a large allocation, or the test could pass vacuously.
  heap_probe::reset();
  heap_probe::on = true;
  {
    std::vector<float> probe(size_t(1) << 20);
    asm volatile("" : : "g"(probe.data()) : "memory");
  }
  heap_probe::on = false;
  ASSERT_EQ(heap_probe::largest.load(), (size_t(1) << 20) * sizeof(float)) << "heap probe broken";

  size_t fwd_bytes[2], bwd_bytes[2], bwd_largest[2];
  const int Ts[2] = {256, 4096};
  for (int k = 0; k < 2; k++) {
    const AttnShape s{1, Ts[k], 1, 1, 16};
    const std::string ctx = str(s) + flashgpt::strformat(" Br=%d Bc=%d", kCpuFlashBr, kCpuFlashBc);
    std::vector<float> qkv = random_qkv<float>(s, 2.0), dout = random_vec<float>(out_size(s));
    std::vector<float> out = poisoned<float>(out_size(s)), lse = poisoned<float>(lse_size(s));
    std::vector<float> dqkv = poisoned<float>(qkv_size(s));

    heap_probe::reset();
    heap_probe::on = true;
    attention_flash_forward_ref(out.data(), lse.data(), qkv.data(), s, kCpuFlashBr, kCpuFlashBc);
    heap_probe::on = false;
    fwd_bytes[k] = heap_probe::total;
    const size_t fwd_largest = heap_probe::largest;

    heap_probe::reset();
    heap_probe::on = true;
    attention_flash_backward_ref(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s,
                                 kCpuFlashBr, kCpuFlashBc);
    heap_probe::on = false;
    bwd_bytes[k] = heap_probe::total;
    bwd_largest[k] = heap_probe::largest;
    std::printf("  %s: forward allocated %zu B (largest %zu B), backward %zu B (largest %zu B); "
                "T x T fp32 would be %zu B\n",
                ctx.c_str(), fwd_bytes[k], fwd_largest, bwd_bytes[k], bwd_largest[k],
                size_t(s.T) * s.T * sizeof(float));
    EXPECT_GT(fwd_bytes[k], 0u) << "flash forward allocated nothing: is the probe still active?";
    // Largest forward buffer is one tile: max(Br x Bc, Br x HS, Bc x HS) doubles.
    const size_t tile = sizeof(double) * std::max({kCpuFlashBr * kCpuFlashBc,
                                                   kCpuFlashBr * s.HS, kCpuFlashBc * s.HS});
    EXPECT_LE(fwd_largest, tile) << ctx;

    if (k == 1) {  // and the results are right at T = 4096
      std::vector<float> out_n(out_size(s)), P(p_size(s)), dqkv_n(qkv_size(s));
      attention_naive_forward_ref(out_n.data(), P.data(), qkv.data(), s);
      attention_naive_backward_ref(dqkv_n.data(), dout.data(), qkv.data(), P.data(), s);
      expect_close("out", ctx, compare(out.data(), out_n.data(), out.size()), Tol<float>::out);
      expect_close("dqkv", ctx, compare(dqkv.data(), dqkv_n.data(), dqkv.size()),
                   Tol<float>::dqkv);
    }
  }
  EXPECT_EQ(fwd_bytes[0], fwd_bytes[1]) << "flash forward's memory depends on T";
  EXPECT_LE(bwd_bytes[1], 16 * bwd_bytes[0]) << "flash backward's memory grows faster than T";
  EXPECT_LT(bwd_bytes[1], size_t(4096) * 4096 * sizeof(float) / 16);
}

TEST(AttentionRef, Registry) {
  EXPECT_EQ(cpu_attention_names(), (std::vector<std::string>{"naive", "flash", "flash1"}));
  try {
    make_cpu_attention("foo");
    ADD_FAILURE() << "make_cpu_attention(\"foo\") did not throw";
  } catch (const flashgpt::Error& e) {
    EXPECT_STREQ(e.what(), "--attn 'foo' is unknown; use one of: naive, flash, flash1");
  }
  EXPECT_THROW(make_cpu_attention(""), flashgpt::Error);
  try {  // a GPU-only backend (kernels/attention/backends.h) says so
    make_cpu_attention("scalar");
    ADD_FAILURE() << "make_cpu_attention(\"scalar\") did not throw";
  } catch (const flashgpt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CPU version"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_cpu_attention("Flash"), flashgpt::Error);

  // Each backend through the interface: its saved size, and the same numbers as the
  // function it wraps (bit for bit: same code, each element written by one thread); causal and
  // under a document mask with a window.
  const AttnShape s{2, 37, 4, 2, 16};
  std::vector<float> qkv = random_qkv<float>(s, 2.0), dout = random_vec<float>(out_size(s));
  for (const MaskCase& mc : {MaskCase{"causal", {}, 0}, mask_case("mid", 9, s.B, s.T, 32)}) {
    SCOPED_TRACE(mc.name);
    const AttnMask mask = mc.mask();
    std::vector<float> outs[3], dqkvs[3];
    int idx = 0;
    for (const std::string& name : cpu_attention_names()) {
      SCOPED_TRACE(name);
      std::unique_ptr<CpuAttention<float>> a = make_cpu_attention(name);
      ASSERT_TRUE(a);
      EXPECT_EQ(name, a->name());
      const Tiles tl = name == "naive"    ? Tiles{0, 0}
                       : name == "flash1" ? Tiles{kCpuFlashBr, kCpuFlashBc, FlashOrder::kFA1}
                                          : Tiles{kCpuFlashBr, kCpuFlashBc, FlashOrder::kFA2};
      EXPECT_EQ(a->saved_floats(s), saved_size(s, tl));
      std::vector<float> out = poisoned<float>(out_size(s)), dqkv = poisoned<float>(qkv_size(s));
      std::vector<float> saved = poisoned<float>(a->saved_floats(s));
      a->forward(out.data(), saved.data(), qkv.data(), s, mask);
      a->backward(dqkv.data(), dout.data(), qkv.data(), out.data(), saved.data(), s, mask);

      std::vector<float> out_r(out_size(s)), saved_r(saved.size()), dqkv_r(qkv_size(s));
      forward_any(out_r, saved_r, qkv, s, tl, mask);
      backward_any(dqkv_r, dout, qkv, out_r, saved_r, s, tl, mask);
      EXPECT_EQ(out, out_r);
      EXPECT_EQ(dqkv, dqkv_r);
      outs[idx] = out;
      dqkvs[idx] = dqkv;
      idx++;
    }
    for (int k = 1; k < 3; k++) {
      const std::string ctx = "naive vs " + cpu_attention_names()[k] + " " + mc.name;
      expect_close("out", ctx, compare(outs[k].data(), outs[0].data(), outs[0].size()),
                   Tol<float>::out);
      expect_close("dqkv", ctx, compare(dqkvs[k].data(), dqkvs[0].data(), dqkvs[0].size()),
                   Tol<float>::dqkv);
    }
  }
}

TEST(AttentionRef, BadShapeThrows) {
  std::vector<float> buf(4096), out(4096), saved(4096);
  const AttnShape not_divisible{1, 4, 3, 2, 8};  // NH % NKV != 0
  EXPECT_THROW(attention_naive_forward_ref(out.data(), saved.data(), buf.data(), not_divisible),
               flashgpt::Error);
  EXPECT_THROW(
      attention_flash_forward_ref(out.data(), saved.data(), buf.data(), not_divisible, 4, 4),
      flashgpt::Error);
  EXPECT_THROW(attention_flash_forward_ref(out.data(), saved.data(), buf.data(), not_divisible, 4,
                                           4, {}, FlashOrder::kFA1),
               flashgpt::Error);
  const AttnShape zero_T{1, 0, 2, 2, 8};
  EXPECT_THROW(attention_flash_backward_ref(out.data(), buf.data(), buf.data(), buf.data(),
                                            saved.data(), zero_T, 4, 4, {}, FlashOrder::kFA1),
               flashgpt::Error);
  EXPECT_THROW(attention_flash_backward_ref(out.data(), buf.data(), buf.data(), buf.data(),
                                            saved.data(), zero_T, 4, 4),
               flashgpt::Error);
  const AttnShape ok{1, 4, 2, 2, 8};
  EXPECT_THROW(attention_flash_forward_ref(out.data(), saved.data(), buf.data(), ok, 0, 4),
               flashgpt::Error);
  EXPECT_THROW(attention_flash_backward_ref(out.data(), buf.data(), buf.data(), buf.data(),
                                            saved.data(), ok, 4, -1),
               flashgpt::Error);
  // A mask no document_starts makes (a document starting after row 0 without its own row), or
  // a negative window.
  const std::vector<int> bad_starts = {0, 0, 1, 1};
  for (const AttnMask& bad : {AttnMask{bad_starts.data(), 0}, AttnMask{nullptr, -2}}) {
    EXPECT_THROW(attention_naive_forward_ref(out.data(), saved.data(), buf.data(), ok, bad),
                 flashgpt::Error);
    EXPECT_THROW(attention_naive_backward_ref(out.data(), buf.data(), buf.data(), saved.data(),
                                              ok, bad),
                 flashgpt::Error);
    EXPECT_THROW(attention_flash_forward_ref(out.data(), saved.data(), buf.data(), ok, 4, 4, bad),
                 flashgpt::Error);
    EXPECT_THROW(attention_flash_backward_ref(out.data(), buf.data(), buf.data(), buf.data(),
                                              saved.data(), ok, 4, 4, bad),
                 flashgpt::Error);
  }
}

}  // namespace
