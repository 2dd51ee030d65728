#include "policies/gradient.hpp"

#include <cstdint>
#include <limits>
#include <set>

#include <gtest/gtest.h>

#include "tests/policies/window_builder.hpp"

namespace bulkhead::policies {
namespace {

using test::kNsPerMs;
using test::make_window;
using test::param_error_of;

// Envoy's own floor and ceiling: min 3 (min_concurrency), max 1000, start at
// 20 (calls). Default params: buffer 0.25, p50, a measurement of >= 50 ok
// calls, then the next one after 600 + [0, 90) windows (none in these tests
// unless asked for).
constexpr Bounds kBounds{.min = 3, .max = 1000, .initial = 20};

// A window of `ok` ok calls whose percentiles are all `rtt_ms`.
Window at_rtt(double rtt_ms, std::uint64_t ok = 100) {
  return make_window({.ok = ok, .rtt_ms = rtt_ms, .max_inflight = 1});
}

// The first window measures minRTT (100 ok calls >= request_count 50) and
// holds the limit.
void measure_min_rtt(GradientPolicy& policy, double rtt_ms) {
  ASSERT_TRUE(policy.measuring_min_rtt());
  const double before = policy.limit();
  ASSERT_EQ(policy.update(at_rtt(rtt_ms)), before);
  ASSERT_FALSE(policy.measuring_min_rtt());
  ASSERT_EQ(policy.min_rtt_ns(), rtt_ms * kNsPerMs);
}

TEST(GradientPolicy, StartsAtInitialLimitMeasuringMinRtt) {
  GradientPolicy policy(kBounds);
  EXPECT_EQ(policy.limit(), 20);
  EXPECT_EQ(policy.name(), "gradient");
  // Envoy measures minRTT on start.
  EXPECT_TRUE(policy.measuring_min_rtt());
  EXPECT_EQ(policy.min_rtt_ns(), 0);
}

TEST(GradientPolicy, DefaultsAreEnvoys) {
  const GradientPolicy::Params params;
  EXPECT_EQ(params.buffer, 0.25);
  EXPECT_EQ(params.percentile, 50);
  EXPECT_EQ(params.min_rtt_interval_windows, 600);
  EXPECT_EQ(params.jitter, 0.15);
  EXPECT_EQ(params.request_count, 50);
  EXPECT_EQ(params.jitter_seed, 0);
  EXPECT_EQ(params.min_concurrency, 3);
  EXPECT_EQ(GradientPolicy::kRemeasureAtMinWindows, 5);
}

TEST(GradientPolicy, MinRttFromLiveTraffic) {
  GradientPolicy policy(kBounds);
  // 30 ok calls at p50 10 ms: fewer than request_count 50, still measuring;
  // the limit holds.
  EXPECT_EQ(policy.update(at_rtt(10, 30)), 20);
  EXPECT_TRUE(policy.measuring_min_rtt());
  // 20 more at 20 ms: 50 in all. minRTT = (30 * 10 + 20 * 20) / 50 = 14 ms,
  // the ok-weighted mean of the two windows' p50; the limit still holds.
  EXPECT_EQ(policy.update(at_rtt(20, 20)), 20);
  EXPECT_FALSE(policy.measuring_min_rtt());
  EXPECT_DOUBLE_EQ(policy.min_rtt_ns(), 14 * kNsPerMs);
  // sampleRTT 17.5 ms: g = 14 * 1.25 / 17.5 = 1; L = floor(20 + sqrt(20)) =
  // floor(24.47) = 24.
  EXPECT_EQ(policy.update(at_rtt(17.5)), 24);
}

TEST(GradientPolicy, HeadroomIsSqrtOfLimit) {
  GradientPolicy policy({.min = 3, .max = 1000, .initial = 16});
  measure_min_rtt(policy, 10);
  // sampleRTT 12.5 ms = minRTT * 1.25: g = 1, so only the headroom moves it.
  // floor(16 + sqrt(16)) = 20.
  EXPECT_EQ(policy.update(at_rtt(12.5)), 20);
  // floor(20 + 4.47) = 24.
  EXPECT_EQ(policy.update(at_rtt(12.5)), 24);
  // floor(24 + 4.90) = 28.
  EXPECT_EQ(policy.update(at_rtt(12.5)), 28);
}

TEST(GradientPolicy, GrowsWhileLatencyIsWithinBuffer) {
  GradientPolicy policy(kBounds);
  measure_min_rtt(policy, 10);
  // sampleRTT = minRTT: g = 1.25; 20 * 1.25 = 25, floor(25 + 5) = 30.
  EXPECT_EQ(policy.update(at_rtt(10)), 30);
}

TEST(GradientPolicy, ShrinksWhenLatencyRises) {
  GradientPolicy policy(kBounds);
  measure_min_rtt(policy, 10);
  // sampleRTT 20 ms: g = 12.5 / 20 = 0.625; 20 * 0.625 = 12.5,
  // floor(12.5 + 3.54) = 16.
  EXPECT_EQ(policy.update(at_rtt(20)), 16);
}

TEST(GradientPolicy, GradientClampedToHalfAndTwo) {
  GradientPolicy slow({.min = 3, .max = 1000, .initial = 100});
  measure_min_rtt(slow, 10);
  // sampleRTT 100 ms: 12.5 / 100 = 0.125, clamped to 0.5; 100 * 0.5 = 50,
  // floor(50 + 7.07) = 57.
  EXPECT_EQ(slow.update(at_rtt(100)), 57);

  GradientPolicy fast({.min = 3, .max = 1000, .initial = 100});
  measure_min_rtt(fast, 10);
  // sampleRTT 1 ms: 12.5 / 1 = 12.5, clamped to 2; 100 * 2 = 200,
  // floor(200 + 14.14) = 214.
  EXPECT_EQ(fast.update(at_rtt(1)), 214);
}

TEST(GradientPolicy, UsesConfiguredPercentile) {
  // A window whose p50 is 10 ms and p90 20 ms; p99 40 ms.
  const auto window = [](double p50_ms) {
    Window w = at_rtt(p50_ms);
    w.rtt_p90_ns = static_cast<std::uint64_t>(2 * p50_ms * kNsPerMs);
    w.rtt_p99_ns = static_cast<std::uint64_t>(4 * p50_ms * kNsPerMs);
    return w;
  };
  GradientPolicy p90(kBounds, {.percentile = 90});
  p90.update(window(10));
  EXPECT_EQ(p90.min_rtt_ns(), 20 * kNsPerMs);  // the p90
  // p90 25 ms: g = 20 * 1.25 / 25 = 1: floor(20 + 4.47) = 24.
  EXPECT_EQ(p90.update(window(12.5)), 24);

  GradientPolicy p99(kBounds, {.percentile = 99});
  p99.update(window(10));
  EXPECT_EQ(p99.min_rtt_ns(), 40 * kNsPerMs);

  GradientPolicy p50(kBounds);
  p50.update(window(10));
  EXPECT_EQ(p50.min_rtt_ns(), 10 * kNsPerMs);
}

TEST(GradientPolicy, IgnoresDrops) {
  // Faithful to Envoy: no error signal, only latency.
  GradientPolicy clean(kBounds);
  GradientPolicy dropping(kBounds);
  for (int i = 0; i < 20; ++i) {
    const double a = clean.update(make_window({.ok = 100, .rtt_ms = 10, .max_inflight = 1}));
    const double b =
        dropping.update(make_window({.ok = 100, .dropped = 100, .rtt_ms = 10, .max_inflight = 1}));
    EXPECT_EQ(a, b);
  }
}

TEST(GradientPolicy, HoldsOnWindowWithoutOkCalls) {
  GradientPolicy policy(kBounds);
  // Drops only, while measuring: no latency, so no part of a measurement.
  EXPECT_EQ(policy.update(make_window({.dropped = 80, .max_inflight = 1})), 20);
  EXPECT_TRUE(policy.measuring_min_rtt());
  measure_min_rtt(policy, 10);
  // And after: hold, no state changed.
  EXPECT_EQ(policy.update(make_window({.dropped = 80, .ignored = 5, .max_inflight = 1})), 20);
  EXPECT_EQ(policy.update(make_window({})), 20);
  EXPECT_EQ(policy.min_rtt_ns(), 10 * kNsPerMs);
}

TEST(GradientPolicy, RemeasuresAfterFiveWindowsAtMinimum) {
  GradientPolicy policy(kBounds);
  measure_min_rtt(policy, 10);
  // sampleRTT 100 ms: g = 0.5 throughout. 20 -> floor(10 + 3.16) = 13 ->
  // floor(6.5 + 2.55) = 9 -> floor(4.5 + 2.12) = 6 -> floor(3 + 1.73) = 4 ->
  // floor(2 + 1.41) = 3, the minimum, set from 4 (not counted).
  for (double expected : {13, 9, 6, 4, 3}) EXPECT_EQ(policy.update(at_rtt(100)), expected);
  // Then floor(1.5 + 1.22) = 2 -> 3, set from 3: four times is not enough ...
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(policy.update(at_rtt(100)), 3);
    EXPECT_FALSE(policy.measuring_min_rtt());
  }
  // ... the fifth starts a measurement.
  EXPECT_EQ(policy.update(at_rtt(100)), 3);
  EXPECT_TRUE(policy.measuring_min_rtt());
  // It takes the live latency, 100 ms, as minRTT, and holds.
  EXPECT_EQ(policy.update(at_rtt(100)), 3);
  EXPECT_EQ(policy.min_rtt_ns(), 100 * kNsPerMs);
  // So the limit grows again under the same latency: g = 1.25, 3 * 1.25 =
  // 3.75, floor(3.75 + 1.94) = 5. The reference's upward drift.
  EXPECT_EQ(policy.update(at_rtt(100)), 5);
}

// The config's min_limit defaults to 1, which the update never reaches
// from 2 (floor(1 + 1) = 2 at the lowest gradient): the floor is Envoy's
// min_concurrency, 3, so a collapse is measured again all the same.
TEST(GradientPolicy, TheFloorIsMinConcurrencyAboveALowerMinLimit) {
  constexpr Bounds kMinOne{.min = 1, .max = 1000, .initial = 20};
  GradientPolicy policy(kMinOne);
  measure_min_rtt(policy, 10);
  for (double expected : {13, 9, 6, 4, 3}) EXPECT_EQ(policy.update(at_rtt(100)), expected);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(policy.update(at_rtt(100)), 3);
  EXPECT_FALSE(policy.measuring_min_rtt());
  EXPECT_EQ(policy.update(at_rtt(100)), 3);
  EXPECT_TRUE(policy.measuring_min_rtt());
  // min_concurrency 1 is Envoy's rule with a floor of 1: stuck at 2, never
  // at the floor, never measured again.
  GradientPolicy low(kMinOne, {.min_concurrency = 1});
  measure_min_rtt(low, 10);
  for (int i = 0; i < 40; ++i) low.update(at_rtt(100));
  EXPECT_EQ(low.limit(), 2);
  EXPECT_FALSE(low.measuring_min_rtt());
  // A min_limit above min_concurrency is the floor; one above max_limit
  // cannot be.
  GradientPolicy high({.min = 5, .max = 1000, .initial = 20});
  measure_min_rtt(high, 10);
  for (int i = 0; i < 5; ++i) high.update(at_rtt(100));
  EXPECT_EQ(high.limit(), 5);
  GradientPolicy capped({.min = 1, .max = 2, .initial = 2});
  measure_min_rtt(capped, 10);
  EXPECT_EQ(capped.update(at_rtt(100)), 2);
}

TEST(GradientPolicy, AMeasurementStartsTheCountAtMinimumOver) {
  GradientPolicy policy(kBounds);
  measure_min_rtt(policy, 10);
  // Down to the minimum and five windows there, as above: a measurement.
  for (int i = 0; i < 10; ++i) policy.update(at_rtt(100));
  ASSERT_TRUE(policy.measuring_min_rtt());
  // It finds 10 ms (the dependency recovered for a moment); then latency
  // is 100 ms again and the limit stays at the minimum. The five windows
  // before the measurement no longer count: it takes five more.
  policy.update(at_rtt(10));
  ASSERT_FALSE(policy.measuring_min_rtt());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(policy.update(at_rtt(100)), 3);
    EXPECT_FALSE(policy.measuring_min_rtt()) << "window " << i + 1;
  }
  EXPECT_EQ(policy.update(at_rtt(100)), 3);
  EXPECT_TRUE(policy.measuring_min_rtt());
}

