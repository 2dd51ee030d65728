// balance: bulkhead's own limit policy.
//
// Source: ours. It takes the latency-ratio target of Envoy's gradient
// controller, the "grow only while the limit is used" rule of Netflix's
// AIMD and Gradient2, the drop back-off of AIMD, and the periodic drain of
// BBR's ProbeRTT, and arranges them to avoid the failures that users of
// those algorithms report (../shared/ALGORITHMS.md).
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
// found slower (below).
// "Used" means a call was rejected or the peak in-flight reached 90% of L.
// Both steps are per round trip: a step shows in the smoothed latency a
// round trip S later plus the smoothing's lag ((1 − w) / w windows, w the
// window's smoothing weight), so a window shorter than that delay D takes
// its share (duration / D) of a step, as a power of the factor or a part
// of the increase.
// A limit the callers leave half unused is not cut, as Gradient2 holds it:
// cutting it does nothing to latency it does not cause, and the noise of
// a quiet time's few samples would wear it down to the minimum just before
// traffic returns (scenarios/low-traffic-spike lost 14 points on one seed).
// The decrease goes halfway (in ratio) to L* each round trip, so it settles a
// 4x capacity drop in a few windows without over-shooting on a smoothed
// latency that lags; the increase is fast when there is no queue (r ≈ 1)
// and fades to nothing at the target, so there is one fixed point and no
// creep. Smoothing by sample count keeps a window of ten noisy samples
// from moving the limit as much as a window of a thousand: without it the
// decrease, larger than the increase, turns noise into a collapse.
//
// The baseline (base, the no-load p50) is where the reference algorithms
// fail: a minimum drifts up under sustained load (Netflix 165, Envoy 11579)
// and the limit ratchets up; a baseline that never rises mistakes a slower
// dependency for queueing and collapses the limit. balance never lets the
// baseline follow latency while the limit is used (a minimum of noise is
// biased low, a queue biased high). Instead:
//   - while the limit is not used (no queue the limit causes), it follows
//     the latency (weight baseline_follow); not when the window kept the
//     limit 80% full on average (Little's law), with no call turned away
//     by chance: with a few dozen calls a window, demand a little over
//     capacity gives such windows while a queue stands under the limit,
//     and following them ratchets the baseline up (docs/policies.md);
//   - until it rests on 200 samples, it is their plain average, and a
//     window the limit binds joins it too unless the window has a queue's
//     shape: its p10 at least half its p50 (a queue in front of a
//     saturated dependency delays every call about as much, where the
//     dependency's own spread puts the p10 far under the p50). A window
//     with that shape calls a drain: the first one, say, after callers
//     queued before the daemon knew the dependency;
//   - when the smoothed latency falls under base / T (no noise does that:
//     the dependency healed), it drops to it at once and drains soon;
//   - it drains: the limit drops to probe_factor (0.9) times the knee for
//     at least three windows, twice the latency and 20 calls measured;
//     the sample-weighted p50 of the probe windows after in-flight fell
//     to the drained limit (the calls queued before it gone) becomes the
//     baseline, up or down.
//     The knee is L / T (since L* = T × W), or, when lower, the
//     smoothed completion rate of saturated windows times the no-load mean
//     latency (Little's law: W = capacity × mean service time), which
//     holds even when the limit overshot; but L / T alone for a drain
//     called because latency stayed over the target (below), which
//     doubts that no-load latency: a dependency k times slower completes
//     k times fewer calls, and the rate puts the knee k times too low. A
//     drain that stayed above the knee would measure queueing and
//     ratchet the baseline up.
//     A drain started above the knee when its latency fell in proportion
//     to the limit (all queue) and its completion rate did not fall: one
//     under the knee serves its limit over the no-load latency, fewer
//     calls than the limit before it, whatever the latency before it was
//     (after a heal, the slower dependency's, which falls far more than
//     the limit either way).
//     A drain that only the schedule or a moved rate calls, with the limit
//     in use, after a drain that measured under the knee (latency did not
//     fall in proportion to the limit, no slower dependency, no drops,
//     and no heal since), goes to 0.95 of the knee Little's law gives
//     instead: that drain's mean latency is the no-load one, so the knee
//     is what the dependency serves at once, and L / T (the limit sits
//     short of the target, where the p50 ratio overstates the queue)
//     falls under it (scenarios/steady-overload's drain at 30 s went to
//     11 calls for its 16 workers, now to 14). Its own latency falls by
//     the whole queue while the limit falls less, so it calls no early
//     drain for having started above the knee; and a drain over the knee
//     by mistake measures the queue of a limit D, so the knee it leaves
//     is D, and the next drain at the knee comes 5% lower.
// A drain is due after probe_interval_ms of window time with the limit in
// use, starts only in a window that uses the limit (unused, the baseline
// follows the latency by itself), and waits for calm (r ≤ T): one that starts
// as the dependency loses capacity measures the queue it is building. A
// window that the limit binds all along, with its p50 within 0.15 × tolerance
// of the baseline and the smoothed latency no more than that over it,
// restarts that time and the rate a drain compares with: the limit is under
// the knee there, so the window saw what a drain would measure (not a window
// whose latency just became the baseline: it is at it by construction; nor,
// on a baseline a drain found slower, one after a window over that band:
// as a heal takes such a baseline away, one window dips to it). It
// comes early when the baseline may be what is wrong: latency stayed over
// the target while the cuts halved the limit, or for 15 windows (round
// trips, when calls outlast windows) — the dependency may have got slower,
// with no queue to shrink, and the drain tells (waiting for the halving to
// show in the smoothed latency takes its lag, long when a cut limit leaves
// a few calls to a window); once calm, when the completion rate of
// saturated windows (time-average in-flight near the limit) moved by more
// than 35% (in log) since the last drain (the capacity moved, and its
// latency may have: a slow latency creep cuts the limit below the knee
// without ever staying over the target for long); a rate that rose with
// latency within the target is the limit's own climb under the knee, and
// moves the rate compared with up instead;
// and again soon when a drain found latency fell by more than the target
// queue explains (it started above the knee). A drain that finds the
// baseline rose past the target (the dependency got slower, not busier)
// puts the limit back halfway (in ratio) to the one from before the cuts
// that latency caused, since the dependency still serves as many calls at
// once (halfway: other limiters' queue in it looks the same). From there
// the limit grows only while r ≤ 1 + tolerance / 3 (and is cut, as ever,
// over T) until a drain finds the dependency no slower: that baseline
// rests on one drain of a few calls, which may have measured the others'
// queue, and the full target on top of it stacks a queue on a queue
// (scenarios/small-dependency: p99 5.7x to 5.1x no-load over 30 seeds,
// docs/policies.md). A window
// whose completions are five Poisson deviations off the smoothed rate (the
// capacity changed) restarts the rate. A drain costs about 15% of the
// admissions of three windows (5% at the knee), and pins the one host-wide
// limit: every process on the host sees it at once.
//
// Alone on the dependency (other_hosts = 0), a drain that latency stuck
// over the target called and that finds it slower can tell a delay every
// call has (a longer network path) from a slower dependency: the delay
// gives the drain a queue's shape (its p10 at least half its p50) where
// the no-load latency had none, leaves the spread p50 - p10 as it was (at
// most 3x the no-load one: a slower dependency widens it, and a drain of
// a few dozen of its calls can show a queue's shape by chance), and the
// dependency still serves as many calls a second, each in flight
// longer. A queue has that shape too, so
// only a drain whose completion rate fell by at least half as much as the
// limit (in log; over the knee it serves what the dependency can, as many
// calls as before) counts: the limit goes to the one from before the cuts
// times the rise of the mean latency (Little's law), not halfway back
// (scenarios/network-delay: 0.5 points under the best reference to 0.3
// over 30 seeds, docs/balance-record.md). When the delay ends, a queue takes its
// place at the same latency (the same limit over the same capacity), and
// only a drain can tell: a drain that finds the delayed baseline lower (by
// more than the band of a confirming window) calls the next one soon,
// under the knee without the delay (the saturated completion rate times
// the no-load mean from before it), where a dependency back as it was has
// no queue; if that one finds it lower too, the limit shrinks by the fall
// of the mean latency (the delay rule undone). In scenarios/network-delay
// 13 seeds of 30 held the delayed baseline to the end of the run, with a
// queue in the delay's place (p50 50-75 ms from 65 s, 21-28 on the
// others); 3 do now (docs/policies.md).
//
// Drops that persist (drop_threshold of the last ~500 calls, and at least
// three) lower the baseline with the limit, and call for a drain once they stop:
// calls that keep timing out under the limit were queued, so the latency the
// baseline rests on held a queue (a drain that others kept loaded: several
// limiters on one dependency, each host with its own daemon). Without it,
// each drain of one limiter among several adopts the others' queue as its
// baseline and the limits ratchet up until calls time out. A tail that
// times out a call in a few hundred backs the limit off in the window it
// lands in, but must not wear the baseline down (scenarios/slow-ramp).
// The drain they call starts at the first window without drops, whatever
// r says (the cuts, not a queue, put it over T), at the knee from before
// the drops (not at the minimum they may have cut the limit to, where it
// would gather its calls one at a time), compares what it measures with
// the baseline from before the cuts, and puts the limit halfway (in ratio)
// back to the one before the drops, or keeps the drained limit if that is
// more and the dependency is as it was: after an outage the limit is back
// within a second (scenarios/outage), not at its minimum until latency
// stuck over the cut baseline calls a drain.
// baseline_max_ms, when set, bounds the baseline, whatever a drain
// measures: latency over T times the bound is then cut as a queue. Every
// limiter of a dependency that many hosts share then sheds the shared
// queue, where each would adopt it (the ratchet above); a dependency that
// really got slower than the bound is throttled like an overloaded one.
// other_hosts = 1 says that bulkheadd on other hosts limits the dependency
// too. A queue every call waits in about as long shifts the whole latency
// distribution, leaving its spread p50 - p10 as it was, where a dependency
// k times slower spreads k times wider. So what a drain measures, and what
// an unused limit's baseline follows, counts as the dependency's own only
// as far as the spread explains: at most shape x spread, the shape (no-load
// p50 over spread) from the last drain that found no rise (the
// exponential's 1.18, the least usual one, before any), and the rest is
// the others' queue, which every host's limiter then sheds. Over 8
// limiters (scenarios/many-processes-per-process): p99 5.2x no-load to
// 1.4x, and 1.3x run for four minutes (vegas 2.0x). A dependency
// that gets slower by a delay every call has (a longer network path) is
// throttled like an overloaded one: no limiter can tell that delay from
// the others' queue (scenarios/network-delay: 63% of capacity, where
// without other_hosts it serves 99%).
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
  // Whether this window's drops, with the recent ones, are overload.
  bool overloaded(const Window& w) const;
  // Whether its latencies look queued (kQueuedShape).
  bool queued_shape(const Window& w) const;
  // The part of latency `p50`, with spread p50 - p10 `spread`, that is the
  // dependency's own: all of it, unless other_hosts; then no more than the
  // learned shape times the spread, nor less than `floor` (or than p50).
  double own_latency(double p50, double spread, double floor) const;
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
  // Window time with the limit in use since the last drain ended, and
  // window time within the current one.
  double since_probe_ns_ = 0;
  bool drain_called_ = false;  // by drops or a doubtful baseline: due once calm (after drops: at once)
  double cut_baseline_ns_ = 0;   // the baseline before drops cut it, until a drain measures; 0: not cut
  double probe_baseline_ns_ = 0;  // what the drain under way compares its measurement with
  double limit_before_drops_ = 0;  // the limit before the drops that cut the baseline
  bool probe_after_drops_ = false;  // the drain under way is the one they called
  bool probing_ = false;
  double probe_elapsed_ns_ = 0;
  double probe_needed_ns_ = 0;
  int probe_windows_ = 0;
  bool probe_settled_ = false;  // in-flight fell to the drained limit
  double windows_over_target_ = 0;  // in a row, while the limit is used (round trips)
  double limit_over_target_ = 0;  // the limit when that run began
  double latency_before_probe_ = 0;
  double limit_in_force_ = 0;  // published while latency_before_probe_ was seen
  double probe_p50_sum_ = 0;   // sample-weighted, over probe windows once settled
  double probe_spread_sum_ = 0;  // p50 - p10, the same way
  double probe_samples_ = 0;
  double limit_before_probe_ = 0;
  double limit_before_cuts_ = 0;  // to restore if the drain finds a slower dependency
  bool found_slower_ = false;     // the last drain that measured found the dependency slower
  bool knee_confirmed_ = false;   // the last drain measured under the knee, and nothing since doubts it
  bool drain_at_knee_ = false;    // the drain under way runs just under the knee Little's law gives
  double probe_measured_ns_ = 0;   // window time the drain measured (once settled)
  double probe_mean_sum_ = 0;  // latency sum over the same windows
  double base_mean_ns_ = 0;    // the no-load mean latency, beside the p50
  double base_spread_ns_ = 0;  // the no-load spread p50 - p10, beside the baseline
  double rate_before_probe_ = 0;  // completions per ns in the window that started the drain
  bool probe_stuck_ = false;      // latency stuck over the target called the drain under way
  double undelayed_mean_ns_ = 0;  // the no-load mean from before a delay the limit was scaled for; 0: none
  bool drain_undelayed_ = false;  // the next drain runs at the knee without that delay
  bool probe_undelayed_ = false;  // the drain under way does
  double shape_ = 0;           // the no-load p50 over its spread p50 - p10; 0: not measured yet
  double rate_ = 0;            // completions per ns while the limit is used
  double drained_rate_ = 0;    // rate_ when the last drain ended
  double baseline_samples_ = 0;  // samples the baseline rests on (a drain counts as enough)
  double drops_ = 0;             // dropped calls among the last drop_samples_ samples, decayed
  double drop_samples_ = 0;
};

}  // namespace bulkhead::policies
