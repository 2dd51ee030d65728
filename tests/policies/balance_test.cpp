#include "policies/balance.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>

#include "tests/policies/window_builder.hpp"

namespace bulkhead::policies {
namespace {

using test::make_window;
using test::WindowSpec;

// Bounds wide enough that no clamp interferes; limit starts at 100.
constexpr Bounds kBounds{1, 1000, 100};

// Round numbers for hand-worked values: T = 1.2, growth 10%, no latency
// smoothing (each window's p50 is the latency), drains every 5 s to 0.85
// of the knee.
BalancePolicy::Params hand() {
  BalancePolicy::Params p;
  p.probe_factor = 0.85;
  p.tolerance = 0.2;
  p.growth = 0.1;
  p.latency_samples = 0;
  p.probe_interval_ms = 5000;
  return p;
}

// A window of 100 ok calls at `rtt_ms` with the limit in full use.
Window used_window(double rtt_ms, std::uint32_t peak = 100) {
  return make_window(WindowSpec{.ok = 100, .rtt_ms = rtt_ms, .max_inflight = peak});
}

// An app-limited first window: it sets the baseline and holds the limit,
// and its 200 samples are enough for the baseline to be trusted.
Window first_window(double base_ms) {
  return make_window(WindowSpec{.ok = 200, .rtt_ms = base_ms, .max_inflight = 10});
}

// A window in which every call timed out.
Window outage_window(std::uint32_t peak) { return make_window(WindowSpec{.dropped = 50, .max_inflight = peak}); }

// A balance policy without drains, its baseline set to `base_ms`.
BalancePolicy with_baseline(double base_ms, BalancePolicy::Params p = hand()) {
  p.probe_interval_ms = 0;
  BalancePolicy b(kBounds, p);
  b.update(first_window(base_ms));
  return b;
}

TEST(BalancePolicy, FirstWindowSetsTheBaseline) {
  BalancePolicy b = with_baseline(10);
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  EXPECT_DOUBLE_EQ(b.limit(), 100);
}

// A window of 100 calls that the limit (100) binds, its p50 at `p50_ms`
// and its p10 at `p10_share` of that: a dependency's own spread (0.2), or
// the shift of a queue every call waits in (0.8).
Window bound_window(double p50_ms, double p10_share) {
  Window w = make_window(WindowSpec{.ok = 100, .rtt_ms = p50_ms, .max_inflight = 100});
  w.rejected = 10;
  w.rtt_p10_ns = static_cast<std::uint64_t>(p10_share * p50_ms * test::kNsPerMs);
  w.rtt_min_ns = w.rtt_p10_ns / 2;
  return w;
}

TEST(BalancePolicy, AWindowTheLimitBindsWithoutAQueuesShapeJoinsAnUntrustedBaseline) {
  BalancePolicy b(kBounds, hand());
  b.update(bound_window(10, 0.2));
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  EXPECT_DOUBLE_EQ(b.limit(), 110);  // r = 1: the full 10% growth
  // 100 samples of the 200 a baseline needs to be trusted: the next such
  // window is averaged in, not drained for.
  b.update(bound_window(12, 0.2));
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 11e6);
}

TEST(BalancePolicy, AFirstWindowTheLimitBindsWithAQueuesShapeCallsADrain) {
  BalancePolicy b(kBounds, hand());
  b.update(bound_window(10, 0.8));
  EXPECT_TRUE(b.probing());
  EXPECT_LT(b.limit(), 100);
}

TEST(BalancePolicy, ABaselineADrainMeasuredIsTrusted) {
  BalancePolicy b(kBounds, hand());
  b.update(bound_window(10, 0.8));
  ASSERT_TRUE(b.probing());
  const auto drained = static_cast<std::uint32_t>(b.limit());
  for (int i = 0; i < 3; ++i) b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 8, .max_inflight = drained}));
  ASSERT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 8e6);
  // The drain measured 8 ms: windows the limit binds with a queue's shape
  // are a queue over that baseline now, not a reason to measure it again
  // (until the drain due after five used seconds).
  for (int i = 0; i < 4; ++i) {
    b.update(bound_window(8.8, 0.8));
    EXPECT_FALSE(b.probing()) << "window " << i + 1;
  }
}

TEST(BalancePolicy, ShrinksHalfwayInRatioToTheTarget) {
  BalancePolicy b = with_baseline(10);
  // r = 15 / 10 = 1.5 > T = 1.2: L = 100 * sqrt(1.2 / 1.5) = 89.44.
  EXPECT_DOUBLE_EQ(b.update(used_window(15)), 100 * std::sqrt(0.8));
}

TEST(BalancePolicy, ShrinksAtMostByHalf) {
  BalancePolicy b = with_baseline(10);
  // r = 10: sqrt(1.2 / 10) = 0.35, floored at 0.5: L = 50.
  EXPECT_DOUBLE_EQ(b.update(used_window(100)), 50);
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
  BalancePolicy::Params p = hand();
  p.probe_interval_ms = 0;
  BalancePolicy b(Bounds{1, 1000, 1}, p);
  b.update(make_window(WindowSpec{.ok = 10, .rtt_ms = 10, .max_inflight = 1}));  // used: 1 >= 0.9
  // Started at 1: 1 * 0.1 < 1, so + 1. A collapsed limit always climbs back.
  EXPECT_DOUBLE_EQ(b.update(make_window(WindowSpec{.ok = 10, .rtt_ms = 10, .max_inflight = 2})), 3);
}

TEST(BalancePolicy, HoldsWhenAppLimited) {
  BalancePolicy b = with_baseline(10);
  // Peak 50 of 100, nothing rejected, no queue: the limit is not what binds.
  EXPECT_DOUBLE_EQ(b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 10, .max_inflight = 50})), 100);
}

TEST(BalancePolicy, DoesNotCutALimitUsedLessThanHalf) {
  BalancePolicy b = with_baseline(10);
  // r = 1.5 > T, but the peak of 49 is under half the limit: the latency is
  // not the limit's doing (a quiet time's few slow calls), so it holds.
  EXPECT_DOUBLE_EQ(b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 15, .max_inflight = 49})), 100);
  // At half, the same latency cuts it halfway in ratio to the target. Not
  // used either, so the baseline first follows a fifth of the way to 15:
  // r = 15 / 11, L = 100 * sqrt(1.2 * 11 / 15).
  BalancePolicy half = with_baseline(10);
  EXPECT_DOUBLE_EQ(half.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 15, .max_inflight = 50})),
                   100 * std::sqrt(1.2 * 11 / 15));
}

// A used window of `duration_ms` whose calls took `rtt_ms`.
Window short_window(double rtt_ms, double duration_ms) {
  Window w = used_window(rtt_ms);
  w.duration_ns = static_cast<std::uint64_t>(duration_ms * test::kNsPerMs);
  return w;
}

TEST(BalancePolicy, StepsOncePerRoundTrip) {
  // Calls of a second, windows of a quarter of it: each window takes a
  // quarter of the step a round trip would.
  BalancePolicy grows = with_baseline(1000);
  // r = 1, room 1: + 0.25 * 10% of 100.
  EXPECT_DOUBLE_EQ(grows.update(short_window(1000, 250)), 102.5);
  BalancePolicy shrinks = with_baseline(800);
  // r = 1.25 > T: the round trip's factor sqrt(1.2 / 1.25), to the power 0.25.
  EXPECT_DOUBLE_EQ(shrinks.update(short_window(1000, 250)), 100 * std::pow(std::sqrt(1.2 / 1.25), 0.25));
}

TEST(BalancePolicy, CountsTheSmoothingsLagInTheRoundTrip) {
  BalancePolicy::Params p = hand();
  p.latency_samples = 100;  // a window of 100 calls moves the latency halfway
  BalancePolicy b = with_baseline(1000, p);
  // Weight 1/2 lags (1 - 1/2) / (1/2) = 1 window, 250 ms: the step waits
  // 1000 + 250 ms to be seen, and this window takes 250 / 1250 of it.
  EXPECT_DOUBLE_EQ(b.update(short_window(1000, 250)), 102);
}

TEST(BalancePolicy, CountsWindowsOverTheTargetInRoundTrips) {
  BalancePolicy::Params p = hand();
  p.probe_interval_ms = 1e9;  // never on schedule
  BalancePolicy b(kBounds, p);
  b.update(first_window(100));  // baseline 100 ms
  // r = 1.3, a little over T = 1.2, in 100-ms windows of 130-ms calls:
  // each window is 100 / 130 of a round trip and cuts by
  // sqrt(1.2 / 1.3)^(100 / 130) = 0.9697, so the limit is not yet halved
  // after 20 windows (54.0). The 15 round trips over the target are
  // complete in the 20th window (19 x 100 / 130 = 14.6, 20 x = 15.4).
  for (int i = 0; i < 19; ++i) {
    b.update(short_window(130, 100));
    EXPECT_FALSE(b.probing()) << "window " << i + 1;
  }
  b.update(short_window(130, 100));
  EXPECT_TRUE(b.probing());
  // Drained to 0.85 of L / T from the unhalved 54.0: floor(38.3).
  EXPECT_DOUBLE_EQ(b.limit(), 38);
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

TEST(BalancePolicy, OverloadDropsLowerTheBaselineAndCallForADrain) {
  BalancePolicy::Params p = hand();
  p.probe_interval_ms = 30000;
  BalancePolicy b(kBounds, p);
  b.update(first_window(10));
  // Calls time out: the latency the baseline rests on held a queue, or the
  // limit would not time calls out. It backs off with the limit...
  EXPECT_DOUBLE_EQ(b.update(outage_window(100)), 90);
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 9e6);
  EXPECT_FALSE(b.probing());
  // ...and the first calm window with the limit in use re-measures it.
  b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 9, .max_inflight = 90}));
  EXPECT_TRUE(b.probing());
}

