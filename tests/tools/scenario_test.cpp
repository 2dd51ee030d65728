// Scenario files: what they accept, and the error each mistake gives.
#include "tools/sim/scenario.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace bulkhead::sim {
namespace {

constexpr const char* kMinimal = R"(duration_s = 10
[dependency]
workers = 4
base_latency_ms = 10
[clients]
rate = 100
)";

std::string error_of(const std::string& text) {
  try {
    parse_scenario(text, "s.toml");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SimScenario, MinimalFileTakesTheDefaults) {
  const Scenario s = parse_scenario(kMinimal, "dir/s.toml");
  EXPECT_EQ(s.name, "s");  // the file's stem
  EXPECT_EQ(s.seed, 1u);
  EXPECT_EQ(s.tick_ms, 100u);
  EXPECT_EQ(s.service, ServiceKind::kExponential);
  EXPECT_FALSE(s.queue_limit.has_value());
  EXPECT_EQ(s.limiter, LimiterMode::kHost);
  EXPECT_EQ(s.timeout_ms, 1000);
  EXPECT_EQ(s.limits.bounds.initial, 20);
  EXPECT_EQ(s.limits.window_min_samples, 10u);
}

TEST(SimScenario, ReadsEveryKey) {
  const Scenario s = parse_scenario(R"(name = "x"
description = "d"
duration_s = 60.5
seed = 9
tick_ms = 50
[dependency]
workers = 8
base_latency_ms = 2.5
service = "lognormal"
sigma = 0.5
queue_limit = 0
network_ms = 1.5
[[dependency.change]]
at_s = 10
workers = 2
ramp_s = 5
[[dependency.change]]
at_s = 20
base_latency_ms = 5
network_ms = 0
[clients]
processes = 3
limiter = "per-process"
rate = 10
timeout_ms = 200
retries = 2
retry_delay_ms = 10
[[clients.change]]
at_s = 30
rate = 20
ramp_s = 1
[limits]
min_limit = 2
max_limit = 50
initial_limit = 4
window_min_samples = 5
window_max_ms = 500
[policy.aimd]
backoff = 0.5
)",
                                    "x.toml");
  EXPECT_EQ(s.name, "x");
  EXPECT_EQ(s.duration_s, 60.5);
  EXPECT_EQ(s.seed, 9u);
  EXPECT_EQ(s.service, ServiceKind::kLognormal);
  EXPECT_EQ(s.sigma, 0.5);
  ASSERT_TRUE(s.queue_limit.has_value());
  EXPECT_EQ(*s.queue_limit, 0u);
  ASSERT_EQ(s.dependency_changes.size(), 2u);
  EXPECT_EQ(s.dependency_changes[0].workers, 2u);
  EXPECT_EQ(s.dependency_changes[0].ramp_s, 5);
  EXPECT_EQ(s.dependency_changes[1].base_latency_ms, 5);
  EXPECT_EQ(s.network_ms, 1.5);
  EXPECT_FALSE(s.dependency_changes[0].network_ms.has_value());
  EXPECT_EQ(s.dependency_changes[1].network_ms, 0);
  EXPECT_EQ(s.limiter, LimiterMode::kPerProcess);
  EXPECT_EQ(s.retries, 2u);
  ASSERT_EQ(s.rate_changes.size(), 1u);
  EXPECT_EQ(s.rate_changes[0].rate, 20);
  EXPECT_EQ(s.limits.bounds.max, 50);
  EXPECT_EQ(s.limits.window_max_age, std::chrono::milliseconds(500));
  const control::LimitSettings aimd = s.settings_for("aimd");
  EXPECT_EQ(aimd.policy, "aimd");
  EXPECT_EQ(aimd.params.at("backoff"), 0.5);
  EXPECT_TRUE(s.settings_for("gradient2").params.empty());
}

struct BadCase {
  std::string text;
  std::string error;
};

