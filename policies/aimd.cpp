#include "policies/aimd.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "policies/params.hpp"

namespace bulkhead::policies {
namespace {

constexpr double kNsPerMs = 1e6;

// Ranges as Netflix's AIMDLimit.Builder checks them.
constexpr std::array<ParamSpec<AimdPolicy::Params>, 2> kParamSpecs{{
    {"backoff", &AimdPolicy::Params::backoff, Range::closed_open(0.5, 1.0)},
    {"timeout_ms", &AimdPolicy::Params::timeout_ms, Range::above(0)},
}};

}  // namespace

AimdPolicy::AimdPolicy(const Bounds& bounds) : AimdPolicy(bounds, Params{}) {}

AimdPolicy::AimdPolicy(const Bounds& bounds, const Params& params)
    : bounds_(bounds), params_(params), limit_(bounds.initial) {
  validate_bounds(bounds_);
  check_params(params_, kParamSpecs);
}

AimdPolicy::Params AimdPolicy::parse_params(const ParamMap& params) {
  return read_params(kName, params, kParamSpecs);
}

double AimdPolicy::update(const Window& window) {
  if (window.samples() == 0) return limit_;

  const bool slow = window.rtt_mean_ns() > params_.timeout_ms * kNsPerMs;
  if (window.dropped > 0 || slow) {
    limit_ = std::floor(limit_ * params_.backoff);
  } else if (2.0 * window.max_inflight >= limit_) {
    limit_ = limit_ + 1;
  }
  limit_ = std::clamp(limit_, bounds_.min, bounds_.max);
  return limit_;
}

}  // namespace bulkhead::policies
