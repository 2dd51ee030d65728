// Whole scenarios: the output is a function of the inputs alone, and the
// metrics mean what docs/simulator.md says.
#include "tools/sim/report.hpp"

#include "policies/policy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace bulkhead::sim {
namespace {

// Small but with everything in it: a worker ramp, a latency change, a
// rate step, retries, several processes.
Scenario busy_scenario(std::uint64_t seed, const char* limiter = "host") {
  return parse_scenario("duration_s = 12\nseed = " + std::to_string(seed) +
                            "\n[dependency]\nworkers = 8\nbase_latency_ms = 10\nservice = \"lognormal\"\n"
                            "sigma = 0.8\n[[dependency.change]]\nat_s = 3\nworkers = 2\nramp_s = 1\n"
                            "[[dependency.change]]\nat_s = 6\nworkers = 8\nbase_latency_ms = 15\n"
                            "[clients]\nprocesses = 3\nlimiter = \"" +
                            limiter +
                            "\"\nrate = 900\ntimeout_ms = 200\nretries = 1\nretry_delay_ms = 20\n"
                            "[[clients.change]]\nat_s = 9\nrate = 300\n",
                        "busy.toml");
}

// Every byte the run command writes for one scenario.
std::string everything(const ScenarioReport& r) {
  return format_table(r) + format_csv(r) + format_json({r}) + gnuplot_script(r, "out.png");
}

TEST(SimReport, TwoRunsGiveTheSameBytes) {
  for (const char* limiter : {"host", "per-process"}) {
    const Scenario s = busy_scenario(42, limiter);
    RunOptions one;
    RunOptions two;
    two.jobs = 2;  // threads change the order runs finish in, not the output
    EXPECT_EQ(everything(run_scenario(s, one)), everything(run_scenario(s, two))) << limiter;
  }
}

TEST(SimReport, AShippedScenarioGivesTheSameBytesTwice) {
  const Scenario s = load_scenario_file(BULKHEAD_SOURCE_DIR "/scenarios/capacity-drop.toml");
  RunOptions options;
  options.jobs = 2;
  EXPECT_EQ(everything(run_scenario(s, options)), everything(run_scenario(s, options)));
}

TEST(SimReport, DifferentSeedsGiveDifferentRuns) {
  RunOptions options;
  options.policies = {"aimd"};
  const ScenarioReport a = run_scenario(busy_scenario(1), options);
  const ScenarioReport b = run_scenario(busy_scenario(2), options);
  EXPECT_NE(format_csv(a), format_csv(b));
  EXPECT_NE(a.summaries[0].ok, b.summaries[0].ok);
}

TEST(SimReport, AddingAPolicyChangesNoOtherRun) {
  const Scenario s = busy_scenario(5);
  RunOptions alone;
  alone.policies = {"gradient2"};
  alone.references = false;
  RunOptions with_others = alone;
  with_others.policies = {"aimd", "gradient2"};
  const ScenarioReport a = run_scenario(s, alone);
  const ScenarioReport b = run_scenario(s, with_others);
  ASSERT_EQ(a.runs.size(), 1u);
  ASSERT_EQ(b.runs.size(), 2u);
  EXPECT_EQ(a.summaries[0].ok, b.summaries[1].ok);
  EXPECT_EQ(a.summaries[0].p99_ms, b.summaries[1].p99_ms);
}

TEST(SimReport, RunsArePoliciesThenTheTwoReferences) {
  RunOptions options;
  options.policies = {"aimd", "gradient2"};
  const ScenarioReport r = run_scenario(busy_scenario(3), options);
  ASSERT_EQ(r.summaries.size(), 4u);
  EXPECT_EQ(r.summaries[0].label, "aimd");
  EXPECT_EQ(r.summaries[1].label, "gradient2");
  EXPECT_EQ(r.summaries[2].label, "none");
  EXPECT_EQ(r.summaries[2].kind, "none");
  EXPECT_FALSE(r.summaries[2].oscillation.has_value());
  const Summary& best = r.summaries[3];
  EXPECT_EQ(best.kind, "static-best");
  ASSERT_TRUE(best.static_limit.has_value());
  EXPECT_EQ(best.label, "static-best(L=" + std::to_string(*best.static_limit) + ")");
  EXPECT_EQ(*best.oscillation, 0);
  // The best is the lowest p99 among limits within 1% of the most goodput.
  double most = 0;
  for (const SweepPoint& p : r.sweep) most = std::max(most, p.goodput_per_s);
  for (const SweepPoint& p : r.sweep) {
    if (p.goodput_per_s >= 0.99 * most) {
      EXPECT_GE(p.p99_ms, best.p99_ms) << "L=" << p.limit;
    }
  }
  EXPECT_NE(format_table(r).find("static-best(L="), std::string::npos);
}

TEST(SimReport, SweepHasTheGridAndTheWorkerCounts) {
  const Scenario s = busy_scenario(1);
  const std::vector<std::uint32_t> limits = sweep_limits(s, Timeline(s));
  for (std::uint32_t want : {1u, 2u, 8u, 16u, 64u}) {
    EXPECT_NE(std::find(limits.begin(), limits.end(), want), limits.end()) << want;
  }
  EXPECT_EQ(limits.back(), 64u);  // 8 x the most workers
  EXPECT_TRUE(std::is_sorted(limits.begin(), limits.end()));
}

// Per limiter: in per-process mode each worker count the scenario names
// is divided by the processes, rounded both ways (20 workers over 4 is 5;
// 26 is 6 or 7, and 7 is no grid point).
TEST(SimReport, SweepHasEveryWorkerCountPerLimiter) {
  const auto limits_of = [](const char* limiter) {
    const Scenario s = parse_scenario(
        std::string("duration_s = 10\n[dependency]\nworkers = 20\nbase_latency_ms = 10\n"
                    "[[dependency.change]]\nat_s = 5\nworkers = 26\n[clients]\nprocesses = 4\nlimiter = \"") +
            limiter + "\"\nrate = 3000\n",
        "w.toml");
    return sweep_limits(s, Timeline(s));
  };
  const auto has = [](const std::vector<std::uint32_t>& limits, std::uint32_t want) {
    return std::find(limits.begin(), limits.end(), want) != limits.end();
  };
  const std::vector<std::uint32_t> per_process = limits_of("per-process");
  for (std::uint32_t want : {5u, 6u, 7u}) EXPECT_TRUE(has(per_process, want)) << want;
  EXPECT_FALSE(has(per_process, 20u));
  EXPECT_EQ(per_process.back(), 45u);  // the grid up to 8 x 26 / 4 = 52
  const std::vector<std::uint32_t> host = limits_of("host");
  for (std::uint32_t want : {20u, 26u}) EXPECT_TRUE(has(host, want)) << want;
}

// The best static limit: of the limits within 1% of the most goodput, the
// one with the lowest p99, and of equal p99s the lowest limit. At half
// load of constant 20 ms calls every limit over the calls ever in flight
// runs the very same run, p99 exactly 20 ms.
TEST(SimReport, TheBestStaticLimitIsTheLowestOfEqualP99s) {
  const Scenario s = parse_scenario(
      "duration_s = 10\nseed = 3\n[dependency]\nworkers = 16\nbase_latency_ms = 20\nservice = \"constant\"\n"
      "[clients]\nrate = 400\ntimeout_ms = 500\n",
      "tie.toml");
  RunOptions options;
  options.policies = {"aimd"};
  const ScenarioReport r = run_scenario(s, options);
  const Summary& best = r.summaries.back();
  ASSERT_EQ(best.kind, "static-best");
  double most = 0;
  for (const SweepPoint& p : r.sweep) most = std::max(most, p.goodput_per_s);
  for (const SweepPoint& p : r.sweep) {
    if (p.limit < *best.static_limit) {
      EXPECT_TRUE(p.goodput_per_s < 0.99 * most || p.p99_ms > best.p99_ms) << p.limit;
    }
  }
  EXPECT_LT(*best.static_limit, 32u);
  EXPECT_EQ(best.p99_ms, 20);
}

// Between the grid's neighbours of its best, the sweep tries finer limits:
// constant 20 ms calls with 30 ms of network take 40 in flight to keep 16
// workers busy, which the grid (32, 45) misses and the finer steps find.
TEST(SimReport, TheSweepRefinesAroundTheGridsBest) {
  const Scenario s = parse_scenario(
      "duration_s = 10\nseed = 3\n[dependency]\nworkers = 16\nbase_latency_ms = 20\nservice = \"constant\"\n"
      "network_ms = 30\n[clients]\nrate = 2400\ntimeout_ms = 500\n",
      "fine.toml");
  RunOptions options;
  options.policies = {"aimd"};
  const ScenarioReport r = run_scenario(s, options);
  const std::uint32_t best = *r.summaries.back().static_limit;
  EXPECT_GE(best, 40u);
  EXPECT_LT(best, 45u);
}

// A hand-made run of a scenario with 16 workers at 3x overload and a drop
// to 4 workers at 5 s: the ideal concurrency is 16, then 4.
struct SimSettle : ::testing::Test {
  Scenario s = parse_scenario(
      "duration_s = 10\n[dependency]\nworkers = 16\nbase_latency_ms = 20\n[[dependency.change]]\n"
      "at_s = 5\nworkers = 4\n[clients]\nrate = 2400\n",
      "settle.toml");
  Timeline timeline{s};
  RunResult run;