TEST(BalancePolicy, AfterAnOutageTheFirstWindowWithoutDropsDrainsAndTheLimitComesHalfwayBack) {
  BalancePolicy::Params p = hand();
  p.probe_interval_ms = 30000;
  BalancePolicy b(kBounds, p);
  b.update(first_window(10));
  // Every call times out for two windows: limit 100 -> 90 -> 81, and the
  // baseline the drops cut 10 -> 9 -> 8.1 ms.
  for (int i = 0; i < 2; ++i) {
    b.update(outage_window(static_cast<std::uint32_t>(b.limit())));
  }
  EXPECT_DOUBLE_EQ(b.limit(), 81);
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 8.1e6);
  // The dependency answers again in 10 ms. Against the cut baseline that is
  // r = 1.235, over the target, which is no news: the drain the drops
  // called starts now rather than once latency is under the target. The
  // window cuts 81 by sqrt(1.2 / 1.235) to 79.86 first, then drains to the
  // knee from before the drops, floor(0.85 * 100 / 1.2) = 70 (over the
  // floor(0.85 * 79.86 / 1.2) = 56 of other drains).
  EXPECT_DOUBLE_EQ(b.update(used_window(10, 81)), 70);
  EXPECT_TRUE(b.probing());
  for (int i = 0; i < 3; ++i) b.update(used_window(10, 70));  // a drain's three windows
  // 10 ms is the baseline from before the drops, no slower: the limit comes
  // halfway back (in ratio) to the 100 before them, floor(sqrt(79.86 * 100)).
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  EXPECT_DOUBLE_EQ(b.limit(), 89);
  // And grows on toward the full target: r = 1.1 has room 0.5 (a drain that
  // found the dependency slower would stop growth at 1 + 0.2 / 3).
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 89)), 89 + 0.5 * 8.9);
}

TEST(BalancePolicy, AfterTheDrainThatDropsCalledLatencyOverTheTargetIsNewsAgain) {
  BalancePolicy b(kBounds, hand());
  b.update(first_window(10));
  // The outage and the drain after it, as above, on the 5 s schedule.
  for (int i = 0; i < 2; ++i) b.update(outage_window(static_cast<std::uint32_t>(b.limit())));
  b.update(used_window(10, 81));
  for (int i = 0; i < 3; ++i) b.update(used_window(10, 70));
  ASSERT_FALSE(b.probing());
  ASSERT_DOUBLE_EQ(b.limit(), 89);
  // The baseline the drops cut went with that drain: latency over the
  // target (r = 1.44) is a queue again, not the cut's echo. The limit is
  // cut, and the drain due after five used seconds waits for calm, until
  // the cuts halve the limit (the eighth window: a drain for latency that
  // stays over the target).
  for (int i = 0; i < 7; ++i) {
    b.update(used_window(14.4, 200));
    EXPECT_FALSE(b.probing()) << "window " << i + 1;
  }
  b.update(used_window(14.4, 200));
  EXPECT_TRUE(b.probing());
}

// A policy whose baseline is 10 ms, after drops took its limit from 100 to
// the minimum, 1.
BalancePolicy after_a_long_outage() {
  BalancePolicy::Params p = hand();
  p.probe_interval_ms = 30000;
  BalancePolicy b(kBounds, p);
  b.update(first_window(10));
  while (b.limit() > kBounds.min) b.update(outage_window(1));
  return b;
}

// The dependency answers again in 10 ms, as before the outage. The drain
// runs at floor(0.85 * 100 / 1.2) = 70, the knee from before the drops,
// not at the minimum, where it would wait for twenty calls one at a time.
// It finds the dependency as it was: halfway back from 1 to 100 is 10, but
// the dependency served 70 in the drain, so the limit stays at 70.
void expect_back_at_the_knee(BalancePolicy& b) {
  EXPECT_DOUBLE_EQ(b.update(used_window(10, 1)), 70);
  for (int i = 0; i < 3; ++i) b.update(used_window(10, 70));
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  EXPECT_DOUBLE_EQ(b.limit(), 70);
}

TEST(BalancePolicy, AfterALongOutageTheDrainRunsAtTheKneeFromBeforeIt) {
  BalancePolicy b = after_a_long_outage();
  expect_back_at_the_knee(b);
}

TEST(BalancePolicy, AnOutageThatGoesOnEndsTheDrainAtOnce) {
  BalancePolicy b = after_a_long_outage();
  // One window of answers, and the drain at 70 starts; the next window's
  // calls time out again: back to the minimum.
  EXPECT_DOUBLE_EQ(b.update(used_window(10, 1)), 70);
  EXPECT_DOUBLE_EQ(b.update(outage_window(70)), 1);
  EXPECT_FALSE(b.probing());
  // When it is back for good, the drain is the same as after an outage
  // that never flickered.
  b.update(outage_window(1));
  expect_back_at_the_knee(b);
}

TEST(BalancePolicy, DropsStopCuttingTheBaselineOnceTheLimitIsAtItsMinimum) {
  BalancePolicy b(kBounds, hand());
  b.update(first_window(10));
  // Every call times out: the limit falls 10% a window (floored), from 100
  // to the minimum of 1 in 27 windows, and the baseline with it, to
  // 10 x 0.9^27 = 0.58 ms.
  int windows = 0;
  for (; b.limit() > kBounds.min; ++windows) b.update(outage_window(1));
  EXPECT_EQ(windows, 27);
  const double at_minimum = b.baseline_ns();
  EXPECT_NEAR(at_minimum, 10e6 * std::pow(0.9, 27), 1);
  // Cuts there would only move the baseline (and what /metrics shows of it)
  // toward zero for as long as the outage lasts.
  for (int i = 0; i < 100; ++i) b.update(outage_window(1));
  EXPECT_DOUBLE_EQ(b.limit(), 1);
  EXPECT_DOUBLE_EQ(b.baseline_ns(), at_minimum);
}

TEST(BalancePolicy, ARareTimeoutBacksOffTheLimitButNotTheBaseline) {
  BalancePolicy b = with_baseline(10);
  // One timeout in a window of 50 is 2% of that window: the limit backs
  // off, but one in 500 calls over the recent ones is a tail, not a queue.
  const Window w = make_window(WindowSpec{.ok = 49, .dropped = 1, .rtt_ms = 10, .max_inflight = 100});
  EXPECT_DOUBLE_EQ(b.update(w), 90);
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  // Four such windows in a row are 4 drops in the 400 calls since the
  // first window's 200: 1%, a queue.
  b.update(w);
  b.update(w);
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  b.update(w);
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 9e6);
}

TEST(BalancePolicy, BaselineHoldsUnderLoadWhenLatencyDips) {
  BalancePolicy b = with_baseline(10);
  // Following dips while the limit is used would make the baseline a
  // minimum of noise. r = 0.9 (not under 1 / T: no heal) is just room:
  // + min(1, 1.5) * 10.
  EXPECT_DOUBLE_EQ(b.update(used_window(9)), 110);
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
}

TEST(BalancePolicy, SmoothsLatencyBySampleCount) {
  BalancePolicy::Params p = hand();
  p.latency_samples = 100;
  BalancePolicy big = with_baseline(10, p), small = with_baseline(10, p);
  // 100 samples at 20 ms move the latency 100 / (100 + 100) of the way:
  // 15 ms; 10 samples only 10 / 110 of it: 10.91 ms.
  big.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 20, .max_inflight = 100}));
  small.update(make_window(WindowSpec{.ok = 10, .rtt_ms = 20, .max_inflight = 100}));
  EXPECT_DOUBLE_EQ(big.latency_ns(), 15e6);
  EXPECT_DOUBLE_EQ(small.latency_ns(), 10e6 + 10e6 * 10 / 110);
}

TEST(BalancePolicy, BaselineFollowsWhileTheLimitIsNotUsed) {
  BalancePolicy b = with_baseline(10);
  b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 20, .max_inflight = 10}));
  // 10 + 0.2 * (20 - 10) = 12.
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 12e6);
}

TEST(BalancePolicy, BaselineDoesNotFollowAWindowThatKeptTheLimitFullWithoutTouchingIt) {
  // No call turned away and a peak of 85 under the limit of 100: unused by
  // the window's own count. But 4,250 calls of 20 ms in the second kept 85
  // in flight on average (Little's law), the limit full all along: with a
  // few dozen calls a window, demand a little over capacity gives such
  // windows by chance while a queue stands under the limit, and following
  // them ratchets the baseline up (docs/policies.md, "Few calls a
  // window"). The baseline stays at 10 (it would follow to 12).
  BalancePolicy b = with_baseline(10);
  b.update(make_window(WindowSpec{.ok = 4250, .rtt_ms = 20, .max_inflight = 85}));
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
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

TEST(BalancePolicy, DrainsEveryProbeIntervalOfUseAndRestores) {
  BalancePolicy b(kBounds, hand());
  // 1 s with the limit unused sets the baseline, 10 ms; unused time does
  // not count toward a drain.
  b.update(first_window(10));
  // Used windows at r = 1.1 (room 0.5), each + 5% of the limit:
  // 100 -> 105 -> 110.25 -> 115.7625 -> 121.550625.
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 105);
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 110.25);
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 115.7625);
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 121.550625);
  EXPECT_FALSE(b.probing());
  // 5 s of use: 121.550625 * 1.05 = 127.62815625, then the drain to 0.85
  // of the knee L / T: floor(127.62815625 * 0.85 / 1.2) = 90. (These
  // windows say nothing of the knee by Little's law: 100 calls of 11 ms in
  // 1 s average 1.1 in flight, far from the limit.)
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 90);
  EXPECT_TRUE(b.probing());
  EXPECT_TRUE(b.baseline().measuring);  // what /metrics shows
  // Three probe windows; the first still holds calls from before the drain
  // and is left out; the others' p50s, weighted by samples, make the new
  // baseline: (10 + 11) / 2. Then the limit comes back.
  EXPECT_DOUBLE_EQ(b.update(used_window(30, 90)), 90);
  EXPECT_DOUBLE_EQ(b.update(used_window(10, 90)), 90);
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 90)), 127.62815625);
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10.5e6);
  EXPECT_DOUBLE_EQ(b.baseline().latency_ns, 10.5e6);
  EXPECT_FALSE(b.baseline().measuring);
}

