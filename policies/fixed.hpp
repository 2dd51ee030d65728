// Fixed: a limit that never moves.
//
// The fallback every registry has, and the baseline every benchmark compares
// against: a static concurrency limit, as a bulkhead or a connection pool
// size is configured by hand. The limit is the config's initial_limit;
// min_limit and max_limit only have to admit it. There are no parameters (no
// "limit" key: initial_limit already is the limit), so any key given is an
// error.
#pragma once

#include <memory>
#include <string_view>

#include "policies/policy.hpp"

namespace bulkhead::policies {

// Thread-safety: owned and called by the control loop only.
class FixedPolicy final : public Policy {
 public:
  static constexpr std::string_view kName = "fixed";

  // Throws ParamError on invalid bounds.
  explicit FixedPolicy(const Bounds& bounds);
  // The registry's factory: refuses any parameter.
  static std::unique_ptr<Policy> create(const Bounds& bounds, const ParamMap& params);

  std::string_view name() const override { return kName; }
  // Ignores the window: the limit is bounds.initial, always.
  double update(const Window& window) override;
  bool learns() const override { return false; }
  double limit() const override { return limit_; }

 private:
  double limit_;  // calls
};

}  // namespace bulkhead::policies
