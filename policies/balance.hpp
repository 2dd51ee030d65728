// balance: bulkhead's own limit policy.
//
// Source: ours. It takes the latency-ratio target of Envoy's gradient
// controller, the "grow only while the limit is used" rule of Netflix's
// AIMD and Gradient2, the drop back-off of AIMD, and the periodic drain of
// BBR's ProbeRTT, and arranges them to avoid the failures that users of
// those algorithms report (../shared/ALGORITHMS.md). Each rule below is
// explained where balance.cpp applies it; docs/policies.md gives the
// measurements that put it there, and docs/balance-record.md what was
// tried instead.
//
// Model: past the dependency's capacity, every extra call in flight waits
// in a queue, so latency grows in proportion to the limit:
//     rtt ≈ base × max(1, L / W)          (W: the calls it serves at once)
// Keeping r = p50 / base at a target T = 1 + tolerance holds the limit at
// L* = T × W: a small standing queue (every worker busy, full goodput) and
// latency no more than T times the no-load latency.
//
// Rule, once per window, with S the latency (the window p50s smoothed,
// each weighted by its sample count n: S += n/(n + latency_samples) ×
// (p50 − S)) and r = S / base:
//   drop ratio ≥ drop_threshold:        L ← L × backoff        (overload)
//     and if drops persist:             base ← base × backoff (L > min), drain once they stop
//   r > T, peak in-flight ≥ L / 2:      L ← L × max(½, √(T / r))
//   limit used, r ≤ T:                  L ← L + max(0, min(1, (G − r)/(G − 1))) × max(1, L × growth)
//   otherwise (app-limited):            hold
// with G = T, or G = 1 + tolerance / 3 while the baseline is one a drain
// found slower. "Used": a call was rejected or the peak in-flight reached
// 90% of L. Both steps are per round trip (the latency plus the
// smoothing's lag); a window shorter than that takes its share of a step.
// The decrease goes halfway (in ratio) to L* each round trip and the
// increase fades to nothing at the target: one fixed point, no creep.
// Smoothing by sample count keeps a window of ten noisy samples from
// moving the limit as much as one of a thousand; without it the decrease,
// larger than the increase, turns noise into a collapse.
//
// The baseline (base, the no-load p50) is where the reference algorithms
// fail: a minimum drifts up under sustained load and the limit ratchets up
// (Netflix 165, Envoy 11579); a baseline that never rises mistakes a
// slower dependency for a queue and collapses the limit. balance never
// lets the baseline follow latency while the limit is used. It moves by:
//   following  while the limit is unused and was not 80% full on average
//              (weight baseline_follow); its first 200 samples are their
//              plain average, windows the limit binds included unless
//              they have a queue's shape (p10 ≥ p50 / 2), which drains;
//   a heal     S under base / T becomes the baseline at once, and drains;
//   drops      that persist: base × backoff, with the limit;
//   a drain    the limit drops to probe_factor × the knee (L / T, or
//              Little's law's saturated completion rate × no-load mean
//              latency when lower and the drain does not doubt that
//              latency; 0.95 of Little's knee where the last drain
//              confirmed it; after drops, the knee from before them)
//              for at least three windows, twice S and 20 calls measured
//              once in-flight fell to it; their p50 becomes the baseline,
//              up or down.
// A drain is due after probe_interval_ms with the limit in use, and waits
// for calm (r ≤ T); a window the limit binds all along at the baseline
// stands for one. It comes early when the baseline may be wrong: latency
// stuck over the target (15 round trips, or while the cuts halved the
// limit), the saturated completion rate moved by 35% (in log), a heal,
// drops that stopped, a drain that found it had started above the knee.
// What a drain finds sets the limit: a slower dependency (the baseline
// rose past T) puts it halfway (in ratio) back to the one before the cuts
// latency caused, and growth stops at G until a drain finds it no slower;
// alone on the dependency, a delay every call has scales the limit from
// before the cuts by the mean latency's rise (and a scheduled drain that
// kept its limit full with every call later measured a queue: nothing);
// after drops, the limit goes
// halfway back to the one before them, or stays at the drained one if
// that is more and the dependency is as it was. A drain costs about 15%
// of the admissions of three windows (5% at a confirmed knee), and pins
// the one host-wide limit: every process on the host sees it at once.
//
// For a dependency that other hosts' limiters share, baseline_max_ms
// bounds the baseline, and other_hosts = 1 counts as the dependency's own
// latency only what its spread p50 − p10 explains: a queue that every
// call waits in shifts the distribution, where a slower dependency
// widens it (Params, below).
//
// Where it differs from its sources: drops count only as a ratio (one
// timeout in a thousand is not overload), and windows are those of the
// daemon's controller.
#pragma once

#include <memory>
#include <string_view>