  SimSettle() {
    run.label = "hand";
    run.initial_limit = 20;
    run.duration_ns = timeline.duration_ns();
  }
  // Ticks 1..100 (every 100 ms); `limit_at(k)` is the limit published at tick k.
  template <typename F>
  void publish(F limit_at) {
    for (int k = 1; k <= 100; ++k) {
      TickRow row;
      row.t_ns = static_cast<std::uint64_t>(k) * 100'000'000;
      row.limit = limit_at(k);
      run.series.push_back(row);
    }
  }
};

TEST_F(SimSettle, SettleIsTheTimeUntilTheLimitStaysInBandForASecond) {
  publish([](int k) { return k < 50 ? 16.0 : k < 60 ? 20.0 : 4.0; });
  const Summary m = summarize(timeline, run);
  ASSERT_EQ(m.settle_s.size(), 2u);
  // 20 at the start is outside [12.8, 19.2]; 16 from the first tick on.
  ASSERT_TRUE(m.settle_s[0].has_value());
  EXPECT_DOUBLE_EQ(*m.settle_s[0], 0.1);
  // After the drop at 5 s: 20 until 6 s, then 4 for good.
  ASSERT_TRUE(m.settle_s[1].has_value());
  EXPECT_NEAR(*m.settle_s[1], 1.0, 1e-9);
}

TEST_F(SimSettle, InBandForLessThanASecondIsNotSettled) {
  // In band for 0.9 s after the drop, out again, then in band only from
  // 9.5 s: too late to hold a second before the run ends.
  publish([](int k) { return k < 50 ? 30.0 : k < 60 ? 4.0 : k < 95 ? 8.0 : 4.0; });
  const Summary m = summarize(timeline, run);
  EXPECT_FALSE(m.settle_s[0].has_value());
  EXPECT_FALSE(m.settle_s[1].has_value());
}

TEST_F(SimSettle, TheLimitInForceAtAChangeCounts) {
  // 16 from before the start; 4 published by the tick at the drop itself.
  run.initial_limit = 16;
  publish([](int k) { return k < 50 ? 16.0 : 4.0; });
  const Summary m = summarize(timeline, run);
  ASSERT_TRUE(m.settle_s[0].has_value());
  EXPECT_EQ(*m.settle_s[0], 0);
  ASSERT_TRUE(m.settle_s[1].has_value());
  EXPECT_EQ(*m.settle_s[1], 0);
}

TEST_F(SimSettle, ASecondInBandExactlyIsSettled) {
  // In band (4) from the drop at 5 s through the tick at 6 s, then out.
  publish([](int k) { return k < 50 ? 30.0 : k <= 60 ? 4.0 : 30.0; });
  const Summary m = summarize(timeline, run);
  ASSERT_TRUE(m.settle_s[1].has_value());
  EXPECT_EQ(*m.settle_s[1], 0);
}

TEST_F(SimSettle, ATickAtTheNextChangeBelongsToTheNextPhase) {
  // 16 from 4 s through the tick at 5 s, the instant of the drop: in the
  // first phase only 0.9 s of it.
  publish([](int k) { return k < 40 ? 30.0 : k <= 50 ? 16.0 : 30.0; });
  const Summary m = summarize(timeline, run);
  EXPECT_FALSE(m.settle_s[0].has_value());
}

TEST(SimSettleBand, TheBandsEdgeIsInIt) {
  // 10 workers of 125 ms at 2x: an ideal of exactly 10, a band of [8, 12].
  const Scenario s = parse_scenario(
      "duration_s = 5\n[dependency]\nworkers = 10\nbase_latency_ms = 125\n[clients]\nrate = 160\n", "b.toml");
  const Timeline timeline(s);
  ASSERT_EQ(timeline.ideal_concurrency(0), 10);
  for (const double limit : {8.0, 12.0}) {
    RunResult run;
    run.initial_limit = limit;
    run.duration_ns = timeline.duration_ns();
    for (int k = 1; k <= 50; ++k) run.series.push_back({.t_ns = k * 100'000'000ull, .limit = limit});
    const Summary m = summarize(timeline, run);
    ASSERT_TRUE(m.settle_s[0].has_value()) << limit;
    EXPECT_EQ(*m.settle_s[0], 0);
  }
}

TEST(SimSummary, QuantilesAreTheSamplesAtTheirRank) {
  // Three calls of 1, 2 and 3 ms: the p50 is the second (rank ceil(1.5)),
  // the p99 and p999 the third.
  const Scenario s = parse_scenario(
      "duration_s = 1\n[dependency]\nworkers = 1\nbase_latency_ms = 1\n[clients]\nrate = 10\n", "q.toml");
  RunResult run;
  run.duration_ns = Timeline(s).duration_ns();
  run.latencies_ns = {1'000'000, 2'000'000, 3'000'000};
  const Summary m = summarize(Timeline(s), run);
  EXPECT_EQ(m.p50_ms, 2);
  EXPECT_EQ(m.p99_ms, 3);
  EXPECT_EQ(m.p999_ms, 3);
}

TEST(SimSummary, GoodputIsAShareOfWhatCouldBeServed) {
  // Capacity 800/s, 400/s offered: serving all 400 is 100%, not 50%.
  const Scenario s = parse_scenario(
      "duration_s = 10\n[dependency]\nworkers = 16\nbase_latency_ms = 20\n[clients]\nrate = 400\n", "g.toml");
  const Timeline timeline(s);
  RunResult run;
  run.duration_ns = timeline.duration_ns();
  run.ok = 4000;
  EXPECT_NEAR(summarize(timeline, run).goodput_pct, 100, 1e-9);
}

TEST_F(SimSettle, OscillationCountsTheMoveFromTheInitialLimit) {
  publish([](int) { return 10.0; });  // 20 before the first tick
  const Summary m = summarize(timeline, run);
  EXPECT_NEAR(*m.oscillation, (10.0 / 100) / 10, 1e-12);
}

TEST_F(SimSettle, OscillationIsMeanMoveOverMeanLimit) {
  publish([](int k) { return k % 2 == 1 ? 20.0 : 10.0; });  // 20, 10, 20, ...
  const Summary m = summarize(timeline, run);
  // Moves: 0 from the initial 20, then 10 at each of the other 99 ticks;
  // mean limit 15.
  EXPECT_NEAR(*m.oscillation, (99 * 10.0 / 100) / 15, 1e-12);
  EXPECT_NEAR(*m.mean_limit, 15, 1e-12);
}

// The series carries what the policy takes for the dependency's own latency:
// at 12% load of a constant 10 ms, 10 ms; nothing for a policy that keeps
// no baseline, nor for the references.
// A run's latencies are summarized and then let go: each was reserved for
// every call of the run (400 MB at the 5e7 calls a scenario may offer), and
// kept by ~50 runs of the static sweep they would take GBs.
TEST(SimReport, ARunsLatenciesAreLetGoOnceSummarized) {
  const ScenarioReport r = run_scenario(busy_scenario(9), RunOptions{});
  ASSERT_FALSE(r.runs.empty());
  for (const RunResult& run : r.runs) {
    EXPECT_GT(run.ok, 0u) << run.label;
    EXPECT_EQ(run.latencies_ns.capacity(), 0u) << run.label;
  }
}

// The sweep keeps no series; the run it chooses is run again for its own,
// which is the series of that static limit run on its own.
TEST(SimReport, TheStaticBestRunHasItsSeries) {
  const Scenario s = busy_scenario(9);
  const ScenarioReport r = run_scenario(s, RunOptions{});
  const Summary& best = r.summaries.back();
  ASSERT_EQ(best.kind, "static-best");
  control::LimitSettings settings = s.limits;
  settings.policy = "fixed";
  settings.bounds = {1, static_cast<double>(*best.static_limit), static_cast<double>(*best.static_limit)};
  const RunResult alone = simulate(s, r.timeline, make_workload(s, r.timeline), {best.label, true, settings});
  ASSERT_EQ(r.runs.back().series.size(), 120u);  // 12 s of 100-ms ticks
  ASSERT_EQ(alone.series.size(), r.runs.back().series.size());
  for (std::size_t i = 0; i < alone.series.size(); ++i) {
    EXPECT_EQ(r.runs.back().series[i].inflight, alone.series[i].inflight) << i;
    EXPECT_EQ(r.runs.back().series[i].goodput_per_s, alone.series[i].goodput_per_s) << i;
  }
}

TEST(SimReport, TheSeriesCarriesThePolicysBaseline) {
  const Scenario s = parse_scenario(
      "duration_s = 5\nseed = 3\n[dependency]\nworkers = 8\nbase_latency_ms = 10\nservice = \"constant\"\n"
      "[clients]\nrate = 100\ntimeout_ms = 200\n",
      "light.toml");
  RunOptions options;
  options.policies = {"balance", "aimd"};
  const ScenarioReport r = run_scenario(s, options);
  ASSERT_EQ(r.runs.size(), 4u);  // the two, none, static-best
  for (const RunResult& run : r.runs) {
    ASSERT_FALSE(run.series.empty());
    const double baseline_ms = run.series.back().baseline_ms;
    if (run.label == "balance") {
      EXPECT_NEAR(baseline_ms, 10, 0.6);  // a histogram bucket's midpoint: within 6%
    } else {
      EXPECT_EQ(baseline_ms, 0) << run.label;
    }
  }
}

TEST(SimReport, JsonAndCsvShapes) {
  RunOptions options;
  options.policies = {"aimd"};
  const ScenarioReport r = run_scenario(busy_scenario(9), options);
  const std::string csv = format_csv(r);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "t_s,policy,limit,inflight,queue,p50_ms,p99_ms,goodput_per_s,rejected_per_s,timeouts_per_s,"
            "baseline_ms");
  EXPECT_NE(csv.find("\n0.100,aimd,"), std::string::npos);
  EXPECT_NE(csv.find(",none,inf,"), std::string::npos);
  const std::string json = format_json({r});
  EXPECT_EQ(json.front(), '{');
  EXPECT_NE(json.find("\"name\": \"busy\""), std::string::npos);
  EXPECT_NE(json.find("\"kind\": \"static-best\""), std::string::npos);
  EXPECT_EQ(format_json({}), "{\n  \"scenarios\": []\n}\n");
}

