// rng — a small deterministic RNG (splitmix64) used for parameter init, sampling, the data
// loader's shuffles and anything else that must give the same numbers on every machine and
// compiler (std:: distributions are implementation-defined, so we do not use them). It sits in
// kernels/ beside common.h, the layer that data/, model/ and train/ all build on.
#pragma once
#include <cmath>
#include <cstdint>

struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next_u64() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0: rejects the top sliver of the 2^64 range that would bias r % n.
  uint64_t below(uint64_t n) {
    uint64_t threshold = (0 - n) % n;  // = 2^64 mod n
    for (;;) {
      uint64_t r = next_u64();
      if (r >= threshold) return r % n;
    }
  }
  double uniform() { return (next_u64() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double normal() {  // Box-Muller, one value per call
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};
