#include "policies/fixed.hpp"

#include "policies/params.hpp"

namespace bulkhead::policies {

FixedPolicy::FixedPolicy(const Bounds& bounds) : limit_(bounds.initial) {
  validate_bounds(bounds);
}

std::unique_ptr<Policy> FixedPolicy::create(const Bounds& bounds, const ParamMap& params) {
  ParamReader(kName, params).finish();
  return std::make_unique<FixedPolicy>(bounds);
}

double FixedPolicy::update(const Window& /*window*/) { return limit_; }

}  // namespace bulkhead::policies
