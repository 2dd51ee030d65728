#include "policies/gradient2.hpp"

#include <algorithm>
#include <array>

#include "policies/params.hpp"

namespace bulkhead::policies {
namespace {

// Above this ratio of long-term to current latency, the long-term average is
// cut back (dimensionless; Netflix's constant) ...
constexpr double kRecoveryRatio = 2.0;
// ... by this factor per update (dimensionless; Netflix's constant).
constexpr double kRecoveryDecay = 0.95;
// The gradient's range (dimensionless; Netflix's constants): at most halve
// the estimate in one update, never grow it by the gradient alone.
constexpr double kMinGradient = 0.5;
constexpr double kMaxGradient = 1.0;
// Floor on a window's mean latency, in nanoseconds: keeps the ratios finite.
constexpr double kMinRttNs = 1.0;

constexpr std::array<ParamSpec<Gradient2Policy::Params>, 4> kParamSpecs{{
    {"smoothing", &Gradient2Policy::Params::smoothing, Range::open_closed(0, 1)},
    {"long_window", &Gradient2Policy::Params::long_window, Range::at_least(1).integers()},
    {"tolerance", &Gradient2Policy::Params::tolerance, Range::at_least(1)},
    {"queue_size", &Gradient2Policy::Params::queue_size, Range::at_least(0)},
}};

// Checks in the member initializers, so that long_rtt_ is never built from
// an invalid long_window; bounds first, as the registry does.
const Bounds& checked(const Bounds& bounds) {
  validate_bounds(bounds);
  return bounds;
}
const Gradient2Policy::Params& checked(const Gradient2Policy::Params& params) {
  check_params(params, kParamSpecs);
  return params;
}

}  // namespace

double Gradient2Policy::ExpAvg::add(double sample) {
  if (count_ < kWarmup) {
    ++count_;
    sum_ += sample;
    value_ = sum_ / count_;
  } else {
    value_ = value_ * (1 - factor_) + sample * factor_;
  }
  return value_;
}

Gradient2Policy::Gradient2Policy(const Bounds& bounds) : Gradient2Policy(bounds, Params{}) {}

Gradient2Policy::Gradient2Policy(const Bounds& bounds, const Params& params)
    : bounds_(checked(bounds)),
      params_(checked(params)),
      limit_(bounds.initial),
      long_rtt_(params_.long_window) {}

Gradient2Policy::Params Gradient2Policy::parse_params(const ParamMap& params) {
  return read_params(kName, params, kParamSpecs);
}

double Gradient2Policy::update(const Window& window) {
  if (window.ok == 0) return limit_;

  const double rtt_ns = std::max(window.rtt_mean_ns(), kMinRttNs);
  // As in Netflix, the rest of this update uses long_rtt_ns as added, before
  // any recovery cut below.
  const double long_rtt_ns = long_rtt_.add(rtt_ns);
  if (long_rtt_ns / rtt_ns > kRecoveryRatio) long_rtt_.scale(kRecoveryDecay);

  if (window.max_inflight < limit_ / 2) return limit_;

  const double gradient =
      std::clamp(params_.tolerance * long_rtt_ns / rtt_ns, kMinGradient, kMaxGradient);
  const double estimate = gradient * limit_ + params_.queue_size;
  const double smoothed = (1 - params_.smoothing) * limit_ + params_.smoothing * estimate;
  limit_ = std::clamp(smoothed, bounds_.min, bounds_.max);
  return limit_;
}

}  // namespace bulkhead::policies
