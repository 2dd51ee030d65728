#include "policies/gradient.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "policies/params.hpp"

namespace bulkhead::policies {
namespace {

// The gradient's range (dimensionless; Envoy's constants): at most halve or
// double the limit in one update, before the headroom.
constexpr double kMinGradient = 0.5;
constexpr double kMaxGradient = 2.0;
// Floor on a latency summary, in nanoseconds: keeps the ratio finite.
constexpr double kMinRttNs = 1.0;
// Upper bound of the integer parameters, 2^32 - 1: far beyond any sensible
// value, and exact as a double and as a uint64_t.
constexpr double kMaxInteger = 4294967295.0;

constexpr std::array<ParamSpec<GradientPolicy::Params>, 7> kParamSpecs{{
    {"buffer", &GradientPolicy::Params::buffer, Range::closed(0, 1)},
    // Only 50, 90 and 99 pass: see check_percentile().
    {"percentile", &GradientPolicy::Params::percentile, Range::closed(50, 99).integers()},
    {"min_rtt_interval_windows", &GradientPolicy::Params::min_rtt_interval_windows,
     Range::closed(1, kMaxInteger).integers()},
    {"jitter", &GradientPolicy::Params::jitter, Range::closed(0, 1)},
    {"request_count", &GradientPolicy::Params::request_count,
     Range::closed(1, kMaxInteger).integers()},
    {"jitter_seed", &GradientPolicy::Params::jitter_seed, Range::closed(0, kMaxInteger).integers()},
    {"min_concurrency", &GradientPolicy::Params::min_concurrency, Range::closed(1, kMaxInteger).integers()},
}};

// The one rule a Range cannot say. Checked before the ranges, so that every
// other value gets this message, not "must be an integer in [50, 99]".
void check_percentile(double percentile) {
  if (percentile == 50 || percentile == 90 || percentile == 99) return;
  throw ParamError("percentile", "percentile = " + format_number(percentile) + ": must be 50, 90 or 99");
}

// Checks in the member initializers, bounds first, as the registry does.
const Bounds& checked(const Bounds& bounds) {
  validate_bounds(bounds);
  return bounds;
}
const GradientPolicy::Params& checked(const GradientPolicy::Params& params) {
  check_percentile(params.percentile);
  check_params(params, kParamSpecs);
  return params;
}

}  // namespace

GradientPolicy::GradientPolicy(const Bounds& bounds) : GradientPolicy(bounds, Params{}) {}

GradientPolicy::GradientPolicy(const Bounds& bounds, const Params& params)
    : bounds_(checked(bounds)),
      floor_(std::min(std::max(bounds.min, params.min_concurrency), bounds.max)),
      params_(checked(params)),
      limit_(std::max(bounds.initial, floor_)),
      jitter_rng_(static_cast<std::uint64_t>(params_.jitter_seed)) {}

GradientPolicy::Params GradientPolicy::parse_params(const ParamMap& params) {
  if (const auto it = params.find("percentile"); it != params.end()) check_percentile(it->second);
  return read_params(kName, params, kParamSpecs);
}

double GradientPolicy::sample_rtt_ns(const Window& window) const {
  const std::uint64_t ns = params_.percentile == 99   ? window.rtt_p99_ns
                           : params_.percentile == 90 ? window.rtt_p90_ns
                                                      : window.rtt_p50_ns;
  return std::max(static_cast<double>(ns), kMinRttNs);
}

void GradientPolicy::start_measuring() {
  measuring_ = true;
  measured_sum_ns_ = 0;
  measured_ok_ = 0;
  // Envoy's updateConcurrencyLimit() zeroes its count inside a measurement.
  at_min_windows_ = 0;
}

std::uint64_t GradientPolicy::next_interval_windows() {
  const auto interval = static_cast<std::uint64_t>(params_.min_rtt_interval_windows);
  if (params_.jitter == 0) return interval;
  // As Envoy: interval + random % ceil(interval * jitter); the range is >= 1
  // since interval >= 1 and jitter > 0.
  const auto range =
      static_cast<std::uint64_t>(std::ceil(params_.min_rtt_interval_windows * params_.jitter));
  return interval + jitter_rng_.next() % range;
}

double GradientPolicy::update(const Window& window) {
  // No latency: Envoy skips an interval with an empty histogram.
  if (window.ok == 0) return limit_;
  const double sample_ns = sample_rtt_ns(window);

  if (measuring_) {
    // The limit holds while minRTT is measured; whole windows are taken
    // until they hold request_count ok calls.
    measured_sum_ns_ += sample_ns * static_cast<double>(window.ok);
    measured_ok_ += window.ok;
    if (static_cast<double>(measured_ok_) >= params_.request_count) {
      min_rtt_ns_ = measured_sum_ns_ / static_cast<double>(measured_ok_);
      measuring_ = false;
      until_measure_ = next_interval_windows();
    }
    return limit_;
  }

  const double gradient = std::clamp(min_rtt_ns_ * (1 + params_.buffer) / sample_ns,
                                     kMinGradient, kMaxGradient);
  const double scaled = gradient * limit_;
  const double previous = limit_;
  // Envoy converts to uint32_t: the floor, for a positive value.
  limit_ = std::clamp(std::floor(scaled + std::sqrt(scaled)), floor_, bounds_.max);

  // As Envoy's updateConcurrencyLimit(): a limit set to the minimum from the
  // minimum 5 times in a row suggests minRTT is wrong; measure it again.
  at_min_windows_ = (previous == floor_ && limit_ == floor_) ? at_min_windows_ + 1 : 0;
  if (--until_measure_ == 0 || at_min_windows_ >= kRemeasureAtMinWindows) start_measuring();
  return limit_;
}

}  // namespace bulkhead::policies
