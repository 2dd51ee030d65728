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

// A pin answers over the bounds; the ticks under it never reach the
// policy, and none of them is left in the first window after it; unpinned,
// the policy starts from the pin within the bounds.
TEST(Controller, APinHoldsTheLimitAndTheTicksUnderItTeachNothing) {
  Controller c(aimd(), 0, 0);
  c.pin(300);
  EXPECT_EQ(c.limit(), 300u);
  EXPECT_EQ(c.pinned(), 300u);
  EXPECT_FALSE(c.observe(tick_of(50, 4'000'000, 50, 300), kTickNs));
  EXPECT_EQ(c.windows(), 0u);
  EXPECT_EQ(c.limit(), 300u);
  c.unpin(2 * kTickNs);
  EXPECT_EQ(c.pinned(), 0u);
  EXPECT_EQ(c.limit(), 100u);  // 300 within [1, 100]
  // The first window after it holds its own tick only, no drop.
  ASSERT_TRUE(c.observe(tick_of(10, 4'000'000, 0, 100), 3 * kTickNs));
  EXPECT_EQ(c.last_window().dropped, 0u);
  EXPECT_EQ(c.last_window().duration_ns, kTickNs);
  c.pin(0);  // a pin is at least one call
  EXPECT_EQ(c.limit(), 1u);
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

TEST(Controller, AMinimumNoTickCarriedIsZeroNotTheNeutralValue) {
  // A call's count and its latency's extremes are read at different
  // moments of a tick, so a window can hold calls with no minimum (still
  // the neutral UINT64_MAX): the policy sees 0, "not known", and never a
  // minimum of 584 years.
  TickObservation o = tick_of(10, 4'000'000, 0, 5);
  o.extremes.rtt_min_ns = UINT64_MAX;
  Controller c(aimd(), 0, 0);
  ASSERT_TRUE(c.observe(o, kTickNs));
  EXPECT_EQ(c.last_window().rtt_min_ns, 0u);
  EXPECT_EQ(c.last_window().rtt_max_ns, 4'000'000u);
}

TEST(Controller, AWindowSpansItsTicks) {
  LimitSettings s = aimd();
  s.window_min_samples = 20;
  Controller c(s, 0, 0);
  EXPECT_FALSE(c.observe(tick_of(10, 4'000'000, 0, 5), kTickNs));
  ASSERT_TRUE(c.observe(tick_of(10, 8'000'000, 0, 12), 2 * kTickNs));
  const policies::Window& w = c.last_window();
  EXPECT_EQ(w.ok, 20u);
  EXPECT_EQ(w.rtt_min_ns, 4'000'000u);
  EXPECT_EQ(w.rtt_max_ns, 8'000'000u);
  EXPECT_EQ(w.max_inflight, 12u);
  EXPECT_EQ(w.duration_ns, 2 * kTickNs);
}

TEST(Controller, AClosedWindowLeavesNothingToTheNext) {
  Controller c(aimd(), 0, 0);
  ASSERT_TRUE(c.observe(tick_of(30, 40'000'000, 0, 15), kTickNs));
  // Ten calls of 2 ms and one of 80 ms at a peak of 3: the percentiles
  // are theirs, not those of the thirty calls of 40 ms before (whose
  // bucket lies between them), and the peak is 3, not 15.
  TickObservation o = tick_of(10, 2'000'000, 0, 3);
  o.delta.ok += 1;
  o.delta.rtt_sum_ns += 80'000'000;
  o.delta.histogram[shm::histogram_bucket(80'000'000)] = 1;
  o.extremes.rtt_max_ns = 80'000'000;
  ASSERT_TRUE(c.observe(o, 2 * kTickNs));
  const policies::Window& w = c.last_window();
  EXPECT_EQ(w.ok, 11u);
  EXPECT_NEAR(static_cast<double>(w.rtt_p50_ns), 2e6, 2e6 / 16);
  EXPECT_NEAR(static_cast<double>(w.rtt_p90_ns), 2e6, 2e6 / 16);
  EXPECT_EQ(w.rtt_max_ns, 80'000'000u);
  EXPECT_EQ(w.max_inflight, 3u);
  EXPECT_EQ(w.duration_ns, kTickNs);
}

TEST(Controller, ShadowAdmissionsReachThePolicyAsRejections) {
  // In shadow mode a call over the limit is admitted, not refused; the
  // limit was reached all the same.
  TickObservation o = tick_of(10, 1'000'000, 0, 20);
  o.delta.rejected = 2;
  o.delta.shadow_admitted = 7;
  Controller c(aimd(), 0, 0);
  ASSERT_TRUE(c.observe(o, kTickNs));
  EXPECT_EQ(c.last_window().rejected, 9u);
}

TEST(Controller, AWindowWithoutSamplesStartsOverAtItsMaxAge) {
  Controller c(aimd(), 0, 0);
  // Fifteen quiet ticks: at the tenth (1 s, the max age) the empty window
  // starts over.
  for (std::uint64_t t = 1; t <= 15; ++t) EXPECT_FALSE(c.observe(tick_of(0, 0, 0, 0), t * kTickNs));
  // The calls of the sixteenth close a window of six ticks, not sixteen:
  // the quiet second is no part of it.
  ASSERT_TRUE(c.observe(tick_of(10, 1'000'000, 0, 5), 16 * kTickNs));
  EXPECT_EQ(c.last_window().duration_ns, 6 * kTickNs);
}

// A tick stamped before the window opened (a clock that went back) does not
// make the window centuries old: it neither closes short of its samples nor
// reaches the policy with such a duration.
TEST(Controller, ATimeBeforeTheWindowsStartAgesItFromThere) {
  Controller c(aimd(), 0, 50 * kTickNs);
  EXPECT_FALSE(c.observe(tick_of(1, 1'000'000, 0, 1), 40 * kTickNs));
  EXPECT_EQ(c.windows(), 0u);
  ASSERT_TRUE(c.observe(tick_of(9, 1'000'000, 0, 1), 41 * kTickNs));
  EXPECT_EQ(c.last_window().ok, 10u);
  EXPECT_EQ(c.last_window().duration_ns, kTickNs);
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
  LimitSettings wider = aimd();
  wider.bounds.max = 200;
  EXPECT_TRUE(c.reconfigure(wider));  // the bounds are the policy's
  EXPECT_EQ(c.limit(), limit);
  LimitSettings other = aimd();
  other.params["backoff"] = 0.5;
  EXPECT_TRUE(c.reconfigure(other));
  EXPECT_EQ(c.limit(), limit);  // continues where it was
  c.observe(tick_of(60, 1'000'000, 1, 20), 2 * kTickNs);
  EXPECT_EQ(c.limit(), limit / 2);  // with the new backoff
}

// A fixed limit is the config's initial_limit: a reload that changes it
// applies it, and a daemon that takes over (or a pin that ends) does not
// keep the limit it found in its place. A policy that learns continues.
TEST(Controller, AFixedLimitIsTheConfigsWhateverLimitWasInForce) {
  LimitSettings fixed;
  fixed.policy = "fixed";
  fixed.bounds = {1, 100, 12};
  EXPECT_EQ(Controller(fixed, 30, 0).limit(), 12u);
  Controller c(fixed, 0, 0);
  LimitSettings raised = fixed;
  raised.bounds.initial = 20;
  EXPECT_TRUE(c.reconfigure(raised));
  EXPECT_EQ(c.limit(), 20u);
  c.pin(5);
  c.unpin(kTickNs);
  EXPECT_EQ(c.limit(), 20u);

  Controller learning(aimd(), 30, 0);
  LimitSettings other_initial = aimd();
  other_initial.bounds.initial = 50;
  EXPECT_FALSE(learning.reconfigure(other_initial));
  EXPECT_EQ(learning.limit(), 30u);
}

}  // namespace
}  // namespace bulkhead::control