TEST(BalancePolicy, ADrainMeasuresOnlyOnceInFlightFellToItsLimit) {
  BalancePolicy b(kBounds, hand());
  b.update(first_window(10));
  for (int i = 0; i < 4; ++i) b.update(used_window(11, 200));
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 90);  // the drain, as above
  // Calls queued before the drain keep completing, slowly, with 150 still
  // in flight after three windows: none of it is measured, and the drain
  // goes on past its three windows.
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(b.update(used_window(40, 150)), 90);
  EXPECT_TRUE(b.probing());
  // In-flight down to the drained limit: the drain measures from the next
  // window on, 12 ms, then ends. The baseline is 12, not the queue's 40.
  EXPECT_DOUBLE_EQ(b.update(used_window(40, 90)), 90);
  EXPECT_DOUBLE_EQ(b.update(used_window(12, 90)), 127.62815625);
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 12e6);
}

// Calls that hang until they time out never bring in-flight down to the
// drained limit: after 50 windows the drain ends, measuring nothing, and
// the limit and the baseline are as they were.
TEST(BalancePolicy, ADrainWhoseCallsNeverLeaveEndsMeasuringNothing) {
  BalancePolicy b(kBounds, hand());
  b.update(first_window(10));
  for (int i = 0; i < 4; ++i) b.update(used_window(11, 200));
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 90);  // the drain, as above
  for (int i = 1; i < 50; ++i) ASSERT_DOUBLE_EQ(b.update(used_window(40, 150)), 90) << i;
  EXPECT_TRUE(b.probing());
  EXPECT_DOUBLE_EQ(b.update(used_window(40, 150)), 127.62815625);
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
}

TEST(BalancePolicy, AScheduledDrainWaitsForCalm) {
  BalancePolicy b(kBounds, hand());
  b.update(first_window(10));
  for (int i = 0; i < 4; ++i) b.update(used_window(11, 200));
  // The drain is due, but latency is over the target (r = 3): a drain
  // now would measure the queue that a loss of capacity is building.
  b.update(used_window(30, 200));
  EXPECT_FALSE(b.probing());
  // r = 1.2 is back at the target: now it drains.
  b.update(used_window(12, 200));
  EXPECT_TRUE(b.probing());
}

// A saturated one-second window at limit L: every call admitted takes
// rtt_ms, so ok = L / rtt by Little's law, or `ok` when given (a dependency
// that serves no more than that, queueing the rest).
Window saturated(double limit, double rtt_ms, std::uint64_t ok = 0) {
  Window w = make_window(WindowSpec{.ok = ok > 0 ? ok : static_cast<std::uint64_t>(limit / (rtt_ms / 1e3)),
                                    .rtt_ms = rtt_ms,
                                    .max_inflight = static_cast<std::uint32_t>(limit)});
  w.rejected = 1;
  return w;
}

TEST(BalancePolicy, DrainsToTheKneeThatLittlesLawGives) {
  BalancePolicy b(Bounds{1, 1000, 20}, hand());
  b.update(first_window(10));  // baseline 10
  // A saturated window: 1800 calls of 11 ms in 1 s keep 19.8 in flight on
  // average, nearly all of the limit. The dependency serves 1800/s, at
  // 10 ms without a queue: its knee is 18 calls. (r = 1.1, room 0.5: the
  // limit grows by 1, to 21.)
  EXPECT_DOUBLE_EQ(b.update(saturated(20, 11, 1800)), 21);
  // Four more used seconds at r = 1.1, + 5% each, the last one due:
  // 21 * 1.05^4 = 25.5, and L / T = 21.3 is over the knee of 18.
  for (int i = 0; i < 3; ++i) b.update(used_window(11, 200));
  EXPECT_FALSE(b.probing());
  // The drain goes to floor(0.85 * 18) = 15, not to floor(0.85 * 21.3).
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 15);
  EXPECT_TRUE(b.probing());
}

TEST(BalancePolicy, TheKneesRateIsSmoothedOverSaturatedWindows) {
  BalancePolicy b(Bounds{1, 1000, 20}, hand());
  b.update(first_window(10));  // baseline 10
  // DrainsToTheKneeThatLittlesLawGives's first saturated window (1800/s;
  // the limit grows to 21), then one of 2000 calls of 11 ms: 22 in flight
  // on average, saturated too. 200 calls over 1800 is under five Poisson
  // deviations (5 x 42), no jump: the rate moves 0.3 of the way, to
  // 1860/s, and the limit grows 5%, to 22.05.
  EXPECT_DOUBLE_EQ(b.update(saturated(20, 11, 1800)), 21);
  EXPECT_DOUBLE_EQ(b.update(saturated(22, 11, 2000)), 22.05);
  // Three more used seconds, the last one due: 22.05 x 1.05^3 = 25.5, L / T
  // = 21.3 over the knee of 1860/s x 10 ms = 18.6. The drain goes to
  // floor(0.85 x 18.6) = 15 (to 17 if the second window had replaced the
  // rate, 20 calls).
  for (int i = 0; i < 2; ++i) b.update(used_window(11, 200));
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 15);
  EXPECT_TRUE(b.probing());
}

// The drain of DrainsToTheKneeThatLittlesLawGives (a dependency that serves
// 1800/s at 10 ms: a knee of 18), at `drained` under a maximum of `max`
// calls, measured: 10 ms. It measured under the knee (latency fell from 11
// to 10 ms, 10%, while the limit fell by over 15%), and found the
// dependency as it was: a knee the next drain may trust.
BalancePolicy after_a_drain_under_the_knee(double max = 1000, double drained = 15) {
  BalancePolicy b(Bounds{1, max, 20}, hand());
  b.update(first_window(10));
  b.update(saturated(20, 11, 1800));
  for (int i = 0; i < 4; ++i) b.update(used_window(11, 200));
  EXPECT_DOUBLE_EQ(b.limit(), drained);
  EXPECT_TRUE(b.probing());
  const auto in_drain = static_cast<std::uint32_t>(drained);
  for (int i = 0; i < 3; ++i) b.update(used_window(10, in_drain));
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  return b;
}

TEST(BalancePolicy, AfterADrainUnderTheKneeTheNextRunsJustUnderIt) {
  BalancePolicy b = after_a_drain_under_the_knee();
  // Five used seconds at r = 1.1 make the next drain due. The knee is
  // still 1800/s times the drained mean latency of 10 ms, 18, and now
  // trusted: the drain runs at floor(0.95 x 18) = 17, not at
  // floor(0.85 x 18) = 15.
  for (int i = 0; i < 4; ++i) b.update(used_window(11, 200));
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.update(used_window(11, 200)), 17);
  EXPECT_TRUE(b.probing());
}

TEST(BalancePolicy, ADrainAtTheKneeCallsNoEarlyDrain) {
  // Under a maximum of 20, the first drain ran at floor(0.85 x 20 / 1.2) =
  // 14; the next, at the knee, at 17, from 20 with latency at 11.9 ms
  // (r = 1.19, calm). It measures 10 ms, at 1700 calls a second (17 in
  // flight) against the 1800 before: latency fell by ln(1.19) = 0.17,
  // more than 0.85 of the limit's ln(20 / 17) = 0.16, and the rate by
  // less than a tenth, which from a lower drain would say it started
  // above the knee and call the next one 2 s of use later. From the knee,
  // the queue goes whole while the limit falls less: the next drain is a
  // full 5 s of use away.
  BalancePolicy b = after_a_drain_under_the_knee(20, 14);
  for (int i = 0; i < 5 && !b.probing(); ++i) b.update(used_window(11.9, 200));
  ASSERT_TRUE(b.probing());
  EXPECT_DOUBLE_EQ(b.limit(), 17);
  for (int i = 0; i < 3; ++i) b.update(make_window(WindowSpec{.ok = 1700, .rtt_ms = 10, .max_inflight = 17}));
  ASSERT_FALSE(b.probing());
  for (int i = 0; i < 4; ++i) {
    b.update(used_window(11.9, 200));
    EXPECT_FALSE(b.probing()) << "second " << i + 1;
  }
  b.update(used_window(11.9, 200));
  EXPECT_TRUE(b.probing());
}

