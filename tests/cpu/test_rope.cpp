// test_rope — the CPU reference of rotary position embedding (kernels/rope.h), the oracle of
// rope.cu.
//
//   RopeRef.BackwardFiniteDifference        d/dx sum(w o rope(x)) = rope_backward(w), central
//                                           differences in double (q, k and v heads)
//   RopeRef.ForwardMatchesDirectFormula     vs the rotate_half formula written here
//   RopeRef.ValueHeadsUntouched             v heads bit-identical after forward and backward
//   RopeRef.PreservesPairNorms              |(x[i], x[i+HS/2])| unchanged by the rotation
//   RopeRef.RelativePosition                rope(q at m).rope(k at n) = same at (m+s, n+s)
//   RopeRef.ForwardThenBackwardIsIdentity
//   RopeRef.Pos0OffsetEqualsSlice           pos0 = 7 on tokens 7.. == those tokens of pos0 = 0
//   RopeRef.TableMatchesDirectCosSin        rope_table_ref vs cos/sin of p*theta^(-2i/HS)
//   RopeRef.FloatIsDoubleRoundedOnce        the float instantiation computes in double
//   RopeRef.RejectsOddHeadSize
//
// Every check prints its error and tolerance; outputs are poisoned with NaN beforehand.
// Run: build/test_cpu --gtest_filter='RopeRef*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/common.h"
#include "kernels/rope.h"
#include "tests/test_common.h"

