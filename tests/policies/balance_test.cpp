#include "policies/balance.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/policies/window_builder.hpp"

namespace bulkhead::policies {
namespace {

using test::make_window;
using test::WindowSpec;

// Bounds wide enough that no clamp interferes; limit starts at 100.
constexpr Bounds kBounds{1, 1000, 100};

// A window of 100 ok calls at `rtt_ms` with the limit in full use.
Window used_window(double rtt_ms, std::uint32_t peak = 100) {
  return make_window(WindowSpec{.ok = 100, .rtt_ms = rtt_ms, .max_inflight = peak});
}

// A balance policy without drains, its baseline set to `base_ms`.
BalancePolicy with_baseline(double base_ms, BalancePolicy::Params p = {}) {
  p.probe_interval_ms = 0;
  BalancePolicy b(kBounds, p);
  // An app-limited first window sets the baseline and holds the limit.
  b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = base_ms, .max_inflight = 10}));
  return b;
}

TEST(BalancePolicy, FirstWindowSetsTheBaseline) {
  BalancePolicy b = with_baseline(10);
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  EXPECT_DOUBLE_EQ(b.limit(), 100);
}

TEST(BalancePolicy, ShrinksToTheTargetRatioInOneStep) {
  BalancePolicy b = with_baseline(10);
  // r = 15 / 10 = 1.5 > T = 1.2: L = 100 * 1.2 / 1.5 = 80.
  EXPECT_DOUBLE_EQ(b.update(used_window(15)), 80);
}

TEST(BalancePolicy, ShrinksAtMostByHalf) {
  BalancePolicy b = with_baseline(10);
  // r = 4: 1.2 / 4 = 0.3, floored at 0.5: L = 50.
  EXPECT_DOUBLE_EQ(b.update(used_window(40)), 50);
}

TEST(BalancePolicy, GrowsByTenPercentWhenUsedWithoutQueue) {
  BalancePolicy b = with_baseline(10);
  // r = 1: room = 1, L = 100 + 100 * 0.1 = 110.
  EXPECT_DOUBLE_EQ(b.update(used_window(10)), 110);
}

TEST(BalancePolicy, GrowthFadesTowardTheTarget) {
  BalancePolicy b = with_baseline(10);
  // r = 1.1: room = (1.2 - 1.1) / 0.2 = 0.5, L = 100 + 100 * 0.1 * 0.5 = 105.
  EXPECT_NEAR(b.update(used_window(11)), 105, 1e-9);
}

TEST(BalancePolicy, GrowsByAtLeastOneFromTheBottom) {
  BalancePolicy b(Bounds{1, 1000, 1}, BalancePolicy::Params{.probe_interval_ms = 0});
  b.update(make_window(WindowSpec{.ok = 10, .rtt_ms = 10, .max_inflight = 1}));  // used: 1 >= 0.9
  // Started at 1: 1 * 0.1 < 1, so + 1. A collapsed limit always climbs back.
  EXPECT_DOUBLE_EQ(b.update(make_window(WindowSpec{.ok = 10, .rtt_ms = 10, .max_inflight = 2})), 3);
}

TEST(BalancePolicy, HoldsWhenAppLimited) {
  BalancePolicy b = with_baseline(10);
  // Peak 50 of 100, nothing rejected, no queue: the limit is not what binds.
  EXPECT_DOUBLE_EQ(b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 10, .max_inflight = 50})), 100);
}

TEST(BalancePolicy, RejectionsCountAsUse) {
  BalancePolicy b = with_baseline(10);
  Window w = make_window(WindowSpec{.ok = 100, .rtt_ms = 10, .max_inflight = 50});
  w.rejected = 3;
  EXPECT_DOUBLE_EQ(b.update(w), 110);
}

TEST(BalancePolicy, BacksOffWhenDropsPassTheThreshold) {
  BalancePolicy b = with_baseline(10);
  // 2 dropped of 100 samples = 2% >= 1%: floor(100 * 0.9) = 90.
  EXPECT_DOUBLE_EQ(b.update(make_window(WindowSpec{.ok = 98, .dropped = 2, .rtt_ms = 10, .max_inflight = 100})), 90);
}

TEST(BalancePolicy, ARareDropIsNotOverload) {
  BalancePolicy b = with_baseline(10);
  // 1 dropped of 1000 = 0.1%: no back-off; no queue and used, so it grows.
  EXPECT_DOUBLE_EQ(b.update(make_window(WindowSpec{.ok = 999, .dropped = 1, .rtt_ms = 10, .max_inflight = 100})), 110);
}

