#include "policies/balance.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "policies/params.hpp"

namespace bulkhead::policies {
namespace {

constexpr std::array<ParamSpec<BalancePolicy::Params>, 10> kParamSpecs{{
    {"tolerance", &BalancePolicy::Params::tolerance, Range::open_closed(0, 2)},
    {"drop_threshold", &BalancePolicy::Params::drop_threshold, Range::open_closed(0, 1)},
    {"backoff", &BalancePolicy::Params::backoff, Range::closed_open(0.5, 1)},
    {"growth", &BalancePolicy::Params::growth, Range::open_closed(0, 1)},
    {"baseline_follow", &BalancePolicy::Params::baseline_follow, Range::closed(0, 1)},
    {"latency_samples", &BalancePolicy::Params::latency_samples, Range::at_least(0)},
    {"probe_interval_ms", &BalancePolicy::Params::probe_interval_ms, Range::at_least(0)},
    {"probe_factor", &BalancePolicy::Params::probe_factor, Range::open_closed(0, 1)},
    {"baseline_max_ms", &BalancePolicy::Params::baseline_max_ms, Range::at_least(0)},
    {"other_hosts", &BalancePolicy::Params::other_hosts, Range::closed(0, 1).integers()},
}};

// A probe lasts at least this many windows: one (or more) while the calls
// admitted before it leave, then the ones it measures.
constexpr int kProbeMinWindows = 3;
// A probe whose in-flight never falls to its limit (calls that hang until
// they time out) ends after this many windows, measuring nothing.
constexpr int kProbeMaxWindows = 50;
// A probe ends with no fewer calls measured than this (a drained limit of
// a few calls of a slow dependency completes one or two a window; their
// p50 is noise, and it becomes the baseline).
constexpr double kProbeSamples = 20;
// A drain window of at least kProbeSamples calls, after as many measured,
// whose p50 is this many times theirs, or a part of it, saw the
// dependency change under the drain, which then measures from that
// window on. Mixed, the two say nothing: in
// scenarios/small-dependency with its seed raised by 3300, the drain at
// 9.8 s measured 3.8 ms, then 17.8 ms from the 5x slowdown at 10 s; its
// 6.5 ms and the spread of the mixture made the next drain take the
// slower dependency for a delay, and the limit went to 43 for 8 workers.
// Three times, since the median of 20 calls moves by a third at one
// standard error.
constexpr double kDrainChangeRatio = 3;
// Windows in a row above the target (while shrinking) after which the
// baseline is re-measured at once: queueing would have receded by then.
// A window shorter than a round trip (latency plus smoothing lag) counts
// as its share of one.
constexpr int kStuckWindows = 15;
// Elasticity of latency to the limit (d ln latency / d ln limit) over a
// drain above which the drain was still above the knee.
constexpr double kKneeElasticity = 0.85;
// A window's p50 is at the baseline within this share of the tolerance
// (0.09 of the baseline at the default tolerance: about a histogram bucket
// and a half).
constexpr double kConfirmShare = 0.15;
// The limit counts as used when the peak in-flight reaches this share of it.
constexpr double kUsedShare = 0.9;
// Weight of each used window's completion rate in the smoothed rate.
constexpr double kRateWeight = 0.3;
// A window is saturated when its time-average in-flight reaches this share
// of the limit.
constexpr double kSaturatedShare = 0.8;
// A window whose completions are this many Poisson standard deviations
// off the smoothed rate means the dependency's capacity changed.
constexpr double kRateJump = 5;
// A saturated completion rate this far (in log) from the one after the
// last drain calls for a drain.
constexpr double kRateDrift = 0.35;
// The time with the limit in use, in milliseconds, until the next drain
// after one that found it had started above the knee.
constexpr double kSoonDrainMs = 2000;
// Samples a baseline must rest on before a limit in use trusts it without
// a drain.
constexpr double kTrustedSamples = 200;
// Drops that persist lower the baseline: their ratio over about this many
// recent samples, and at least kMinDrops of them. One window of fifty calls
// with one timeout in it backs the limit off, but a dependency's tail that
// times out one call in five hundred must not wear the baseline down.
constexpr double kDropSamples = 500;
constexpr double kMinDrops = 3;
// A drain that finds the dependency slower puts the limit back this share
// of the way (in ratio) from the cut limit to the one before the cuts.
constexpr double kRestoreShare = 0.5;
// A window whose fastest tenth took at least this share of its median
// latency has a queue's shape. A queue in front of a saturated dependency
// delays every call by about as much (each waits for the same number of
// completions: docs/balance-record.md), where the dependency's own spread puts
// the p10 far under the p50: 0.15 of it for exponential service times,
// 0.28 for lognormal ones of sigma 1, and with a standing queue of 0.6 of
// the workers (balance's target), about 0.55 for exponential ones. Latency
// that varies little by itself (near-constant service times) has a
// queue's shape too, and drains: the safe side.
constexpr double kQueuedShape = 0.5;
// After a drain that found the dependency slower, the limit grows only
// while latency is within this share of the tolerance over the baseline.
constexpr double kSlowerGrowthShare = 1.0 / 3;
// A drain that completes this share fewer calls than the limit before it
// did ran under the knee (Poisson noise over its two windows or so of a
// hundred calls and more is a few percent).
constexpr double kRateFallShare = 0.1;
// A drain at the knee that the last drain confirmed runs at this share of
// it: the knee rests on a smoothed rate and a drain's mean latency, a few
// percent off either way.
constexpr double kKneeDrainShare = 0.95;
// A drain that latency stuck over the target called, and that found the
// dependency slower with a queue's shape where its no-load latency had
// none, ran under the knee when its completion rate fell by at least this
// share of the limit's fall (in log); over the knee it serves what the
// dependency can, about as many calls as before.
constexpr double kDelayRateElasticity = 0.5;
// A delay every call has leaves the spread p50 - p10 as it was, where a
// dependency k times slower widens it k times. A drain of a few dozen
// calls may show a queue's shape by chance (its p10 at half its p50), so
// one whose spread grew past this many times the no-load one found a
// slower dependency, not a delay. Over 100 seeds, the delay rule's drains
// in scenarios/network-delay measured 0.39 to 1.90 times the no-load
// spread; one in sudden-slowdown (seed +9800), 12.6 times, took the 8x
// slower dependency for a delay of 14.9x, and the limit went to 562 for
// 32 workers (docs/balance-record.md).
constexpr double kDelaySpreadGrowth = 3;
// The no-load p50 over the spread p50 - p10 of exponential service times:
// ln 2 / (ln 2 - ln(10/9)) = 1.18, the least of the usual shapes (lognormal
// ones of sigma 1 give 1.38, near-constant ones far more). Until a drain
// has measured the dependency's own, it credits the dependency with the
// least latency its spread explains.
constexpr double kExponentialShape = 1.18;

// Whether latency whose fastest tenth took `p10` and median `p50` has a
// queue's shape (kQueuedShape).
bool queued(double p10, double p50) { return p10 >= kQueuedShape * p50; }

// A window's spread, p50 - p10: what a queue every call waits in about as
// long leaves as it was, and what a dependency k times slower multiplies
// by k.
double spread_of(const Window& w) {
  return w.rtt_p50_ns > w.rtt_p10_ns ? static_cast<double>(w.rtt_p50_ns - w.rtt_p10_ns) : 0.0;
}

}  // namespace

BalancePolicy::BalancePolicy(const Bounds& bounds) : BalancePolicy(bounds, Params{}) {}

BalancePolicy::BalancePolicy(const Bounds& bounds, const Params& params)
    : bounds_(bounds), params_(params), limit_(bounds.initial) {
  validate_bounds(bounds_);
  check_params(params_, kParamSpecs);
}

BalancePolicy::Params BalancePolicy::parse_params(const ParamMap& params) {
  return read_params(kName, params, kParamSpecs);
}

void BalancePolicy::drain_soon() {
  since_probe_ns_ = std::max(since_probe_ns_, std::max(0.0, params_.probe_interval_ms - kSoonDrainMs) * 1e6);
}

double BalancePolicy::clamp(double limit) const { return std::clamp(limit, bounds_.min, bounds_.max); }

double BalancePolicy::bounded(double ns) const {
  return params_.baseline_max_ms > 0 ? std::min(ns, params_.baseline_max_ms * 1e6) : ns;
}

double BalancePolicy::own_latency(double p50, double spread, double floor) const {
  if (params_.other_hosts == 0 || spread == 0) return p50;
  const double shape = shape_ > 0 ? shape_ : kExponentialShape;
  return std::min(p50, std::max(floor, shape * spread));
}

bool BalancePolicy::queued_shape(const Window& w) const {
  return queued(static_cast<double>(w.rtt_p10_ns), static_cast<double>(w.rtt_p50_ns));
}

bool BalancePolicy::shifted(double p50, double spread) const {
  // A queue's shape now, none in the no-load latency, and the no-load
  // spread: every call has the same added latency, a delay or a queue.
  return queued(p50 - spread, p50) && !queued(drain_.baseline_ns - base_spread_ns_, drain_.baseline_ns) &&
         spread <= kDelaySpreadGrowth * base_spread_ns_;
}

double BalancePolicy::delay_factor(double p50, double spread, double mean, double rate, double drained_limit) const {
  // Only alone on the dependency: other hosts' queue shifts every call
  // the same way (own_latency()).
  if (params_.other_hosts != 0 || !drain_.stuck || base_mean_ns_ <= 0) return 1;
  // Not a queue: the drain ran under the knee, its completion rate down
  // with its limit.
  const double limit_fell = std::log(drain_.limit_in_force / std::max(drained_limit, 1.0));
  const bool under_knee = std::log(drain_.rate_before / rate) > kDelayRateElasticity * limit_fell;
  return shifted(p50, spread) && under_knee ? std::max(1.0, mean / base_mean_ns_) : 1.0;
}

bool BalancePolicy::overloaded(const Window& w) const {
  return static_cast<double>(w.dropped) >= params_.drop_threshold * static_cast<double>(w.samples());
}

double BalancePolicy::update(const Window& w) {
  if (w.samples() == 0) return limit_;
  const double p50 = static_cast<double>(w.rtt_p50_ns);
  const double n = static_cast<double>(w.ok);
  const double weight = n / (n + params_.latency_samples);
  const double latency_before = latency_ns_;
  if (w.ok > 0) {
    if (baseline_ns_ == 0) {
      // The baseline's first value: steady_update() counts the window's
      // samples in it, or calls a drain when the limit bound and the
      // window has a queue's shape (callers may have been queueing since
      // before the daemon knew the dependency).
      baseline_ns_ = latency_ns_ = p50;
      base_mean_ns_ = w.rtt_mean_ns();
    }
    latency_ns_ += weight * (p50 - latency_ns_);
  }
  const double limit = probing_ ? probe_update(w, p50) : steady_update(w, p50, weight, latency_before);
  // However the baseline moved (a first window, following, a drain), it
  // stays within baseline_max_ms, and the no-load mean latency with it.
  if (const double held = bounded(baseline_ns_); held < baseline_ns_) {
    base_mean_ns_ *= held / baseline_ns_;
    baseline_ns_ = held;
  }
  return limit;
}

double BalancePolicy::steady_update(const Window& w, double p50, double weight, double latency_before) {
  const bool used = w.rejected > 0 || w.max_inflight >= kUsedShare * limit_;
  if (back_off(w)) return limit_;
  if (w.ok == 0) return limit_;

  // Drains fall due after so much time with the limit in use; unused, the
  // baseline follows the latency by itself.
  const double duration = static_cast<double>(std::max<std::uint64_t>(w.duration_ns, 1));
  if (used) since_probe_ns_ += duration;
  // The completion rate tells what the dependency can do only while the
  // limit binds all along: the time-average in-flight (Little's law: the
  // latency sum over the window's length) near the limit, not a burst
  // that touched it. A window far outside the smoothed rate's Poisson
  // noise means its capacity changed: start over from that window.
  const double n = static_cast<double>(w.ok);
  const double expected = rate_ * duration;
  const bool jumped = std::abs(n - expected) > kRateJump * std::sqrt(std::max(expected, 1.0));
  const bool full = static_cast<double>(w.rtt_sum_ns) / duration >= kSaturatedShare * limit_;
  const bool saturated = used && full;
  if (saturated) rate_ = rate_ == 0 || jumped ? n / duration : rate_ + kRateWeight * (n / duration - rate_);

  follow_baseline(w, p50, weight, used, full);
  const bool healed = heal();
  const double r = latency_ns_ / std::max(baseline_ns_, 1.0);
  // A step of the limit shows in the smoothed latency a round trip later,
  // plus the smoothing's own lag ((1 - weight) / weight windows: a few when
  // windows hold few calls). With that delay longer than the window, a
  // full step each window would overshoot by several steps before the
  // first one is seen. Each window takes its share of the delay's step,
  // and counts as that share of a window toward a stuck drain (a queue
  // recedes in round trips, not windows).
  const double lag = weight > 0 ? duration * (1 - weight) / weight : 0.0;
  const double trip = std::min(1.0, duration / std::max(latency_ns_ + lag, 1.0));
  step_limit(w, r, trip, used);

  // Drain early when the baseline may be what is wrong: latency over the
  // target for kStuckWindows, or long enough for the cuts to halve the
  // limit. A queue would have receded by then, or a drain settles it: a
  // drain under the knee sees the baseline either way, and when that rose
  // puts the limit back. Waiting to see whether the halving helped costs
  // round trips of the smoothed latency, whose lag is long when the cut
  // limit leaves a few calls to a window (scenarios/small-dependency).
  const bool stuck = windows_over_target_ >= kStuckWindows ||
                     (windows_over_target_ > 0 && limit_ <= limit_over_target_ / 2);
  const bool due = drain_due(p50, r, used, saturated, healed, latency_before);
  if (params_.probe_interval_ms > 0 && (due || stuck)) start_drain(w, stuck, used, n / duration);
  return limit_;
}

bool BalancePolicy::back_off(const Window& w) {
  drops_ += static_cast<double>(w.dropped);
  drop_samples_ += static_cast<double>(w.samples());
  if (drop_samples_ > kDropSamples) {
    drops_ *= kDropSamples / drop_samples_;
    drop_samples_ = kDropSamples;
  }
  if (overloaded(w)) {
    const double limit_before_backoff = limit_;
    limit_ = clamp(std::floor(limit_ * params_.backoff));
    if (drops_ >= std::max(kMinDrops, params_.drop_threshold * drop_samples_)) {
      if (cut_baseline_ns_ == 0) {
        cut_baseline_ns_ = baseline_ns_;
        limit_before_drops_ = limit_before_backoff;
      }
      // Calls that keep timing out under the limit were queued, so the
      // latency the baseline rests on held a queue: a drain that others
      // kept loaded (several limiters on one dependency, each host with its
      // own daemon). Without this cut, each drain of one limiter among
      // several adopts the others' queue as its baseline, and the limits
      // ratchet up until calls time out. The drain this calls once the
      // drops stop measures the baseline again (drain_.after_drops).
      // Not below what can still lower the limit: at its minimum, a cut
      // only moves the baseline toward zero (and bulkhead_policy_baseline_
      // seconds with it) for as long as an outage lasts.
      if (limit_before_backoff > bounds_.min) {
        baseline_ns_ *= params_.backoff;
        base_mean_ns_ *= params_.backoff;
      }
      drain_called_ = true;
    }
    return true;
  }
  return false;
}

void BalancePolicy::follow_baseline(const Window& w, double p50, double weight, bool used, bool full) {
  const double n = static_cast<double>(w.ok);
  // While the limit is used only a drain moves the baseline: following
  // the latency down there would make it a minimum of noise, biased low,
  // and the limit would shrink to nothing.
  // Until it rests on kTrustedSamples samples, the baseline is their
  // plain average (light traffic gives windows of one or two calls), and
  // a window the limit binds joins it too when it has no queue's shape:
  // the limit then holds little or no queue, and a drain would measure
  // about the same latency at the cost of the calls it turns away (at 70%
  // load in scenarios/latency-noise, about 150 at the start of every run).
  const bool untrusted = baseline_samples_ < kTrustedSamples;
  // Nor a window that kept the limit full on average (`full`, as
  // steady_update() counts it for the rate) without turning a call away: with a few dozen calls a
  // window, demand a little over capacity gives such windows by chance
  // while a queue stands under the limit, and following them ratcheted the
  // baseline up (scenarios/slow-calls: 106 to 179 ms by 30 s for a p50
  // of 111, docs/policies.md). Not while
  // the baseline is untrusted: its first windows join it as said above.
  if ((!used && (untrusted || !full)) || (untrusted && !queued_shape(w))) {
    const double follow = untrusted ? n / (baseline_samples_ + n) : params_.baseline_follow * weight;
    // With other hosts' limiters on the dependency, a limit this host
    // leaves unused is no sign that the dependency has no queue: follow
    // only what its spread explains.
    const double own = untrusted ? p50 : own_latency(p50, spread_of(w), baseline_ns_);
    baseline_ns_ += follow * (own - baseline_ns_);
    base_mean_ns_ += follow * (w.rtt_mean_ns() * (own < p50 ? own / p50 : 1.0) - base_mean_ns_);
    base_spread_ns_ += follow * (spread_of(w) - base_spread_ns_);
    baseline_samples_ += n;
  } else if (untrusted) {
    // The limit binds, the window has a queue's shape, and the baseline
    // rests on too few calls to tell (a quiet time's handful, or a first
    // window queued since before the daemon knew the dependency): measure
    // it.
    drain_called_ = true;
  }
}

bool BalancePolicy::heal() {
  const double tolerance = 1 + params_.tolerance;
  // Latency far under the baseline is no noise of a smoothed p50: the
  // dependency got faster (it healed). Take it as the baseline now, and
  // drain soon to measure the real one (the smoothed latency is still
  // falling).
  const bool healed = latency_ns_ * tolerance < baseline_ns_;
  if (healed) {
    // The mean latency scales with a smoothed latency still falling: the
    // knee it gives is in doubt until a drain measures.
    knee_confirmed_ = false;
    base_mean_ns_ *= latency_ns_ / baseline_ns_;
    baseline_ns_ = latency_ns_;
    since_probe_ns_ = std::max(since_probe_ns_, params_.probe_interval_ms * 1e6);
  }
  return healed;
}

void BalancePolicy::step_limit(const Window& w, double r, double trip, bool used) {
  const double tolerance = 1 + params_.tolerance;
  if (used && r > tolerance) {
    if (windows_over_target_ == 0) limit_over_target_ = limit_;
    windows_over_target_ += trip;
  } else {
    windows_over_target_ = 0;
  }
  // A limit used less than half is not what makes latency: hold it, as
  // Gradient2 does. Cutting it does nothing to latency it does not cause,
  // and the noise of a quiet time's few samples would wear it down to the
  // minimum just before traffic returns (scenarios/low-traffic-spike lost
  // 14 points on one seed).
  if (r > tolerance && 2.0 * w.max_inflight >= limit_) {
    limit_ = clamp(limit_ * std::pow(std::max(0.5, std::sqrt(tolerance / r)), trip));
  } else if (used) {
    // 1 with no queue, 0 at the target; at least one call per round trip
    // with no queue, so that a collapsed limit climbs back. On a baseline
    // a drain found slower, growth stops short of the target: that drain
    // may have measured other limiters' queue, and T times it is a queue
    // on a queue (the limit is still cut only over the target).
    const double target = found_slower_ ? 1 + kSlowerGrowthShare * params_.tolerance : tolerance;
    const double room = std::clamp((target - r) / (target - 1), 0.0, 1.0);
    limit_ = clamp(limit_ + trip * room * std::max(1.0, limit_ * params_.growth));
  }
}

bool BalancePolicy::drain_due(double p50, double r, bool used, bool saturated, bool healed, double latency_before) {
  const double tolerance = 1 + params_.tolerance;
  // A dependency whose capacity moved may have moved its latency too
  // (a slow creep never keeps latency over the target for long: the limit
  // follows it down, below the knee): drain once calm when the saturated
  // completion rate moved by more than kRateDrift since the last drain.
  // Under the knee the rate follows the limit, so a rate that rose while
  // latency was within the target is the limit's own climb, no news of the
  // dependency: the rate to compare with follows it up, and a fall counts
  // from the highest. (A limit climbing back after a drain, or after the
  // capacity came back, otherwise met a drain at every 35% of its climb:
  // three in the three seconds after scenarios/capacity-drop's workers
  // returned.)
  if (drained_rate_ == 0) drained_rate_ = rate_;
  if (saturated && r <= tolerance) drained_rate_ = std::max(drained_rate_, rate_);
  // A window the limit binds all along with its p50 at the baseline, and
  // the smoothed latency no higher, does what a scheduled drain would: the
  // limit is at or under the knee, where latency is the no-load latency,
  // and the baseline is that latency at this completion rate. It restarts
  // the schedule and the rate a drain compares with; a drain now would
  // only cost goodput (a limit climbing after capacity came back met
  // drains it did not need: scenarios/capacity-grows). It also stands for
  // the drain of a dependency that healed (latency stopped falling at the
  // new baseline); one that drops or a baseline of a few calls called for
  // stays due, since their baseline itself is in doubt. Not the window
  // whose latency just became the baseline (the dependency healed): it is
  // at the baseline by construction, and the latency is still falling (in
  // scenarios/small-dependency the limit then held twice the calls at twice
  // the p50 for the rest of the run: docs/balance-record.md). Nor, on a baseline
  // a drain found slower, a window that follows one with the smoothed
  // latency over the band: a heal takes such a baseline away (a delay on
  // every call that ends), and as the slow calls leave, one window dips to
  // it (in scenarios/network-delay that window restarted the schedule, and
  // the limit held a queue in the delay's place for 30 s more).
  const double band = kConfirmShare * params_.tolerance;
  const double at_base = (1 + band) * baseline_ns_;
  if (!healed && saturated && std::abs(p50 - baseline_ns_) <= band * baseline_ns_ && latency_ns_ <= at_base &&
      (!found_slower_ || latency_before <= at_base)) {
    since_probe_ns_ = 0;
    drained_rate_ = rate_;
  }
  const bool rate_moved = drained_rate_ > 0 && std::abs(std::log(rate_ / drained_rate_)) > kRateDrift;
  // A scheduled drain waits for calm: one that starts as the dependency
  // loses capacity measures the queue it is building, not the baseline.
  // Not one that drops called by cutting the baseline: latency over the
  // cut baseline is no news, and waiting for it to come under the target
  // held the limit at its minimum for 17 s after a 20 s outage, until a
  // drain for latency stuck over the target (few calls at the minimum make
  // for slow round trips of the smoothed latency). The first window
  // without drops is calm enough.
  const bool calm = r <= tolerance || cut_baseline_ns_ > 0;
  return (drain_called_ || since_probe_ns_ >= params_.probe_interval_ms * 1e6 || rate_moved) && used && calm;
}

void BalancePolicy::start_drain(const Window& w, bool stuck, bool used, double window_rate) {
  const double tolerance = 1 + params_.tolerance;
  windows_over_target_ = 0;
  const bool called = drain_called_ || stuck;
  drain_called_ = false;
  drain_ = Drain{};
  // What the drain compares its measurement with: the baseline before
  // drops cut it, if they did.
  drain_.baseline_ns = cut_baseline_ns_ > 0 ? cut_baseline_ns_ : baseline_ns_;
  drain_.after_drops = cut_baseline_ns_ > 0;
  probing_ = true;
  // Long enough for calls admitted before the drain to finish.
  drain_.needed_ns = 2 * latency_ns_;
  drain_.limit_before = limit_;
  drain_.rate_before = window_rate;
  drain_.stuck = stuck;
  // Cut for latency that may not have been a queue: if the drain finds
  // the baseline itself rose past the target, the cuts were for nothing.
  drain_.limit_before_cuts = drain_.after_drops ? std::max(limit_, limit_before_drops_)
                             : stuck              ? std::max(limit_, limit_over_target_)
                                                  : limit_;
  drain_.latency_before = latency_ns_;
  drain_.limit_in_force = w.limit > 0 ? w.limit : limit_;
  // Below the knee: at the target the limit is T x W, so L / T is W;
  // and by Little's law W is the completion rate times the no-load mean
  // latency, which is what to trust when the two disagree (the limit
  // overshot, or the dependency lost capacity). Not for a stuck drain:
  // it is there because the no-load latency itself is in doubt, and a
  // dependency k times slower completes k times fewer calls, so the rate
  // times the old mean latency puts the knee k times too low (one call
  // of eight in scenarios/small-dependency, for the 20 calls the drain
  // waits for). L / T of a limit already cut for that latency is low
  // enough.
  const double knee = rate_ * base_mean_ns_;
  const bool trust_knee = knee > 0 && !stuck;
  const double below = trust_knee ? std::min(limit_ / tolerance, knee) : limit_ / tolerance;
  // From a knee the last drain confirmed (it measured under the knee: its
  // latency did not fall in proportion to its limit, it found no slower
  // dependency, no drops came, and no heal since), a drain that only the
  // schedule or a moved rate calls, with the limit in use, runs just under
  // the knee Little's law gives: that drain's mean latency is the no-load
  // one, so the knee is what the dependency serves at once, and L / T
  // falls under it wherever the limit sits short of the target, where
  // the p50 ratio overstates the queue (scenarios/steady-overload's drain
  // at 30 s went to 11 calls for its 16 workers, now to 14). Its own
  // latency falls by the whole queue while the limit falls less, so it
  // calls no early drain for having started above the knee; and a drain
  // over the knee by mistake measures the queue of a limit D, so the
  // knee it leaves is D, and the next drain at the knee comes 5% lower.
  drain_.at_knee = trust_knee && knee_confirmed_ && !called && used;
  limit_ = drain_.at_knee ? clamp(std::floor(std::min(limit_, kKneeDrainShare * knee)))
                          : clamp(std::floor(params_.probe_factor * below));
  // After drops, the limit they cut is no measure of the dependency: at
  // the minimum a drain takes seconds to gather its calls, and a p50 of
  // a few is noise (after scenarios/outage, 7.5 ms for a p50 of 13.9 ms,
  // and a second drain). Drain at the knee from before the drops: below
  // it if the dependency is back as it was, and if it is still out, its
  // drops end the drain at once.
  if (drain_.after_drops) {
    limit_ = std::max(limit_, clamp(std::floor(params_.probe_factor * limit_before_drops_ / tolerance)));
  }
  // A drain that found the delayed baseline lower called this one: the
  // delay may be gone, and a queue in its place looks the same. Drain
  // under the knee without the delay (Little's law with the no-load mean
  // from before it), where the delay, if it is gone, leaves no queue.
  // Not a drain that drops called: that one runs at the knee from before
  // them, and its own measure of the dependency says whether it is back.
  drain_.undelayed = drain_undelayed_ && rate_ > 0 && !drain_.after_drops;
  drain_undelayed_ = false;
  if (drain_.undelayed) {
    drain_.at_knee = false;
    limit_ = std::min(limit_, clamp(std::floor(params_.probe_factor * rate_ * undelayed_mean_ns_)));
  }
}

double BalancePolicy::probe_update(const Window& w, double p50) {
  drain_.elapsed_ns += static_cast<double>(w.duration_ns);
  // Calls admitted before the drain still complete after it began, with
  // the queue they waited in: measure only from the window after the one
  // that closed with in-flight down to the drained limit. (A dependency
  // slower than the smoothed latency says, just after it slowed down,
  // takes longer than the drain's first window to give them back.)
  ++drain_.windows;
  // The dependency changed under the drain (kDrainChangeRatio): measure
  // from this window.
  if (drain_.settled && drain_.samples >= kProbeSamples && static_cast<double>(w.ok) >= kProbeSamples) {
    const double so_far = drain_.p50_sum / drain_.samples;
    if (std::max(p50 / so_far, so_far / p50) > kDrainChangeRatio) {
      drain_.p50_sum = drain_.spread_sum = drain_.mean_sum = drain_.samples = drain_.measured_ns = 0;
    }
  }
  if (drain_.settled && w.ok > 0) {
    drain_.p50_sum += p50 * static_cast<double>(w.ok);
    drain_.spread_sum += spread_of(w) * static_cast<double>(w.ok);
    drain_.mean_sum += static_cast<double>(w.rtt_sum_ns);
    drain_.samples += static_cast<double>(w.ok);
    drain_.measured_ns += static_cast<double>(w.duration_ns);
  }
  if (w.inflight <= limit_) drain_.settled = true;
  if (overloaded(w)) {
    // The dependency is failing, not draining: end the probe and back off
    // from the limit before it, but never above the drained limit (a
    // limit does not rise while calls are dropped).
    probing_ = false;
    since_probe_ns_ = 0;
    limit_ = clamp(std::min(limit_, std::floor(drain_.limit_before * params_.backoff)));
    return limit_;
  }
  const bool drained = (drain_.windows >= kProbeMinWindows && drain_.elapsed_ns >= drain_.needed_ns &&
                        drain_.samples >= kProbeSamples) ||
                       drain_.windows >= kProbeMaxWindows;
  if (!drained) return limit_;
  probing_ = false;
  since_probe_ns_ = 0;
  if (drain_.samples > 0) {
    settle_drain();
  } else {
    limit_ = drain_.limit_before;
  }
  drained_rate_ = 0;
  return limit_;
}

void BalancePolicy::settle_drain() {
  const double drained_limit = limit_;
  const double drained_p50 = drain_.p50_sum / drain_.samples;
  const double spread = drain_.spread_sum / drain_.samples;
  // A drain that found no more latency than the baseline it compares
  // with measured no queue it did not know: its p50 over its spread is
  // the dependency's shape. With other hosts' limiters on the
  // dependency, one that found more takes only the part the spread
  // explains (the dependency got slower) for the dependency's own; the
  // rest is a delay every call has in common, the others' queue.
  if (drained_p50 <= drain_.baseline_ns && spread > 0) shape_ = drained_p50 / spread;
  const double measured = own_latency(drained_p50, spread, drain_.baseline_ns);
  // Latency that fell in proportion to the limit (elasticity near 1) was
  // all queue, even at the drained limit: it started above the knee.
  // Drain again soon, from the lower limit the new baseline brings,
  // rather than in a full interval.
  // But a drain that served fewer calls than the limit before it did ran
  // under the knee, whatever its latency did: after a heal, the latency
  // before it was the slower dependency's. Not a drain at the knee
  // either: from a limit with a queue, its latency falls by the whole
  // queue while the limit falls less.
  const double latency_fell = std::log(drain_.latency_before / std::max(measured, 1.0));
  const double limit_fell = std::log(drain_.limit_in_force / std::max(drained_limit, 1.0));
  // (rate_ is the rate from before the drain: only steady windows move it.)
  const double drained_rate = drain_.samples / std::max(drain_.measured_ns, 1.0);
  const bool above_knee = limit_fell > 0 && latency_fell > kKneeElasticity * limit_fell &&
                          drained_rate >= (1 - kRateFallShare) * rate_;
  if (above_knee && !drain_.at_knee) {
    drain_soon();
  }
  // The dependency got slower, not busier (the baseline rose past the
  // target): the limit before the cuts that latency caused still fits
  // what it serves at once. Or other limiters on the same dependency
  // (other hosts) kept their queue in it through the drain, which then
  // measured that queue: no drain of one limiter tells the two apart.
  // Going back halfway (in ratio) hedges: a slower dependency is served
  // at once by most of the old limit and the growth does the rest, while
  // limiters that each restored the whole of it fed one another's queue
  // (scenarios/many-processes-per-process, docs/balance-record.md).
  // Over baseline_max_ms, what the drain measured counts only up to it
  // (update() holds the baseline there): the rest is queueing, which the
  // cuts were right to shed.
  const bool slower = bounded(measured) > (1 + params_.tolerance) * drain_.baseline_ns;
  // A drain the schedule or a moved rate called, that kept its limit full
  // and found every call later by the same amount, ran over the knee: the
  // dependency lost capacity just as it began (in scenarios/capacity-drop
  // the schedule falls on the drop on 5 seeds of 50). It measured a queue,
  // not the no-load latency; taken for a slower dependency's latency, it
  // held the limit at four times the workers left for the 30 s the drop
  // lasted. The baseline stays: the cuts it calls for, and the drain that
  // latency stuck over the target then calls, measure the rest (a delay
  // that began with this drain too: delay_factor()). A drain that left its
  // limit unfilled kept no queue of its own: there such latency is a delay,
  // the dependency's own.
  const bool full = drain_.mean_sum / std::max(drain_.measured_ns, 1.0) >= kSaturatedShare * drained_limit;
  if (slower && full && !drain_.stuck && params_.other_hosts == 0 && shifted(drained_p50, spread)) {
    knee_confirmed_ = false;
    limit_ = drain_.limit_before;
    return;
  }
  found_slower_ = slower;
  knee_confirmed_ = !above_knee && !slower && !drain_.after_drops;
  // Measured: the cuts are undone. (Not when the drain starts: drops that
  // end it would then cut from the cut baseline, and the next drain
  // compare with that, from the minimum.)
  cut_baseline_ns_ = 0;
  baseline_ns_ = latency_ns_ = measured;
  const double drained_mean = drain_.mean_sum / drain_.samples;
  const double delay = slower ? delay_factor(drained_p50, spread, drained_mean, drained_rate, drained_limit) : 1.0;
  // The limit rests on a delay from this drain on (the no-load mean
  // without it kept), until a drain at the knee without it measures.
  // One that finds the delayed baseline lower (by more than the band of
  // a confirming window) calls that drain soon: the delay may have
  // ended, with a queue in its place (scenarios/network-delay at 60 s).
  // If that drain finds it lower too, the delay is gone: the dependency
  // serves as many calls a second, each in flight that much shorter, and
  // the limit shrinks by the fall of the mean latency (the delay rule
  // undone; restored as it was, it held three times the calls the
  // dependency serves at once, and the cuts from there went under it).
  const bool lower = measured < (1 - kConfirmShare * params_.tolerance) * drain_.baseline_ns;
  const double undelay = drain_.undelayed && lower ? drained_mean / base_mean_ns_ : 1.0;
  if (delay > 1) {
    undelayed_mean_ns_ = base_mean_ns_;
  } else if (drain_.undelayed) {
    undelayed_mean_ns_ = 0;
  } else if (undelayed_mean_ns_ > 0 && lower) {
    drain_undelayed_ = true;
    drain_soon();
  }
  base_mean_ns_ = drained_mean;
  base_spread_ns_ = spread;
  baseline_samples_ = std::max(baseline_samples_, kTrustedSamples);
  const double cut = std::max(drain_.limit_before, 1.0);
  // So does one after drops that stopped: what they cut for has passed
  // (an outage), or the drain found the dependency slower.
  limit_ = slower || drain_.after_drops
               ? clamp(std::floor(cut * std::pow(drain_.limit_before_cuts / cut, kRestoreShare)))
               : drain_.limit_before;
  // And the dependency as it was served the drained limit: keep at least
  // that.
  if (drain_.after_drops && !slower) limit_ = std::max(limit_, drained_limit);
  // A delay every call has: the dependency serves as many calls a second
  // as before the cuts, each in flight that much longer.
  if (delay > 1) limit_ = clamp(std::floor(drain_.limit_before_cuts * delay));
  // The delay gone: as many calls a second, each in flight shorter.
  if (undelay < 1) limit_ = clamp(std::floor(limit_ * undelay));
}

}  // namespace bulkhead::policies