TEST(GradientPolicy, RemeasuresEveryIntervalWithoutJitter) {
  GradientPolicy policy(kBounds, {.min_rtt_interval_windows = 3, .jitter = 0});
  measure_min_rtt(policy, 10);
  // Three updates at g = 1.25: 20 -> floor(25 + 5) = 30 -> floor(37.5 + 6.12)
  // = 43 -> floor(53.75 + 7.33) = 61.
  EXPECT_EQ(policy.update(at_rtt(10)), 30);
  EXPECT_EQ(policy.update(at_rtt(10)), 43);
  EXPECT_FALSE(policy.measuring_min_rtt());
  EXPECT_EQ(policy.update(at_rtt(10)), 61);
  // The interval is over: the next window is a measurement. It holds at 61
  // and takes 20 ms as minRTT.
  EXPECT_TRUE(policy.measuring_min_rtt());
  EXPECT_EQ(policy.update(at_rtt(20)), 61);
  EXPECT_EQ(policy.min_rtt_ns(), 20 * kNsPerMs);
  // 20 ms now reads as no queue: g = 1.25, floor(76.25 + 8.73) = 84.
  EXPECT_EQ(policy.update(at_rtt(20)), 84);
}

// Windows with ok calls from the end of the first measurement to the start
// of the next, for interval 10 and jitter 0.5: 10 + x mod ceil(10 * 0.5) =
// 10 + [0, 4].
int windows_to_remeasure(double seed) {
  GradientPolicy policy({.min = 3, .max = 1000, .initial = 20},
                        {.min_rtt_interval_windows = 10, .jitter = 0.5, .jitter_seed = seed});
  policy.update(at_rtt(10));
  for (int window = 1; window <= 40; ++window) {
    policy.update(at_rtt(10));
    if (policy.measuring_min_rtt()) return window;
  }
  return -1;
}