#include "policies/policy.hpp"

namespace bulkhead::policies {

class BalancePolicy : public Policy {
 public:
  static constexpr std::string_view kName = "balance";

  struct Params {
    // Standing latency ratio p50 / no-load p50 the limit aims at, minus 1;
    // dimensionless, (0, 2]. 0.6: 60% queueing delay on the p50 at the
    // target, which keeps every worker busy through the noise of a window's
    // p50 and the arrival gaps of a dependency only a little over its
    // capacity (tuned on the simulator's suite over three seeds,
    // docs/policies.md).
    double tolerance = 0.6;
    // Share of dropped samples (timeouts, back-pressure) in a window that
    // counts as overload; (0, 1].
    double drop_threshold = 0.01;
    // Factor applied to the limit on overload drops; [0.5, 1). As AIMD.
    double backoff = 0.9;
    // Largest relative increase per window, with no queue; (0, 1].
    double growth = 0.3;
    // Weight of each window's p50 in the baseline while the limit is not
    // used; [0, 1].
    double baseline_follow = 0.2;
    // Samples it takes for a window's p50 to move the smoothed latency
    // halfway; >= 0 (0: no smoothing).
    double latency_samples = 50;
    // Time between scheduled drains, in milliseconds of window time with
    // the limit in use; >= 0, 0: never (nor any early drain).
    double probe_interval_ms = 30000;
    // Limit during a drain, as a fraction of the knee estimate L / T (at
    // the target the limit is T times what the dependency serves at once);
    // (0, 1]. Not for a drain from a knee the last drain confirmed, which
    // runs at 0.95 of it (above). 0.9: over 30 seeds of the suite, 0.6
    // points less goodput lost than 0.85 (docs/balance-record.md).
    double probe_factor = 0.9;
    // The highest no-load p50 it takes for the dependency's own, in
    // milliseconds; >= 0, 0: no bound. A drain that measures more, and the
    // baseline's following, stop there: latency over (1 + tolerance) times
    // it is queueing, and the limit is cut, whatever the dependency's own
    // latency. For a dependency that many hosts call, each with its own
    // bulkheadd, whose queue a drain of one cannot tell from a slower
    // dependency (docs/config.md, "Choosing a policy"). A dependency that
    // really gets slower than that is throttled down to min_limit.
    double baseline_max_ms = 0;
    // 1 when bulkheadd on other hosts limits this dependency too (each of
    // them with other_hosts = 1), 0 when this host's limit is the only
    // one; 0 or 1. With 1, latency that every call has in common (a delay
    // that leaves the p50 - p10 spread as it was) is taken for the others'
    // queue, and only what the spread explains (a dependency k times
    // slower spreads k times wider) for the dependency's own: a drain of
    // one host's limit cannot tell the others' queue from a slower
    // dependency by its p50 (docs/config.md, "Choosing a policy"). A
    // dependency that gets slower by a fixed delay (a longer network
    // path) is then throttled like an overloaded one.
    double other_hosts = 0;

    bool operator==(const Params&) const = default;
  };

  explicit BalancePolicy(const Bounds& bounds);
  BalancePolicy(const Bounds& bounds, const Params& params);
  static Params parse_params(const ParamMap& params);

  std::string_view name() const override { return kName; }
  double update(const Window& window) override;
  double limit() const override { return limit_; }
  // The no-load p50, and a drain under way.
  Baseline baseline() const override { return {baseline_ns_, probing_}; }
  const Params& params() const { return params_; }
  // The no-load p50 estimate, in nanoseconds (0 before any ok window).
  double baseline_ns() const { return baseline_ns_; }
  // The smoothed latency, in nanoseconds.
  double latency_ns() const { return latency_ns_; }
  bool probing() const { return probing_; }

