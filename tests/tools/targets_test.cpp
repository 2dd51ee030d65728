// The targets docs/policies.md says the default policy (balance) meets on
// the shipped scenarios, at each scenario's own seed (and, for the goodput
// floor, five more). The simulator runs on a virtual clock, so these are
// results, not timings: the same on every machine, and a policy change that
// gives one of them up fails here rather than in a table nobody re-reads.
// (The targets balance does not meet yet are in docs/policies.md, "Where
// balance stands against the targets".)
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/sim/report.hpp"

namespace bulkhead::sim {
namespace {

constexpr const char* kPolicy = "balance";

Scenario shipped(const std::string& name) {
  return load_scenario_file(std::string(BULKHEAD_SOURCE_DIR) + "/scenarios/" + name + ".toml");
}

ScenarioReport run(const Scenario& scenario, bool references) {
  RunOptions options;
  options.policies = {kPolicy};
  options.references = references;
  options.jobs = 2;
  return run_scenario(scenario, options);
}

// Throws when the report has no such run: the test fails there (gtest
// reports the exception) instead of reading another run's figures.
const Summary& summary_of(const ScenarioReport& r, const std::string& kind) {
  for (const Summary& s : r.summaries) {
    if (s.kind == kind) return s;
  }
  throw std::runtime_error("no " + kind + " run in the report");
}

// The same, by label ("vegas").
const Summary& labelled(const ScenarioReport& r, const std::string& label) {
  for (const Summary& s : r.summaries) {
    if (s.label == label) return s;
  }
  throw std::runtime_error("no " + label + " run in the report");
}

// Every scenario in scenarios/.
std::vector<std::filesystem::path> shipped_files() {
  std::vector<std::filesystem::path> out;
  for (const auto& entry : std::filesystem::directory_iterator(BULKHEAD_SOURCE_DIR "/scenarios")) {
    if (entry.path().extension() == ".toml") out.push_back(entry.path());
  }
  return out;
}

TEST(SimTargets, ServesThreeTimesOverloadNearCapacityWithAShortTail) {
  const ScenarioReport r = run(shipped("steady-overload"), false);
  const Summary& b = summary_of(r, "policy");
  EXPECT_GE(b.goodput_pct, 95.0);
  EXPECT_LE(b.p99_vs_noload, 2.0);
}

TEST(SimTargets, StaysWithinTenPercentOfTheBestStaticLimitWhereNothingChanges) {
  for (const char* name : {"steady-overload", "latency-noise", "many-processes"}) {
    const ScenarioReport r = run(shipped(name), true);
    const double best_static = summary_of(r, "static-best").goodput_per_s;
    EXPECT_GE(summary_of(r, "policy").goodput_per_s, 0.9 * best_static) << name;
  }
}

TEST(SimTargets, HasAShorterTailThanTheBestStaticLimitWhereCapacityChanges) {
  for (const char* name : {"capacity-drop", "capacity-grows", "slow-calls"}) {
    const ScenarioReport r = run(shipped(name), true);
    EXPECT_LT(summary_of(r, "policy").p99_ms, summary_of(r, "static-best").p99_ms) << name;
  }
}

// With one limit for the host, no shipped scenario loses more than 5% of
// what the dependency could serve: no collapse, whatever changes. On the
// six seeds scripts/sim-seeds.py compares policies over (each scenario's
// own, then raised by 100 to 500), not just the scenario's own: a collapse
// shows on a rare seed first (one of low-traffic-spike's lost 14 points
// before the app-limited hold, docs/policies.md). The worst of them
// serves 96.5% (slow-calls, seed 202); of thirty (offsets 0 to 2900),
// slow-calls serves 91.9% on seed 1002, under this target, where drains
// of a few calls of 160 ms misread the no-load latency (docs/policies.md,
// "Few calls a window"), and the other scenarios no less than 97.0% (outage,
// seed 2803): `bulkhead-sim run --policy balance` on a copy of each
// scenario with its seed raised, as scripts/sim-seeds.py makes them.
TEST(SimTargets, OneHostWideLimitServesAtLeast95PercentEverywhere) {
  int scenarios = 0;
  for (const std::filesystem::path& file : shipped_files()) {
    Scenario s = load_scenario_file(file.string());
    if (s.limiter != LimiterMode::kHost) continue;
    const std::uint64_t own_seed = s.seed;
    for (std::uint64_t offset = 0; offset <= 500; offset += 100) {
      s.seed = own_seed + offset;
      const ScenarioReport r = run(s, false);
      EXPECT_GE(summary_of(r, "policy").goodput_pct, 95.0) << file.filename() << ", seed " << s.seed;
    }
    ++scenarios;
  }
  EXPECT_GE(scenarios, 10);
}

// No reference policy serves more than balance with a p99 no worse, on any
// shipped scenario at its own seed: the issue's "goodput at least the best
// reference's and p99 no worse", read as no loss on both counts (the
// reference with the most goodput buys its last tenths with a deep queue:
// where it serves more, AIMD and Gradient2 at 1.1 to 4 times balance's
// p99 on the table in docs/policies.md). Tight in steady-overload, where
// gradient serves 0.1 calls/s fewer at a p99 of 1.11x against 1.10x;
// over other seeds gradient and vegas still win there and in
// small-dependency on some (scripts/sim-seeds.py).
TEST(SimTargets, NoReferencePolicyBeatsItOnBothCounts) {
  int scenarios = 0;
  for (const std::filesystem::path& file : shipped_files()) {
    RunOptions options;
    options.references = false;  // every registered policy, no sweep
    options.jobs = 2;
    const ScenarioReport r = run_scenario(load_scenario_file(file.string()), options);
    const Summary& ours = labelled(r, kPolicy);
    for (const Summary& s : r.summaries) {
      EXPECT_FALSE(s.goodput_per_s > ours.goodput_per_s && s.p99_ms <= ours.p99_ms)
          << file.filename() << ": " << s.label << " serves " << s.goodput_per_s << "/s at p99 " << s.p99_ms
          << " ms, balance " << ours.goodput_per_s << "/s at " << ours.p99_ms << " ms";
    }
    ++scenarios;
  }
  EXPECT_GE(scenarios, 14);
}

// After 20 s in which every call timed out, the limit is back to the 24
// calls the dependency then has in flight (Little's law) within 5 s, and
// the run serves over 90% of what it could. Until the drain the drops
// called stopped waiting for latency under the target they had cut, the
// limit sat at 1 for 17 s and the run served 52%.
TEST(SimTargets, TheLimitComesBackWithinSecondsOfAnOutage) {
  const ScenarioReport r = run(shipped("outage"), false);
  EXPECT_GE(summary_of(r, "policy").goodput_pct, 90.0);
  const RunResult& balance = r.runs.front();
  ASSERT_EQ(balance.label, kPolicy);
  double limit_at_45s = 0;
  for (const TickRow& row : balance.series) {
    if (row.t_ns <= 45'000'000'000) limit_at_45s = row.limit;
  }
  EXPECT_GE(limit_at_45s, 24);
}

// docs/config.md, "Choosing a policy": where every process (every host)
// limits one dependency on its own, balance's drains adopt the others'
// queue and the limits ratchet until calls time out. The shipped scenario
// runs balance as such hosts should configure it, with other_hosts = 1:
// latency every call has in common (the spread p50 - p10 as it was) is
// the others' queue, and is shed. That holds all the goodput with a
// shorter tail than vegas, the reference best there; so does a bound on
// the baseline at twice the healthy p50 (28 ms for 20 ms exponential
// service, whose p50 is 13.9 ms) instead.
class SharedDependency : public ::testing::Test {
 protected:
  ScenarioReport run_with(const Scenario& scenario) const { return run_scenario(scenario, options_); }
  // balance's p99 under 1.5x no-load and under vegas's, with all of
  // vegas's goodput (within a tenth of a point).
  static void expect_a_shorter_tail_than_vegas(const ScenarioReport& r) {
    const Summary& b = labelled(r, kPolicy);
    const Summary& vegas = labelled(r, "vegas");
    EXPECT_LT(b.p99_vs_noload, 1.5);
    EXPECT_LT(b.p99_vs_noload, vegas.p99_vs_noload);
    EXPECT_GE(b.goodput_pct, vegas.goodput_pct - 0.1);
  }

  Scenario scenario_ = shipped("many-processes-per-process");
  RunOptions options_ = [] {
    RunOptions o;
    o.policies = {kPolicy, "vegas"};
    o.references = false;
    o.jobs = 2;
    return o;
  }();
};

TEST_F(SharedDependency, OtherHostsKeepsTheLimitersFromRatcheting) {
  ASSERT_EQ(scenario_.policy_params[kPolicy]["other_hosts"], 1);
  expect_a_shorter_tail_than_vegas(run_with(scenario_));
  scenario_.policy_params[kPolicy]["other_hosts"] = 0;
  EXPECT_GT(labelled(run_with(scenario_), kPolicy).p99_vs_noload, 3.0);
}

// A ratchet can take longer than the scenario's minute: a version that let
// drains for latency stuck over the target adopt the whole rise when it
// stayed (to tell a longer network path) was at 2.2x at 60 s and at 5.1x
// with calls timing out at 300 s (docs/balance-record.md). Four minutes: without
// other_hosts, 5.4x and 96.7%.
TEST_F(SharedDependency, OtherHostsHoldsTheTailOverFourMinutes) {
  scenario_.duration_s = 240;
  options_.policies = {kPolicy};
  const ScenarioReport report = run_with(scenario_);
  const Summary& b = labelled(report, kPolicy);
  EXPECT_LT(b.p99_vs_noload, 2.0);
  EXPECT_GE(b.goodput_pct, 99.0);
}

TEST_F(SharedDependency, ABoundedBaselineKeepsTheLimitersFromRatchetingToo) {
  scenario_.policy_params[kPolicy]["other_hosts"] = 0;
  scenario_.policy_params[kPolicy]["baseline_max_ms"] = 28;
  expect_a_shorter_tail_than_vegas(run_with(scenario_));
}

}  // namespace
}  // namespace bulkhead::sim
