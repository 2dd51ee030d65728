#include "policies/vegas.hpp"

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

// Netflix's own bounds: min 1, max 1000, start at 20 (calls). Default params:
// smoothing 1, probe_multiplier 30 (no probe before 0.5 * 30 * L >= 300
// windows, far beyond any test here that does not ask for one), alpha 3 lg,
// beta 6 lg. lg(L) = 1 for L in [1, 100), 2 for [100, 1000).
constexpr Bounds kBounds{.min = 1, .max = 1000, .initial = 20};

// A window of 100 ok calls at `rtt_ms` mean, in-flight reaching
// `max_inflight` (default: far above any limit here, so never app-limited).
Window at_rtt(double rtt_ms, std::uint32_t max_inflight = 5000) {
  return make_window({.ok = 100, .rtt_ms = rtt_ms, .max_inflight = max_inflight});
}

// The same with one dropped call.
Window dropping_at_rtt(double rtt_ms) {
  return make_window({.ok = 99, .dropped = 1, .rtt_ms = rtt_ms, .max_inflight = 5000});
}

// The first window only sets the baseline and holds.
void set_baseline_10ms(VegasPolicy& policy) {
  const double before = policy.limit();
  ASSERT_EQ(policy.update(at_rtt(10)), before);
  ASSERT_EQ(policy.rtt_noload_ns(), 10 * kNsPerMs);
}

TEST(VegasPolicy, StartsAtInitialLimit) {
  VegasPolicy policy(kBounds);
  EXPECT_EQ(policy.limit(), 20);
  EXPECT_EQ(policy.rtt_noload_ns(), 0);
  EXPECT_EQ(policy.name(), "vegas");
}

TEST(VegasPolicy, DefaultsAreNetflixs) {
  const VegasPolicy::Params params;
  EXPECT_EQ(params.smoothing, 1.0);
  EXPECT_EQ(params.probe_multiplier, 30);
  EXPECT_EQ(params.probe_seed, 0);
  EXPECT_EQ(params.alpha_factor, 3);
  EXPECT_EQ(params.beta_factor, 6);
}

TEST(VegasPolicy, StepIsLog10OfTheLimit) {
  // Netflix's Log10RootFunction of the limit's integer part (its tests:
  // 0 -> 1, 100 -> 2, 10000 -> 4).
  EXPECT_EQ(VegasPolicy::log10_root(1), 1);     // max(1, 0)
  EXPECT_EQ(VegasPolicy::log10_root(9.9), 1);   // int 9: max(1, 0)
  EXPECT_EQ(VegasPolicy::log10_root(10), 1);
  EXPECT_EQ(VegasPolicy::log10_root(99.9), 1);  // int 99
  EXPECT_EQ(VegasPolicy::log10_root(100), 2);
  EXPECT_EQ(VegasPolicy::log10_root(999), 2);
  EXPECT_EQ(VegasPolicy::log10_root(1000), 3);  // not floor(sqrt(1000)) = 31, as before 3fbad85
  EXPECT_EQ(VegasPolicy::log10_root(9999.9), 3);
  EXPECT_EQ(VegasPolicy::log10_root(10000), 4);
  EXPECT_EQ(VegasPolicy::log10_root(1e6), 6);
}

TEST(VegasPolicy, FirstWindowSetsBaselineAndHolds) {
  VegasPolicy policy(kBounds);
  // No baseline yet: this rtt becomes it, and the limit holds at 20.
  EXPECT_EQ(policy.update(at_rtt(10)), 20);
  EXPECT_EQ(policy.rtt_noload_ns(), 10 * kNsPerMs);
}

TEST(VegasPolicy, LowerRttResetsBaselineAndHoldsEvenWithDrops) {
  VegasPolicy policy(kBounds);
  set_baseline_10ms(policy);
  // 8 ms < 10 ms: new baseline, hold at 20. The check comes before the drop
  // rule, as in Netflix, so the drop does not lower the limit.
  EXPECT_EQ(policy.update(dropping_at_rtt(8)), 20);
  EXPECT_EQ(policy.rtt_noload_ns(), 8 * kNsPerMs);
}