// With nothing offered there is no share of it to print: "-", as for the
// other values that do not exist, and null in the JSON.
TEST(SimReport, NothingOfferedHasNoShareOfCapacity) {
  RunOptions options;
  options.policies = {"aimd"};
  const ScenarioReport r = run_scenario(
      parse_scenario("duration_s = 2\n[dependency]\nworkers = 4\nbase_latency_ms = 10\n[clients]\nrate = 0\n",
                     "idle.toml"),
      options);
  const std::string table = format_table(r);
  EXPECT_EQ(table.find("nan"), std::string::npos) << table;
  EXPECT_NE(table.find("\naimd                   0.0      -       -       -        -      -         0"),
            std::string::npos)
      << table;
  EXPECT_NE(format_json({r}).find("\"goodput_pct\": null"), std::string::npos);
}

// The scenario's own numbers are printed as given, not to six digits: a
// change at 0.1234567 s is not one at 0.123457 s.
TEST(SimReport, TheScenariosNumbersArePrintedExactly) {
  RunOptions options;
  options.policies = {"aimd"};
  options.references = false;
  const ScenarioReport r = run_scenario(
      parse_scenario("duration_s = 1.2345678\n[dependency]\nworkers = 4\nbase_latency_ms = 10\n"
                     "[[dependency.change]]\nat_s = 0.1234567\nworkers = 2\n"
                     "[clients]\nrate = 100\ntimeout_ms = 600000\nretries = 1\nretry_delay_ms = 12.345678\n",
                     "exact.toml"),
      options);
  const std::string table = format_table(r);
  EXPECT_NE(table.find("   1.2345678 s simulated, "), std::string::npos) << table;
  EXPECT_NE(table.find("; timeout 600000 ms, 1 retry after 12.345678 ms\n"), std::string::npos) << table;
  EXPECT_NE(table.find(" at 0.1234567 s"), std::string::npos) << table;
  EXPECT_NE(table.find("settle s after 0 / 0.1234567\n"), std::string::npos) << table;
  const std::string json = format_json({r});
  EXPECT_NE(json.find("\"duration_s\": 1.2345678,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"changes_s\": [0, 0.1234567],"), std::string::npos) << json;
  EXPECT_NE(gnuplot_script(r, "exact.png").find("set xrange [0:1.2345678]\n"), std::string::npos);
}

