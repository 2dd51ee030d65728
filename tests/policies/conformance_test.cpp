// Invariants every registered policy keeps, run over every name in
// builtin_registry(): a new policy gets them by being registered.
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "policies/policy.hpp"
#include "tests/policies/window_builder.hpp"

namespace bulkhead::policies {
namespace {

using test::make_window;

constexpr Bounds kBounds{.min = 5, .max = 150, .initial = 20};  // calls

class PolicyConformance : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Policy> make_policy(const Bounds& bounds = kBounds) const {
    return builtin_registry().create(GetParam(), bounds, {});
  }

  // Feeds one window and checks what every update must keep: the result is
  // the policy's limit, finite and within bounds. Returns the new limit.
  static double feed_window(Policy& policy, const Window& window,
                            const Bounds& bounds = kBounds) {
    const double limit = policy.update(window);
    EXPECT_EQ(limit, policy.limit());
    EXPECT_TRUE(std::isfinite(limit));
    EXPECT_GE(limit, bounds.min);
    EXPECT_LE(limit, bounds.max);
    return limit;
  }

  // Feeds a window in which callers used every call the published limit (its
  // integer part) allowed: half the calls ok at `rtt_ms`, the other half
  // dropped when `drops` is set.
  static double feed_saturated_window(Policy& policy, double rtt_ms, bool drops) {
    const auto inflight = static_cast<std::uint32_t>(std::floor(policy.limit()));
    return feed_window(policy, make_window({.ok = 50,
                                            .dropped = drops ? 50u : 0u,
                                            .rtt_ms = rtt_ms,
                                            .max_inflight = inflight}));
  }

  // A window drawn from `rng`, including the odd ones a daemon can hand
  // over: no ok call, zero latency, minutes of latency, nothing in flight.
  // Uses raw engine output only, whose sequence the standard fixes, so the
  // windows are the same on every platform.
  static Window random_window(std::mt19937_64& rng) {
    const auto pick = [&rng](std::uint64_t n) { return rng() % n; };
    Window w;
    w.ok = pick(8) == 0 ? 0 : 1 + pick(500);
    w.dropped = pick(3) == 0 ? pick(200) : 0;
    w.ignored = pick(20);
    w.rejected = pick(50);
    if (w.ok > 0) {
      std::uint64_t rtt_ns = 0;
      switch (pick(10)) {
        case 0: rtt_ns = 0; break;                                   // coarse clock
        case 1: rtt_ns = 60'000'000'000 + pick(1'000'000'000); break;  // a minute
        default: rtt_ns = 1'000'000 + pick(200'000'000); break;      // 1..201 ms
      }
      w.rtt_sum_ns = rtt_ns * w.ok;
      w.rtt_min_ns = rtt_ns / 2;
      w.rtt_max_ns = rtt_ns * 2;
      // Both shapes: a spread of the dependency's own, or a queue's shift.
      w.rtt_p10_ns = w.ok % 2 == 0 ? rtt_ns / 4 : rtt_ns - rtt_ns / 4;
      w.rtt_p50_ns = rtt_ns;
      w.rtt_p90_ns = rtt_ns + rtt_ns / 2;
      w.rtt_p99_ns = rtt_ns * 2;
    }
    w.max_inflight = static_cast<std::uint32_t>(pick(400));
    w.inflight = static_cast<std::uint32_t>(pick(w.max_inflight + 1));
    w.duration_ns = 100'000'000 + pick(2'000'000'000);
    return w;
  }
};

TEST_P(PolicyConformance, StartsAtInitialLimit) {
  EXPECT_EQ(make_policy()->limit(), kBounds.initial);
  EXPECT_EQ(make_policy()->name(), GetParam());
}

TEST_P(PolicyConformance, RefusesUnknownParameter) {
  try {
    builtin_registry().create(GetParam(), kBounds, {{"no_such_key", 1}});
    ADD_FAILURE() << "no ParamError";
  } catch (const ParamError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("unknown parameter 'no_such_key' for policy '" +
                                              GetParam() + "' (known: ",
                                          0),
              0u)
        << e.what();
  }
}

