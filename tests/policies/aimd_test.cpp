#include "policies/aimd.hpp"

#include <gtest/gtest.h>

#include "tests/policies/window_builder.hpp"

namespace bulkhead::policies {
namespace {

using test::make_window;
using test::param_error_of;

// min 10, max 100, start at 20 (calls).
constexpr Bounds kBounds{.min = 10, .max = 100, .initial = 20};

// A window with no drops, 10 ms mean latency, and the given max in-flight.
Window healthy(std::uint32_t max_inflight) {
  return make_window({.ok = 100, .rtt_ms = 10, .max_inflight = max_inflight});
}

TEST(AimdPolicy, StartsAtInitialLimit) {
  AimdPolicy policy(kBounds);
  EXPECT_EQ(policy.limit(), 20);
  EXPECT_EQ(policy.name(), "aimd");
}

TEST(AimdPolicy, DefaultsAreNetflixs) {
  const AimdPolicy::Params params;
  EXPECT_EQ(params.backoff, 0.9);
  EXPECT_EQ(params.timeout_ms, 5000);
}

TEST(AimdPolicy, BacksOffOnDrop) {
  AimdPolicy policy(kBounds);
  // One drop among 100 calls, latency fine: floor(20 * 0.9) = 18.
  EXPECT_EQ(policy.update(make_window({.ok = 99, .dropped = 1, .rtt_ms = 10, .max_inflight = 20})),
            18);
  EXPECT_EQ(policy.limit(), 18);
}

TEST(AimdPolicy, BacksOffOnWindowOfOnlyDrops) {
  AimdPolicy policy(kBounds);
  // No ok call, so no latency at all; the drops alone count: floor(20 * 0.9) = 18.
  EXPECT_EQ(policy.update(make_window({.dropped = 5, .max_inflight = 20})), 18);
}

TEST(AimdPolicy, BacksOffWhenMeanRttExceedsTimeout) {
  AimdPolicy policy(kBounds);
  // Mean 6000 ms > timeout 5000 ms, no drops: floor(20 * 0.9) = 18.
  EXPECT_EQ(policy.update(make_window({.ok = 10, .rtt_ms = 6000, .max_inflight = 20})), 18);
}

TEST(AimdPolicy, MeanRttEqualToTimeoutIsNotSlow) {
  AimdPolicy policy(kBounds);
  // Mean exactly 5000 ms: not > timeout; 2 * 10 >= 20, so it grows: 20 + 1 = 21.
  EXPECT_EQ(policy.update(make_window({.ok = 10, .rtt_ms = 5000, .max_inflight = 10})), 21);
}

TEST(AimdPolicy, HonoursConfiguredTimeout) {
  AimdPolicy policy(kBounds, {.backoff = 0.9, .timeout_ms = 100});
  // Mean 150 ms > timeout 100 ms: floor(20 * 0.9) = 18.
  EXPECT_EQ(policy.update(make_window({.ok = 10, .rtt_ms = 150, .max_inflight = 20})), 18);
}

TEST(AimdPolicy, HonoursConfiguredBackoff) {
  AimdPolicy policy(kBounds, {.backoff = 0.5, .timeout_ms = 5000});
  // floor(20 * 0.5) = 10.
  EXPECT_EQ(policy.update(make_window({.ok = 10, .dropped = 1, .rtt_ms = 10, .max_inflight = 20})),
            10);
}

TEST(AimdPolicy, GrowsOnlyWhenLimitIsUsed) {
  AimdPolicy policy(kBounds);
  // 2 * 9 = 18 < 20: app-limited, hold at 20.
  EXPECT_EQ(policy.update(healthy(9)), 20);
  // 2 * 10 = 20 >= 20: grow by one, 21.
  EXPECT_EQ(policy.update(healthy(10)), 21);
  // 2 * 10 = 20 < 21: hold at 21.
  EXPECT_EQ(policy.update(healthy(10)), 21);
  // 2 * 11 = 22 >= 21: 22.
  EXPECT_EQ(policy.update(healthy(11)), 22);
}

TEST(AimdPolicy, HoldsOnWindowWithoutSamples) {
  AimdPolicy policy(kBounds);
  // Only ignored completions: ok + dropped == 0, nothing learned, even though
  // 2 * 20 >= 20 would otherwise grow it.
  EXPECT_EQ(policy.update(make_window({.ignored = 50, .max_inflight = 20})), 20);
  EXPECT_EQ(policy.update(make_window({})), 20);
}

TEST(AimdPolicy, StopsAtMinUnderRepeatedDrops) {
  AimdPolicy policy(kBounds);
  const Window drop = make_window({.ok = 10, .dropped = 1, .rtt_ms = 10, .max_inflight = 20});
  // floor(20*0.9)=18, floor(16.2)=16, floor(14.4)=14, floor(12.6)=12,
  // floor(10.8)=10, floor(9)=9 -> clamped to min 10, and stays there.
  for (double expected : {18, 16, 14, 12, 10, 10, 10}) {
    EXPECT_EQ(policy.update(drop), expected);
  }
}

TEST(AimdPolicy, StopsAtMax) {
  AimdPolicy policy({.min = 10, .max = 22, .initial = 20});
  // 21, 22, then 23 clamped to max 22.
  for (double expected : {21, 22, 22}) EXPECT_EQ(policy.update(healthy(100)), expected);
}

TEST(AimdPolicy, RecoversByOneCallPerWindow) {
  AimdPolicy policy(kBounds);
  policy.update(make_window({.ok = 10, .dropped = 1, .rtt_ms = 10, .max_inflight = 20}));  // 18
  // Additive increase: 19, 20, 21.
  for (double expected : {19, 20, 21}) EXPECT_EQ(policy.update(healthy(20)), expected);
}

TEST(AimdPolicy, RefusesOutOfRangeParams) {
  EXPECT_EQ(param_error_of([] { AimdPolicy::parse_params({{"backoff", 1.0}}); }),
            "backoff = 1: must be in [0.5, 1)");
  EXPECT_EQ(param_error_of([] { AimdPolicy::parse_params({{"backoff", 0.4}}); }),
            "backoff = 0.4: must be in [0.5, 1)");
  EXPECT_EQ(param_error_of([] { AimdPolicy::parse_params({{"timeout_ms", 0}}); }),
            "timeout_ms = 0: must be > 0");
  // The same ranges hold for Params built in code.
  EXPECT_EQ(param_error_of([] { AimdPolicy policy(kBounds, {.backoff = 1.5}); }),
            "backoff = 1.5: must be in [0.5, 1)");
}

TEST(AimdPolicy, ReadsParams) {
  const AimdPolicy::Params params =
      AimdPolicy::parse_params({{"backoff", 0.5}, {"timeout_ms", 250}});
  EXPECT_EQ(params.backoff, 0.5);
  EXPECT_EQ(params.timeout_ms, 250);
  // Absent keys keep their defaults.
  EXPECT_EQ(AimdPolicy::parse_params({{"backoff", 0.75}}).timeout_ms, 5000);
}

}  // namespace
}  // namespace bulkhead::policies