TEST(VegasPolicy, GrowsByBetaWhenQueueIsSmall) {
  VegasPolicy policy(kBounds);
  set_baseline_10ms(policy);
  // rtt 10 ms: queue = ceil(20 * (1 - 10/10)) = 0 <= lg(20) = 1:
  // L = 20 + beta = 20 + 6 * 1 = 26.
  EXPECT_EQ(policy.update(at_rtt(10)), 26);
  // rtt 10.3 ms: queue = ceil(26 * 0.3/10.3) = ceil(0.757) = 1 <= 1: 26 + 6 = 32.
  EXPECT_EQ(policy.update(at_rtt(10.3)), 32);
}

TEST(VegasPolicy, GrowsByLgWhenQueueIsBelowAlpha) {
  VegasPolicy policy(kBounds);
  set_baseline_10ms(policy);
  // rtt 11 ms: queue = ceil(20 * (1 - 10/11)) = ceil(1.82) = 2; 1 < 2 < alpha 3:
  // L = 20 + lg(20) = 21.
  EXPECT_EQ(policy.update(at_rtt(11)), 21);
}

TEST(VegasPolicy, HoldsWhenQueueIsBetweenAlphaAndBeta) {
  VegasPolicy policy(kBounds);
  set_baseline_10ms(policy);
  // rtt 12 ms: queue = ceil(20 * 2/12) = ceil(3.33) = 4, in [alpha 3, beta 6]: hold.
  EXPECT_EQ(policy.update(at_rtt(12)), 20);
  // rtt 14 ms: queue = ceil(20 * 4/14) = ceil(5.71) = 6, not > beta 6: hold.
  EXPECT_EQ(policy.update(at_rtt(14)), 20);
  // rtt 11.5 ms: queue = ceil(20 * 1.5/11.5) = ceil(2.61) = 3, alpha, not
  // under it: hold (the queue is rounded up before the comparisons).
  EXPECT_EQ(policy.update(at_rtt(11.5)), 20);
}

TEST(VegasPolicy, ShrinksByLgWhenQueueIsAboveBeta) {
  VegasPolicy policy(kBounds);
  set_baseline_10ms(policy);
  // rtt 20 ms: queue = ceil(20 * 10/20) = 10 > beta 6: L = 20 - 1 = 19.
  EXPECT_EQ(policy.update(at_rtt(20)), 19);
  // From 150, lg = 2 (alpha 6, beta 12): queue = ceil(150 * 0.5) = 75 > 12:
  // L = 150 - 2 = 148. The reference moves down slowly.
  VegasPolicy high({.min = 1, .max = 1000, .initial = 150});
  set_baseline_10ms(high);
  EXPECT_EQ(high.update(at_rtt(20)), 148);
}

TEST(VegasPolicy, BacksOffOnDrop) {
  VegasPolicy policy(kBounds);
  set_baseline_10ms(policy);
  // rtt at the baseline (queue 0 would grow it by 6), but one call dropped:
  // L = 20 - lg(20) = 19.
  EXPECT_EQ(policy.update(dropping_at_rtt(10)), 19);
  // Again: 19 - 1 = 18.
  EXPECT_EQ(policy.update(dropping_at_rtt(10)), 18);
}

TEST(VegasPolicy, BacksOffOnWindowOfOnlyDrops) {
  VegasPolicy policy(kBounds);
  // No ok call, so no latency and no baseline; the drops alone count:
  // L = 20 - 1 = 19, and the baseline stays unset.
  EXPECT_EQ(policy.update(make_window({.dropped = 5, .max_inflight = 20})), 19);
  EXPECT_EQ(policy.rtt_noload_ns(), 0);
}

TEST(VegasPolicy, HoldsWhenAppLimited) {
  VegasPolicy policy(kBounds);
  set_baseline_10ms(policy);
  // max_inflight 9: 2 * 9 = 18 < 20, app-limited: hold though queue is 0.
  EXPECT_EQ(policy.update(at_rtt(10, 9)), 20);
  // max_inflight 10: 20 is not < 20: queue 0, L = 20 + 6 = 26.
  EXPECT_EQ(policy.update(at_rtt(10, 10)), 26);
}

