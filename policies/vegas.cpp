#include "policies/vegas.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "policies/params.hpp"

namespace bulkhead::policies {
namespace {

// Floor on a window's mean latency, in nanoseconds: keeps the ratio finite.
constexpr double kMinRttNs = 1.0;
// The probe waits probe_multiplier * L * U[kProbeJitterLo, 1) updates
// (dimensionless; Netflix's nextDouble(0.5, 1)).
constexpr double kProbeJitterLo = 0.5;
// Upper bound of probe_seed, 2^32 - 1: exact as a double and as a uint64_t.
constexpr double kMaxSeed = 4294967295.0;

constexpr std::array<ParamSpec<VegasPolicy::Params>, 5> kParamSpecs{{
    {"smoothing", &VegasPolicy::Params::smoothing, Range::open_closed(0, 1)},
    {"probe_multiplier", &VegasPolicy::Params::probe_multiplier, Range::at_least(0).integers()},
    {"probe_seed", &VegasPolicy::Params::probe_seed, Range::closed(0, kMaxSeed).integers()},
    {"alpha_factor", &VegasPolicy::Params::alpha_factor, Range::at_least(1).integers()},
    {"beta_factor", &VegasPolicy::Params::beta_factor, Range::at_least(1).integers()},
}};

// Checks in the member initializers, so that probe_rng_ is never seeded from
// an invalid probe_seed; bounds first, as the registry does.
const Bounds& checked(const Bounds& bounds) {
  validate_bounds(bounds);
  return bounds;
}
const VegasPolicy::Params& checked(const VegasPolicy::Params& params) {
  check_params(params, kParamSpecs);
  // The one rule between two keys; worded as check_param words a range.
  if (params.beta_factor < params.alpha_factor) {
    throw ParamError("beta_factor", "beta_factor = " + format_number(params.beta_factor) +
                     ": must be >= alpha_factor (" + format_number(params.alpha_factor) + ")");
  }
  return params;
}

}  // namespace

double VegasPolicy::log10_root(double limit) {
  // Netflix applies it to limit.intValue(); our limit is >= min >= 1.
  // max(1, floor(log10 n)), by comparison rather than log10, so that no
  // rounding can move a power of ten below its exponent.
  double lg = 1;
  for (double power = 100; std::floor(limit) >= power; power *= 10) ++lg;
  return lg;
}

VegasPolicy::VegasPolicy(const Bounds& bounds) : VegasPolicy(bounds, Params{}) {}

VegasPolicy::VegasPolicy(const Bounds& bounds, const Params& params)
    : bounds_(checked(bounds)),
      params_(checked(params)),
      limit_(bounds.initial),
      probe_rng_(static_cast<std::uint64_t>(params_.probe_seed)),
      // As in Netflix, the first jitter is drawn at construction.
      probe_jitter_(kProbeJitterLo + (1 - kProbeJitterLo) * probe_rng_.next_unit()) {}

VegasPolicy::Params VegasPolicy::parse_params(const ParamMap& params) {
  return checked(read_params(kName, params, kParamSpecs));
}

double VegasPolicy::update(const Window& window) {
  if (window.samples() == 0) return limit_;

  if (window.ok == 0) {
    // Only drops: no latency for the probe or the baseline, but the drop
    // rule needs none.
    limit_ = next_limit(0, true, window.max_inflight);
    return limit_;
  }

  const double rtt_ns = std::max(window.rtt_mean_ns(), kMinRttNs);
  if (params_.probe_multiplier > 0) {
    ++probe_count_;
    if (probe_jitter_ * params_.probe_multiplier * limit_ <= static_cast<double>(probe_count_)) {
      // The probe: take the current rtt as the baseline, whatever the load
      // (the weakness of Netflix issue 165), and hold.
      probe_jitter_ = kProbeJitterLo + (1 - kProbeJitterLo) * probe_rng_.next_unit();
      probe_count_ = 0;
      rtt_noload_ns_ = rtt_ns;
      return limit_;
    }
  }
  if (rtt_noload_ns_ == 0 || rtt_ns < rtt_noload_ns_) {
    rtt_noload_ns_ = rtt_ns;
    return limit_;
  }

  limit_ = next_limit(rtt_ns, window.dropped > 0, window.max_inflight);
  return limit_;
}

double VegasPolicy::next_limit(double rtt_ns, bool drop, std::uint32_t inflight) const {
  const double lg = log10_root(limit_);
  double estimate = 0;
  if (drop) {
    estimate = limit_ - lg;
  } else if (2.0 * inflight < limit_) {
    return limit_;  // app-limited
  } else {
    // rtt_ns >= rtt_noload_ns_ > 0 here, so the queue is in [0, L].
    const double queue = std::ceil(limit_ * (1 - rtt_noload_ns_ / rtt_ns));
    const double alpha = params_.alpha_factor * lg;
    const double beta = params_.beta_factor * lg;
    if (queue <= lg) {
      estimate = limit_ + beta;
    } else if (queue < alpha) {
      estimate = limit_ + lg;
    } else if (queue > beta) {
      estimate = limit_ - lg;
    } else {
      return limit_;
    }
  }
  estimate = std::clamp(estimate, bounds_.min, bounds_.max);
  const double smoothed = (1 - params_.smoothing) * limit_ + params_.smoothing * estimate;
  // A blend of two values within bounds is within bounds, but for rounding.
  return std::clamp(smoothed, bounds_.min, bounds_.max);
}

}  // namespace bulkhead::policies