TEST(GradientPolicy, JitterDelaysRemeasureWithinRange) {
  std::set<int> seen;
  for (int seed = 0; seed < 32; ++seed) {
    const int windows = windows_to_remeasure(seed);
    EXPECT_GE(windows, 10) << "seed " << seed;
    EXPECT_LE(windows, 14) << "seed " << seed;
    seen.insert(windows);
  }
  // The jitter does spread the measurements ...
  EXPECT_GE(seen.size(), 3u);
  // ... and a seed always gives the same one.
  EXPECT_EQ(windows_to_remeasure(3), windows_to_remeasure(3));
}

TEST(GradientPolicy, TakesZeroLatencyAsOneNanosecond) {
  GradientPolicy policy(kBounds);
  // A zero p50 (a coarse clock) is taken as 1 ns: minRTT 1 ns ...
  EXPECT_EQ(policy.update(at_rtt(0)), 20);
  EXPECT_EQ(policy.min_rtt_ns(), 1);
  // ... and sampleRTT 1 ns: g = 1.25, L = 30, where 0/0 would be nan.
  EXPECT_EQ(policy.update(at_rtt(0)), 30);
}

TEST(GradientPolicy, StaysWithinBounds) {
  GradientPolicy policy({.min = 10, .max = 40, .initial = 20});
  measure_min_rtt(policy, 10);
  // 30, then floor(37.5 + 6.12) = 43 -> max 40, and stays.
  for (double expected : {30, 40, 40}) EXPECT_EQ(policy.update(at_rtt(10)), expected);
  // g = 0.5: floor(20 + 4.47) = 24 -> floor(12 + 3.46) = 15 -> floor(7.5 + 2.74)
  // = 10 -> floor(5 + 2.24) = 7 -> min 10.
  for (double expected : {24, 15, 10, 10}) EXPECT_EQ(policy.update(at_rtt(100)), expected);
}

