// Vegas: estimate the queue from how far latency sits above its no-load
// value, and keep that queue between two small bounds.
//
// Source: Netflix concurrency-limits, VegasLimit and Log10RootFunction
// (core/limit/VegasLimit.java, core/limit/functions/Log10RootFunction.java),
// the library's default limit; itself TCP Vegas (Brakmo and Peterson, 1995)
// applied to a concurrency limit. Per update, with L the limit, rtt the
// update's latency and lg(L) = Netflix's Log10RootFunction of int(L):
//
//   lg(L)  = max(1, floor(log10 L))   (a table below 1000, log10 above;
//                                      releases before Netflix's 3fbad85
//                                      took floor(sqrt L) from 1000 on)
//   every probe_multiplier * L * U[0.5, 1) updates:
//                          rtt_noload = rtt; hold           (the probe)
//   if rtt < rtt_noload:   rtt_noload = rtt; hold           (also the first update)
//   queue = ceil(L * (1 - rtt_noload / rtt))
//   if drop:               L' = L - lg(L)
//   elif inflight*2 < L:   hold                             (app-limited)
//   elif queue <= lg(L):   L' = L + beta_factor * lg(L)     (beta: 6 lg)
//   elif queue < alpha:    L' = L + lg(L)                   (alpha: 3 lg)
//   elif queue > beta:     L' = L - lg(L)
//   else:                  hold
//   L = (1 - smoothing) * L + smoothing * clamp(L', min, max)
//
// The checks run in that order, as in Netflix: a probe or a new minimum
// holds the limit even in an update with drops. The queue is compared with
// alpha, beta and lg(L) of the integer part of L, and the limit moves down by
// only lg(L) per update (1 or 2 calls below 1000), so it falls slowly.
//
// Known weakness, kept: the probe copies the current rtt into the baseline.
// Under a sustained load the probe lands on a loaded rtt, the queue estimate
// falls to zero and the limit grows by beta again (Netflix issue 165).
//
// Where ours differs:
// - Windowed: driven once per window the daemon hands us, as Netflix's
//   WindowedLimit drives it: rtt is the window's mean latency of ok calls
//   (WindowedLimit's default average window), inflight is the window's
//   max_inflight, drop is window.dropped > 0. A dropped call's latency never
//   enters the mean, as in WindowedLimit (addDroppedSample keeps only the
//   drop flag and the in-flight count; issue 176 is about the per-sample
//   form, where a drop arrives with its own fast rtt).
//   The daemon's windows are a tenth of WindowedLimit's under load
//   (window.hpp): the probe every 30 L U[0.5, 1) windows comes 10 times
//   sooner, and a step of lg(L) 10 times as often.
// - A window with no samples holds the limit and changes no state. A window
//   with drops but no ok call has no latency: it skips the probe count and
//   the baseline and goes straight to the drop rule (L' = L - lg(L)).
//   WindowedLimit never closes such a window (isWindowReady wants an ok
//   call), so there the drops wait, limit unchanged, for the next ok call.
// - The probe jitter U[0.5, 1) comes from a SplitMix64 sequence seeded by
//   probe_seed, not from a random source, so that the policy is
//   deterministic; the probe counts windows with ok calls. probe_multiplier
//   = 0 turns the probe off (in Netflix, 0 would probe on every update and
//   freeze the limit).
// - A mean below 1 ns (a zero-latency window, only possible with a coarse or
//   fake clock) is taken as 1 ns; Netflix refuses rtt <= 0.
// - min, max and the initial limit come from the config's bounds (the same
//   for every policy): L' is clamped to [min, max] where Netflix clamps to
//   [1, maxConcurrency]; Netflix's defaults (initial 20, max 1000) are a
//   config matter here. alpha and beta are offered as multiples of lg(L)
//   (alpha_factor, beta_factor); Netflix's arbitrary alpha/beta/threshold/
//   increase/decrease functions are not.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "policies/policy.hpp"
#include "policies/prng.hpp"

namespace bulkhead::policies {

// Thread-safety: owned and called by the control loop only.
class VegasPolicy final : public Policy {
 public:
  static constexpr std::string_view kName = "vegas";

  struct Params {
    // Weight of the new estimate in each update; dimensionless, in (0, 1].
    // Netflix VegasLimit default.
    double smoothing = 1.0;
    // The baseline is re-probed every probe_multiplier * L * U[0.5, 1)
    // windows with ok calls; an integer >= 0, 0 turns the probe off.
    // Netflix default (its probeMultiplier, counted in updates).
    double probe_multiplier = 30;
    // Seed of the probe's jitter sequence; an integer in [0, 2^32 - 1]. Ours:
    // Netflix draws from ThreadLocalRandom. Give hosts different seeds to
    // keep their probes apart.
    double probe_seed = 0;
    // alpha = alpha_factor * lg(L), in calls of queue: below it the limit
    // grows by lg(L); an integer >= 1. Netflix default (alpha 3 * log10).
    double alpha_factor = 3;
    // beta = beta_factor * lg(L), in calls of queue: above it the limit
    // shrinks by lg(L), and a queue <= lg(L) grows it by beta; an integer
    // >= alpha_factor. Netflix default (beta 6 * log10).
    double beta_factor = 6;

    bool operator==(const Params&) const = default;
  };

  // Throws ParamError on invalid bounds or params.
  explicit VegasPolicy(const Bounds& bounds);
  VegasPolicy(const Bounds& bounds, const Params& params);
  // alpha_factor, beta_factor.
  // Params from a config's keys, defaults for those absent; throws ParamError.
  static Params parse_params(const ParamMap& params);
  // Netflix's Log10RootFunction of int(limit), in calls: max(1,
  // floor(log10)).
  static double log10_root(double limit);

  std::string_view name() const override { return kName; }
  double update(const Window& window) override;
  double limit() const override { return limit_; }
  // The no-load latency; its probe is one window, which holds the limit.
  Baseline baseline() const override { return {rtt_noload_ns_, false}; }
  const Params& params() const { return params_; }
  // The no-load latency baseline, in nanoseconds (0 before any ok window).
  double rtt_noload_ns() const { return rtt_noload_ns_; }

 private:
  // The rule after the probe and the baseline: the new L.
  double next_limit(double rtt_ns, bool drop, std::uint32_t inflight) const;

  Bounds bounds_;
  Params params_;
  double limit_;               // calls
  double rtt_noload_ns_ = 0;   // ns; 0 until the first ok window
  SplitMix64 probe_rng_;
  double probe_jitter_;        // dimensionless, in [0.5, 1)
  std::uint64_t probe_count_ = 0;  // windows with ok calls since the last probe
};

}  // namespace bulkhead::policies
