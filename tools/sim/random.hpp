// Random numbers for the simulator that are the same on every run.
//
// std::mt19937_64 is specified bit for bit by the standard; the
// std::*_distribution classes are not (each standard library draws its own
// way), so every variate here is derived from the engine's bits by hand:
// uniforms from the top 53 bits, exponentials by inverse transform, normals
// by Box-Muller. What remains platform-dependent is libm's log, exp, sin,
// cos: the same binary on the same libm gives the same bytes.
//
// Every stream has its own engine, seeded from the scenario's seed and the
// stream's identity, so that drawing more from one stream (another policy,
// another process) never shifts the numbers of another.
//
// Thread-safety: a stream is used by one thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace bulkhead::sim {

// SplitMix64's finalizer: spreads nearby seeds (1, 2, 3) over the whole
// 64-bit space before they seed an engine.
constexpr std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The independent streams of one scenario.
enum class Stream : std::uint64_t {
  kArrivals = 1,     // inter-arrival times, one stream per process group
  kServiceSize = 2,  // the work of each service, in the order services start, one stream per run
};

class RandomStream {
 public:
  RandomStream(std::uint64_t seed, Stream stream, std::uint64_t index)
      : engine_(mix64(mix64(seed ^ mix64(static_cast<std::uint64_t>(stream))) + index)) {}

  // Uniform in (0, 1): never 0, so log() stays finite, never 1.
  double uniform_open() {
    return (static_cast<double>(engine_() >> 11) + 0.5) * 0x1.0p-53;
  }
  // Exponential with mean 1 (inverse transform).
  double exponential() { return -std::log(uniform_open()); }
  // Standard normal (Box-Muller; the second value of each pair is kept for
  // the next call).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform_open()));
    const double angle = 2.0 * std::numbers::pi * uniform_open();
    spare_ = r * std::sin(angle);
    has_spare_ = true;
    return r * std::cos(angle);
  }
  // Lognormal with mean 1 and shape sigma: exp(sigma Z - sigma^2 / 2).
  double lognormal_unit_mean(double sigma) { return std::exp(sigma * normal() - sigma * sigma / 2); }

 private:
  std::mt19937_64 engine_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace bulkhead::sim
