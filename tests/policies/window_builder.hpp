// Helpers shared by the policy tests: windows described in milliseconds, and
// the message of a ParamError.
#pragma once

#include <cstdint>
#include <string>

#include "policies/policy.hpp"
#include "policies/window.hpp"

namespace bulkhead::policies::test {

inline constexpr double kNsPerMs = 1e6;

// What a test says about a window; everything else is derived.
struct WindowSpec {
  std::uint64_t ok = 0;
  std::uint64_t dropped = 0;
  std::uint64_t ignored = 0;
  double rtt_ms = 0;  // mean latency of the ok calls, in milliseconds
  std::uint32_t max_inflight = 0;
};

// A one-second window whose ok calls all took rtt_ms (so min, max and the
// percentiles equal the mean).
inline Window make_window(const WindowSpec& spec) {
  Window w;
  w.ok = spec.ok;
  w.dropped = spec.dropped;
  w.ignored = spec.ignored;
  if (spec.ok > 0) {
    const auto rtt_ns = static_cast<std::uint64_t>(spec.rtt_ms * kNsPerMs);
    w.rtt_sum_ns = rtt_ns * spec.ok;
    w.rtt_min_ns = w.rtt_max_ns = rtt_ns;
    w.rtt_p10_ns = w.rtt_p50_ns = w.rtt_p90_ns = w.rtt_p99_ns = rtt_ns;
  }
  w.max_inflight = spec.max_inflight;
  w.inflight = spec.max_inflight;
  w.duration_ns = 1'000'000'000;
  return w;
}

// The what() of the ParamError `f` throws, or a note that it threw none.
template <typename F>
std::string param_error_of(F&& f) {
  try {
    f();
  } catch (const ParamError& e) {
    return e.what();
  }
  return "<no ParamError thrown>";
}

// The key() of the ParamError `f` throws, or a note that it threw none.
template <typename F>
std::string param_key_of(F&& f) {
  try {
    f();
  } catch (const ParamError& e) {
    return e.key();
  }
  return "<no ParamError thrown>";
}

}  // namespace bulkhead::policies::test
