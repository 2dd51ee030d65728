// The targets docs/policies.md says the default policy (balance) meets on
// the shipped scenarios, at each scenario's own seed. The simulator runs on
// a virtual clock, so these are results, not timings: the same on every
// machine, and a policy change that gives one of them up fails here rather
// than in a table nobody re-reads. (The targets balance does not meet yet
// are in docs/policies.md, "Where balance stands against the targets".)
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>

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
  for (const char* name : {"capacity-drop", "capacity-grows"}) {
    const ScenarioReport r = run(shipped(name), true);
    EXPECT_LT(summary_of(r, "policy").p99_ms, summary_of(r, "static-best").p99_ms) << name;
  }
}

// With one limit for the host, no shipped scenario loses more than 5% of
// what the dependency could serve (the worst on the table in
// docs/policies.md, outage, serves 98.1%; slow-ramp 98.3%): no collapse,
// whatever changes.
TEST(SimTargets, OneHostWideLimitServesAtLeast95PercentEverywhere) {
  int scenarios = 0;
  for (const auto& entry : std::filesystem::directory_iterator(BULKHEAD_SOURCE_DIR "/scenarios")) {
    if (entry.path().extension() != ".toml") continue;
    const Scenario s = load_scenario_file(entry.path().string());
    if (s.limiter != LimiterMode::kHost) continue;
    const ScenarioReport r = run(s, false);
    EXPECT_GE(summary_of(r, "policy").goodput_pct, 95.0) << entry.path().filename();
    ++scenarios;
  }
  EXPECT_GE(scenarios, 10);
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
// queue and the limits ratchet until calls time out; a bound on its
// baseline at twice the healthy p50 (28 ms for 20 ms exponential service,
// whose p50 is 13.9 ms) sheds that queue, with no less goodput and a
// shorter tail than vegas, the reference best there.
TEST(SimTargets, ABoundedBaselineKeepsLimitersThatShareADependencyFromRatcheting) {
  Scenario scenario = shipped("many-processes-per-process");
  RunOptions options;
  options.policies = {kPolicy, "vegas"};
  options.references = false;
  options.jobs = 2;
  const ScenarioReport unbounded = run_scenario(scenario, options);
  scenario.policy_params[kPolicy]["baseline_max_ms"] = 28;
  const ScenarioReport bounded = run_scenario(scenario, options);
  const auto labelled = [](const ScenarioReport& r, const std::string& label) -> const Summary& {
    for (const Summary& s : r.summaries) {
      if (s.label == label) return s;
    }
    throw std::runtime_error("no " + label + " run in the report");
  };
  EXPECT_GT(labelled(unbounded, kPolicy).p99_vs_noload, 3.0);
  const Summary& b = labelled(bounded, kPolicy);
  const Summary& vegas = labelled(bounded, "vegas");
  EXPECT_LT(b.p99_vs_noload, 1.5);
  EXPECT_LT(b.p99_vs_noload, vegas.p99_vs_noload);
  EXPECT_GE(b.goodput_pct, vegas.goodput_pct - 0.1);
}

}  // namespace
}  // namespace bulkhead::sim