 private:
  // `latency_before`: the smoothed latency before this window.
  double steady_update(const Window& w, double p50, double weight, double latency_before);
  double probe_update(const Window& w, double p50);
  // Ends a drain that measured calls at the limit it holds: what it
  // measured becomes the baseline, and what it found (a slower dependency,
  // a delay, the knee) sets the limit.
  void settle_drain();
  // The parts of steady_update(), in the order it calls them.
  // Counts the window's drops; on overload backs the limit off (and, when
  // drops persist, the baseline) and returns true: the window moves
  // nothing else.
  bool back_off(const Window& w);
  // The baseline follows a window the limit did not bind, or joins the
  // first samples; a bound first window with a queue's shape calls a drain.
  void follow_baseline(const Window& w, double p50, double weight, bool used, bool full);
  // Takes latency far under the baseline for it (the dependency healed),
  // and makes a drain due; returns whether it did.
  bool heal();
  // The cut over the target, or the growth under it, as a `trip` share of
  // a round trip's step at latency ratio `r`.
  void step_limit(const Window& w, double r, double trip, bool used);
  // Whether a drain is due now (the schedule, a moved rate or a call for
  // one, with the limit used and latency calm); a window at the baseline
  // restarts the schedule instead.
  bool drain_due(double p50, double r, bool used, bool saturated, bool healed, double latency_before);
  // Starts a drain from this window, whose completion rate was
  // `window_rate` (calls per ns): sets the drained limit and what the
  // drain compares its measurement with.
  void start_drain(const Window& w, bool stuck, bool used, double window_rate);
  // Whether this window's drops, with the recent ones, are overload.
  bool overloaded(const Window& w) const;
  // Whether its latencies look queued (kQueuedShape).
  bool queued_shape(const Window& w) const;
  // The part of latency `p50`, with spread p50 - p10 `spread`, that is the
  // dependency's own: all of it, unless other_hosts; then no more than the
  // learned shape times the spread, nor less than `floor` (or than p50).
  double own_latency(double p50, double spread, double floor) const;
  // Whether latency with median `p50` and spread p50 - p10 `spread` is
  // every call later by the same amount than the baseline the drain
  // compares with: a delay or a queue.
  bool shifted(double p50, double spread) const;
  // After a drain that found the dependency slower, with latency `p50`,
  // spread `spread` and mean `mean`, completing `rate` calls per ns at
  // `drained_limit`: how many times more calls in flight a delay every
  // call has needs (mean over the no-load mean), or 1 if the drain may
  // have measured a queue or a dependency that serves fewer calls.
  double delay_factor(double p50, double spread, double mean, double rate, double drained_limit) const;
  // Makes the next drain due after kSoonDrainMs of window time with the
  // limit in use, unless it is due sooner.
  void drain_soon();
  // `ns`, held to baseline_max_ms.
  double bounded(double ns) const;
  double clamp(double limit) const;

  Bounds bounds_;
  Params params_;
  double limit_;
  double baseline_ns_ = 0;
  double latency_ns_ = 0;
  // Window time with the limit in use since the last drain ended.
  double since_probe_ns_ = 0;
  bool drain_called_ = false;  // by drops or a doubtful baseline: due once calm (after drops: at once)
  double cut_baseline_ns_ = 0;   // the baseline before drops cut it, until a drain measures; 0: not cut
  double limit_before_drops_ = 0;  // the limit before the drops that cut the baseline
  // The drain under way: set when it starts, read while it runs and when
  // it ends.
  struct Drain {
    double baseline_ns = 0;  // what it compares its measurement with
    bool after_drops = false;  // drops that stopped called it
    bool stuck = false;        // latency stuck over the target called it
    bool at_knee = false;      // it runs just under the knee Little's law gives
    bool undelayed = false;    // it runs at the knee without a delay the limit was scaled for
    double needed_ns = 0;      // window time it lasts at least
    double elapsed_ns = 0;
    int windows = 0;
    bool settled = false;  // in-flight fell to the drained limit
    // Over its windows once settled:
    double p50_sum = 0;     // sample-weighted
    double spread_sum = 0;  // p50 - p10, the same way
    double mean_sum = 0;    // latency sum
    double samples = 0;
    double measured_ns = 0;  // window time
    // From when it started:
    double latency_before = 0;  // the smoothed latency
    double limit_in_force = 0;  // published while latency_before was seen
    double limit_before = 0;
    double limit_before_cuts = 0;  // to restore if it finds a slower dependency
    double rate_before = 0;        // completions per ns in the window that started it
  };
  bool probing_ = false;  // a drain is under way
  Drain drain_;
  double windows_over_target_ = 0;  // in a row, while the limit is used (round trips)
  double limit_over_target_ = 0;  // the limit when that run began
  bool found_slower_ = false;     // the last drain that measured found the dependency slower
  bool knee_confirmed_ = false;   // the last drain measured under the knee, and nothing since doubts it
  double base_mean_ns_ = 0;    // the no-load mean latency, beside the p50
  double base_spread_ns_ = 0;  // the no-load spread p50 - p10, beside the baseline
  double undelayed_mean_ns_ = 0;  // the no-load mean from before a delay the limit was scaled for; 0: none
  bool drain_undelayed_ = false;  // the next drain runs at the knee without that delay
  double shape_ = 0;           // the no-load p50 over its spread p50 - p10; 0: not measured yet
  double rate_ = 0;            // completions per ns while the limit is used
  double drained_rate_ = 0;    // rate_ when the last drain ended
  double baseline_samples_ = 0;  // samples the baseline rests on (a drain counts as enough)
  double drops_ = 0;             // dropped calls among the last drop_samples_ samples, decayed
  double drop_samples_ = 0;
};

}  // namespace bulkhead::policies