TEST(GradientPolicy, RefusesOutOfRangeParams) {
  EXPECT_EQ(param_error_of([] { GradientPolicy::parse_params({{"percentile", 75}}); }),
            "percentile = 75: must be 50, 90 or 99");
  EXPECT_EQ(param_error_of([] { GradientPolicy::parse_params({{"percentile", 0.5}}); }),
            "percentile = 0.5: must be 50, 90 or 99");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(param_error_of([nan] { GradientPolicy::parse_params({{"percentile", nan}}); }),
            "percentile = nan: must be 50, 90 or 99");
  EXPECT_EQ(param_error_of([] { GradientPolicy::parse_params({{"buffer", 25}}); }),
            "buffer = 25: must be in [0, 1]");
  EXPECT_EQ(param_error_of([] { GradientPolicy::parse_params({{"jitter", -0.1}}); }),
            "jitter = -0.1: must be in [0, 1]");
  EXPECT_EQ(param_error_of([] { GradientPolicy::parse_params({{"min_rtt_interval_windows", 0}}); }),
            "min_rtt_interval_windows = 0: must be an integer in [1, 4294967295]");
  EXPECT_EQ(param_error_of([] { GradientPolicy::parse_params({{"request_count", 10.5}}); }),
            "request_count = 10.5: must be an integer in [1, 4294967295]");
  EXPECT_EQ(param_error_of([] { GradientPolicy::parse_params({{"jitter_seed", -1}}); }),
            "jitter_seed = -1: must be an integer in [0, 4294967295]");
  EXPECT_EQ(param_error_of([] { GradientPolicy::parse_params({{"min_concurrency", 0}}); }),
            "min_concurrency = 0: must be an integer in [1, 4294967295]");
  EXPECT_EQ(param_error_of([] { GradientPolicy::parse_params({{"min_concurrency_limit", 3}}); }),
            "unknown parameter 'min_concurrency_limit' for policy 'gradient' (known: buffer, jitter, "
            "jitter_seed, min_concurrency, min_rtt_interval_windows, percentile, request_count)");
  // The same rules hold for Params built in code.
  EXPECT_EQ(param_error_of([] { GradientPolicy policy(kBounds, {.percentile = 95}); }),
            "percentile = 95: must be 50, 90 or 99");
  EXPECT_EQ(param_error_of([] { GradientPolicy policy(kBounds, {.request_count = 0}); }),
            "request_count = 0: must be an integer in [1, 4294967295]");
}

TEST(GradientPolicy, ReadsParams) {
  const GradientPolicy::Params params =
      GradientPolicy::parse_params({{"buffer", 0.1},
                                    {"percentile", 99},
                                    {"min_rtt_interval_windows", 100},
                                    {"jitter", 0},
                                    {"request_count", 10},
                                    {"jitter_seed", 12},
                                    {"min_concurrency", 4}});
  EXPECT_EQ(params.buffer, 0.1);
  EXPECT_EQ(params.percentile, 99);
  EXPECT_EQ(params.min_rtt_interval_windows, 100);
  EXPECT_EQ(params.jitter, 0);
  EXPECT_EQ(params.request_count, 10);
  EXPECT_EQ(params.jitter_seed, 12);
  EXPECT_EQ(params.min_concurrency, 4);
  // Absent keys keep their defaults.
  EXPECT_EQ(GradientPolicy::parse_params({{"buffer", 0.1}}).percentile, 50);
}

}  // namespace
}  // namespace bulkhead::policies