TEST(SimReport, JsonStringsEscapeQuotesBackslashesAndControlsOnly) {
  Scenario s = busy_scenario(9);
  s.description = "a \"quoted\" path\\to\tend";
  RunOptions options;
  options.policies = {"aimd"};
  options.references = false;
  const std::string json = format_json({run_scenario(s, options)});
  EXPECT_NE(json.find("\"description\": \"a \\\"quoted\\\" path\\\\to\\u0009end\""), std::string::npos) << json;
}

// A file name may be any bytes, but JSON is UTF-8: what is not valid UTF-8
// is replaced, what is passes through as it is.
TEST(SimReport, JsonStringsAreUtf8WhateverTheFileName) {
  Scenario s = busy_scenario(9);
  s.source = "caf\xe9/\xc3\xa9t\xc3\xa9/\xed\xa0\x80/\xf0\x9f\x93\x88/\xe2\x82.toml";
  RunOptions options;
  options.policies = {"aimd"};
  options.references = false;
  const std::string json = format_json({run_scenario(s, options)});
  EXPECT_NE(json.find("\"file\": \"caf\\ufffd/\xc3\xa9t\xc3\xa9/\\ufffd\\ufffd\\ufffd/\xf0\x9f\x93\x88/"
                      "\\ufffd\\ufffd.toml\""),
            std::string::npos)
      << json;
}

