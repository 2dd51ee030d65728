// Gradient2: shrink the limit as the current latency rises above its own
// long-term average.
//
// Source: Netflix concurrency-limits, Gradient2Limit and ExpAvgMeasurement
// (core/limit/Gradient2Limit.java, core/limit/measurement/
// ExpAvgMeasurement.java), the limit Netflix recommends. Per update, with L
// the limit and rtt the update's latency:
//
//   long = ExpAvg(rtt)    plain mean of the first 10 updates, then an EMA
//                         with factor 2 / (long_window + 1)
//   if long / rtt > 2:    long *= 0.95       (recover after a long overload;
//                                             this update still uses the old long)
//   if inflight < L / 2:  hold               (app-limited)
//   g  = clamp(tolerance * long / rtt, 0.5, 1)
//   L' = g * L + queue_size
//   L  = clamp((1 - smoothing) * L + smoothing * L', min, max)
//
// The averages are fed before the app-limited check, as in Netflix. With a
// steady g < 1 the limit settles at queue_size / (1 - g) whatever the real
// capacity, and under a sustained overload the long average follows the rtt
// up until g returns to 1 and the limit creeps up again (Netflix PR 134,
// issue 165). Drops are ignored entirely: Gradient2Limit never reads didDrop,
// so a dependency that fails fast without slowing down never lowers it
// (Netflix issue 176). That is faithful, and kept so that comparisons with
// the reference are honest.
//
// Where ours differs:
// - Windowed: driven once per window the daemon hands us, as Netflix's
//   WindowedLimit drives it: rtt is the window's mean latency of ok calls
//   (WindowedLimit's default average window), inflight is the window's
//   max_inflight. A dropped call's latency never enters the mean.
//   The daemon's windows are a tenth of WindowedLimit's under load
//   (window.hpp): long_window = 600 windows is a minute where behind a
//   default WindowedLimit it is ten, so the long average follows a
//   sustained overload (and the limit creeps up) ten times sooner.
// - A window with no ok calls holds the limit and does not feed the long
//   average: it has no latency to learn from.
// - A mean below 1 ns (a zero-latency window, only possible with a coarse or
//   fake clock) is taken as 1 ns, where Netflix would divide by zero.
// - min, max and the initial limit come from the config's bounds (the same
//   for every policy); Netflix's defaults for them (initial 20, min 20,
//   max 200) are a config matter here. queue_size is a constant, not
//   Netflix's optional function of the limit.
#pragma once

#include <memory>
#include <string_view>

#include "policies/policy.hpp"

namespace bulkhead::policies {

// Thread-safety: owned and called by the control loop only.
class Gradient2Policy final : public Policy {
 public:
  static constexpr std::string_view kName = "gradient2";

  struct Params {
    // Weight of the new estimate in each update; dimensionless, in (0, 1].
    // Netflix Gradient2Limit default.
    double smoothing = 0.2;
    // Span of the long-term latency EMA, in windows (Netflix: updates); an
    // integer >= 1. Netflix default.
    double long_window = 600;
    // Latency ratio long/rtt tolerated before the limit shrinks;
    // dimensionless, >= 1 (Netflix checks the same). Netflix default.
    double tolerance = 1.5;
    // Growth allowed per update while latency is steady, in calls; >= 0.
    // Netflix default (its queueSize).
    double queue_size = 4;

    bool operator==(const Params&) const = default;
  };

  // Throws ParamError on invalid bounds or params.
  explicit Gradient2Policy(const Bounds& bounds);
  Gradient2Policy(const Bounds& bounds, const Params& params);
  // Params from a config's keys, defaults for those absent; throws ParamError.
  static Params parse_params(const ParamMap& params);

  std::string_view name() const override { return kName; }
  double update(const Window& window) override;
  double limit() const override { return limit_; }
  // The long-term latency average; never measured apart.
  Baseline baseline() const override { return {long_rtt_.value(), false}; }
  const Params& params() const { return params_; }
  // The long-term latency average, in nanoseconds (0 before any ok window).
  double long_rtt_ns() const { return long_rtt_.value(); }

 private:
  // Netflix's ExpAvgMeasurement: the plain mean of the first kWarmup
  // samples, then an EMA with factor 2 / (window + 1).
  class ExpAvg {
   public:
    explicit ExpAvg(double window) : factor_(2.0 / (window + 1.0)) {}
    // Adds a sample; returns the new average.
    double add(double sample);
    void scale(double factor) { value_ *= factor; }
    double value() const { return value_; }

   private:
    static constexpr int kWarmup = 10;  // samples (Netflix's warmupWindow)
    double factor_;      // dimensionless
    double value_ = 0;   // same unit as the samples
    double sum_ = 0;     // of the warm-up samples
    int count_ = 0;      // warm-up samples seen, up to kWarmup
  };

  Bounds bounds_;
  Params params_;
  double limit_;    // calls
  ExpAvg long_rtt_;  // ns
};

}  // namespace bulkhead::policies
