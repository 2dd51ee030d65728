// A seeded pseudo-random sequence, for the policies that port a jittered
// reference.
//
// Netflix's VegasLimit and Envoy's gradient controller draw jitter from a
// random source. A policy here is a pure function of its windows and
// parameters, so the ports draw from this generator instead, seeded by one of
// their parameters: two instances with the same seed fed the same windows
// give the same limits.
//
// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014; the seeding generator of xoshiro): 64 bits of
// state and a sequence fixed by its own arithmetic, so it is the same on
// every platform and standard library, which std::uniform_*_distribution is
// not.
//
// Thread-safety: none; owned by one policy, called by the control loop only.
#pragma once

#include <cstdint>

namespace bulkhead::policies {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}

  // The next 64 uniformly distributed bits.
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1): the top 53 bits of next(), so every value is exact.
  double next_unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

}  // namespace bulkhead::policies
