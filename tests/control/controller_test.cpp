// The controller alone, fed synthetic observations: no segment, no clock.
#include "control/controller.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "shm/histogram.hpp"

namespace bulkhead::control {
namespace {

constexpr std::uint64_t kTickNs = 100'000'000;

// One tick in which `ok` calls of `rtt_ns` and `dropped` calls completed,
// with `peak` calls in flight at most.
TickObservation tick_of(std::uint64_t ok, std::uint64_t rtt_ns, std::uint64_t dropped, std::uint32_t peak) {
  TickObservation o;
  o.delta.ok = ok;
  o.delta.dropped = dropped;
  o.delta.rtt_sum_ns = ok * rtt_ns;
  o.delta.histogram[shm::histogram_bucket(rtt_ns)] = ok;
  if (ok > 0) {
    o.extremes.rtt_min_ns = rtt_ns;
    o.extremes.rtt_max_ns = rtt_ns;
  }
  o.extremes.max_inflight = peak;
  o.inflight = peak;
  return o;
}

LimitSettings aimd() {
  LimitSettings s;
  s.policy = "aimd";
  s.bounds = {1, 100, 20};
  return s;
}

TEST(Controller, StartsFromThePublishedLimitNotTheInitialOne) {
  EXPECT_EQ(Controller(aimd(), 0, 0).limit(), 20u);   // nothing published: initial
  EXPECT_EQ(Controller(aimd(), 37, 0).limit(), 37u);  // a limit in force continues
  EXPECT_EQ(Controller(aimd(), 500, 0).limit(), 100u);  // within the bounds
}

TEST(Controller, WindowCarriesPercentilesAndClampsThePeakToTheLimit) {
  Controller c(aimd(), 0, 0);
  ASSERT_TRUE(c.observe(tick_of(10, 4'000'000, 2, 1000), kTickNs));
  const policies::Window& w = c.last_window();
  EXPECT_EQ(w.ok, 10u);
  EXPECT_EQ(w.dropped, 2u);
  EXPECT_NEAR(static_cast<double>(w.rtt_p50_ns), 4e6, 4e6 / 16);
  EXPECT_EQ(w.rtt_min_ns, 4'000'000u);
  EXPECT_EQ(w.max_inflight, 20u);  // a client claiming 1000 is not believed past the limit
  EXPECT_EQ(w.limit, 20u);
  EXPECT_EQ(w.duration_ns, kTickNs);
  EXPECT_EQ(c.limit(), 18u);  // a drop: floor(20 * 0.9)
}

TEST(Controller, WindowCarriesTheTenthPercentile) {
  // 10 calls at 1 ms and 90 at 8 ms: the p10 is the fast ones', the p50 the
  // slow ones' (bucket midpoints, within a sixteenth).
  TickObservation o = tick_of(90, 8'000'000, 0, 20);
  o.delta.ok += 10;
  o.delta.rtt_sum_ns += 10 * 1'000'000;
  o.delta.histogram[shm::histogram_bucket(1'000'000)] = 10;
  o.extremes.rtt_min_ns = 1'000'000;
  Controller c(aimd(), 0, 0);
  ASSERT_TRUE(c.observe(o, kTickNs));
  const policies::Window& w = c.last_window();
  EXPECT_NEAR(static_cast<double>(w.rtt_p10_ns), 1e6, 1e6 / 16);
  EXPECT_NEAR(static_cast<double>(w.rtt_p50_ns), 8e6, 8e6 / 16);
}

TEST(Controller, SameObservationsGiveTheSameLimits) {
  LimitSettings s;  // gradient2, the default
  Controller a(s, 0, 0), b(s, 0, 0);
  for (int i = 1; i <= 500; ++i) {
    const auto o = tick_of(50, 1'000'000 + (i % 17) * 150'000, i % 23 == 0, 40);
    a.observe(o, i * kTickNs);
    b.observe(o, i * kTickNs);
    ASSERT_EQ(a.limit(), b.limit()) << "tick " << i;
  }
}

TEST(Controller, ReconfigureRebuildsThePolicyOnlyWhenItsSettingsChange) {
  Controller c(aimd(), 0, 0);
  c.observe(tick_of(10, 1'000'000, 1, 20), kTickNs);
  const std::uint32_t limit = c.limit();
  LimitSettings window_only = aimd();
  window_only.window_min_samples = 50;
  EXPECT_FALSE(c.reconfigure(window_only));
  LimitSettings other = aimd();
  other.params["backoff"] = 0.5;
  EXPECT_TRUE(c.reconfigure(other));
  EXPECT_EQ(c.limit(), limit);  // continues where it was
  c.observe(tick_of(60, 1'000'000, 1, 20), 2 * kTickNs);
  EXPECT_EQ(c.limit(), limit / 2);  // with the new backoff
}

}  // namespace
}  // namespace bulkhead::control