TEST(BalancePolicy, ADrainThatDropsCalledConfirmsNoKnee) {
  // The dependency of DrainsToTheKneeThatLittlesLawGives (1800/s at 10 ms:
  // a knee of 18), then two windows whose calls all time out: the limit
  // 21 -> 18.9 -> 17.01, the baseline and the mean latency cut to 8.1 ms.
  BalancePolicy b(Bounds{1, 1000, 20}, hand());
  b.update(first_window(10));
  b.update(saturated(20, 11, 1800));
  for (int i = 0; i < 2; ++i) b.update(outage_window(static_cast<std::uint32_t>(b.limit())));
  ASSERT_DOUBLE_EQ(b.baseline_ns(), 8.1e6);
  // It answers in 10 ms again: the drain the drops called runs at the knee
  // from before them, floor(0.85 x 21 / 1.2) = 14, serves 1400 calls a
  // second at 10 ms, and finds the dependency as it was.
  b.update(used_window(10, 17));
  ASSERT_TRUE(b.probing());
  ASSERT_DOUBLE_EQ(b.limit(), 14);
  for (int i = 0; i < 3; ++i) b.update(make_window(WindowSpec{.ok = 1400, .rtt_ms = 10, .max_inflight = 14}));
  ASSERT_FALSE(b.probing());
  ASSERT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  // Yet its limit was the drops', not one under a knee it measured: the
  // next drain, five used seconds later, runs at 0.85 of the knee of 18,
  // floor(15.3) = 15, as from a knee in doubt, not at 0.95 of it (17).
  for (int i = 0; i < 5 && !b.probing(); ++i) b.update(used_window(11, 200));
  ASSERT_TRUE(b.probing());
  EXPECT_DOUBLE_EQ(b.limit(), 15);
}

// After a drain under the knee (a knee of 18 it confirmed, limit back at
// 25.5), one window whose calls all time out (limit 22.97, baseline and
// mean latency 9 ms: a knee of 16.2), then answers in 10 ms again: the
// drain the drops called starts at once, at the knee from before the
// drops, floor(0.85 x 25.5 / 1.2) = 18 (over 0.85 or 0.95 of 16.2). It
// measures 7 ms at 1800 calls a second. Returns the used seconds after it
// until the next drain.
int seconds_to_the_drain_after_a_drops_drain() {
  BalancePolicy b = after_a_drain_under_the_knee();
  b.update(outage_window(static_cast<std::uint32_t>(b.limit())));
  b.update(used_window(10, 22));
  EXPECT_TRUE(b.probing());
  EXPECT_DOUBLE_EQ(b.limit(), 18);
  for (int i = 0; i < 3; ++i) b.update(make_window(WindowSpec{.ok = 1800, .rtt_ms = 7, .max_inflight = 18}));
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 7e6);
  int seconds = 0;
  while (!b.probing() && seconds < 10) {
    b.update(used_window(7, 200));
    ++seconds;
  }
  return seconds;
}

TEST(BalancePolicy, ADrainTheDropsCalledIsNotOneAtTheKnee) {
  // Its latency fell from 10 to 7 ms, ln(10 / 7) = 0.36, more than 0.85 of
  // the limit's fall from 24 to 18 (0.29), and the rate held: it started
  // above the knee, and the next drain comes 2 s of use later. Only a
  // drain that ran at a confirmed knee by schedule is excused that (its
  // latency falls by the whole queue while the limit falls less): this one
  // the drops called, from their own knee.
  EXPECT_EQ(seconds_to_the_drain_after_a_drops_drain(), 2);
}

TEST(BalancePolicy, AHealPutsTheKneeInDoubt) {
  BalancePolicy b = after_a_drain_under_the_knee();
  // The dependency heals: 8 ms is under 10 / 1.2. The baseline drops to it
  // and the mean latency with it (8 ms: a knee of 1800/s x 8 ms = 14.4),
  // and the drain it calls starts at once. That mean scales with a
  // smoothed latency that may still be falling: the drain runs at 0.85 of
  // the knee, floor(0.85 x 14.4) = 12, not at 0.95 of it (13).
  b.update(used_window(8, 200));
  EXPECT_TRUE(b.probing());
  EXPECT_DOUBLE_EQ(b.limit(), 12);
}

// After a heal, the drain it calls: the dependency healed to 8 ms, the
// drain (at 12, as in AHealPutsTheKneeInDoubt) measures 3 ms over windows
// of `ok_in_drain` calls a second. Latency fell by ln(8 / 3) = 0.98, more
// than 0.85 of the limit's fall from 25.5 x 1.1 = 28.05 to 12, 0.72: read
// from latency alone, the drain started above the knee. Returns the used
// seconds after it until the next drain.
int seconds_to_the_drain_after_a_heal(std::uint64_t ok_in_drain) {
  BalancePolicy b = after_a_drain_under_the_knee();
  b.update(used_window(8, 200));
  EXPECT_DOUBLE_EQ(b.limit(), 12);
  for (int i = 0; i < 3; ++i) {
    b.update(make_window(WindowSpec{.ok = ok_in_drain, .rtt_ms = 3, .max_inflight = 12}));
  }
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 3e6);
  int seconds = 0;
  while (!b.probing() && seconds < 10) {
    b.update(used_window(3, 200));
    ++seconds;
  }
  return seconds;
}

TEST(BalancePolicy, ADrainThatServedFewerCallsRanUnderTheKnee) {
  // Before the heal the dependency served 1800 calls a second; the drain
  // 100. The latency before the drain was the slower dependency's, and
  // says nothing of the knee; the fall of the completion rate says the
  // drain ran under it: the next drain is a full 5 s of use away.
  EXPECT_EQ(seconds_to_the_drain_after_a_heal(100), 5);
  // A drain that served as many as before (1800) ran at or over the knee:
  // it may have measured a queue, and the next drain comes 2 s later.
  EXPECT_EQ(seconds_to_the_drain_after_a_heal(1800), 2);
}

TEST(BalancePolicy, DrainsEarlyWhenShrinkingDoesNotBringLatencyDown) {
  BalancePolicy::Params p = hand();
  p.probe_interval_ms = 1e9;  // never on schedule
  BalancePolicy b(kBounds, p);
  b.update(first_window(10));
  // Latency doubled and stays doubled whatever the limit: not queueing.
  // r = 2 cuts by sqrt(1.2 / 2) = 0.775 a window: 77.5, 60, 46.5, halved
  // in the third window over the target, which drains at once.
  int windows = 0;
  while (!b.probing() && windows < 100) {
    b.update(used_window(20, 1000));
    ++windows;
  }
  EXPECT_EQ(windows, 3);
}

TEST(BalancePolicy, ADrainMeasuresAtLeastTwentyCalls) {
  BalancePolicy::Params p = hand();
  p.probe_interval_ms = 1e9;  // never on schedule
  BalancePolicy b(kBounds, p);
  b.update(first_window(10));
  // Latency doubled whatever the limit: drains in the third window (above).
  for (int i = 0; i < 3; ++i) b.update(used_window(20, 1000));
  ASSERT_TRUE(b.probing());
  // Windows of five calls: the first is left out (calls from before the
  // drain), so the measured calls reach 20 in the fifth, and not before:
  // three windows and twice the latency are not enough on their own.
  const Window few = make_window(WindowSpec{.ok = 5, .rtt_ms = 20, .max_inflight = 5});
  for (int i = 0; i < 4; ++i) {
    b.update(few);
    EXPECT_TRUE(b.probing()) << "window " << i + 1;
  }
  b.update(few);
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 20e6);
}

TEST(BalancePolicy, ADrainLastsTwiceTheLatency) {
  BalancePolicy b(kBounds, hand());
  b.update(first_window(2500));  // calls of 2.5 s, windows of 1 s
  // Five used seconds at r = 1.1: the drain.
  for (int i = 0; i < 5; ++i) b.update(used_window(2750, 200));
  ASSERT_TRUE(b.probing());
  // Calls admitted before it take 2.5 s and more to leave, so it lasts
  // twice the latency, 5.5 s: the end of the sixth window, not the third,
  // though in-flight is at the drained limit and 200 calls are measured
  // by then.
  const auto drained = static_cast<std::uint32_t>(b.limit());
  for (int i = 0; i < 5; ++i) {
    b.update(used_window(2500, drained));
    EXPECT_TRUE(b.probing()) << "window " << i + 1;
  }
  b.update(used_window(2500, drained));
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 2500e6);
}

// Whether a drain starts in the calm after the limit was cut: a 10 ms
// baseline at 2000/s, three windows at 16 ms (r = 1.6 over T = 1.2, so
// the limit falls by sqrt(1.2 / 1.6) a window, from 22 to 14.3), then
// windows at 12 ms (r = 1.2, calm).
bool drains_after_cut(bool rate_follows_limit) {
  BalancePolicy::Params p = hand();
  p.probe_interval_ms = 1e9;  // never on schedule
  BalancePolicy b(Bounds{1, 1000, 20}, p);
  b.update(first_window(10));  // baseline 10
  b.update(saturated(b.limit(), 10, 2000));  // 2000/s at 20 in flight
  for (int i = 0; i < 3; ++i) b.update(saturated(b.limit(), 16, rate_follows_limit ? 0 : 2000));
  if (b.probing()) return true;
  for (int i = 0; i < 3; ++i) {
    b.update(saturated(b.limit(), 12, rate_follows_limit ? 0 : 2000));
    if (b.probing()) return true;
  }
  return false;
}

