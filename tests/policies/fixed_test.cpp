#include "policies/fixed.hpp"

#include <gtest/gtest.h>

#include "tests/policies/window_builder.hpp"

namespace bulkhead::policies {
namespace {

using test::make_window;
using test::param_error_of;

constexpr Bounds kBounds{.min = 1, .max = 100, .initial = 32};

TEST(FixedPolicy, HoldsInitialLimitWhateverTheWindow) {
  FixedPolicy policy(kBounds);
  EXPECT_EQ(policy.limit(), 32);
  EXPECT_EQ(policy.update(make_window({.ok = 100, .rtt_ms = 1, .max_inflight = 32})), 32);
  const Window overload = make_window({.ok = 1, .dropped = 99, .rtt_ms = 9000, .max_inflight = 32});
  EXPECT_EQ(policy.update(overload), 32);
  EXPECT_EQ(policy.update(make_window({})), 32);
  EXPECT_EQ(policy.limit(), 32);
}

TEST(FixedPolicy, IsNamedFixed) { EXPECT_EQ(FixedPolicy(kBounds).name(), "fixed"); }

TEST(FixedPolicy, TakesNoParameters) {
  // initial_limit is the limit: there is no "limit" key.
  EXPECT_EQ(param_error_of([] { FixedPolicy::create(kBounds, {{"limit", 10}}); }),
            "unknown parameter 'limit' for policy 'fixed' (known: none)");
  EXPECT_NE(FixedPolicy::create(kBounds, {}), nullptr);
}

TEST(FixedPolicy, RefusesInvalidBounds) {
  EXPECT_EQ(param_error_of([] { FixedPolicy policy({.min = 1, .max = 10, .initial = 11}); }),
            "initial_limit = 11: must be in [min_limit, max_limit] = [1, 10]");
}

}  // namespace
}  // namespace bulkhead::policies