TEST_P(PolicyConformance, StaysWithinBoundsOverLongRandomRun) {
  std::mt19937_64 rng(20240601);
  auto policy = make_policy();
  for (int i = 0; i < 20'000; ++i) {
    feed_window(*policy, random_window(rng));
    if (HasFailure()) FAIL() << "at window " << i;
  }
}

TEST_P(PolicyConformance, SurvivesDegenerateWindowsFromTheStart) {
  // Zero latency (a coarse clock), a minute of latency, nothing in flight,
  // only drops: in this order, into a fresh policy.
  auto policy = make_policy();
  const Window zero_rtt = make_window({.ok = 10, .rtt_ms = 0, .max_inflight = 100});
  feed_window(*policy, zero_rtt);
  feed_window(*policy, zero_rtt);
  feed_window(*policy, make_window({.ok = 10, .rtt_ms = 60'000, .max_inflight = 100}));
  feed_window(*policy, zero_rtt);
  feed_window(*policy, make_window({.ok = 10, .rtt_ms = 5, .max_inflight = 0}));
  feed_window(*policy, make_window({.dropped = 10, .max_inflight = 100}));
}

TEST_P(PolicyConformance, PinnedWhenMinEqualsMax) {
  const Bounds pinned{.min = 7, .max = 7, .initial = 7};
  std::mt19937_64 rng(7);
  auto policy = make_policy(pinned);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(policy->update(random_window(rng)), 7);
}

TEST_P(PolicyConformance, IsDeterministic) {
  std::mt19937_64 rng(42);
  auto a = make_policy();
  auto b = make_policy();
  for (int i = 0; i < 5000; ++i) {
    const Window w = random_window(rng);
    // Exactly equal: same inputs, same arithmetic, no clock, no randomness.
    ASSERT_EQ(a->update(w), b->update(w)) << "at window " << i;
  }
}

// A window with no ok or dropped completion says nothing about the
// dependency, so it must not move the limit.
TEST_P(PolicyConformance, HoldsOnWindowWithoutSamples) {
  auto policy = make_policy();
  for (int i = 0; i < 5; ++i) feed_saturated_window(*policy, 10, false);
  const double before = policy->limit();
  EXPECT_EQ(feed_window(*policy, make_window({.ignored = 10, .max_inflight = 200})), before);
  EXPECT_EQ(feed_window(*policy, make_window({})), before);
}

// How many windows of the overload below a policy is held to never rising in.
//
// 60 windows. Gradient2's baseline is an EMA over 600 windows that
// follows a sustained rise (its known upward creep, Netflix PR 134): with the
// defaults its limit turns upward again after about 90 windows of 10x latency
// (see Gradient2Policy.BaselineCreepsUpUnderSustainedOverload). A policy of
// our own should hold for much longer; raise the horizon for it here.
//
// 13 windows for gradient (Envoy's), which reads no drops and remeasures its
// baseline from live traffic once its limit has sat at the minimum for 5
// windows: it adopts the 10x latency as the baseline and grows again, the
// reference's own behaviour (see
// GradientPolicy.RemeasuresAfterFiveWindowsAtMinimum). From 150 at g = 0.5 its limits are
// floor(gL + sqrt(gL)) = 83, 47, 28, 17, 11, 7, then 5 (min_limit) in
// windows 0 to 6; windows 7 to 11 set 5 from 5, and the fifth of them starts
// a measurement; window 12 measures (holds at 5); window 13 would grow it to
// floor(6.25 + 2.5) = 8.
int overload_horizon_windows(const std::string& policy) { return policy == "gradient" ? 13 : 60; }

// Sustained overload: half the calls dropped, latency 10x the baseline, every
// allowed call in use. Over the policy's horizon (above) the limit never
// rises, and every policy but fixed (which never moves by design) ends lower
// than where overload began.
TEST_P(PolicyConformance, NeverRisesUnderSustainedDropsAndLatency) {
  constexpr int kBaselineWindows = 30;
  const int overload_windows = overload_horizon_windows(GetParam());
  constexpr double kBaselineRttMs = 10;
  auto policy = make_policy();
  for (int i = 0; i < kBaselineWindows; ++i) {
    feed_saturated_window(*policy, kBaselineRttMs, false);
  }
  const double onset = policy->limit();
  double previous = onset;
  for (int i = 0; i < overload_windows; ++i) {
    const double limit = feed_saturated_window(*policy, 10 * kBaselineRttMs, true);
    ASSERT_LE(limit, previous) << "rose at overload window " << i;
    previous = limit;
  }
  if (GetParam() != "fixed") {
    EXPECT_LT(policy->limit(), onset);
  }
}

// A dependency of W workers that queues past them: rtt = base * max(1, L/W),
// fed with demand always above the limit (every window rejects some).
double feed_queueing_dependency(Policy& policy, double workers, double base_ms) {
  const double limit = policy.limit();
  Window w = make_window({.ok = 200, .rtt_ms = base_ms * std::max(1.0, limit / workers),
                          .max_inflight = static_cast<std::uint32_t>(std::floor(limit))});
  w.rejected = 50;
  w.duration_ns = 100'000'000;
  return policy.update(w);
}

// The failures of the faithful ports that ../shared/ALGORITHMS.md lists;
// the conformance checks below assert the failure is still there for these,
// so that fixing or breaking one shows up here.
bool creeps_under_steady_overload(const std::string& name) {
  return name == "gradient2"    // Netflix PR 134: the long EMA follows the rtt up
         || name == "vegas"     // Netflix 165: the probe copies a loaded rtt into the baseline
         || name == "gradient";  // Envoy PR 11579: minRTT re-measured from queued live calls
}

TEST_P(PolicyConformance, DoesNotCollapseOnAHealthyDependency) {
  auto policy = make_policy();
  // Constant latency, no drops, demand for 60 calls at once: nothing asks
  // the limit to go down.
  double lowest = policy->limit();
  for (int i = 0; i < 2000; ++i) {
    const auto used = static_cast<std::uint32_t>(std::min(60.0, std::floor(policy->limit())));
    lowest = std::min(lowest, feed_window(*policy, make_window({.ok = 100, .rtt_ms = 10, .max_inflight = used})));
  }
  EXPECT_GE(lowest, kBounds.initial * 0.5) << GetParam();
  EXPECT_GE(policy->limit(), kBounds.initial) << GetParam();
}

TEST_P(PolicyConformance, DoesNotCreepUpUnderSteadyOverload) {
  auto policy = builtin_registry().create(GetParam(), Bounds{1, 1000, 20}, {});
  // W = 20 workers, 10 ms each. Warm up, then compare the highest limit of
  // an early stretch with the highest of a late one.
  for (int i = 0; i < 500; ++i) feed_queueing_dependency(*policy, 20, 10);
  double early = 0, late = 0;
  for (int i = 0; i < 500; ++i) early = std::max(early, feed_queueing_dependency(*policy, 20, 10));
  for (int i = 0; i < 3000; ++i) feed_queueing_dependency(*policy, 20, 10);
  for (int i = 0; i < 500; ++i) late = std::max(late, feed_queueing_dependency(*policy, 20, 10));
  if (creeps_under_steady_overload(GetParam())) {
    EXPECT_GT(late, early * 1.2) << GetParam() << " no longer creeps: update the known failures";
  } else {
    EXPECT_LE(late, early * 1.1 + 1) << GetParam() << ": early " << early << ", late " << late;
  }
}

// The policies that compare latency with none.
bool keeps_no_baseline(const std::string& name) { return name == "aimd" || name == "fixed"; }

TEST_P(PolicyConformance, ReportsTheNoLoadLatencyAsItsBaseline) {
  auto policy = make_policy();
  EXPECT_EQ(policy->baseline().latency_ns, 0) << GetParam() << ": none before a window";
  // A dependency of a constant 10 ms, the limit far from used: no queue.
  for (int i = 0; i < 100; ++i) feed_window(*policy, make_window({.ok = 100, .rtt_ms = 10, .max_inflight = 5}));
  const Baseline baseline = policy->baseline();
  if (keeps_no_baseline(GetParam())) {
    EXPECT_EQ(baseline.latency_ns, 0) << GetParam();
  } else {
    EXPECT_NEAR(baseline.latency_ns, 10e6, 0.5e6) << GetParam();
  }
  EXPECT_FALSE(baseline.measuring) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Builtin, PolicyConformance,
                         ::testing::ValuesIn(builtin_registry().names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace bulkhead::policies