TEST(BalancePolicy, ADrainForLatencyStuckOverTheTargetIgnoresTheRatesKnee) {
  BalancePolicy::Params p = hand();
  p.probe_interval_ms = 1e9;  // never on schedule
  BalancePolicy b(Bounds{1, 1000, 20}, p);
  b.update(first_window(10));  // baseline 10
  // 2000/s at 10 ms: no queue (r = 1), the limit grows by 10% of 20, to 22.
  EXPECT_DOUBLE_EQ(b.update(saturated(b.limit(), 10)), 22);
  // The dependency turns 4x slower. r = 4 cuts by sqrt(1.2 / 4) = 0.548 a
  // window: 12.05, then 6.60, half of the 22 latency first passed the
  // target at: a drain. Its completions fell with it (22 / 40 ms = 550/s,
  // then 301/s), so the rate times the 10 ms no-load mean latency gives a
  // knee of 3 calls, and a drain there (floor(0.85 x 3.01) = 2) would
  // measure two calls at a time. That knee rests on the latency the drain
  // is there to doubt: it drains to floor(0.85 x 6.60 / 1.2) = 4.
  b.update(saturated(b.limit(), 40));
  EXPECT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.update(saturated(b.limit(), 40)), 4);
  EXPECT_TRUE(b.probing());
}

TEST(BalancePolicy, DrainsOnceCalmWhenTheRateMoved) {
  // The dependency got slower, no queue: the limit fell to 14.3 and the
  // rate with it, 14.3 / 12 ms = 1190/s, 52% (in log) under the 2000/s
  // of the last drain. Its latency may have moved as well: drain.
  EXPECT_TRUE(drains_after_cut(true));
}

TEST(BalancePolicy, ARateThatMovedCallsOneDrain) {
  BalancePolicy::Params p = hand();
  p.probe_interval_ms = 1e9;  // never on schedule
  BalancePolicy b(Bounds{1, 1000, 20}, p);
  b.update(first_window(10));
  b.update(saturated(b.limit(), 10, 2000));
  for (int i = 0; i < 3; ++i) b.update(saturated(b.limit(), 16));
  for (int i = 0; i < 3 && !b.probing(); ++i) b.update(saturated(b.limit(), 12));
  ASSERT_TRUE(b.probing());  // DrainsOnceCalmWhenTheRateMoved's drain
  for (int i = 0; i < 3; ++i) b.update(saturated(b.limit(), 11));
  ASSERT_FALSE(b.probing());
  ASSERT_DOUBLE_EQ(b.baseline_ns(), 11e6);
  // The dependency stays where it moved to, 11 ms a call and about 1200
  // calls a second at the restored limit (r = 1.1: growing 5% a window,
  // and the rate with it). That rate is the one the next drain compares
  // with, not the 2000/s from before the move: no drain follows.
  for (int i = 0; i < 6; ++i) {
    b.update(saturated(b.limit(), 12.1));
    EXPECT_FALSE(b.probing()) << "window " << i + 1;
  }
}

TEST(BalancePolicy, AQueueThatHoldsTheRateIsNoReasonToDrain) {
  // The same latency from a queue: the dependency keeps serving 2000/s
  // whatever the limit; cutting the limit is right, the baseline is.
  EXPECT_FALSE(drains_after_cut(false));
}

TEST(BalancePolicy, ALimitClimbingUnderTheKneeIsNoReasonToDrain) {
  BalancePolicy::Params p = hand();
  p.probe_interval_ms = 1e9;  // never on schedule
  BalancePolicy b(Bounds{1, 1000, 20}, p);
  b.update(first_window(10));  // baseline 10
  // Saturated seconds at r = 1.1 (outside the baseline's band, under the
  // target): the limit grows by 5% a window and the rate, L / 11 ms, with
  // it. Past 35% (in log) of rise the rate has moved, but by the limit's
  // doing: the dependency is the same.
  for (int i = 0; i < 12; ++i) {
    b.update(saturated(b.limit(), 11));
    EXPECT_FALSE(b.probing()) << "window " << i;
  }
  EXPECT_NEAR(b.limit(), 20 * std::pow(1.05, 12), 1e-9);
  // A fall counts from the highest rate: the dependency gets slower at
  // 15 ms, the limit is cut under it, and the calm after (r back at 1.2)
  // drains.
  for (int i = 0; i < 3 && !b.probing(); ++i) b.update(saturated(b.limit(), 15));
  for (int i = 0; i < 3 && !b.probing(); ++i) b.update(saturated(b.limit(), 12));
  EXPECT_TRUE(b.probing());
}

TEST(BalancePolicy, ADrainThatFoundTheDependencySlowerConfirmsNoKnee) {
  BalancePolicy b = after_a_drain_under_the_knee();  // a knee of 18, confirmed
  const auto at = [&b](double rtt_ms) { return b.update(saturated(b.limit(), rtt_ms)); };
  // The dependency turns 2x slower, no queue: r = 2 cuts by sqrt(1.2 / 2)
  // a window, 25.5 -> 19.8 -> 15.3 -> 11.9, half of 25.5: a drain, which
  // finds 20 ms, past the target over 10. The limit goes back halfway (in
  // ratio) to 25.5: floor(sqrt(11.9 x 25.5)) = 17.
  int windows = 0;
  while (!b.probing() && windows++ < 20) at(20);
  while (b.probing() && windows++ < 40) at(20);
  ASSERT_DOUBLE_EQ(b.baseline_ns(), 20e6);
  ASSERT_DOUBLE_EQ(b.limit(), 17);
  // Five used seconds at 22 ms (r = 1.1; the limit holds, growth stopping
  // at 1 + 0.2 / 3 after such a drain) make the next drain due. The rate,
  // 17 / 22 ms = 773/s, times that drain's mean latency, 20 ms, gives a
  // knee of 15.5; but that drain may have measured other limiters' queue,
  // so its knee is not trusted: the drain runs at floor(0.85 x 17 / 1.2) =
  // 12, not at floor(0.95 x 15.5) = 14.
  for (int i = 0; i < 4; ++i) {
    at(22);
    EXPECT_FALSE(b.probing()) << "second " << i + 1;
  }
  EXPECT_DOUBLE_EQ(at(22), 12);
  EXPECT_TRUE(b.probing());
}

TEST(BalancePolicy, OnABaselineADrainFoundSlowerOneWindowAtItStandsForNoDrain) {
  // Whether the drain due after five used seconds comes, when the fourth
  // is bound all along at the baseline and the fifth is `fifth_ms`.
  const auto drains = [](double fifth_ms) {
    BalancePolicy b = after_a_drain_under_the_knee();
    const auto at = [&b](double rtt_ms) { return b.update(saturated(b.limit(), rtt_ms)); };
    // The dependency turns 2x slower; a drain finds 20 ms (as above).
    int windows = 0;
    while (!b.probing() && windows++ < 20) at(20);
    while (b.probing() && windows++ < 40) at(20);
    EXPECT_DOUBLE_EQ(b.baseline_ns(), 20e6);
    for (int i = 0; i < 3; ++i) at(22);  // r = 1.1, over the band of 0.15 x 0.2
    at(20);
    at(fifth_ms);
    return b.probing();
  };
  // A window at the baseline after one over the band is what a heal of
  // such a baseline looks like (a delay on every call ends, and the slow
  // calls leave): it confirms nothing, and the drain comes on schedule.
  EXPECT_TRUE(drains(22));
  // Two in a row: the second stands for the drain, and the schedule
  // starts over.
  EXPECT_FALSE(drains(20));
}

TEST(BalancePolicy, AWindowAtTheBaselineWithTheLimitBindingStandsForADrain) {
  BalancePolicy b(Bounds{1, 1000, 20}, hand());
  b.update(first_window(10));  // baseline 10
  // Four used seconds at r = 1.1, one short of a drain.
  for (int i = 0; i < 4; ++i) b.update(used_window(11, 200));
  // A second with the limit bound all along (2000 calls of 10 ms keep the
  // 20 in flight) and its p50 at the baseline (within 0.15 * 0.2): the
  // limit is at the knee or under it, and latency is the no-load one. It
  // saw what a drain would measure, and the schedule starts over.
  b.update(saturated(b.limit(), 10, 2000));
  EXPECT_FALSE(b.probing());
  for (int i = 0; i < 4; ++i) b.update(used_window(11, 200));
  EXPECT_FALSE(b.probing());
  b.update(used_window(11, 200));
  EXPECT_TRUE(b.probing());  // five used seconds after that window

  // The same second at 10.5 ms, 5% over the baseline, outside the band:
  // the drain comes on schedule.
  BalancePolicy c(Bounds{1, 1000, 20}, hand());
  c.update(first_window(10));
  for (int i = 0; i < 4; ++i) c.update(used_window(11, 200));
  c.update(saturated(c.limit(), 10.5, 2000));
  EXPECT_TRUE(c.probing());
}

TEST(BalancePolicy, TakesAMuchLowerLatencyAsTheBaselineAndDrainsSoon) {
  BalancePolicy b(kBounds, hand());
  b.update(first_window(20));  // baseline 20
  // The dependency healed: 10 ms is under 20 / 1.2, no noise. The baseline
  // drops to it at once (unused, it would only have followed by 20%), and
  // the next window that uses the limit drains to measure the real one.
  b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 10, .max_inflight = 10}));
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  EXPECT_FALSE(b.probing());
  b.update(used_window(10));
  EXPECT_TRUE(b.probing());
}

