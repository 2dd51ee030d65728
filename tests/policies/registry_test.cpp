#include "policies/policy.hpp"

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "policies/fixed.hpp"
#include "tests/policies/window_builder.hpp"

namespace bulkhead::policies {
namespace {

using test::make_window;
using test::param_error_of;
using test::param_key_of;

constexpr Bounds kBounds{.min = 10, .max = 100, .initial = 20};

// A factory that counts its calls.
Factory counting_factory(int& calls) {
  return [&calls](const Bounds& bounds, const ParamMap&) {
    ++calls;
    return std::make_unique<FixedPolicy>(bounds);
  };
}

TEST(Registry, RefusesDuplicate) {
  int calls = 0;
  Registry registry;
  registry.add("x", counting_factory(calls));
  EXPECT_THROW(registry.add("x", counting_factory(calls)), std::logic_error);
  EXPECT_EQ(registry.names(), std::vector<std::string>{"x"});
}

TEST(Registry, RefusesEmptyNameOrFactory) {
  int calls = 0;
  Registry registry;
  EXPECT_THROW(registry.add("", counting_factory(calls)), std::logic_error);
  EXPECT_THROW(registry.add("y", Factory{}), std::logic_error);
  EXPECT_TRUE(registry.names().empty());
}

TEST(Registry, CreatesThroughTheFactory) {
  int calls = 0;
  Registry registry;
  registry.add("x", counting_factory(calls));
  EXPECT_TRUE(registry.contains("x"));
  EXPECT_FALSE(registry.contains("y"));
  const auto policy = registry.create("x", kBounds, {});
  ASSERT_NE(policy, nullptr);
  EXPECT_EQ(policy->limit(), 20);
  EXPECT_EQ(calls, 1);
}

TEST(Registry, ChecksBoundsBeforeTheFactoryRuns) {
  int calls = 0;
  Registry registry;
  registry.add("x", counting_factory(calls));
  EXPECT_EQ(param_error_of([&] { registry.create("x", {.min = 0, .max = 10, .initial = 5}, {}); }),
            "min_limit = 0: must be >= 1");
  EXPECT_EQ(calls, 0);
}

TEST(Registry, ListsNamesSorted) {
  Registry registry;
  int calls = 0;
  for (const char* name : {"zeta", "alpha", "mid"}) registry.add(name, counting_factory(calls));
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"alpha", "mid", "zeta"}));
}

TEST(Registry, BuiltinHasEveryPolicyAndAlwaysFixed) {
  const Registry& registry = builtin_registry();
  EXPECT_EQ(registry.names(),
            (std::vector<std::string>{"aimd", "balance", "fixed", "gradient", "gradient2", "vegas"}));
  EXPECT_TRUE(registry.contains("fixed"));
  EXPECT_EQ(&registry, &builtin_registry());  // one instance
  for (const std::string& name : registry.names()) {
    EXPECT_EQ(registry.create(name, kBounds, {})->name(), name);
  }
}

TEST(Registry, NamesKnownPoliciesForUnknownOne) {
  EXPECT_EQ(param_error_of([] { builtin_registry().create("bbr", kBounds, {}); }),
            "unknown policy 'bbr' (known: aimd, balance, fixed, gradient, gradient2, vegas)");
}

TEST(Registry, NamesKnownParametersForUnknownOne) {
  EXPECT_EQ(param_error_of([] { builtin_registry().create("aimd", kBounds, {{"foo", 1}}); }),
            "unknown parameter 'foo' for policy 'aimd' (known: backoff, timeout_ms)");
}

TEST(Registry, NamesOutOfRangeParameterAndReason) {
  EXPECT_EQ(param_error_of([] { builtin_registry().create("aimd", kBounds, {{"backoff", 1.2}}); }),
            "backoff = 1.2: must be in [0.5, 1)");
  EXPECT_EQ(
      param_error_of([] { builtin_registry().create("gradient2", kBounds, {{"tolerance", 0.5}}); }),
      "tolerance = 0.5: must be >= 1");
}

// The config points at the line of key(): the key each error is about,
// wherever its message names it, or none for a policy that does not exist.
TEST(Registry, EveryErrorCarriesTheKeyAtFault) {
  const auto key_for = [](const char* policy, Bounds bounds, ParamMap params) {
    return param_key_of([&] { builtin_registry().create(policy, bounds, params); });
  };
  EXPECT_EQ(key_for("bbr", kBounds, {}), "");
  EXPECT_EQ(key_for("aimd", kBounds, {{"foo", 1}}), "foo");
  EXPECT_EQ(key_for("aimd", kBounds, {{"backoff", 1.2}}), "backoff");
  EXPECT_EQ(key_for("fixed", {.min = 20, .max = 10, .initial = 15}, {}), "max_limit");
  EXPECT_EQ(key_for("fixed", {.min = 20, .max = 200, .initial = 5}, {}), "initial_limit");
  // Rules between two keys, or beyond what a range says.
  EXPECT_EQ(key_for("vegas", kBounds, {{"alpha_factor", 5}, {"beta_factor", 4}}), "beta_factor");
  EXPECT_EQ(key_for("gradient", kBounds, {{"percentile", 75}}), "percentile");
  EXPECT_EQ(key_for("aimd", kBounds, {{"backoff", 0.9}}), "<no ParamError thrown>");
}

TEST(Registry, PassesParametersToThePolicy) {
  const auto policy = builtin_registry().create("aimd", kBounds, {{"backoff", 0.5}});
  // floor(20 * 0.5) = 10.
  EXPECT_EQ(policy->update(make_window({.ok = 10, .dropped = 1, .rtt_ms = 1, .max_inflight = 20})),
            10);
}

TEST(Registry, ValidatesBounds) {
  const auto error_for = [](Bounds bounds) {
    return param_error_of([&] { builtin_registry().create("fixed", bounds, {}); });
  };
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(error_for({.min = 0, .max = 10, .initial = 5}), "min_limit = 0: must be >= 1");
  EXPECT_EQ(error_for({.min = 0.5, .max = 10, .initial = 5}), "min_limit = 0.5: must be >= 1");
  EXPECT_EQ(error_for({.min = 20, .max = 10, .initial = 15}),
            "max_limit = 10: must be >= min_limit (20)");
  EXPECT_EQ(error_for({.min = 20, .max = 200, .initial = 5}),
            "initial_limit = 5: must be in [min_limit, max_limit] = [20, 200]");
  EXPECT_EQ(error_for({.min = 20, .max = 200, .initial = 300}),
            "initial_limit = 300: must be in [min_limit, max_limit] = [20, 200]");
  EXPECT_EQ(error_for({.min = 1, .max = inf, .initial = 5}), "max_limit = inf: must be finite");
  EXPECT_EQ(error_for({.min = nan, .max = 10, .initial = 5}), "min_limit = nan: must be finite");
  EXPECT_EQ(error_for({.min = 1, .max = 10, .initial = -inf}),
            "initial_limit = -inf: must be finite");
  // Edges are valid: min == initial == max, and min == 1.
  EXPECT_EQ(error_for({.min = 1, .max = 1, .initial = 1}), "<no ParamError thrown>");
}

}  // namespace
}  // namespace bulkhead::policies