// Without --policy, every registered policy but "fixed" (which the static
// references are).
TEST(SimReport, TheDefaultPoliciesAreEveryOneButFixed) {
  const std::vector<std::string> names = default_policies();
  EXPECT_EQ(names.size(), policies::builtin_registry().names().size() - 1);
  for (const char* name : {"balance", "aimd", "gradient2", "vegas", "gradient"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  EXPECT_EQ(std::find(names.begin(), names.end(), "fixed"), names.end());
}

// The plot: no limiter has no limit to draw, but its in-flight and latency
// lines are there.
TEST(SimReport, ThePlotDrawsNoLimitForNoLimiter) {
  RunOptions options;
  options.policies = {"aimd"};
  const ScenarioReport r = run_scenario(busy_scenario(9), options);
  const std::string script = gnuplot_script(r, "out.png");
  std::size_t none = 0, aimd = 0;
  for (std::size_t at = script.find("title 'none'"); at != std::string::npos;
       at = script.find("title 'none'", at + 1)) {
    ++none;
  }
  for (std::size_t at = script.find("title 'aimd'"); at != std::string::npos;
       at = script.find("title 'aimd'", at + 1)) {
    ++aimd;
  }
  EXPECT_EQ(aimd, 3u);  // limit, in flight, latency
  EXPECT_EQ(none, 2u);
}

}  // namespace
}  // namespace bulkhead::sim