TEST(BalancePolicy, ADrainStartsOnlyInAWindowThatUsesTheLimit) {
  BalancePolicy b(kBounds, hand());
  b.update(first_window(10));
  // A drain (as in DrainsEveryProbeIntervalOfUseAndRestores): baseline 10.5.
  for (int i = 0; i < 5; ++i) b.update(used_window(11, 200));
  for (double rtt : {30.0, 10.0, 11.0}) b.update(used_window(rtt, 90));
  ASSERT_FALSE(b.probing());
  ASSERT_DOUBLE_EQ(b.baseline_ns(), 10.5e6);
  // Unused, the dependency healed to 5 ms: the baseline drops to it, and
  // a drain is due. Latency then rises to 6.5 ms, over T times the 5 ms of
  // the heal, and the baseline follows it, 20% a window, back within the
  // target (6.5 / 5.54 = 1.17 after two windows). None of that starts the
  // drain: unused, the baseline follows the latency by itself.
  b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 5, .max_inflight = 10}));
  ASSERT_DOUBLE_EQ(b.baseline_ns(), 5e6);
  for (int i = 0; i < 20; ++i) {
    b.update(make_window(WindowSpec{.ok = 100, .rtt_ms = 6.5, .max_inflight = 10}));
    EXPECT_FALSE(b.probing()) << "unused window " << i;
  }
  // The first window that uses the limit does.
  b.update(used_window(6.5, 200));
  EXPECT_TRUE(b.probing());
}

TEST(BalancePolicy, AWindowDoesNotConfirmTheBaselineItJustBecame) {
  BalancePolicy b(Bounds{1, 1000, 20}, hand());
  // A baseline of 20 ms resting on enough calls to be trusted.
  b.update(make_window(WindowSpec{.ok = 300, .rtt_ms = 20, .max_inflight = 10}));
  // The dependency healed, in a window that binds the limit all along:
  // 10 ms becomes the baseline. That window is at the baseline only
  // because it set it; it does not stand for the drain, which starts now.
  b.update(saturated(b.limit(), 10, 2000));
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  EXPECT_TRUE(b.probing());
}

TEST(BalancePolicy, RecoversFromASlowerDependencyAtTheNextDrain) {
  BalancePolicy b(kBounds, hand());
  b.update(first_window(10));
  // The dependency turns 2x slower with no queue at all (base latency rose):
  // the limit shrinks (it looks like queueing) ...
  double lowest = b.limit();
  int windows = 0;
  while (!b.probing() && windows++ < 20) {
    b.update(used_window(20, static_cast<std::uint32_t>(b.limit())));
    lowest = std::min(lowest, b.limit());
  }
  EXPECT_LT(lowest, 100);
  // ... until a drain measures 20 ms as the new baseline. That is past the
  // target over the old one (20 > 1.2 x 10): the dependency got slower,
  // not busier, so the cuts were for nothing, and the limit goes back at
  // once halfway (in ratio) to the 100 from before them. r = 2 cut it by
  // sqrt(1.2 / 2) a window: 77.46, 60.00, 46.48 (halved: the drain), so
  // floor(sqrt(46.48 x 100)) = 68. Then it grows, instead of collapsing.
  while (b.probing() && windows++ < 40) b.update(used_window(20, static_cast<std::uint32_t>(b.limit())));
  EXPECT_NEAR(b.baseline_ns(), 20e6, 1);
  EXPECT_DOUBLE_EQ(b.limit(), 68);
  for (int i = 0; i < 10; ++i) b.update(used_window(20, static_cast<std::uint32_t>(b.limit())));
  EXPECT_GT(b.limit(), 100);
}

TEST(BalancePolicy, GrowsShortOfTheTargetOnABaselineADrainFoundSlower) {
  BalancePolicy b(kBounds, hand());
  b.update(first_window(10));
  const auto at = [&b](double rtt_ms) { return b.update(used_window(rtt_ms, static_cast<std::uint32_t>(b.limit()))); };
  // The dependency turns 2x slower: the cuts, then the drain that finds
  // the baseline at 20 ms and puts the limit back to 68, as above.
  int windows = 0;
  while (!b.probing() && windows++ < 20) at(20);
  while (b.probing() && windows++ < 40) at(20);
  ASSERT_DOUBLE_EQ(b.limit(), 68);
  // r = 1.1 is under the target T = 1.2 (room for half a step, 71.4), but
  // the baseline rests on that one drain (other limiters' queue would
  // look the same), and growth stops at 1 + 0.2 / 3: hold.
  EXPECT_DOUBLE_EQ(at(22), 68);
  // r = 1.025: room (1.0667 - 1.025) / 0.0667 = 0.625 of 10% of 68.
  EXPECT_NEAR(at(20.5), 72.25, 1e-9);
  // The next scheduled drain (5 s of use) finds 20 ms again, no slower:
  // the whole target is back, and r = 1.1 grows the limit again.
  while (!b.probing() && windows++ < 60) at(20.5);
  ASSERT_TRUE(b.probing());
  while (b.probing() && windows++ < 80) at(20);
  EXPECT_NEAR(b.baseline_ns(), 20e6, 1);
  const double restored = b.limit();
  EXPECT_GT(at(22), restored);
}

TEST(BalancePolicy, ABaselineMaxHoldsWhatADrainAdopts) {
  BalancePolicy::Params p = hand();
  p.baseline_max_ms = 12;
  BalancePolicy b(kBounds, p);
  b.update(first_window(10));
  // The 2x slowdown above: the same cuts, 77.46, 60.00, 46.48, then the
  // drain measures 20 ms. Only 12 ms of it is taken for the dependency's
  // own (the rest may be other hosts' queue in it), which is not past the
  // target over 10 ms: the cuts stand, the limit comes back to 46.48 and
  // not halfway to 100.
  int windows = 0;
  const auto at = [&b](double rtt_ms) { return b.update(used_window(rtt_ms, static_cast<std::uint32_t>(b.limit()))); };
  while (!b.probing() && windows++ < 20) at(20);
  while (b.probing() && windows++ < 40) at(20);
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 12e6);
  EXPECT_NEAR(b.limit(), 46.48, 0.01);
  // r = 20 / 12 stays over T = 1.2: the cuts go on (the dependency that
  // got slower than the bound is throttled), where without the bound the
  // limit grew back past 100.
  for (int i = 0; i < 10; ++i) at(20);
  EXPECT_LT(b.limit(), 20);
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 12e6);
}

TEST(BalancePolicy, ABaselineMaxHoldsTheFirstWindowAndTheFollowing) {
  BalancePolicy::Params p = hand();
  p.baseline_max_ms = 12;
  BalancePolicy b(kBounds, p);
  b.update(first_window(30));
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 12e6);
  for (int i = 0; i < 5; ++i) b.update(first_window(40));
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 12e6);
  // Under the bound it moves as ever: toward 11 ms by baseline_follow
  // (0.2) of the way, and to 8 ms at once, far enough under it (8 x 1.2 <
  // 11.8) for a dependency that healed.
  b.update(first_window(11));
  EXPECT_NEAR(b.baseline_ns(), 11.8e6, 1);
  b.update(first_window(8));
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 8e6);
}

TEST(BalancePolicy, ADrainThatSeesDropsEndsWithoutRisingAgain) {
  BalancePolicy b(kBounds, hand());
  b.update(first_window(10));
  for (int i = 0; i < 5; ++i) b.update(used_window(11, 200));
  ASSERT_TRUE(b.probing());
  ASSERT_DOUBLE_EQ(b.limit(), 90);
  // Half the calls dropped: the drain ends; backing off from the limit
  // before it would give floor(127.62815625 * 0.9) = 114, more than the
  // drained 90, and a limit does not rise while calls drop.
  EXPECT_DOUBLE_EQ(b.update(make_window(WindowSpec{.ok = 50, .dropped = 50, .rtt_ms = 10, .max_inflight = 90})), 90);
  EXPECT_FALSE(b.probing());
}

// A window of 100 calls, its p50 at `p50_ms` and its p10 at `p10_ms`, with
// `peak` in flight.
Window spread_window(double p50_ms, double p10_ms, std::uint32_t peak) {
  Window w = make_window(WindowSpec{.ok = 100, .rtt_ms = p50_ms, .max_inflight = peak});
  w.rtt_p10_ns = static_cast<std::uint64_t>(p10_ms * test::kNsPerMs);
  w.rtt_min_ns = w.rtt_p10_ns;
  return w;
}

// Runs windows with the limit in use at r = 1.1 until the next scheduled
// drain starts (the fifth, as in DrainsEveryProbeIntervalOfUseAndRestores),
// then drain windows of p50 `p50_ms` and p10 `p10_ms` until it ends.
void drain_measuring(BalancePolicy& b, double p50_ms, double p10_ms) {
  for (int i = 0; i < 10 && !b.probing(); ++i) b.update(spread_window(11, 2.2, 1000));
  ASSERT_TRUE(b.probing());
  for (int i = 0; i < 10 && b.probing(); ++i) b.update(spread_window(p50_ms, p10_ms, 1));
  ASSERT_FALSE(b.probing());
}

// Balance with other_hosts set as given, after a first drain that found the
// dependency as the first window did: p50 10 ms, p10 2 ms. A drain that
// finds no more latency than the baseline measured no queue, so its p50
// over its spread, 10 / 8 = 1.25, is the dependency's shape.
BalancePolicy drained_at_ten(double other_hosts) {
  BalancePolicy::Params p = hand();
  p.other_hosts = other_hosts;
  BalancePolicy b(kBounds, p);
  b.update(first_window(10));
  drain_measuring(b, 10, 2);
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  return b;
}