namespace {

using Vec = std::vector<double>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Fresh inputs for every check: one generator for the file, from the base seed.
std::mt19937_64& rng() {
  return iteration_rng(0x726f7065ull);
}
Vec normal(size_t n, double sd = 1.0) {
  std::normal_distribution<double> d(0.0, sd);
  Vec v(n);
  for (double& x : v) x = d(rng());
  return v;
}

struct RopeShape {
  int B, T, NH, NKV, HS, pos0;
  float theta;
  size_t size() const { return (size_t)B * T * (NH + 2 * NKV) * HS; }
  std::string str() const {
    return flashgpt::strformat("B=%d T=%d NH=%d NKV=%d HS=%d pos0=%d theta=%g", B, T, NH, NKV, HS,
                               pos0, theta);
  }
};
// Head of element i: < NH query, < NH + NKV key, else value.
bool is_value(const RopeShape& s, size_t i) {
  return (int)((i / s.HS) % (s.NH + 2 * s.NKV)) >= s.NH + s.NKV;
}

Vec rope_fwd(Vec x, const RopeShape& s) {
  rope_forward_ref(x.data(), s.B, s.T, s.NH, s.NKV, s.HS, s.pos0, s.theta);
  return x;
}
Vec rope_bwd(Vec x, const RopeShape& s) {
  rope_backward_ref(x.data(), s.B, s.T, s.NH, s.NKV, s.HS, s.pos0, s.theta);
  return x;
}

const RopeShape kShapes[] = {
    {1, 1, 1, 1, 2, 0, 10000.0f},      // one pair, position 0: the identity
    {2, 5, 3, 1, 8, 3, 10000.0f},      // MQA, pos0 > 0
    {3, 7, 4, 2, 6, 11, 100.0f},       // GQA, HS/2 odd, small theta: fast angles
    {1, 4, 2, 2, 16, 131000, 500000.0f},  // long positions
};

// =============================================================================================
// RoPE
// =============================================================================================

TEST(RopeRef, BackwardFiniteDifference) {
  // f(x) = rope(x) is linear: central differences with h = 1e-3 are exact up to rounding
  // (~1e-16 / h relative), far below the tolerance; a wrong sign or index errs by O(1).
  for (const RopeShape& s : kShapes) {
    Vec x = normal(s.size()), w = normal(s.size());
    const Vec grad = rope_bwd(w, s);  // dL/dx for L = sum(w o rope(x)); v heads: w itself
    Vec num(s.size());
    const double h = 1e-3;
    for (size_t i = 0; i < x.size(); i++) {
      const double xi = x[i];
      x[i] = xi + h;
      const Vec fp = rope_fwd(x, s);
      x[i] = xi - h;
      const Vec fm = rope_fwd(x, s);
      x[i] = xi;
      double d = 0;
      for (size_t j = 0; j < fp.size(); j++) d += w[j] * (fp[j] - fm[j]);
      num[i] = d / (2 * h);
    }
    expect_le("rope d/dx vs finite differences", s.str(), max_rel_error(grad, num), 1e-9);
  }
}

TEST(RopeRef, ForwardMatchesDirectFormula) {
  for (const RopeShape& s : kShapes) {
    const Vec x = normal(s.size());
    Vec ref = x;
    const int H3 = s.NH + 2 * s.NKV, half = s.HS / 2;
    for (int b = 0; b < s.B; b++)
      for (int t = 0; t < s.T; t++)
        for (int h = 0; h < s.NH + s.NKV; h++) {
          const size_t base = (((size_t)b * s.T + t) * H3 + h) * s.HS;
          for (int i = 0; i < half; i++) {
            // theta_i = theta^(-2i/HS) written as exp(-(2i/HS) ln theta): an independent path.
            const double a = (s.pos0 + t) * std::exp(-(2.0 * i / s.HS) * std::log((double)s.theta));
            const double x0 = x[base + i], x1 = x[base + i + half];
            ref[base + i] = x0 * std::cos(a) - x1 * std::sin(a);
            ref[base + i + half] = x0 * std::sin(a) + x1 * std::cos(a);
          }
        }
    // pow vs exp/log differ by a few ulp of the angle; at p ~ 131000 that is ~1e-11 absolute.
    expect_le("rope forward vs direct formula", s.str(), max_rel_error(rope_fwd(x, s), ref), 1e-9);
  }
}

TEST(RopeRef, ValueHeadsUntouched) {
  for (const RopeShape& s : kShapes) {
    std::vector<float> x(s.size());
    for (size_t i = 0; i < x.size(); i++) x[i] = (float)normal(1)[0];
    std::vector<float> f = x, b = x;
    rope_forward_ref(f.data(), s.B, s.T, s.NH, s.NKV, s.HS, s.pos0, s.theta);
    rope_backward_ref(b.data(), s.B, s.T, s.NH, s.NKV, s.HS, s.pos0, s.theta);
    size_t changed_v = 0, changed_qk = 0;
    for (size_t i = 0; i < x.size(); i++) {
      const bool same_f = std::memcmp(&f[i], &x[i], 4) == 0, same_b = std::memcmp(&b[i], &x[i], 4) == 0;
      if (is_value(s, i)) changed_v += !same_f + !same_b;
      else changed_qk += !same_f;
    }
    std::printf("  %-48s v elements changed: %zu (must be 0); q/k changed by forward: %zu\n",
                s.str().c_str(), changed_v, changed_qk);
    EXPECT_EQ(changed_v, 0u) << s.str();
    if (s.pos0 + s.T > 1) {
      EXPECT_GT(changed_qk, 0u) << s.str() << ": forward did nothing";
    }
  }
}

TEST(RopeRef, PreservesPairNorms) {
  for (const RopeShape& s : kShapes) {
    const Vec x = normal(s.size());
    const Vec y = rope_fwd(x, s);
    double worst = 0;
    for (size_t base = 0; base < x.size(); base += s.HS)
      for (int i = 0; i < s.HS / 2; i++) {
        const size_t a = base + i, b = base + i + s.HS / 2;
        const double n0 = std::hypot(x[a], x[b]), n1 = std::hypot(y[a], y[b]);
        worst = std::max(worst, std::fabs(n1 - n0) / std::max(n0, 1e-300));
      }
    expect_le("rope pair norm change (relative)", s.str(), worst, 1e-14);
  }
}

TEST(RopeRef, RelativePosition) {
  // q and k of one head at positions m and n: the score depends on n - m only.
  for (int HS : {2, 8, 64}) {
    const RopeShape one{1, 1, 1, 1, HS, 0, 10000.0f};
    const Vec qk = normal(one.size());  // head 0: q, head 1: k, head 2: v
    auto score = [&](int m, int n) {
      RopeShape sm = one, sn = one;
      sm.pos0 = m, sn.pos0 = n;
      const Vec a = rope_fwd(qk, sm), b = rope_fwd(qk, sn);
      double d = 0;
      for (int i = 0; i < HS; i++) d += a[i] * b[HS + i];
      return d;
    };
    double qn = 0, kn = 0;
    for (int i = 0; i < HS; i++) qn += qk[i] * qk[i], kn += qk[HS + i] * qk[HS + i];
    const double norm = std::sqrt(qn * kn);
    double worst = 0;
    for (auto mn : {std::pair<int, int>{0, 0}, {3, 10}, {10, 3}, {100, 1000}, {5000, 17}})
      for (int shift : {1, 7, 1000, 100000}) {
        const double a = score(mn.first, mn.second), b = score(mn.first + shift, mn.second + shift);
        worst = std::max(worst, std::fabs(a - b) / norm);
      }
    // Angles up to ~1e5 rad carry ~1e-11 absolute rounding in double.
    expect_le("rope score(m,n) - score(m+s,n+s)", "HS=" + std::to_string(HS), worst, 1e-9);
  }
}

TEST(RopeRef, ForwardThenBackwardIsIdentity) {
  for (const RopeShape& s : kShapes) {
    const Vec x = normal(s.size());
    expect_le("rope backward(forward(x)) - x", s.str(), max_rel_error(rope_bwd(rope_fwd(x, s), s), x),
              1e-14);
    expect_le("rope forward(backward(x)) - x", s.str(), max_rel_error(rope_fwd(rope_bwd(x, s), s), x),
              1e-14);
  }
}

TEST(RopeRef, Pos0OffsetEqualsSlice) {
  // Tokens 7..19 of a sequence from position 0 == a 13-token sequence starting at pos0 = 7.
  const int B = 2, T = 20, T0 = 7, NH = 4, NKV = 2, HS = 16, H3 = NH + 2 * NKV;
  const size_t tok = (size_t)H3 * HS;
  const RopeShape full{B, T, NH, NKV, HS, 0, 10000.0f}, part{B, T - T0, NH, NKV, HS, T0, 10000.0f};
  const Vec x = normal(full.size());
  Vec xs(part.size());
  for (int b = 0; b < B; b++)
    std::copy(x.begin() + ((size_t)b * T + T0) * tok, x.begin() + ((size_t)b * T + T) * tok,
              xs.begin() + (size_t)b * (T - T0) * tok);
  const Vec yf = rope_fwd(x, full), ys = rope_fwd(xs, part);
  Vec yf_slice(part.size());
  for (int b = 0; b < B; b++)
    std::copy(yf.begin() + ((size_t)b * T + T0) * tok, yf.begin() + ((size_t)b * T + T) * tok,
              yf_slice.begin() + (size_t)b * (T - T0) * tok);
  expect_le("rope pos0=7 vs slice of pos0=0", part.str(), max_rel_error(ys, yf_slice), 0.0);
}

TEST(RopeRef, TableMatchesDirectCosSin) {
  for (int HS : {2, 64, 128})
    for (float theta : {10000.0f, 500000.0f}) {
      const int rows = 300, half = HS / 2;
      std::vector<float> tab((size_t)rows * half * 2, std::numeric_limits<float>::quiet_NaN());
      rope_table_ref(tab.data(), rows, HS, theta);
      // Each entry must be cos/sin of the double angle rounded once to float: within half a
      // float ulp (plus a little for the few-ulp difference of exp/log vs pow in the angle).
      double worst = 0;
      for (int p : {0, 1, 2, 17, 299})
        for (int i = 0; i < half; i++) {
          const double a = p * std::exp(-(2.0 * i / HS) * std::log((double)theta));
          const double ref[2] = {std::cos(a), std::sin(a)};
          for (int k = 0; k < 2; k++) {
            const double got = tab[((size_t)p * half + i) * 2 + k];
            const double ulp = FLT_EPSILON * std::max(std::fabs(ref[k]), (double)FLT_MIN);
            worst = std::max(worst, std::isnan(got) ? INFINITY : std::fabs(got - ref[k]) / (0.5 * ulp));
          }
        }
      expect_le("rope table |tab - cos/sin| / half ulp",
                flashgpt::strformat("HS=%d theta=%g", HS, theta), worst, 1.01);
      // The table at row p + the kernel formula reproduces the double forward at pos0 = p.
      const RopeShape s{1, 1, 1, 1, HS, 299, theta};
      const Vec x = normal(s.size());
      Vec y = x;
      for (int h = 0; h < 2; h++)  // q and k heads (v stays)
        for (int i = 0; i < half; i++) {
          const double c = tab[((size_t)299 * half + i) * 2], sn = tab[((size_t)299 * half + i) * 2 + 1];
          const double x0 = x[h * HS + i], x1 = x[h * HS + i + half];
          y[h * HS + i] = x0 * c - x1 * sn;
          y[h * HS + i + half] = x0 * sn + x1 * c;
        }
      expect_le("rope via table vs forward (fp32 table)",
                flashgpt::strformat("HS=%d theta=%g", HS, theta), max_rel_error(y, rope_fwd(x, s)), 1e-6);
    }
}

TEST(RopeRef, FloatIsDoubleRoundedOnce) {
  for (const RopeShape& s : kShapes) {
    Vec x = normal(s.size());
    std::vector<float> xf(x.size());
    for (size_t i = 0; i < x.size(); i++) xf[i] = (float)x[i], x[i] = xf[i];
    for (int dir = 0; dir < 2; dir++) {
      std::vector<float> yf = xf;
      if (dir == 0) rope_forward_ref(yf.data(), s.B, s.T, s.NH, s.NKV, s.HS, s.pos0, s.theta);
      else rope_backward_ref(yf.data(), s.B, s.T, s.NH, s.NKV, s.HS, s.pos0, s.theta);
      const Vec yd = dir == 0 ? rope_fwd(x, s) : rope_bwd(x, s);
      size_t bad = 0;
      for (size_t i = 0; i < yd.size(); i++) bad += yf[i] != (float)yd[i];
      std::printf("  %-34s %-48s %zu of %zu differ from (float)double\n",
                  dir == 0 ? "rope forward float vs double" : "rope backward float vs double",
                  s.str().c_str(), bad, yd.size());
      EXPECT_EQ(bad, 0u) << s.str();
    }
  }
}

TEST(RopeRef, RejectsOddHeadSize) {
  std::vector<float> x(3 * 5, 1.0f), tab(10);
  for (auto fn : {+[](float* p) { rope_forward_ref(p, 1, 1, 1, 1, 5, 0, 10000.0f); },
                  +[](float* p) { rope_backward_ref(p, 1, 1, 1, 1, 5, 0, 10000.0f); },
                  +[](float* p) { rope_table_ref(p, 1, 5, 10000.0f); }}) {
    try {
      fn(x.data());
      ADD_FAILURE() << "HS = 5 accepted";
    } catch (const flashgpt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("even"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