TEST(SimScenario, ErrorsNameFileLineKeyAndReason) {
  const std::string deps = "[dependency]\nworkers = 4\nbase_latency_ms = 10\n";
  const std::string clients = "[clients]\nrate = 100\n";
  const std::string base = "duration_s = 10\n" + deps + clients;
  const BadCase cases[] = {
      {"duration_s = 10\nduratoin = 3\n", "s.toml:2: duratoin: unknown key"},
      {"[bogus]\n", "s.toml:1: bogus: unknown table"},
      {"duration_s = \"long\"\n", "s.toml:1: duration_s: must be a number"},
      {"duration_s = 0\n", "s.toml:1: duration_s: must be in (0, 3600], got 0"},
      {"duration_s = 10\nseed = 1.5\n", "s.toml:2: seed: must be an integer"},
      {"duration_s = 10\ntick_ms = 5\n", "s.toml:2: tick_ms: must be in [10, 60000], got 5"},
      {"name = \"a b\"\n", "s.toml:1: name: may hold only letters, digits, '-', '_' and '.'"},
      {"duration_s = 10\n[dependency]\nworkers = 0\n",
       "s.toml:3: dependency.workers: must be in [1, 100000], got 0"},
      {"duration_s = 10\n[dependency]\nservice = \"gamma\"\n",
       "s.toml:3: dependency.service: must be one of constant, exponential, lognormal"},
      {"duration_s = 10\n[dependency]\nbase_latency_ms = -1\n",
       "s.toml:3: dependency.base_latency_ms: must be in (0, 3600000], got -1"},
      {"duration_s = 10\n[dependency]\nnetwork_ms = -1\n",
       "s.toml:3: dependency.network_ms: must be in [0, 3600000], got -1"},
      {"duration_s = 10\n[clients]\nlimiter = \"global\"\n",
       "s.toml:3: clients.limiter: must be \"host\" or \"per-process\""},
      {"duration_s = 10\n[clients]\nretries = 11\n", "s.toml:3: clients.retries: must be in [0, 10], got 11"},
      {"duration_s = 10\n[clients]\nrate = 1\n[[clients.change]]\nat_s = 1\ntimeout_ms = 5\n",
       "s.toml:6: clients.change#1.timeout_ms: unknown key"},
      {"duration_s = 10\n[clients]\nchange = 3\n",
       "s.toml:3: clients.change: must be an array of tables: [[clients.change]]"},
      {"[policy.nope]\nx = 1\n", "s.toml:1: policy.nope: unknown policy \"nope\""},
      {"[policy.aimd]\nbackoff = \"big\"\n",
       "s.toml:2: policy.aimd.backoff: must be a number (policy parameters are numbers)"},
      {"duration_s = 10\n= 3\n", "s.toml:2:1: syntax error"},
      {"duration_s = inf\n", "s.toml:1: duration_s: must be a finite number"},
      {"duration_s = 10\n[clients]\nrate = nan\n", "s.toml:3: clients.rate: must be a finite number"},
      {"description = \"two\\nlines\"\n", "s.toml:1: description: must be one line"},
      {"[policy]\naimd = 3\n", "s.toml:2: policy.aimd: must be a table: [policy.NAME]"},
      // Pass two: what needs the whole file.
      {"[dependency]\nworkers = 4\n", "s.toml: duration_s: is required"},
      {"duration_s = 10\n[dependency]\nworkers = 4\n[clients]\nrate = 1\n",
       "s.toml:2: dependency.base_latency_ms: is required"},
      {"duration_s = 10\n[dependency]\nbase_latency_ms = 1\n[clients]\nrate = 1\n",
       "s.toml:2: dependency.workers: is required"},
      {base + "[[clients.change]]\nat_s = 5\n", "s.toml:7: clients.change#1: needs rate"},
      {base + "[[dependency.change]]\nat_s = 10\nworkers = 2\n",
       "s.toml:8: dependency.change#1.at_s: must be < duration_s (10), got 10"},
      {"duration_s = 10\n[dependency]\nworkers = 4\nbase_latency_ms = 1\n",
       "s.toml: clients.rate: is required"},
      {"duration_s = 10\n[dependency]\nworkers = 4\nbase_latency_ms = 1\nsigma = 1\n[clients]\nrate = 1\n",
       "s.toml:5: dependency.sigma: only for service = \"lognormal\""},
      {base + "[[dependency.change]]\nat_s = 12\nworkers = 2\n",
       "s.toml:8: dependency.change#1.at_s: must be < duration_s (10), got 12"},
      {base + "[[dependency.change]]\nat_s = 5\nworkers = 2\nramp_s = 2\n[[dependency.change]]\nat_s = 6\n"
                  "workers = 3\n",
       "s.toml:12: dependency.change#2.at_s: must be >= 7 (the previous change's at_s + ramp_s)"},
      {base + "[[dependency.change]]\nat_s = 5\n",
       "s.toml:7: dependency.change#1: sets none of workers, base_latency_ms, network_ms"},
      {base + "[[clients.change]]\nrate = 5\n", "s.toml:7: clients.change#1: needs at_s"},
      {base + "[[clients.change]]\nat_s = 8\nrate = 5\nramp_s = 3\n",
       "s.toml:10: clients.change#1.ramp_s: the ramp must end by duration_s (10)"},
      {base + "[limits]\nmax_limit = 10\n",
       "s.toml:8: limits.max_limit: must be >= initial_limit (20, the default)"},
      {base + "[limits]\nmin_limit = 30\n",
       "s.toml:8: limits.min_limit: must be <= initial_limit (20, the default)"},
      {base + "[limits]\nmin_limit = 30\nmax_limit = 20\n",
       "s.toml:9: limits.max_limit: must be >= min_limit (30)"},
      {base + "[limits]\ninitial_limit = 5\nmin_limit = 6\n",
       "s.toml:8: limits.initial_limit: must be in [min_limit, max_limit] = [6, 1000]"},
      {base + "[policy.aimd]\nbackoff = 1.5\n",
       "s.toml:8: policy.aimd.backoff: backoff = 1.5: must be in [0.5, 1)"},
      {base + "[policy.aimd]\nbackof = 0.5\n",
       "s.toml:8: policy.aimd.backof: unknown parameter 'backof' for policy 'aimd'"},
  };
  for (const BadCase& c : cases) {
    const std::string error = error_of(c.text);
    EXPECT_EQ(error.substr(0, c.error.size()), c.error) << "for:\n" << c.text;
  }
}