TEST(BalancePolicy, DroppedLatencyNeverMovesTheBaseline) {
  BalancePolicy b = with_baseline(10);
  b.update(make_window(WindowSpec{.dropped = 50, .max_inflight = 100}));
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
}

TEST(BalancePolicy, BaselineFallsHalfwayToALowerP50) {
  BalancePolicy b = with_baseline(10);
  b.update(used_window(8));
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 9e6);
}

TEST(BalancePolicy, BaselineFollowsWhileTheLimitIsNotUsed) {
  BalancePolicy b = with_baseline(10);
  b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 20, .max_inflight = 10}));
  // 10 + 0.2 * (20 - 10) = 12.
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 12e6);
}

TEST(BalancePolicy, BaselineDoesNotDriftUpUnderLoad) {
  BalancePolicy b = with_baseline(10);
  // A standing queue at the target, window after window: the baseline stays.
  for (int i = 0; i < 1000; ++i) b.update(used_window(12, static_cast<std::uint32_t>(b.limit())));
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
}

TEST(BalancePolicy, SettlesAtTheTargetOnAQueueingDependency) {
  // W = 20 workers, 10 ms each: rtt = 10 * max(1, L / 20). The fixed point
  // is L* = 1.2 * 20 = 24.
  BalancePolicy b = with_baseline(10);
  for (int i = 0; i < 200; ++i) {
    const double rtt = 10 * std::max(1.0, b.limit() / 20);
    b.update(used_window(rtt, static_cast<std::uint32_t>(b.limit())));
  }
  EXPECT_NEAR(b.limit(), 24, 2);
}

TEST(BalancePolicy, DrainsEveryProbeIntervalAndRestores) {
  BalancePolicy b(kBounds, BalancePolicy::Params{});
  b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 10, .max_inflight = 10}));  // 1 s, baseline 10
  // Used windows at r = 1.1 (room 0.5), each + 5% of the limit:
  // 100 -> 105 -> 110.25 -> 115.7625.
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 105);
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 110.25);
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 115.7625);
  // 5 s of window time: 115.7625 * 1.05 = 121.550625, then the drain:
  // floor(121.550625 * 0.75) = 91.
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 91);
  EXPECT_TRUE(b.probing());
  // Two probe windows; the last one's p50 is the new baseline; the limit
  // comes back.
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 91)), 91);
  EXPECT_DOUBLE_EQ(b.update(used_window(10.5, 91)), 121.550625);
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10.5e6);
}

TEST(BalancePolicy, RecoversFromASlowerDependencyAtTheNextDrain) {
  BalancePolicy b(kBounds, BalancePolicy::Params{});
  b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 10, .max_inflight = 10}));
  // The dependency turns 2x slower with no queue at all (base latency rose):
  // the limit shrinks (it looks like queueing) ...
  double lowest = b.limit();
  for (int i = 0; i < 12; ++i) {
    b.update(used_window(20, static_cast<std::uint32_t>(b.limit())));
    lowest = std::min(lowest, b.limit());
  }
  EXPECT_LT(lowest, 100);
  // ... until a drain measures 20 ms as the new baseline, after which it
  // grows back instead of collapsing.
  EXPECT_NEAR(b.baseline_ns(), 20e6, 1);
  const double after_drain = b.limit();
  for (int i = 0; i < 10; ++i) b.update(used_window(20, static_cast<std::uint32_t>(b.limit())));
  EXPECT_GT(b.limit(), after_drain);
}

TEST(BalancePolicy, ADrainThatSeesDropsBacksOff) {
  BalancePolicy b(kBounds, BalancePolicy::Params{});
  b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 10, .max_inflight = 10}));
  for (int i = 0; i < 4; ++i) b.update(used_window(11, 200));
  ASSERT_TRUE(b.probing());
  // Backs off from the limit before the drain: floor(121.550625 * 0.9) = 109.
  EXPECT_DOUBLE_EQ(b.update(make_window(WindowSpec{.ok = 50, .dropped = 50, .rtt_ms = 10, .max_inflight = 91})), 109);
  EXPECT_FALSE(b.probing());
}

TEST(BalancePolicy, RefusesOutOfRangeParameters) {
  EXPECT_EQ(test::param_error_of([] { BalancePolicy::parse_params({{"tolerance", 0}}); }),
            "tolerance = 0: must be in (0, 2]");
  EXPECT_EQ(test::param_error_of([] { BalancePolicy::parse_params({{"probe_factor", 1}}); }),
            "probe_factor = 1: must be in (0, 0.99]");
}

}  // namespace
}  // namespace bulkhead::policies