TEST(BalancePolicy, WithOtherHostsADrainTakesOnlyWhatTheSpreadExplains) {
  struct Case {
    double other_hosts;
    double p50_ms, p10_ms;  // what the next drain finds
    double baseline_ms;     // what it takes for the dependency's own
    const char* why;
  };
  for (const Case& c : {
           // 10 ms more on every call, the spread still 8 ms. Alone on the
           // dependency that is its own latency: no queue of this limit's
           // is left in a drain.
           Case{0, 20, 12, 20, "alone, a delay on every call"},
           // With other hosts' limiters it is their queue: the
           // dependency's own is the shape times the spread, 1.25 x 8.
           Case{1, 20, 12, 10, "other hosts, a delay on every call"},
           // 2x slower, the spread doubled with it: 1.25 x 16.
           Case{1, 20, 4, 20, "other hosts, a dependency 2x slower"},
           // 1.25 x 12 = 15 of it (1.5x slower), and 15 ms on every call.
           Case{1, 30, 18, 15, "other hosts, both"},
       }) {
    BalancePolicy b = drained_at_ten(c.other_hosts);
    drain_measuring(b, c.p50_ms, c.p10_ms);
    EXPECT_DOUBLE_EQ(b.baseline_ns(), c.baseline_ms * 1e6) << c.why;
  }
}

TEST(BalancePolicy, WithOtherHostsTheShapeIsTheExponentialsUntilADrainMeasuresIt) {
  // No drain yet (the first window has no spread): 1.18, the exponential's
  // ln 2 / (ln 2 - ln(10/9)). A first drain that finds p50 30, p10 18
  // takes 1.18 x 12 = 14.16 ms for the dependency's own.
  BalancePolicy::Params p = hand();
  p.other_hosts = 1;
  BalancePolicy b(kBounds, p);
  b.update(first_window(10));
  drain_measuring(b, 30, 18);
  EXPECT_NEAR(b.baseline_ns(), 14.16e6, 1);
}

TEST(BalancePolicy, WithOtherHostsAnUnusedLimitFollowsOnlyWhatTheSpreadExplains) {
  // The limit unused (peak in-flight 1 of 100+): the baseline follows the
  // latency, 0.2 of the way a window. 20 ms with the spread of 10 ms is,
  // alone on the dependency, its own latency: 10 -> 12.
  BalancePolicy alone = drained_at_ten(0);
  alone.update(spread_window(20, 12, 1));
  EXPECT_DOUBLE_EQ(alone.baseline_ns(), 12e6);
  // With other hosts' limiters, callers queue it below this limit: the
  // baseline holds at 10.
  BalancePolicy shared = drained_at_ten(1);
  shared.update(spread_window(20, 12, 1));
  EXPECT_DOUBLE_EQ(shared.baseline_ns(), 10e6);
  // A narrower spread (p10 16: the others' queue delays every call alike)
  // explains only 1.25 x 4 = 5 ms, under the baseline. That is no news of
  // a faster dependency: the baseline holds at 10, not 9.
  shared.update(spread_window(20, 16, 1));
  EXPECT_DOUBLE_EQ(shared.baseline_ns(), 10e6);
  // A spread twice as wide is a slower dependency: it follows, to 12.
  shared.update(spread_window(20, 4, 1));
  EXPECT_DOUBLE_EQ(shared.baseline_ns(), 12e6);
}

TEST(BalancePolicy, WithOtherHostsAnUnusedLimitsMeanLatencyFollowsOnlyWhatTheSpreadExplains) {
  // As above, other hosts' callers queue the dependency below this limit
  // (p50 20 ms, spread 8 ms: the shape 1.25 explains 10 ms of it) for five
  // windows: the baseline holds at 10 ms, and the no-load mean latency
  // that Little's law multiplies for the knee holds with it, at the 10 ms
  // the first drain measured (following the windows' mean of 20 ms, it
  // would be 10 + (1 - 0.8^5) x 10 = 16.7 ms).
  BalancePolicy b = drained_at_ten(1);
  for (int i = 0; i < 5; ++i) b.update(spread_window(20, 12, 1));
  ASSERT_DOUBLE_EQ(b.baseline_ns(), 10e6);
  // Four used seconds at r = 1.1 (growth 5% each, 127.6 -> 155.1); the
  // fifth saturates the limit, its 7,756 calls of 20 ms on average (p50
  // 11 ms) keeping 155.1 in flight, and the drain is due. The first drain
  // confirmed the knee, so this one runs just under it: 7,756/s x 10 ms =
  // 77.6, and floor(0.95 x 77.6) = 73 (with 16.7 ms, 123).
  for (int i = 0; i < 4; ++i) {
    b.update(spread_window(11, 2.2, static_cast<std::uint32_t>(b.limit())));
    ASSERT_FALSE(b.probing());
  }
  ASSERT_NEAR(b.limit(), 155.13, 0.01);
  Window w = spread_window(11, 2.2, 155);
  w.ok = 7756;
  w.rtt_sum_ns = w.ok * 20'000'000;
  w.rejected = 1;
  EXPECT_DOUBLE_EQ(b.update(w), 73);
  EXPECT_TRUE(b.probing());
}

// Balance (hand()) with a trusted baseline of 10 ms, its spread 8 ms and
// no queue's shape, run with the limit in use at r = 1.1 until the drain
// five seconds of use make due has started.
BalancePolicy in_a_scheduled_drain() {
  BalancePolicy b(kBounds, hand());
  for (int i = 0; i < 2; ++i) b.update(spread_window(10, 2, 10));
  for (int i = 0; i < 10 && !b.probing(); ++i) b.update(spread_window(11, 2.2, 1000));
  EXPECT_TRUE(b.probing());
  return b;
}

// The baseline a scheduled drain leaves when the first window it measures
// finds p50 10 ms and the second `next_ms`, `calls` calls each, one in flight.
double baseline_after_drain_windows(double next_ms, std::uint64_t calls = 100) {
  BalancePolicy b = in_a_scheduled_drain();
  const auto window = [calls](double p50_ms) {
    Window w = spread_window(p50_ms, p50_ms / 5, 1);
    w.rtt_sum_ns = w.rtt_sum_ns / w.ok * calls;
    w.ok = calls;
    return w;
  };
  b.update(window(10));  // in-flight falls to the drained limit: measured from the next
  b.update(window(10));
  b.update(window(next_ms));
  EXPECT_FALSE(b.probing());
  return b.baseline_ns() / 1e6;
}

TEST(BalancePolicy, ADrainMeasuresFromAWindowThatSawTheDependencyChange) {
  // Twice the p50: within what the medians of a few dozen calls may
  // differ by, so both windows count, (10 + 20) / 2.
  EXPECT_DOUBLE_EQ(baseline_after_drain_windows(20), 15);
  // Four times, or a third: the dependency got slower, or healed, under
  // the drain, which measures what it is now.
  EXPECT_DOUBLE_EQ(baseline_after_drain_windows(40), 40);
  EXPECT_DOUBLE_EQ(baseline_after_drain_windows(3), 3);
  // 20 calls on each side are enough to tell.
  EXPECT_DOUBLE_EQ(baseline_after_drain_windows(40, 20), 40);
  EXPECT_DOUBLE_EQ(baseline_after_drain_windows(40, 19), 25);
}

// Where a scheduled drain leaves the baseline (ms) and the limit when its
// windows find p50 `p50_ms` and p10 `p10_ms`, with its limit full (the
// time-average in-flight at the drained limit) or one call in flight.
std::pair<double, double> after_a_scheduled_drain_finding(double p50_ms, double p10_ms, bool full) {
  BalancePolicy b = in_a_scheduled_drain();
  for (int i = 0; i < 10 && b.probing(); ++i) {
    Window w = full ? saturated(b.limit(), p50_ms) : spread_window(p50_ms, p10_ms, 1);
    w.rtt_p10_ns = w.rtt_min_ns = static_cast<std::uint64_t>(p10_ms * test::kNsPerMs);
    b.update(w);
  }
  EXPECT_FALSE(b.probing());
  return {b.baseline_ns() / 1e6, b.limit()};
}

TEST(BalancePolicy, AScheduledDrainThatKeptItsLimitFullWithEveryCallLaterRanOverTheKnee) {
  // The drain finds the baseline again: the limit comes back.
  const auto [calm_ms, calm_limit] = after_a_scheduled_drain_finding(10, 2, true);
  ASSERT_DOUBLE_EQ(calm_ms, 10);
  // 30 ms more on every call, the spread still 8 ms, and the drained limit
  // kept full: a queue the drain never got under (the dependency lost
  // capacity as it began). It measured nothing of the no-load latency:
  // the baseline stays, and the limit comes back as from the calm drain.
  const auto [queue_ms, queue_limit] = after_a_scheduled_drain_finding(40, 32, true);
  EXPECT_DOUBLE_EQ(queue_ms, 10);
  EXPECT_DOUBLE_EQ(queue_limit, calm_limit);
  // With one call in flight there is no queue of the drain's: a delay
  // every call has, the dependency's own latency.
  EXPECT_DOUBLE_EQ(after_a_scheduled_drain_finding(40, 32, false).first, 40);
  // Full, but the spread 4x wider with the p50: a dependency 4x slower.
  EXPECT_DOUBLE_EQ(after_a_scheduled_drain_finding(40, 8, true).first, 40);
}

// What the drain that latency stuck over the target calls finds, when a
// dependency of p50 10 ms and p10 2 ms (its own spread) turns slower.
struct Slowdown {
  double p50_ms, p10_ms;    // every window's, from then on
  double drained_rate;      // the drain's completions per second
  double limit;             // after the drain
  const char* why;
  double drain_limit = 28;  // where the drain runs (below)
};