// The description heads the table and titles the plot: a carriage return
// or another control character is refused as a line break is, a tab is not.
TEST(SimScenario, ADescriptionIsOneLineOfText) {
  EXPECT_EQ(error_of("description = \"two\\r\\nlines\"\n"),
            "s.toml:1: description: must be one line of text: control character \\r at byte 4");
  EXPECT_EQ(error_of("description = \"a\\u0000b\"\n"),
            "s.toml:1: description: must be one line of text: control character \\0 at byte 2");
  EXPECT_EQ(error_of("description = \"bell\\u0007\"\n"),
            "s.toml:1: description: must be one line of text: control character \\x07 at byte 5");
  EXPECT_EQ(error_of("description = \"del\\u007f\"\n"),
            "s.toml:1: description: must be one line of text: control character \\x7f at byte 4");
  EXPECT_EQ(parse_scenario("description = \"a\\tb\"\n" + std::string(kMinimal), "s.toml").description, "a\tb");
}

// Without a name key the file's name names the scenario, and must be one.
TEST(SimScenario, AFileNameThatIsNoScenarioNameNeedsANameKey) {
  try {
    parse_scenario(kMinimal, "dir/my scenario.toml");
    ADD_FAILURE() << "no error";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("dir/my scenario.toml: name: the file's name may hold only", 0), 0u)
        << e.what();
  }
  EXPECT_EQ(parse_scenario(std::string("name = \"mine\"\n") + kMinimal, "dir/my scenario.toml").name, "mine");
}

// Every range includes its ends: each value below is the edge of its rule.
TEST(SimScenario, TheEdgesOfEachRangeAreAccepted) {
  const Scenario s = parse_scenario(
      "name = \"" + std::string(64, 'n') + "\"\nduration_s = 3600\n[dependency]\nworkers = 4\nbase_latency_ms = 10\n"
      "[[dependency.change]]\nat_s = 5\nworkers = 2\nramp_s = 2\n"
      "[[dependency.change]]\nat_s = 7\nworkers = 3\n"  // where the ramp before it ends
      "[clients]\nrate = 100\nretries = 10\n"
      "[limits]\nmin_limit = 12\ninitial_limit = 12\nmax_limit = 12\n",
      "s.toml");
  EXPECT_EQ(s.name.size(), 64u);
  EXPECT_EQ(s.duration_s, 3600);
  EXPECT_EQ(s.retries, 10u);
  ASSERT_EQ(s.dependency_changes.size(), 2u);
  EXPECT_EQ(s.dependency_changes[1].at_s, 7);
  EXPECT_EQ(s.limits.bounds.min, 12);
  EXPECT_EQ(s.limits.bounds.max, 12);
  EXPECT_EQ(error_of("name = \"" + std::string(65, 'n') + "\"\n"), "s.toml:1: name: must be at most 64 characters");
}

