// Gradient: scale the limit by how far a latency percentile sits above a
// measured baseline, plus a square-root headroom.
//
// Source: Envoy's adaptive concurrency filter, gradient controller
// (source/extensions/filters/http/adaptive_concurrency/controller/
// gradient_controller.{h,cc}, api/.../adaptive_concurrency/v3/
// adaptive_concurrency.proto, and the filter's documentation). Per update
// interval, with L the limit:
//
//   sampleRTT = percentile(the interval's latencies)            p50 by default
//   g = clamp(minRTT * (1 + buffer) / sampleRTT, 0.5, 2)
//   L = clamp(floor(g * L + sqrt(g * L)), min, max)             headroom sqrt(g L)
//
// minRTT is measured at start, then every interval + U[0, jitter * interval),
// and again as soon as the limit has been set to the minimum for 5
// consecutive updates (old == new == min): the next request_count latencies
// are summarised by the same percentile, and that is minRTT. The limit is
// not updated while minRTT is measured (the sample timer skips its update
// while a measurement runs). Envoy measures in one of two ways: pinned, its
// default, which sets the limit to min_concurrency (3) for the measurement
// and restores it after; or from live traffic, chosen by setting
// min_concurrency_limit apart from min_concurrency, which leaves the limit
// where it is and samples the calls that run anyway.
//
// Envoy reads no error signal: drops are ignored entirely, only latency
// counts. It keeps a standing queue by design (the buffer and the headroom),
// and a minRTT taken from live traffic under load is a loaded one, so the
// baseline steps up with each measurement under sustained load (the drift
// ALGORITHMS.md lists against Envoy PR 11579). In particular, a limit held at
// the minimum by a sustained rise in latency triggers a measurement after 5
// windows, adopts the raised latency as minRTT, and grows again (see
// GradientPolicy.RemeasuresAfterFiveWindowsAtMinimum).
//
// Where ours differs:
// - Windowed: one update per window the daemon hands us. sampleRTT is the
//   window's percentile field (rtt_p50_ns, rtt_p90_ns or rtt_p99_ns, from
//   the log-linear histogram: within about 6% of the true value); Envoy's
//   percentile is any value in [0, 100]. A window with no ok calls holds the
//   limit and changes no state, as Envoy skips an interval without samples.
//   The 5-updates rule counts windows with ok calls.
// - Live traffic only, the only mode offered. The pinned probe is not:
//   there is one limit per dependency for the whole host, so pinning it to 3
//   for a measurement throttles every process on the host at once; and the
//   daemon cannot exclude from a measurement the calls admitted before the
//   pin (Envoy stamps an epoch at acquire; that needs an acquire epoch in the
//   segment, not in this change). Envoy's fixed minRTT (fixed_value) is not
//   offered either.
// - A measurement takes whole windows until they hold at least
//   request_count ok calls. With one window that is the window's percentile,
//   as in Envoy. With several, minRTT is the ok-weighted mean of their
//   percentiles: a window carries percentiles, not its histogram, so their
//   exact union percentile is out of reach.
// - The interval and the jitter are counted in windows with ok calls, not in
//   time: the next measurement starts after min_rtt_interval_windows + j
//   windows, j = x mod ceil(min_rtt_interval_windows * jitter), x drawn from
//   a SplitMix64 sequence seeded by jitter_seed (Envoy: its random source
//   modulo the jitter range in milliseconds), so the policy is
//   deterministic. The first measurement is the first window(s), as Envoy
//   measures on start.
// - max and the initial limit come from the config's bounds: max is Envoy's
//   max_concurrency_limit (1000), and the limit starts at initial_limit
//   where Envoy starts at the minimum. The minimum is Envoy's
//   min_concurrency (3, parameter min_concurrency), or the config's
//   min_limit if that is higher (and at most max_limit). Latencies are nanoseconds, not
//   truncated to whole microseconds; a percentile below 1 ns (a coarse or
//   fake clock) is taken as 1 ns, where Envoy asserts sampleRTT > 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "policies/policy.hpp"
#include "policies/prng.hpp"