TEST(VegasPolicy, AppLimitedDoesNotShieldFromDrops) {
  VegasPolicy policy(kBounds);
  set_baseline_10ms(policy);
  // The drop rule comes first: 20 - 1 = 19 even with nothing in flight.
  EXPECT_EQ(policy.update(make_window({.ok = 10, .dropped = 1, .rtt_ms = 10, .max_inflight = 0})),
            19);
}

TEST(VegasPolicy, SmoothingBlendsTowardTheEstimate) {
  VegasPolicy policy(kBounds, {.smoothing = 0.5});
  set_baseline_10ms(policy);
  // L' = 20 + 6 = 26; L = 0.5 * 20 + 0.5 * 26 = 23.
  EXPECT_EQ(policy.update(at_rtt(10)), 23);
  // L' = 23 + 6 = 29; L = 0.5 * 23 + 0.5 * 29 = 26.
  EXPECT_EQ(policy.update(at_rtt(10)), 26);
}

TEST(VegasPolicy, ClampsEstimateBeforeSmoothing) {
  VegasPolicy policy({.min = 1, .max = 22, .initial = 20}, {.smoothing = 0.5});
  set_baseline_10ms(policy);
  // L' = 26 clamped to max 22 first, as Netflix does: L = 0.5 * 20 + 0.5 * 22 = 21.
  EXPECT_EQ(policy.update(at_rtt(10)), 21);
}

TEST(VegasPolicy, StepsByLog10FromAThousandToo) {
  VegasPolicy policy({.min = 1, .max = 50000, .initial = 1000});
  set_baseline_10ms(policy);
  // lg(1000) = 3: queue 0 <= 3, L = 1000 + 6 * 3 = 1018 (not 1186, as by
  // floor(sqrt 1000) = 31 before Netflix's 3fbad85).
  EXPECT_EQ(policy.update(at_rtt(10)), 1018);
  // A drop takes lg(L) = 3 off.
  Window dropped = at_rtt(10);
  dropped.dropped = 1;
  EXPECT_EQ(policy.update(dropped), 1015);
}

TEST(VegasPolicy, HonoursAlphaAndBetaFactors) {
  VegasPolicy policy(kBounds, {.alpha_factor = 2, .beta_factor = 4});
  set_baseline_10ms(policy);
  // queue 0: L = 20 + 4 * 1 = 24.
  EXPECT_EQ(policy.update(at_rtt(10)), 24);
  // rtt 11.5 ms: queue = ceil(24 * 1.5/11.5) = ceil(3.13) = 4, not < alpha 2,
  // not > beta 4: hold.
  EXPECT_EQ(policy.update(at_rtt(11.5)), 24);
  // rtt 13 ms: queue = ceil(24 * 3/13) = ceil(5.54) = 6 > beta 4: 24 - 1 = 23.
  EXPECT_EQ(policy.update(at_rtt(13)), 23);
}

// Feeds a policy with probe_multiplier 1 at L = 20 (so the probe comes after
// ceil(U[0.5, 1) * 20), i.e. 10 to 20, windows with ok calls): first a 10 ms
// baseline, then app-limited windows at 30 ms, which hold the limit and do
// not lower the baseline. Returns the window (counting from 1) in which the
// baseline became 30 ms: the probe.
int probe_window(double seed) {
  VegasPolicy policy(kBounds, {.probe_multiplier = 1, .probe_seed = seed});
  policy.update(at_rtt(10));
  for (int window = 2; window <= 40; ++window) {
    EXPECT_EQ(policy.update(at_rtt(30, 0)), 20);
    if (policy.rtt_noload_ns() == 30 * kNsPerMs) return window;
  }
  return -1;
}

TEST(VegasPolicy, ProbesAfterJitteredMultipleOfLimit) {
  std::set<int> seen;
  for (int seed = 0; seed < 32; ++seed) {
    const int window = probe_window(seed);
    EXPECT_GE(window, 10) << "seed " << seed;
    EXPECT_LE(window, 20) << "seed " << seed;
    seen.insert(window);
  }
  // The jitter does spread the probes ...
  EXPECT_GE(seen.size(), 3u);
  // ... and a seed always gives the same one.
  EXPECT_EQ(probe_window(5), probe_window(5));
}