// Times are compared in whole nanoseconds, the simulator's clock: 1.1 + 2.2
// is 3.3000000000000003 in doubles, and a change at 3.3 (or a run of 3.3 s)
// is where that ramp ends, not before it.
TEST(SimScenario, AChangeWhereTheRampBeforeItEndsPassesWhateverTheRounding) {
  const Scenario s = parse_scenario(
      "duration_s = 4\n[dependency]\nworkers = 4\nbase_latency_ms = 10\n"
      "[[dependency.change]]\nat_s = 1.1\nworkers = 2\nramp_s = 2.2\n"
      "[[dependency.change]]\nat_s = 3.3\nworkers = 3\n[clients]\nrate = 100\n",
      "s.toml");
  ASSERT_EQ(s.dependency_changes.size(), 2u);
  EXPECT_EQ(s.dependency_changes[1].at_s, 3.3);
  const Scenario ends = parse_scenario(
      "duration_s = 3.3\n[dependency]\nworkers = 4\nbase_latency_ms = 10\n"
      "[clients]\nrate = 100\n[[clients.change]]\nat_s = 1.1\nrate = 50\nramp_s = 2.2\n",
      "s.toml");
  EXPECT_EQ(ends.rate_changes.size(), 1u);
  EXPECT_EQ(error_of("duration_s = 4\n[dependency]\nworkers = 4\nbase_latency_ms = 10\n"
                     "[[dependency.change]]\nat_s = 1.1\nworkers = 2\nramp_s = 2.2\n"
                     "[[dependency.change]]\nat_s = 3.299999\nworkers = 3\n[clients]\nrate = 100\n")
                .substr(0, 57),
            "s.toml:10: dependency.change#2.at_s: must be >= 3.3 (the ");
}

// Every call is kept in memory: a run that would offer more attempts than
// that holds is refused before it is drawn, not left to swap the host.
TEST(SimScenario, ARunThatOffersMoreCallsThanFitInMemoryIsRefused) {
  EXPECT_EQ(error_of("duration_s = 3600\n[dependency]\nworkers = 4\nbase_latency_ms = 10\n"
                     "[clients]\nrate = 10000000\n"),
            "s.toml:6: clients.rate: the run offers 36000000000 calls on average (the rate over duration_s, "
            "3600 s): more than the 50000000 the simulator holds in memory; shorten duration_s or lower the rate");
  // The rate profile counts, ramps and retries included.
  const std::string ramp = "duration_s = 100\n[dependency]\nworkers = 4\nbase_latency_ms = 10\n"
                           "[clients]\nrate = 0\nretries = 4\n[[clients.change]]\nat_s = 50\nramp_s = 50\n";
  EXPECT_NO_THROW(parse_scenario(ramp + "rate = 400000\n", "s.toml"));  // 1e7 calls, 5e7 attempts
  EXPECT_EQ(error_of(ramp + "rate = 400001\n"),
            "s.toml:6: clients.rate: the run offers 10000025 calls on average (the rate over duration_s, 100 s), "
            "50000125 attempts with the retries: more than the 50000000 the simulator holds in memory; "
            "shorten duration_s or lower the rate");
}

// The policies act at the ticks only: a run without one would report every
// policy at its initial limit.
// A worker ramp is an event per worker in every run: ramps that move more
// than a million workers in all are refused rather than left to run for
// minutes. A change at once is one event, whatever it moves.
TEST(SimScenario, RampsThatMoveMoreThanAMillionWorkersAreRefused) {
  const auto ramps = [](int count, const char* ramp_s) {
    std::string text = "duration_s = 100\n[dependency]\nworkers = 1\nbase_latency_ms = 10\n";
    for (int i = 0; i < count; ++i) {
      text += "[[dependency.change]]\nat_s = " + std::to_string(2 * i) + "\nworkers = " +
              (i % 2 == 0 ? "100000" : "1") + "\nramp_s = " + ramp_s + "\n";
    }
    return text + "[clients]\nrate = 10\n";
  };
  EXPECT_NO_THROW(parse_scenario(ramps(10, "1"), "s.toml"));  // 10 x 99999
  EXPECT_NO_THROW(parse_scenario(ramps(40, "0"), "s.toml"));
  EXPECT_EQ(error_of(ramps(11, "1")),
            "s.toml:47: dependency.change#11.workers: the ramps so far move 1099989 workers one at a time: more "
            "than the 1000000 the simulator schedules; ramp fewer, or change the workers at once (ramp_s = 0)");
}