BalancePolicy after(const Slowdown& c) {
  BalancePolicy b(kBounds, hand());
  // Two app-limited windows of 100 calls: a trusted baseline of 10 ms, its
  // spread 8 ms, no queue's shape.
  for (int i = 0; i < 2; ++i) b.update(spread_window(10, 2, 10));
  const auto window = [&c](double limit, double ok) {
    Window w = saturated(limit, c.p50_ms, static_cast<std::uint64_t>(ok));
    w.rtt_p10_ns = w.rtt_min_ns = static_cast<std::uint64_t>(c.p10_ms * test::kNsPerMs);
    return w;
  };
  // r = 3 cuts by sqrt(1.2 / 3) a window: 100 -> 63.2 -> 40, half of 100: a
  // drain, at floor(0.85 x 40 / 1.2) = 28, from a window that completed
  // 63.2 / 30 ms = 2108 calls.
  int windows = 0;
  while (!b.probing() && windows++ < 10) b.update(window(b.limit(), b.limit() / (c.p50_ms / 1e3)));
  EXPECT_DOUBLE_EQ(b.limit(), c.drain_limit) << c.why;
  while (b.probing() && windows++ < 20) b.update(window(b.limit(), c.drained_rate));
  EXPECT_DOUBLE_EQ(b.baseline_ns(), c.p50_ms * 1e6) << c.why;
  return b;
}

double limit_after(const Slowdown& c) { return after(c).limit(); }

TEST(BalancePolicy, ADrainThatFindsADelayOnEveryCallScalesTheLimitByIt) {
  for (const Slowdown& c : {
           // 20 ms more on every call, the spread still 8 ms, and the drain
           // at 28 completed 28 / 30 ms = 933 calls a second, fewer than
           // before it in proportion to its limit: it ran under the knee,
           // and found a delay. The dependency still serves as many calls a
           // second, so it takes 3x the calls in flight: the limit from
           // before the cuts, 100, times the mean latency's rise, 30 / 10.
           Slowdown{30, 22, 933, 300, "a delay"},
           // 3x slower, the spread 3x wider with it: the dependency serves
           // a third of the calls, and the limit goes back halfway (in
           // ratio) to 100: floor(sqrt(40 x 100)) = 63.
           Slowdown{30, 6, 933, 63, "a slower dependency"},
           // Every call 20 ms later, but the drain completed as many calls
           // as the window before it (2108): over the knee, a queue.
           Slowdown{30, 22, 2108, 63, "a queue"},
       }) {
    EXPECT_DOUBLE_EQ(limit_after(c), c.limit) << c.why;
  }
}

TEST(BalancePolicy, ADrainWhoseSpreadGrewWithItsLatencyFoundASlowerDependencyNotADelay) {
  // Every call 10x slower (p50 100 ms): r = 10 cuts by half a window, 100
  // -> 50, half of 100: a drain, at floor(0.85 x 50 / 1.2) = 35, from a
  // window that completed 50 / 100 ms = 500 calls. The drain completes
  // 35 / 100 ms = 350 a second, fewer in proportion to its limit: it ran
  // under the knee.
  for (const Slowdown& c : {
           // The spread 10x wider too (p10 10 ms, the spread 90 ms): the
           // limit goes back halfway (in ratio) from the cut 50 to 100,
           // floor(sqrt(50 x 100)) = 70.
           Slowdown{100, 10, 350, 70, "a slower dependency", 35},
           // A drain of a few dozen such calls can show a queue's shape by
           // chance (p10 50 ms, half the p50), as a delay every call has
           // would. But its spread, 50 ms, is over 6x the no-load 8 ms,
           // where a delay leaves it as it was: still a slower dependency,
           // not a delay of 10x (the limit from before the cuts times the
           // mean latency's rise would be 1000: seed +9800 of
           // scenarios/sudden-slowdown went to 562 for 32 workers).
           Slowdown{100, 50, 350, 70, "a slower dependency, a queue's shape by chance", 35},
       }) {
    EXPECT_DOUBLE_EQ(limit_after(c), c.limit) << c.why;
  }
}

TEST(BalancePolicy, ADrainThatFindsTheDelayedBaselineLowerCallsADrainUnderTheKneeWithoutTheDelay) {
  // Where the next drain after the one that finds `drained_ms` runs, and
  // the baseline and the limit after it.
  struct Next {
    double limit;
    double baseline_ms;
    double limit_after;
  };
  const auto next_after = [](double drained_ms) {
    // The delay of the first case above: the limit at 300 on a baseline
    // of 30 ms, the no-load mean from before the delay, 10 ms, kept.
    BalancePolicy b = after(Slowdown{30, 22, 933, 300, "a delay"});
    // Five used seconds at 33 ms (r = 1.1: no growth on a baseline a drain
    // found slower), 9,090 calls each, then the scheduled drain, at
    // floor(0.85 x 300 / 1.2) = 212.
    for (int i = 0; i < 10 && !b.probing(); ++i) b.update(saturated(b.limit(), 33));
    EXPECT_DOUBLE_EQ(b.limit(), 212);
    for (int i = 0; i < 10 && b.probing(); ++i) b.update(saturated(b.limit(), drained_ms));
    EXPECT_DOUBLE_EQ(b.limit(), 300);
    // Then used seconds at r = 1.1 over what it found, 10,000 calls each,
    // until the next drain starts.
    int windows = 0;
    while (!b.probing() && windows++ < 10) b.update(saturated(b.limit(), 1.1 * drained_ms, 10000));
    const double drain_limit = b.limit();
    while (b.probing() && windows++ < 20) b.update(saturated(b.limit(), 10));
    return std::pair{Next{drain_limit, b.baseline_ns() / 1e6, b.limit()}, windows};
  };
  // It found 25 ms, more than the band (0.03) under 30: the delay may be
  // gone, with a queue in its place. The next drain comes 2 s of use
  // later, at floor(0.85 x 10,000/s x 10 ms) = 85: under the knee without
  // the delay, where the dependency, back as it was, has no queue (a drain
  // from L / T would run at 212 again). It finds 10 ms: the delay is
  // gone, and the limit from before the drain (300 grown by 5% twice,
  // 330.75) shrinks by the mean latency's fall, 10 / 25 ms, to 132, where
  // restored as it was it would hold 2.5x the calls the dependency serves
  // at once, each now in flight shorter.
  const auto [lower, lower_windows] = next_after(25);
  EXPECT_DOUBLE_EQ(lower.limit, 85);
  EXPECT_DOUBLE_EQ(lower.baseline_ms, 10);
  EXPECT_DOUBLE_EQ(lower.limit_after, 132);
  EXPECT_EQ(lower_windows, 2 + 3);
  // It found 30 ms again: the delay is still there, and the next drain
  // comes on schedule (5 s of use), from L / T.
  const auto [same, same_windows] = next_after(30);
  EXPECT_GT(same.limit, 212);
  EXPECT_EQ(same_windows, 5 + 3);
}

TEST(BalancePolicy, OnlyADrainThatLatencyStuckOverTheTargetCalledScalesTheLimitByADelay) {
  // The finding of "a delay" above (every call 20 ms later, the spread
  // still 8 ms, the completion rate down with the limit), by a drain the
  // schedule called: latency never stuck over the target. The delay rule
  // is not for it (delay_factor), so the drain ends as one that found the
  // dependency slower with no cuts to undo: back to the limit from before
  // it, 127.6 (scaled by the delay it would be 3 x 127.6 = 382).
  BalancePolicy b(kBounds, hand());
  for (int i = 0; i < 2; ++i) b.update(spread_window(10, 2, 10));  // baseline 10 ms, spread 8
  // Five used seconds at r = 1.1, 100 calls each (100 -> 127.6), then the
  // drain to floor(0.85 x 127.6 / 1.2) = 90.
  for (int i = 0; i < 10 && !b.probing(); ++i) b.update(spread_window(11, 2.2, 1000));
  ASSERT_TRUE(b.probing());
  ASSERT_DOUBLE_EQ(b.limit(), 90);
  // The drain completes 30 calls a second where the window before it
  // completed 100: log(100 / 30) = 1.2, over half the limit's fall,
  // log(127.6 / 90) = 0.35.
  for (int i = 0; i < 10 && b.probing(); ++i) {
    Window w = spread_window(30, 22, 1);
    w.ok = 30;
    w.rtt_sum_ns = w.ok * 30'000'000;
    b.update(w);
  }
  ASSERT_FALSE(b.probing());
  EXPECT_DOUBLE_EQ(b.baseline_ns(), 30e6);  // found slower
  EXPECT_DOUBLE_EQ(b.limit(), 127);
}

TEST(BalancePolicy, RefusesOutOfRangeParameters) {
  EXPECT_EQ(test::param_error_of([] { BalancePolicy::parse_params({{"tolerance", 0}}); }),
            "tolerance = 0: must be in (0, 2]");
  EXPECT_EQ(test::param_error_of([] { BalancePolicy::parse_params({{"probe_factor", 0}}); }),
            "probe_factor = 0: must be in (0, 1]");
  EXPECT_EQ(test::param_error_of([] { BalancePolicy::parse_params({{"baseline_max_ms", -1}}); }),
            "baseline_max_ms = -1: must be >= 0");
  EXPECT_EQ(test::param_error_of([] { BalancePolicy::parse_params({{"other_hosts", 0.5}}); }),
            "other_hosts = 0.5: must be an integer in [0, 1]");
}

}  // namespace
}  // namespace bulkhead::policies