TEST(VegasPolicy, EachProbeDrawsItsOwnJitter) {
  // The windows from one probe to the next, for the second probe of seeds
  // 0 to 31 (probe_multiplier 1, L = 20: 10 to 20 windows; app-limited at
  // 30 ms, but for a first window at 10 ms that puts the baseline back).
  // Drawn again at each probe, not once: the second interval is another
  // draw than the first, so the two differ on most seeds.
  std::set<int> second;
  int differ = 0;
  for (int seed = 0; seed < 32; ++seed) {
    VegasPolicy policy(kBounds, {.probe_multiplier = 1, .probe_seed = static_cast<double>(seed)});
    policy.update(at_rtt(10));
    int windows = 1, probes = 0;  // the probe counts every window since the last
    int first = 0;
    while (probes < 2 && windows < 100) {
      ++windows;
      policy.update(at_rtt(30, 0));
      if (policy.rtt_noload_ns() != 30 * kNsPerMs) continue;
      if (++probes == 1) first = windows;
      if (probes == 2) {
        EXPECT_GE(windows, 10) << "seed " << seed;
        EXPECT_LE(windows, 20) << "seed " << seed;
        second.insert(windows);
        if (windows != first) ++differ;
      }
      windows = 1;
      policy.update(at_rtt(10));  // lower: the baseline again, and holds
    }
    EXPECT_EQ(probes, 2) << "seed " << seed;
  }
  EXPECT_GE(second.size(), 3u);
  EXPECT_GE(differ, 16);
}

TEST(VegasPolicy, TheProbeWindowHolds) {
  // Saturated at 12 ms over a 10 ms baseline: queue = ceil(20 * 2/12) = 4,
  // between alpha and beta, so every window holds; so does the probe's,
  // though against the 12 ms it takes for the baseline the queue is 0
  // (which would grow the limit by beta, to 26).
  VegasPolicy policy(kBounds, {.probe_multiplier = 1});
  set_baseline_10ms(policy);
  for (int i = 0; i < 40 && policy.rtt_noload_ns() != 12 * kNsPerMs; ++i) {
    ASSERT_EQ(policy.update(at_rtt(12)), 20);
  }
  EXPECT_EQ(policy.rtt_noload_ns(), 12 * kNsPerMs);
}

TEST(VegasPolicy, ProbeCopiesCurrentRttIntoBaseline) {
  // Netflix issue 165: a probe under load takes the loaded rtt as the
  // no-load baseline, after which 3x the true baseline reads as no queue.
  VegasPolicy policy(kBounds, {.probe_multiplier = 1});
  policy.update(at_rtt(10));
  while (policy.rtt_noload_ns() != 30 * kNsPerMs) {
    ASSERT_EQ(policy.update(at_rtt(30, 0)), 20);
  }
  // Saturated at 30 ms: queue = ceil(20 * (1 - 30/30)) = 0: L = 20 + 6 = 26.
  EXPECT_EQ(policy.update(at_rtt(30)), 26);
}

TEST(VegasPolicy, ZeroProbeMultiplierNeverProbes) {
  VegasPolicy policy(kBounds, {.probe_multiplier = 0});
  set_baseline_10ms(policy);
  for (int i = 0; i < 2000; ++i) policy.update(at_rtt(30, 0));
  EXPECT_EQ(policy.rtt_noload_ns(), 10 * kNsPerMs);
}

TEST(VegasPolicy, HoldsOnWindowWithoutSamples) {
  VegasPolicy policy(kBounds);
  // Only ignored completions: nothing learned, not even a baseline.
  EXPECT_EQ(policy.update(make_window({.ignored = 50, .max_inflight = 20})), 20);
  EXPECT_EQ(policy.update(make_window({})), 20);
  EXPECT_EQ(policy.rtt_noload_ns(), 0);
}