TEST(SimScenario, ARunShorterThanATickIsRefused) {
  const std::string rest = "[dependency]\nworkers = 4\nbase_latency_ms = 10\n[clients]\nrate = 100\n";
  EXPECT_EQ(error_of("duration_s = 0.05\n" + rest),
            "s.toml:1: duration_s: must be at least one tick (tick_ms = 100, the default), got 0.05 s");
  EXPECT_EQ(error_of("tick_ms = 1000\nduration_s = 0.999\n" + rest),
            "s.toml:2: duration_s: must be at least one tick (tick_ms = 1000), got 0.999 s");
  EXPECT_EQ(parse_scenario("duration_s = 0.1\n" + rest, "s.toml").duration_s, 0.1);
}

TEST(SimScenario, EveryShippedScenarioParses) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(BULKHEAD_SOURCE_DIR "/scenarios")) {
    if (entry.path().extension() != ".toml") continue;
    EXPECT_NO_THROW(load_scenario_file(entry.path().string())) << entry.path();
    ++count;
  }
  EXPECT_GE(count, 7);
}

TEST(SimScenario, UnreadableFileIsAnError) {
  // Why it cannot be read: a wrong path is not a wrong permission.
  try {
    load_scenario_file("/nonexistent/s.toml");
    ADD_FAILURE() << "a missing file was read";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/s.toml: cannot read: No such file or directory");
  }
  // A directory opens as a stream with nothing in it: said as it is, not
  // as a scenario without duration_s.
  try {
    load_scenario_file(BULKHEAD_SOURCE_DIR "/scenarios");
    ADD_FAILURE() << "a directory was read";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("/scenarios: cannot read: it is a directory"), std::string::npos)
        << e.what();
  }
}

TEST(SimScenario, AParamFromTheCommandLineSetsOrOverridesThePolicys) {
  Scenario s = parse_scenario(std::string(kMinimal) + "[policy.balance]\ntolerance = 0.4\ngrowth = 0.2\n", "s.toml");
  set_policy_param(s, "balance.tolerance=0.5");
  set_policy_param(s, "balance.baseline_max_ms=28");
  set_policy_param(s, "aimd.backoff=0.8");
  EXPECT_EQ(s.policy_params.at("balance"),
            (policies::ParamMap{{"baseline_max_ms", 28}, {"growth", 0.2}, {"tolerance", 0.5}}));
  EXPECT_EQ(s.settings_for("aimd").params, (policies::ParamMap{{"backoff", 0.8}}));
}

TEST(SimScenario, ABadParamNamesItselfAndWhatIsWrong) {
  const auto error_of_param = [](const std::string& spec) -> std::string {
    Scenario s = parse_scenario(kMinimal, "s.toml");
    try {
      set_policy_param(s, spec);
    } catch (const ScenarioError& e) {
      EXPECT_TRUE(s.policy_params.empty()) << spec << ": a refused value must change nothing";
      return e.what();
    }
    return "(no error)";
  };
  const std::string shape = "must be POLICY.KEY=NUMBER, e.g. balance.tolerance=0.4";
  for (const char* spec : {"tolerance=0.5", ".tolerance=1", "balance.=1", "balance.tolerance", "balance.tolerance=",
                           "balance.tolerance=x", "balance.tolerance=0.5ms"}) {
    EXPECT_EQ(error_of_param(spec), "--param " + std::string(spec) + ": " + shape);
  }
  EXPECT_EQ(error_of_param("bbr.gain=2"),
            "--param bbr.gain=2: unknown policy \"bbr\" (known: aimd, balance, fixed, gradient, gradient2, vegas)");
  EXPECT_EQ(error_of_param("balance.tolerance=0"), "--param balance.tolerance=0: tolerance = 0: must be in (0, 2]");
  EXPECT_NE(error_of_param("balance.bogus=1").find("--param balance.bogus=1: unknown parameter 'bogus'"),
            std::string::npos)
      << error_of_param("balance.bogus=1");
}

}  // namespace
}  // namespace bulkhead::sim