namespace bulkhead::policies {

// Thread-safety: owned and called by the control loop only.
class GradientPolicy final : public Policy {
 public:
  static constexpr std::string_view kName = "gradient";

  struct Params {
    // Share of minRTT added to it before it is compared with sampleRTT;
    // dimensionless fraction, in [0, 1]. Envoy default (buffer, 25%).
    double buffer = 0.25;
    // The latency percentile that summarises a window and a minRTT
    // measurement: 50, 90 or 99 (the window's fields). Envoy default
    // (sample_aggregate_percentile, p50).
    double percentile = 50;
    // Windows with ok calls between the end of one minRTT measurement and
    // the start of the next, before jitter; an integer in [1, 2^32 - 1]. Envoy
    // has no default (interval is required); its documented example is 60 s
    // at a 100 ms update interval, 600 updates, and 600 windows is 60 s at
    // the daemon's default 100 ms tick under load.
    double min_rtt_interval_windows = 600;
    // Largest extra delay of each measurement, drawn from the jitter_seed
    // sequence, as a fraction of the interval; in [0, 1]. Envoy default
    // (jitter, 15%).
    double jitter = 0.15;
    // Ok calls a minRTT measurement takes, at least; an integer in
    // [1, 2^32 - 1]. Envoy default (request_count).
    double request_count = 50;
    // Seed of the jitter sequence; an integer in [0, 2^32 - 1]. Ours: Envoy
    // draws from its random source. Give hosts different seeds to keep
    // their measurements apart.
    double jitter_seed = 0;
    // The lowest limit, in calls, an integer in [1, 2^32 - 1]: the floor of
    // the update and the minimum the 5-windows rule counts. Envoy default
    // (min_concurrency, 3). A config's min_limit above it raises the floor;
    // one below it does not lower it: from a limit of 2, floor(g L +
    // sqrt(g L)) is 2 at any gradient, so a floor of 1 is never reached,
    // and a collapse would never be measured again.
    double min_concurrency = 3;

    bool operator==(const Params&) const = default;
  };

  // Envoy remeasures minRTT once the limit has been set to the minimum this
  // many consecutive updates; Envoy's constant, in windows.
  static constexpr int kRemeasureAtMinWindows = 5;

  // Throws ParamError on invalid bounds or params.
  explicit GradientPolicy(const Bounds& bounds);
  GradientPolicy(const Bounds& bounds, const Params& params);
  // jitter, request_count, jitter_seed.
  // Params from a config's keys, defaults for those absent; throws ParamError.
  static Params parse_params(const ParamMap& params);

  std::string_view name() const override { return kName; }
  double update(const Window& window) override;
  double limit() const override { return limit_; }
  // minRTT, and its measurement under way.
  Baseline baseline() const override { return {min_rtt_ns_, measuring_}; }
  const Params& params() const { return params_; }
  // The baseline latency, in nanoseconds (0 until the first measurement ends).
  double min_rtt_ns() const { return min_rtt_ns_; }
  // True while the next window with ok calls goes to a minRTT measurement.
  bool measuring_min_rtt() const { return measuring_; }

 private:
  // The window's latency summary for this policy, in ns, at least 1.
  double sample_rtt_ns(const Window& window) const;
  void start_measuring();
  // Windows with ok calls until the next measurement, jitter included.
  std::uint64_t next_interval_windows();

  Bounds bounds_;
  double floor_;  // max(bounds_.min, min_concurrency), within bounds_.max
  Params params_;
  double limit_;                 // calls
  double min_rtt_ns_ = 0;        // ns; 0 until measured
  SplitMix64 jitter_rng_;
  bool measuring_ = true;        // Envoy measures minRTT on start
  double measured_sum_ns_ = 0;   // of percentile * ok over the measurement's windows
  std::uint64_t measured_ok_ = 0;      // ok calls in the measurement so far
  std::uint64_t until_measure_ = 0;    // windows with ok calls until the next measurement
  int at_min_windows_ = 0;             // consecutive updates with old == new == min
};

}  // namespace bulkhead::policies
