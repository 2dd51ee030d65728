// AIMD: additive increase, multiplicative decrease, on loss or slowness.
//
// Source: Netflix concurrency-limits, AIMDLimit (core/limit/AIMDLimit.java),
// itself TCP Reno's congestion window rule applied to a concurrency limit.
// Per update, with L the limit:
//
//   if drop or rtt > timeout:  L = floor(L * backoff)
//   elif inflight * 2 >= L:    L = L + 1         (grow only when the limit is used)
//   L = clamp(L, min, max)
//
// Where ours differs:
// - Windowed: Netflix runs AIMDLimit per sample, or per window behind its
//   WindowedLimit. We run it once per window the daemon hands us: "drop" is
//   window.dropped > 0, rtt is the window's mean latency of ok calls (a
//   dropped call's latency is never part of it), inflight is the window's
//   max_inflight.
//   The daemon's windows are a tenth of WindowedLimit's under load
//   (window.hpp): AIMD steps up to 10 times a second where behind a
//   default WindowedLimit it steps once.
// - A window with no samples (ok + dropped == 0; only ignored completions,
//   or none) holds the limit: it says nothing about the dependency. A
//   window of drops only backs off, as a drop does per sample in Netflix;
//   WindowedLimit never closes such a window (isWindowReady wants an ok
//   call), so there the drops wait, limit unchanged, for the next ok call.
// - min, max and the initial limit come from the config's bounds (the same
//   for every policy), not from AIMD's parameters; Netflix's defaults for
//   them (initial 20, min 20, max 200) are a config matter here. The limit
//   is kept as a double but stays integral unless a bound is not.
#pragma once

#include <memory>
#include <string_view>

#include "policies/policy.hpp"

namespace bulkhead::policies {

// Thread-safety: owned and called by the control loop only.
class AimdPolicy final : public Policy {
 public:
  static constexpr std::string_view kName = "aimd";

  struct Params {
    // Factor the limit is multiplied by on a drop or a slow window;
    // dimensionless, in [0.5, 1). Netflix AIMDLimit default and range.
    double backoff = 0.9;
    // Mean latency above which a window counts as a drop, in milliseconds;
    // > 0. Netflix AIMDLimit default (5 s).
    double timeout_ms = 5000;

    bool operator==(const Params&) const = default;
  };

  // Throws ParamError on invalid bounds or params.
  explicit AimdPolicy(const Bounds& bounds);
  AimdPolicy(const Bounds& bounds, const Params& params);
  // Params from a config's keys, defaults for those absent; throws ParamError.
  static Params parse_params(const ParamMap& params);

  std::string_view name() const override { return kName; }
  double update(const Window& window) override;
  double limit() const override { return limit_; }
  const Params& params() const { return params_; }

 private:
  Bounds bounds_;
  Params params_;
  double limit_;  // calls
};

}  // namespace bulkhead::policies
