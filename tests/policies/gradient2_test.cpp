#include "policies/gradient2.hpp"

#include <algorithm>

#include <gtest/gtest.h>

#include "tests/policies/window_builder.hpp"

namespace bulkhead::policies {
namespace {

using test::kNsPerMs;
using test::make_window;
using test::param_error_of;

// min 5, max 200, start at 20 (calls). Default params: smoothing 0.2,
// long_window 600 (EMA factor 2/601), tolerance 1.5, queue_size 4.
constexpr Bounds kBounds{.min = 5, .max = 200, .initial = 20};
// Doubles from a handful of multiplications: equal to within rounding.
constexpr double kEps = 1e-9;

// A window of 100 ok calls at `rtt_ms` mean, in-flight reaching
// `max_inflight` (default: far above any limit here, so never app-limited).
Window at_rtt(double rtt_ms, std::uint32_t max_inflight = 1000) {
  return make_window({.ok = 100, .rtt_ms = rtt_ms, .max_inflight = max_inflight});
}

// Ten saturated windows at 10 ms: the warm-up ends with long = 10 ms, and
// with g = clamp(1.5 * 10/10) = 1 each adds smoothing * queue_size = 0.8,
// so the limit is 20 + 10 * 0.8 = 28.
void warm_up_at_10ms(Gradient2Policy& policy) {
  for (int i = 0; i < 10; ++i) policy.update(at_rtt(10));
  ASSERT_NEAR(policy.long_rtt_ns(), 10 * kNsPerMs, kEps);
  ASSERT_NEAR(policy.limit(), 28, kEps);
}

TEST(Gradient2Policy, StartsAtInitialLimit) {
  Gradient2Policy policy(kBounds);
  EXPECT_EQ(policy.limit(), 20);
  EXPECT_EQ(policy.long_rtt_ns(), 0);
  EXPECT_EQ(policy.name(), "gradient2");
}

TEST(Gradient2Policy, DefaultsAreNetflixs) {
  const Gradient2Policy::Params params;
  EXPECT_EQ(params.smoothing, 0.2);
  EXPECT_EQ(params.long_window, 600);
  EXPECT_EQ(params.tolerance, 1.5);
  EXPECT_EQ(params.queue_size, 4);
}

TEST(Gradient2Policy, GrowsByQueueSizeShareWhileLatencyIsSteady) {
  Gradient2Policy policy(kBounds);
  // g = clamp(1.5 * 10/10, 0.5, 1) = 1: L' = L + 4; L = 0.8L + 0.2(L + 4) = L + 0.8.
  EXPECT_NEAR(policy.update(at_rtt(10)), 20.8, kEps);
  EXPECT_NEAR(policy.update(at_rtt(10)), 21.6, kEps);
}

TEST(Gradient2Policy, HoldsWhenAppLimited) {
  Gradient2Policy policy(kBounds);
  // max_inflight 9 < 20 / 2: hold at 20.
  EXPECT_EQ(policy.update(at_rtt(10, 9)), 20);
  // ... but the window still fed the long average (as in Netflix).
  EXPECT_NEAR(policy.long_rtt_ns(), 10 * kNsPerMs, kEps);
  // max_inflight 10 is not < 10: g = 1, L = 20 + 0.8 = 20.8.
  EXPECT_NEAR(policy.update(at_rtt(10, 10)), 20.8, kEps);
}

TEST(Gradient2Policy, ShrinksWhenLatencyRises) {
  Gradient2Policy policy(kBounds);
  warm_up_at_10ms(policy);  // L = 28, long = 10 ms
  // rtt 20 ms: long = 10 + (20 - 10) * 2/601 = 10.0332779 ms;
  // g = 1.5 * 10.0332779 / 20 = 0.7524958;
  // L' = 28 * 0.7524958 + 4 = 25.0698835; L = 0.8 * 28 + 0.2 * 25.0698835 = 27.4139767.
  EXPECT_NEAR(policy.update(at_rtt(20)), 27.41397670549085, kEps);
  EXPECT_NEAR(policy.long_rtt_ns(), (10 + 10.0 * 2 / 601) * kNsPerMs, 1e-3);
}

TEST(Gradient2Policy, HalvesEstimateAtMostWhenLatencyJumps) {
  Gradient2Policy policy(kBounds);
  warm_up_at_10ms(policy);  // L = 28, long = 10 ms
  // rtt 100 ms: long = 10 + 90 * 2/601 = 10.2995 ms; 1.5 * 10.2995 / 100 =
  // 0.1545 -> g clamped to 0.5; L = 0.8 * 28 + 0.2 * (0.5 * 28 + 4) = 26.
  EXPECT_NEAR(policy.update(at_rtt(100)), 26, kEps);
  // Again g = 0.5 (long 10.598 ms): L = 0.9 * 26 + 0.8 = 24.2.
  EXPECT_NEAR(policy.update(at_rtt(100)), 24.2, kEps);
}

TEST(Gradient2Policy, ToleratesLatencyUpToTolerance) {
  Gradient2Policy policy(kBounds);
  warm_up_at_10ms(policy);  // L = 28, long = 10 ms
  // rtt 14 ms, 1.4x the baseline: long = 10.0133 ms, 1.5 * 10.0133 / 14 =
  // 1.073 -> g = 1; L = 28 + 0.8 = 28.8.
  EXPECT_NEAR(policy.update(at_rtt(14)), 28.8, kEps);
}

TEST(Gradient2Policy, LongRttIsPlainMeanDuringWarmUpThenEma) {
  Gradient2Policy policy(kBounds);
  // Windows at 10, 20, ..., 100 ms: long is their running mean, 55 ms after ten.
  for (int i = 1; i <= 10; ++i) policy.update(at_rtt(10.0 * i));
  EXPECT_NEAR(policy.long_rtt_ns(), 55 * kNsPerMs, 1e-3);
  // Then the EMA: 55 + (656 - 55) * 2/601 = 55 + 2 = 57 ms.
  policy.update(at_rtt(656));
  EXPECT_NEAR(policy.long_rtt_ns(), 57 * kNsPerMs, 1e-3);
}

TEST(Gradient2Policy, CutsBaselineWhenLatencyFallsFarBelowIt) {
  Gradient2Policy policy(kBounds);
  for (int i = 0; i < 10; ++i) policy.update(at_rtt(100));  // long = 100 ms
  const double before = policy.limit();
  // rtt 40 ms: long = 100 - 60 * 2/601 = 99.8003328 ms; 99.80 / 40 = 2.495 > 2,
  // so the stored long is cut to 0.95 * 99.8003328 = 94.8103161 ms. This
  // update's gradient uses the uncut 99.80 ms (as in Netflix); with tolerance
  // >= 1 and a ratio > 2 it is 1 either way: L grows by 0.8.
  EXPECT_NEAR(policy.update(at_rtt(40)), before + 0.8, kEps);
  EXPECT_NEAR(policy.long_rtt_ns(), 0.95 * (100 - 60.0 * 2 / 601) * kNsPerMs, 1e-3);
}

TEST(Gradient2Policy, ALongRttJustTwiceTheShortIsNotCut) {
  // Netflix cuts when longRtt / shortRtt > 2, not at 2: windows at 300 and
  // 100 ms make the warm-up mean 200 ms, exactly twice the last.
  Gradient2Policy policy(kBounds);
  policy.update(at_rtt(300));
  policy.update(at_rtt(100));
  EXPECT_EQ(policy.long_rtt_ns(), 200 * kNsPerMs);
}

TEST(Gradient2Policy, HoldsAndLearnsNothingFromWindowWithoutOkCalls) {
  Gradient2Policy policy(kBounds);
  policy.update(at_rtt(10));  // long = 10 ms (mean of 1), L = 20.8
  // Only drops: no latency to learn from; hold, leave the average alone.
  EXPECT_NEAR(policy.update(make_window({.dropped = 50, .max_inflight = 1000})), 20.8, kEps);
  EXPECT_NEAR(policy.long_rtt_ns(), 10 * kNsPerMs, 1e-3);
  // The next ok window is the second warm-up sample: mean(10, 20) = 15 ms.
  policy.update(at_rtt(20));
  EXPECT_NEAR(policy.long_rtt_ns(), 15 * kNsPerMs, 1e-3);
}

TEST(Gradient2Policy, TakesZeroLatencyAsOneNanosecond) {
  Gradient2Policy policy(kBounds);
  // All ok calls took 0 ns (a coarse clock): taken as 1 ns, so long = 1 ns,
  // g = clamp(1.5 * 1/1) = 1 and L = 20.8, where 0/0 would give nan.
  EXPECT_NEAR(policy.update(make_window({.ok = 10, .rtt_ms = 0, .max_inflight = 1000})), 20.8,
              kEps);
  EXPECT_EQ(policy.long_rtt_ns(), 1);
}

TEST(Gradient2Policy, IgnoresDrops) {
  // Faithful to Netflix: drops never reach the rule, only ok latency does.
  Gradient2Policy clean(kBounds);
  Gradient2Policy dropping(kBounds);
  for (int i = 0; i < 20; ++i) {
    const double a = clean.update(make_window({.ok = 100, .rtt_ms = 10, .max_inflight = 1000}));
    const double b = dropping.update(
        make_window({.ok = 100, .dropped = 100, .rtt_ms = 10, .max_inflight = 1000}));
    EXPECT_EQ(a, b);
  }
}

TEST(Gradient2Policy, SettlesAtQueueSizeOverOneMinusGradient) {
  // With g pinned at 0.5 (rtt far above 1.5x the baseline), L = 0.9L + 0.8
  // has the fixed point queue_size / (1 - g) = 4 / 0.5 = 8, whatever the
  // real capacity: the known weakness of the reference.
  Gradient2Policy policy({.min = 1, .max = 200, .initial = 20},
                         {.smoothing = 0.2, .long_window = 1e6, .tolerance = 1.5, .queue_size = 4});
  for (int i = 0; i < 10; ++i) policy.update(at_rtt(1));  // long = 1 ms; L = 28
  for (int i = 0; i < 300; ++i) policy.update(at_rtt(100));
  EXPECT_NEAR(policy.limit(), 8, 1e-6);
}

TEST(Gradient2Policy, BaselineCreepsUpUnderSustainedOverload) {
  // The other known weakness (Netflix PR 134, issue 165): under a sustained
  // 10x latency the long EMA (600 windows) follows the rtt up. g stays 0.5
  // while long < 100/1.5 ms and the limit falls toward 8; after about 90
  // windows g exceeds 0.5 and the limit climbs again with the baseline.
  // The conformance test's "never rises under overload" horizon is shorter
  // than this on purpose; this test pins the behaviour down so that a change
  // to it is seen.
  Gradient2Policy policy(kBounds);
  warm_up_at_10ms(policy);
  double lowest = policy.limit();
  for (int i = 0; i < 90; ++i) lowest = std::min(lowest, policy.update(at_rtt(100)));
  EXPECT_LT(lowest, 8.5);
  for (int i = 0; i < 1000; ++i) policy.update(at_rtt(100));
  EXPECT_GT(policy.limit(), 2 * lowest);
}

TEST(Gradient2Policy, StaysWithinBounds) {
  Gradient2Policy policy({.min = 15, .max = 22, .initial = 20});
  // Growth stops at max: 20.8, 21.6, then 22.4 -> 22, for the rest of the
  // ten warm-up windows (long = 10 ms).
  for (double expected : {20.8, 21.6, 22.0, 22.0}) {
    EXPECT_NEAR(policy.update(at_rtt(10)), expected, kEps);
  }
  for (int i = 0; i < 6; ++i) policy.update(at_rtt(10));
  // Sustained jump to 100 ms: g = 0.5, L = 0.9L + 0.8 falls toward 8:
  // 20.6, 19.34, 18.21, 17.19, 16.27, 15.44, then stops at min 15.
  for (int i = 0; i < 6; ++i) EXPECT_GT(policy.update(at_rtt(100)), 15);
  EXPECT_EQ(policy.update(at_rtt(100)), 15);
  EXPECT_EQ(policy.update(at_rtt(100)), 15);
}

TEST(Gradient2Policy, RefusesOutOfRangeParams) {
  EXPECT_EQ(param_error_of([] { Gradient2Policy::parse_params({{"smoothing", 0}}); }),
            "smoothing = 0: must be in (0, 1]");
  EXPECT_EQ(param_error_of([] { Gradient2Policy::parse_params({{"smoothing", 1.5}}); }),
            "smoothing = 1.5: must be in (0, 1]");
  EXPECT_EQ(param_error_of([] { Gradient2Policy::parse_params({{"long_window", 0}}); }),
            "long_window = 0: must be an integer >= 1");
  EXPECT_EQ(param_error_of([] { Gradient2Policy::parse_params({{"long_window", 10.5}}); }),
            "long_window = 10.5: must be an integer >= 1");
  EXPECT_EQ(param_error_of([] { Gradient2Policy::parse_params({{"tolerance", 0.9}}); }),
            "tolerance = 0.9: must be >= 1");
  EXPECT_EQ(param_error_of([] { Gradient2Policy::parse_params({{"queue_size", -1}}); }),
            "queue_size = -1: must be >= 0");
  EXPECT_EQ(param_error_of([] { Gradient2Policy::parse_params({{"queueSize", 4}}); }),
            "unknown parameter 'queueSize' for policy 'gradient2' "
            "(known: long_window, queue_size, smoothing, tolerance)");
  EXPECT_EQ(param_error_of([] {
              Gradient2Policy policy(kBounds, {.smoothing = 0.2, .long_window = 0});
            }),
            "long_window = 0: must be an integer >= 1");
}

TEST(Gradient2Policy, ReadsParams) {
  const Gradient2Policy::Params params = Gradient2Policy::parse_params(
      {{"smoothing", 0.5}, {"long_window", 100}, {"tolerance", 2}, {"queue_size", 0}});
  EXPECT_EQ(params.smoothing, 0.5);
  EXPECT_EQ(params.long_window, 100);
  EXPECT_EQ(params.tolerance, 2);
  EXPECT_EQ(params.queue_size, 0);
}

}  // namespace
}  // namespace bulkhead::policies