TEST(VegasPolicy, TakesZeroLatencyAsOneNanosecond) {
  VegasPolicy policy(kBounds);
  // A zero mean (a coarse clock) is taken as 1 ns: the baseline is 1 ns.
  EXPECT_EQ(policy.update(make_window({.ok = 10, .rtt_ms = 0, .max_inflight = 100})), 20);
  EXPECT_EQ(policy.rtt_noload_ns(), 1);
  // Again 1 ns: queue = ceil(20 * (1 - 1/1)) = 0: L = 26, where 0/0 would be nan.
  EXPECT_EQ(policy.update(make_window({.ok = 10, .rtt_ms = 0, .max_inflight = 100})), 26);
}

TEST(VegasPolicy, StaysWithinBounds) {
  VegasPolicy policy({.min = 18, .max = 30, .initial = 20});
  set_baseline_10ms(policy);
  // 26, then 32 clamped to 30.
  EXPECT_EQ(policy.update(at_rtt(10)), 26);
  EXPECT_EQ(policy.update(at_rtt(10)), 30);
  EXPECT_EQ(policy.update(at_rtt(10)), 30);
  // Drops: 29, 28, ..., 18, then 17 clamped to 18.
  for (int i = 0; i < 11; ++i) policy.update(dropping_at_rtt(10));
  EXPECT_EQ(policy.limit(), 19);
  EXPECT_EQ(policy.update(dropping_at_rtt(10)), 18);
  EXPECT_EQ(policy.update(dropping_at_rtt(10)), 18);
}

TEST(VegasPolicy, RefusesOutOfRangeParams) {
  EXPECT_EQ(param_error_of([] { VegasPolicy::parse_params({{"smoothing", 0}}); }),
            "smoothing = 0: must be in (0, 1]");
  EXPECT_EQ(param_error_of([] { VegasPolicy::parse_params({{"probe_multiplier", 2.5}}); }),
            "probe_multiplier = 2.5: must be an integer >= 0");
  EXPECT_EQ(param_error_of([] { VegasPolicy::parse_params({{"probe_seed", -1}}); }),
            "probe_seed = -1: must be an integer in [0, 4294967295]");
  EXPECT_EQ(param_error_of([] { VegasPolicy::parse_params({{"probe_seed", 4294967296.0}}); }),
            "probe_seed = 4294967296: must be an integer in [0, 4294967295]");
  EXPECT_EQ(param_error_of([] { VegasPolicy::parse_params({{"alpha_factor", 0}}); }),
            "alpha_factor = 0: must be an integer >= 1");
  EXPECT_EQ(param_error_of([] { VegasPolicy::parse_params({{"beta_factor", 2}}); }),
            "beta_factor = 2: must be >= alpha_factor (3)");
  EXPECT_EQ(param_error_of([] {
              VegasPolicy::parse_params({{"smoothing", std::numeric_limits<double>::quiet_NaN()}});
            }),
            "smoothing = nan: must be finite");
  EXPECT_EQ(param_error_of([] { VegasPolicy::parse_params({{"probeMultiplier", 30}}); }),
            "unknown parameter 'probeMultiplier' for policy 'vegas' "
            "(known: alpha_factor, beta_factor, probe_multiplier, probe_seed, smoothing)");
  // The same rules hold for Params built in code.
  EXPECT_EQ(param_error_of([] { VegasPolicy policy(kBounds, {.alpha_factor = 7}); }),
            "beta_factor = 6: must be >= alpha_factor (7)");
}

TEST(VegasPolicy, ReadsParams) {
  const VegasPolicy::Params params = VegasPolicy::parse_params({{"smoothing", 0.5},
                                                                {"probe_multiplier", 0},
                                                                {"probe_seed", 7},
                                                                {"alpha_factor", 2},
                                                                {"beta_factor", 2}});
  EXPECT_EQ(params.smoothing, 0.5);
  EXPECT_EQ(params.probe_multiplier, 0);
  EXPECT_EQ(params.probe_seed, 7);
  EXPECT_EQ(params.alpha_factor, 2);
  EXPECT_EQ(params.beta_factor, 2);
  // Absent keys keep their defaults.
  EXPECT_EQ(VegasPolicy::parse_params({{"smoothing", 0.5}}).probe_multiplier, 30);
}

}  // namespace
}  // namespace bulkhead::policies
