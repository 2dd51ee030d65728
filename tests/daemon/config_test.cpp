// daemon/config: the embedded default, inheritance from [defaults], and every
// way a config file can be wrong, each reported with file, line, key and
// reason.
#include "daemon/config.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <string_view>

#include "policies/aimd.hpp"
#include "policies/balance.hpp"
#include "policies/gradient.hpp"
#include "policies/gradient2.hpp"
#include "policies/vegas.hpp"

namespace bulkhead::daemon {
namespace {

using std::chrono::milliseconds;

// The message of the ConfigError that `load` throws, or a note that it threw
// none (or something else).
std::string error_of(const std::function<void()>& load) {
  try {
    load();
  } catch (const ConfigError& error) {
    return error.what();
  } catch (const std::exception& error) {
    return std::string("not a ConfigError: ") + error.what();
  }
  return "<no error>";
}

// A fresh directory per test for config files, removed afterwards.
class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                          "/bulkhead-config-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << "mkdtemp " << pattern;
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string path_of(std::string_view name) const { return dir_ + "/" + std::string(name); }

  std::string write_file(std::string_view name, std::string_view text) const {
    const std::string path = path_of(name);
    std::ofstream out(path, std::ios::binary);
    out << text;
    EXPECT_TRUE(out.good()) << "writing " << path;
    return path;
  }

  Config load_text(std::string_view text) const {
    return load_config_file(write_file("bulkhead.toml", text));
  }

  std::string dir_;
};

void expect_default_daemon(const DaemonConfig& d) {
  const DaemonConfig want;
  EXPECT_EQ(d.segment, want.segment);
  EXPECT_EQ(d.tick, want.tick);
  EXPECT_EQ(d.metrics_listen, want.metrics_listen);
  EXPECT_EQ(d.strict, want.strict);
  EXPECT_EQ(d.max_dependencies, want.max_dependencies);
  EXPECT_EQ(d.max_processes, want.max_processes);
  EXPECT_EQ(d.stats_stripes, want.stats_stripes);
  EXPECT_EQ(d.queue_slots, want.queue_slots);
  EXPECT_EQ(d.segment_group, want.segment_group);
  EXPECT_EQ(d.segment_mode, want.segment_mode);
  EXPECT_EQ(d.segment_reserve, want.segment_reserve);
  EXPECT_EQ(d.log_level, want.log_level);
}

void expect_default_dependency(const DependencyConfig& dep) {
  const DependencyConfig want;
  EXPECT_EQ(dep.name, want.name);
  EXPECT_EQ(dep.policy, want.policy);
  EXPECT_EQ(dep.bounds.min, want.bounds.min);
  EXPECT_EQ(dep.bounds.max, want.bounds.max);
  EXPECT_EQ(dep.bounds.initial, want.bounds.initial);
  EXPECT_EQ(dep.params, want.params);
  EXPECT_EQ(dep.window_min_samples, want.window_min_samples);
  EXPECT_EQ(dep.window_max_age, want.window_max_age);
  EXPECT_EQ(dep.enforce, want.enforce);
  EXPECT_EQ(dep.max_queue, want.max_queue);
  EXPECT_EQ(dep.queue_order, want.queue_order);
  EXPECT_EQ(dep.breaker, want.breaker);
}

// ---------------------------------------------------------------------------
// The embedded default

TEST(EmbeddedDefaultConfig, ParsesToTheStructDefaults) {
  const Config config = parse_config(embedded_default_config(), "<embedded default>");
  EXPECT_EQ(config.source, "<embedded default>");
  expect_default_daemon(config.daemon);
  expect_default_dependency(config.defaults);
  EXPECT_TRUE(config.dependencies.empty());
}

// stats_stripes = "auto": a stripe of its own for every CPU and one spare,
// within the limit and the daemon's budget of stripes read per tick.
TEST(StatsStripes, AutoGivesEveryCpuAStripeWithinTheBudget) {
  DaemonConfig d;
  EXPECT_EQ(d.stats_stripes, kAutoStripes);  // the default
  EXPECT_EQ(stripes_for(d, 2), 3u);
  EXPECT_EQ(stripes_for(d, 16), 17u);
  EXPECT_EQ(stripes_for(d, 63), 64u);
  EXPECT_EQ(stripes_for(d, 256), 64u);  // the limit: CPUs then share stripes
  EXPECT_EQ(stripes_for(d, 0), 8u);     // CPUs unknown
  d.max_dependencies = 4096;            // 32768 / 4096
  EXPECT_EQ(stripes_for(d, 16), 8u);
  EXPECT_EQ(stripes_for(d, 4), 5u);
  d.max_dependencies = 16384;
  EXPECT_EQ(stripes_for(d, 16), 2u);
  d.stats_stripes = 12;  // set: as it is, whatever the host
  EXPECT_EQ(stripes_for(d, 2), 12u);
  EXPECT_EQ(parse_config("[daemon]\nstats_stripes = \"auto\"\n", "a.toml").daemon.stats_stripes, kAutoStripes);
  EXPECT_EQ(parse_config("[daemon]\nstats_stripes = 5\n", "a.toml").daemon.stats_stripes, 5u);
}

TEST(EmbeddedDefaultConfig, ShowsEveryKeyWithItsValue) {
  const std::string_view text = embedded_default_config();
  for (std::string_view line :
       {"[daemon]\n", "\nsegment = \"bulkhead\"\n", "\ntick_ms = 100\n",
        "\nmetrics_listen = \"127.0.0.1:9477\"\n", "\nstrict = false\n", "\nmax_dependencies = 256 ",
        "\nmax_processes = 256 ", "\nstats_stripes = \"auto\" ", "\nqueue_slots = 64 ", "\nsegment_group = \"\"\n",
        "\nsegment_mode = 0o660\n", "\nsegment_reserve = true\n", "\nlog_level = \"info\"\n", "\n[defaults]\n",
        "\npolicy = \"balance\"\n", "\nmin_limit = 1\n", "\nmax_limit = 1000\n",
        "\ninitial_limit = 20\n", "\nwindow_min_samples = 10\n", "\nwindow_max_ms = 1000\n", "\nenforce = true\n",
        "\nmax_queue = 0\n", "\nqueue_order = \"fifo\"\n", "\n[defaults.breaker]\n", "\nenabled = false\n",
        "\nfailure_rate_threshold = 0.5\n", "\nminimum_calls = 20\n", "\nwindow_ms = 10000\n",
        "\nsleep_window_ms = 5000\n", "\nhalf_open_calls = 3\n", "\nslow_call_duration_ms = 0\n",
        "\nslow_call_rate_threshold = 1.0\n", "\nforce = \"auto\"\n",
        "\n# [dependency.payments-db]\n"}) {
    EXPECT_NE(text.find(line), std::string_view::npos) << "missing: " << line;
  }
}

// The commented list of each policy's parameters shows every one of them,
// each at the policy's own default: uncommenting a line changes nothing.
TEST(EmbeddedDefaultConfig, ListsEveryPolicyParameterAtItsDefault) {
  std::map<std::string, policies::ParamMap> listed;  // policy -> what its block shows
  std::string policy;
  std::istringstream lines{std::string(embedded_default_config())};
  for (std::string line; std::getline(lines, line);) {
    // "# aimd (additive ...):" opens a policy's block; "#   key = value  # ..." is a parameter.
    if (line.rfind('#', 0) != 0) {
      policy.clear();  // the comment block ended
    } else if (const std::size_t paren = line.find(" (");
               line.rfind("# ", 0) == 0 && paren != std::string::npos && line.find(' ', 2) == paren) {
      policy = line.substr(2, paren - 2);
    } else if (line.rfind("#   ", 0) == 0 && !policy.empty() && line.find(" = ") != std::string::npos) {
      std::istringstream fields(line.substr(4));
      std::string key, equals;
      double value = 0;
      ASSERT_TRUE(fields >> key >> equals >> value) << line;
      listed[policy][key] = value;
    }
  }
  const auto check = [&](const std::string& name, auto parse) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(listed.contains(name));
    EXPECT_TRUE(parse(listed[name]) == parse(policies::ParamMap{}));
    // Every key it knows is listed: the unknown-key error names them all.
    std::string known;
    try {
      parse(policies::ParamMap{{"no_such_key", 1}});
    } catch (const policies::ParamError& e) {
      known = e.what();
    }
    std::string shown;
    for (const auto& [key, value] : listed[name]) shown += (shown.empty() ? "" : ", ") + key;
    EXPECT_NE(known.find("(known: " + shown + ")"), std::string::npos) << known;
  };
  check("aimd", policies::AimdPolicy::parse_params);
  check("balance", policies::BalancePolicy::parse_params);
  check("gradient", policies::GradientPolicy::parse_params);
  check("gradient2", policies::Gradient2Policy::parse_params);
  check("vegas", policies::VegasPolicy::parse_params);
  EXPECT_EQ(listed.size(), 5u);
}

// The build embeds the checked-in file, not a stale copy of it.
TEST(EmbeddedDefaultConfig, IsTheCheckedInFile) {
  const std::filesystem::path file = BULKHEAD_SOURCE_DIR "/daemon/default_config.toml";
  std::ifstream in(file, std::ios::binary);
  ASSERT_TRUE(in) << "cannot read " << file;
  std::ostringstream text;
  text << in.rdbuf();
  EXPECT_EQ(embedded_default_config(), text.str());
}

// Its commented example is a valid dependency table once uncommented.
TEST(EmbeddedDefaultConfig, ExampleDependencyIsValid) {
  std::string text(embedded_default_config());
  const std::string marker = "# [dependency.payments-db]";
  const std::size_t at = text.find(marker);
  ASSERT_NE(at, std::string::npos);
  std::string example = text.substr(at);
  std::string uncommented;
  std::istringstream lines(example);
  for (std::string line; std::getline(lines, line);) {
    uncommented += (line.rfind("# ", 0) == 0 ? line.substr(2) : line) + "\n";
  }
  const Config config = parse_config(text.substr(0, at) + uncommented, "example");
  ASSERT_EQ(config.dependencies.size(), 1u);
  const DependencyConfig& dep = config.dependencies[0];
  EXPECT_EQ(dep.name, "payments-db");
  EXPECT_EQ(dep.policy, "aimd");
  EXPECT_EQ(dep.params, (policies::ParamMap{{"backoff", 0.8}}));
  EXPECT_EQ(dep.bounds.max, 200);
  EXPECT_TRUE(dep.breaker.enabled);
  EXPECT_EQ(dep.breaker.half_open_calls, 3u);
  ASSERT_EQ(config.patterns.size(), 1u);
  EXPECT_EQ(config.effective("db-shard-4").bounds.max, 64);
}

TEST(ParseConfig, EmptyTextIsTheStructDefaults) {
  const Config config = parse_config("", "empty.toml");
  expect_default_daemon(config.daemon);
  expect_default_dependency(config.defaults);
  EXPECT_TRUE(config.dependencies.empty());
}

// ---------------------------------------------------------------------------
// A realistic config

constexpr std::string_view kRealistic = R"(# production host
[daemon]
segment = "bulkhead-prod"
tick_ms = 50
metrics_listen = "[::1]:9100"
strict = true
max_dependencies = 8
max_processes = 512
stats_stripes = 16
segment_group = "bulkhead"
segment_mode = 0o640
segment_reserve = false
log_level = "warn"

[defaults]
policy = "gradient2"
min_limit = 2
max_limit = 500
initial_limit = 40
window_min_samples = 20
window_max_ms = 2000
smoothing = 0.3
queue_size = 2

# A different policy: none of [defaults]' gradient2 parameters.
[dependency.payments-db]
policy = "aimd"
backoff = 0.8
max_limit = 100

# Same policy as [defaults], named or not: its parameters carry over.
[dependency.recs-api]
max_limit = 200
tolerance = 2

[dependency."search.v2"]
policy = "gradient2"
smoothing = 0.5
window_max_ms = 500

[dependency.cache]
policy = "fixed"
initial_limit = 64
)";

TEST_F(ConfigFileTest, RealisticConfigParses) {
  const Config config = load_text(kRealistic);
  EXPECT_EQ(config.source, path_of("bulkhead.toml"));

  const DaemonConfig& d = config.daemon;
  EXPECT_EQ(d.segment, "bulkhead-prod");
  EXPECT_EQ(d.tick, milliseconds(50));
  EXPECT_EQ(d.metrics_listen, "[::1]:9100");
  EXPECT_TRUE(d.strict);
  EXPECT_EQ(d.max_dependencies, 8u);
  EXPECT_EQ(d.max_processes, 512u);
  EXPECT_EQ(d.stats_stripes, 16u);
  EXPECT_EQ(d.segment_group, "bulkhead");
  EXPECT_FALSE(d.segment_reserve);
  EXPECT_EQ(d.segment_mode, 0640u);
  EXPECT_EQ(d.log_level, "warn");

  const DependencyConfig& defaults = config.defaults;
  EXPECT_EQ(defaults.name, "");
  EXPECT_EQ(defaults.policy, "gradient2");
  EXPECT_EQ(defaults.bounds.min, 2);
  EXPECT_EQ(defaults.bounds.max, 500);
  EXPECT_EQ(defaults.bounds.initial, 40);
  EXPECT_EQ(defaults.window_min_samples, 20u);
  EXPECT_EQ(defaults.window_max_age, milliseconds(2000));
  EXPECT_EQ(defaults.params, (policies::ParamMap{{"queue_size", 2}, {"smoothing", 0.3}}));

  // Sorted by name, whatever the file order.
  ASSERT_EQ(config.dependencies.size(), 4u);
  EXPECT_EQ(config.dependencies[0].name, "cache");
  EXPECT_EQ(config.dependencies[1].name, "payments-db");
  EXPECT_EQ(config.dependencies[2].name, "recs-api");
  EXPECT_EQ(config.dependencies[3].name, "search.v2");
}

TEST_F(ConfigFileTest, DependencyWithAnotherPolicyStartsFromItsDefaults) {
  const Config config = load_text(kRealistic);
  const DependencyConfig* payments = config.find("payments-db");
  ASSERT_NE(payments, nullptr);
  EXPECT_EQ(payments->policy, "aimd");
  EXPECT_EQ(payments->params, (policies::ParamMap{{"backoff", 0.8}}));
  // General keys still come from [defaults].
  EXPECT_EQ(payments->bounds.min, 2);
  EXPECT_EQ(payments->bounds.max, 100);
  EXPECT_EQ(payments->bounds.initial, 40);
  EXPECT_EQ(payments->window_min_samples, 20u);
  EXPECT_EQ(payments->window_max_age, milliseconds(2000));

  const DependencyConfig* cache = config.find("cache");
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->policy, "fixed");
  EXPECT_TRUE(cache->params.empty());
  EXPECT_EQ(cache->bounds.initial, 64);
}

TEST_F(ConfigFileTest, DependencyWithTheSamePolicyInheritsItsParameters) {
  const Config config = load_text(kRealistic);
  const DependencyConfig* recs = config.find("recs-api");
  ASSERT_NE(recs, nullptr);
  EXPECT_EQ(recs->policy, "gradient2");  // inherited
  EXPECT_EQ(recs->params,
            (policies::ParamMap{{"queue_size", 2}, {"smoothing", 0.3}, {"tolerance", 2}}));
  EXPECT_EQ(recs->bounds.min, 2);
  EXPECT_EQ(recs->bounds.max, 200);
  EXPECT_EQ(recs->bounds.initial, 40);

  const DependencyConfig* search = config.find("search.v2");
  ASSERT_NE(search, nullptr);
  EXPECT_EQ(search->policy, "gradient2");  // named, and the same
  EXPECT_EQ(search->params, (policies::ParamMap{{"queue_size", 2}, {"smoothing", 0.5}}));
  EXPECT_EQ(search->window_max_age, milliseconds(500));
  EXPECT_EQ(search->window_min_samples, 20u);
}

TEST_F(ConfigFileTest, EffectiveFallsBackToDefaultsUnderTheName) {
  const Config config = load_text(kRealistic);
  EXPECT_EQ(config.find("unknown"), nullptr);
  EXPECT_EQ(config.find(""), nullptr);
  EXPECT_EQ(config.find("payments"), nullptr);  // no prefix match

  const DependencyConfig unknown = config.effective("unknown");
  EXPECT_EQ(unknown.name, "unknown");
  EXPECT_EQ(unknown.policy, "gradient2");
  EXPECT_EQ(unknown.params, config.defaults.params);
  EXPECT_EQ(unknown.bounds.max, 500);

  const DependencyConfig payments = config.effective("payments-db");
  EXPECT_EQ(payments.name, "payments-db");
  EXPECT_EQ(payments.policy, "aimd");
}

// [dependency."PATTERN"] gives its settings, over [defaults] key by key,
// to the names it matches that have no table of their own; the first
// pattern in file order wins. It claims no slot and counts against no
// capacity.
TEST(ParseConfig, APatternTableSetsTheNamesItMatches) {
  const Config config = parse_config(
      "[daemon]\nmax_dependencies = 1\n"
      "[defaults]\npolicy = \"aimd\"\nmax_limit = 100\n"
      "[dependency.\"db-shard-*\"]\nmax_limit = 40\nbackoff = 0.8\n"
      "[dependency.\"db-*\"]\npolicy = \"fixed\"\ninitial_limit = 7\n"
      "[dependency.db-shard-07]\nmax_limit = 10\ninitial_limit = 5\n"
      "[dependency.\"cache-[ab]?\"]\nenforce = false\n",
      "t.toml");
  ASSERT_EQ(config.dependencies.size(), 1u);
  ASSERT_EQ(config.patterns.size(), 3u);
  EXPECT_EQ(config.patterns[0].name, "db-shard-*");  // file order

  const DependencyConfig shard = config.effective("db-shard-12");
  EXPECT_EQ(shard.name, "db-shard-12");
  EXPECT_EQ(shard.policy, "aimd");  // from [defaults]
  EXPECT_EQ(shard.bounds.max, 40);
  EXPECT_EQ(shard.params, (policies::ParamMap{{"backoff", 0.8}}));
  EXPECT_EQ(config.table_for("db-shard-12"), &config.patterns[0]);
  EXPECT_EQ(config.find("db-shard-12"), nullptr);  // a pattern is no table of its own

  EXPECT_EQ(config.effective("db-shard-07").bounds.max, 10);  // its own table wins
  EXPECT_EQ(config.effective("db-users").policy, "fixed");  // the second pattern
  EXPECT_EQ(config.effective("db-users").bounds.initial, 7);
  EXPECT_FALSE(config.effective("cache-a1").enforce);
  EXPECT_TRUE(config.effective("cache-c1").enforce);  // not in [ab]
  EXPECT_TRUE(config.effective("cache-a12").enforce);  // ? is one character
  EXPECT_EQ(config.table_for("payments"), nullptr);
  EXPECT_EQ(config.effective("payments").bounds.max, 100);
}

// A pattern that an earlier one covers never gives any name its settings:
// valid, but a mistake (a catch-all put first), so it is warned of, at the
// later pattern's line, naming the earlier one.
TEST(ParseConfig, APatternAnEarlierOneShadowsIsWarnedOf) {
  const Config config = parse_config(
      "[dependency.\"db-*\"]\n"           // 1
      "[dependency.\"db-shard-*\"]\n"     // 2: every db-shard-... is a db-...
      "[dependency.\"cache-?\"]\n"        // 3
      "[dependency.\"*\"]\n"              // 4
      "[dependency.\"queue-[ab]*\"]\n"    // 5: under *
      "[dependency.\"*-cache\"]\n",       // 6: under *, and db-*'s names are not all *-cache
      "p.toml");
  EXPECT_EQ(config.patterns.size(), 6u);  // still applied as written
  EXPECT_EQ(config.warnings,
            (std::vector<std::string>{
                "p.toml:2: dependency.\"db-shard-*\": never applies: every name it matches takes "
                "[dependency.\"db-*\"] (line 1), the first pattern in the file that matches it",
                "p.toml:5: dependency.\"queue-[ab]*\": never applies: every name it matches takes "
                "[dependency.\"*\"] (line 4), the first pattern in the file that matches it",
                "p.toml:6: dependency.\"*-cache\": never applies: every name it matches takes "
                "[dependency.\"*\"] (line 4), the first pattern in the file that matches it"}));
  EXPECT_EQ(config.table_for("db-shard-1"), &config.patterns[0]);
}

// Only a pattern every name of which an earlier one matches is warned of:
// the specific before the general, patterns that overlap in part, and a
// name's own table (which wins over any pattern) are all as meant.
TEST(ParseConfig, PatternsThatOverlapOnlyInPartAreNotWarnedOf) {
  const Config config = parse_config(
      "[dependency.\"db-shard-*\"]\n"
      "[dependency.\"db-*\"]\n"
      "[dependency.\"db-shard-?\"]\n"   // db-shard-* covers it, but warned of once only
      "[dependency.\"*-db\"]\n"         // overlaps db-* (db-x-db) but also matches other-db
      "[dependency.\"db-?\"]\n"         // db-* covers it
      "[dependency.\"cache-a?\"]\n"
      "[dependency.\"cache-[ab]?\"]\n"  // cache-b1 is not cache-a?
      "[dependency.\"q?\"]\n"
      "[dependency.\"qa\"]\n"           // a name's own table: no pattern
      "[dependency.\"*x*\"]\n"
      "[dependency.\"[x]\"]\n",         // covered by *x*, but not provably by a bracket
      "p.toml");
  ASSERT_EQ(config.warnings.size(), 2u);
  EXPECT_EQ(config.warnings[0].substr(0, 33), "p.toml:3: dependency.\"db-shard-?\"");
  EXPECT_NE(config.warnings[0].find("takes [dependency.\"db-shard-*\"] (line 1)"), std::string::npos);
  EXPECT_EQ(config.warnings[1].substr(0, 27), "p.toml:5: dependency.\"db-?\"");
}

// The check compares what comes before a pattern's first * and after its
// last with the other's first and last characters before matching them
// whole: covers found by both ends, and near misses at either end.
TEST(ParseConfig, APatternIsShadowedByOneWhoseEndsAreItsOwn) {
  const Config config = parse_config(
      "[dependency.\"svc-*-cache\"]\n"     // 1
      "[dependency.\"svc-eu-*-cache\"]\n"  // 2: under 1
      "[dependency.\"svc-*-cache-?\"]\n"   // 3: ends otherwise
      "[dependency.\"ab*ba\"]\n"           // 4
      "[dependency.\"ab*a\"]\n"            // 5: aba is too short for 4
      "[dependency.\"ab*b*ba\"]\n"         // 6: under 4, which is before 5
      "[dependency.\"xsvc-*-cache\"]\n",   // 7: starts otherwise
      "p.toml");
  ASSERT_EQ(config.warnings.size(), 2u);
  EXPECT_TRUE(config.warnings[0].starts_with("p.toml:2: dependency.\"svc-eu-*-cache\":")) << config.warnings[0];
  EXPECT_NE(config.warnings[0].find("(line 1)"), std::string::npos);
  EXPECT_TRUE(config.warnings[1].starts_with("p.toml:6: dependency.\"ab*b*ba\":")) << config.warnings[1];
  EXPECT_NE(config.warnings[1].find("(line 4)"), std::string::npos);
}

// A ] right after [ or [! is one of the bracket's characters, as fnmatch(3)
// reads it: the pattern checks and the matching agree.
TEST(ParseConfig, APatternBracketMayStartWithItsCloseBracket) {
  const Config config = parse_config("[dependency.\"db-[]a]\"]\nmax_limit = 90\n", "p.toml");
  EXPECT_EQ(config.effective("db-a").bounds.max, 90);
  EXPECT_EQ(config.table_for("db-b"), nullptr);
}

// A pattern may be as long as a name (47 bytes; 48 is refused, below).
TEST(ParseConfig, APatternOfTheLongestNamesLengthIsAccepted) {
  const std::string pattern = "db-*-" + std::string(42, '7');
  ASSERT_EQ(pattern.size(), 47u);
  const Config config = parse_config("[dependency.\"" + pattern + "\"]\nmax_limit = 90\n", "p.toml");
  EXPECT_EQ(config.effective("db-1-" + std::string(42, '7')).bounds.max, 90);
}

// Patterns take no slot of the table unless the daemon is strict, where
// each is published in one for strict clients to match names against.
TEST(ParseConfig, PatternsCountAgainstTheTableOnlyUnderStrict) {
  const std::string tables =
      "[dependency.db]\n[dependency.\"db-*\"]\ninitial_limit = 5\nmax_limit = 5\n[dependency.\"kv-?\"]\n";
  const Config loose = parse_config("[daemon]\nmax_dependencies = 1\n" + tables, "p.toml");
  EXPECT_EQ(loose.patterns.size(), 2u);
  const Config strict = parse_config("[daemon]\nstrict = true\nmax_dependencies = 3\n" + tables, "p.toml");
  EXPECT_TRUE(strict.daemon.strict);
  ASSERT_EQ(strict.patterns.size(), 2u);
  EXPECT_EQ(strict.effective("db-7").bounds.max, 5);
  EXPECT_EQ(error_of([&] { parse_config("[daemon]\nstrict = true\nmax_dependencies = 2\n" + tables, "p.toml"); }),
            "p.toml:8: dependency.\"kv-?\": 1 dependencies and 2 patterns configured, more than "
            "daemon.max_dependencies (2): with daemon.strict = true each pattern takes a slot");
  // Names that fill the table leave no slot for the first pattern.
  EXPECT_EQ(error_of([&] { parse_config("[daemon]\nstrict = true\nmax_dependencies = 1\n" + tables, "p.toml"); }),
            "p.toml:5: dependency.\"db-*\": 1 dependencies and 2 patterns configured, more than "
            "daemon.max_dependencies (1): with daemon.strict = true each pattern takes a slot");
}

// A reload is checked against the segment in use: its capacities keep their
// running values (main.cpp), so a file that raises them cannot make room for
// more configured names or a longer wait queue than the segment has.
TEST(ParseConfig, AReloadIsCheckedAgainstTheRunningCapacities) {
  DaemonConfig running;
  running.max_dependencies = 1;
  running.queue_slots = 4;
  const std::string more_names = "[daemon]\nmax_dependencies = 8\n[dependency.a]\n[dependency.b]\n";
  EXPECT_NO_THROW(parse_config(more_names, "r.toml"));
  EXPECT_EQ(error_of([&] { parse_config(more_names, "r.toml", &running); }),
            "r.toml:4: dependency.b: 2 dependencies configured, more than daemon.max_dependencies (1, the running "
            "value: it changes only on restart)");
  const std::string longer_queue = "[daemon]\nqueue_slots = 64\n[defaults]\nmax_queue = 16\n";
  EXPECT_NO_THROW(parse_config(longer_queue, "r.toml"));
  EXPECT_EQ(error_of([&] { parse_config(longer_queue, "r.toml", &running); }),
            "r.toml:4: defaults.max_queue: must be <= daemon.queue_slots (4, the running value: it changes only on "
            "restart)");
  running.queue_slots = 16;
  EXPECT_EQ(parse_config(longer_queue, "r.toml", &running).defaults.max_queue, 16u);
}

TEST(ParseConfig, AReloadIsCheckedAgainstTheFilesOwnCapacitiesToo) {
  // The running segment has room; the file's own capacities, which the
  // next start creates the segment with, do not.
  DaemonConfig running;
  running.max_dependencies = 8;
  running.queue_slots = 64;
  const std::string fewer_names = "[daemon]\nmax_dependencies = 1\n[dependency.a]\n[dependency.b]\n";
  EXPECT_EQ(error_of([&] { parse_config(fewer_names, "r.toml", &running); }),
            "r.toml:4: dependency.b: 2 dependencies configured, more than daemon.max_dependencies (1)");
  const std::string shorter_queue = "[daemon]\nqueue_slots = 4\n[defaults]\nmax_queue = 16\n";
  EXPECT_EQ(error_of([&] { parse_config(shorter_queue, "r.toml", &running); }),
            "r.toml:4: defaults.max_queue: must be <= daemon.queue_slots (4)");
  // Within both, a reload applies.
  EXPECT_EQ(parse_config("[daemon]\nqueue_slots = 16\n[defaults]\nmax_queue = 16\n", "r.toml", &running)
                .defaults.max_queue,
            16u);
}

TEST(ParseConfig, DefaultsPolicyCarriesToDependencies) {
  const Config config = parse_config(
      "[defaults]\npolicy = \"aimd\"\nbackoff = 0.7\n\n[dependency.db]\nmax_limit = 50\n", "t.toml");
  const DependencyConfig* db = config.find("db");
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->policy, "aimd");
  EXPECT_EQ(db->params, (policies::ParamMap{{"backoff", 0.7}}));
}

TEST(ParseConfig, IntegerPolicyParametersBecomeDoubles) {
  const Config config = parse_config("[defaults]\nprobe_interval_ms = 100\ntolerance = 2\n", "t.toml");
  EXPECT_EQ(config.defaults.params, (policies::ParamMap{{"probe_interval_ms", 100.0}, {"tolerance", 2.0}}));
}

// What bulkheadd logs when it takes a dependency on: the parameters the
// config set, so that an operator sees a bound like baseline_max_ms took.
TEST(ParseConfig, DescribesThePolicyWithTheParametersSet) {
  const Config config = parse_config(
      "[defaults]\ntolerance = 0.4\n[dependency.db]\nbaseline_max_ms = 28\n[dependency.cache]\npolicy = \"fixed\"\n",
      "t.toml");
  EXPECT_EQ(describe_policy(config.effective("db")), "balance (baseline_max_ms=28, tolerance=0.4)");
  EXPECT_EQ(describe_policy(config.effective("other")), "balance (tolerance=0.4)");
  EXPECT_EQ(describe_policy(config.effective("cache")), "fixed");
}

TEST(ParseConfig, EnforceIsInheritedAndOverridden) {
  const Config config = parse_config(
      "[defaults]\nenforce = false\n[dependency.a]\nmin_limit = 2\n[dependency.b]\nenforce = true\n",
      "t.toml");
  EXPECT_FALSE(config.defaults.enforce);
  EXPECT_FALSE(config.find("a")->enforce);  // inherited
  EXPECT_TRUE(config.find("b")->enforce);   // its own
  EXPECT_FALSE(config.effective("unlisted").enforce);
}

TEST(ParseConfig, QueueSettingsAreInheritedAndOverridden) {
  const Config config = parse_config(
      "[daemon]\nqueue_slots = 100\n[defaults]\nmax_queue = 10\nqueue_order = \"lifo\"\n"
      "[dependency.a]\nmin_limit = 2\n[dependency.b]\nmax_queue = 100\nqueue_order = \"fifo\"\n",
      "t.toml");
  EXPECT_EQ(config.daemon.queue_slots, 100u);
  EXPECT_EQ(config.find("a")->max_queue, 10u);  // inherited
  EXPECT_EQ(config.find("a")->queue_order, QueueOrder::kLifo);
  EXPECT_EQ(config.find("b")->max_queue, 100u);  // its own, up to queue_slots
  EXPECT_EQ(config.find("b")->queue_order, QueueOrder::kFifo);
  EXPECT_EQ(config.effective("unlisted").max_queue, 10u);
}

TEST(ParseConfig, BreakerKeysAreInheritedKeyByKey) {
  const Config config = parse_config(
      "[defaults.breaker]\nenabled = true\nfailure_rate_threshold = 0.25\nsleep_window_ms = 2000\n"
      "[dependency.a]\nmin_limit = 2\n"
      "[dependency.b.breaker]\nminimum_calls = 5\nwindow_ms = 30000\nhalf_open_calls = 1\n"
      "slow_call_duration_ms = 250\nslow_call_rate_threshold = 1\nforce = \"open\"\n"
      "[dependency.c.breaker]\nenabled = false\n",
      "t.toml");
  const BreakerSettings builtin;
  EXPECT_FALSE(builtin.enabled);  // off unless a config turns it on
  EXPECT_EQ(builtin.failure_rate_threshold, 0.5);
  EXPECT_EQ(builtin.minimum_calls, 20u);
  EXPECT_EQ(builtin.window, milliseconds(10'000));
  EXPECT_EQ(builtin.sleep_window, milliseconds(5'000));
  EXPECT_FALSE(builtin.slow_calls_on());
  const BreakerSettings& a = config.find("a")->breaker;
  EXPECT_TRUE(a.enabled);
  EXPECT_EQ(a.failure_rate_threshold, 0.25);
  EXPECT_EQ(a.sleep_window, milliseconds(2000));
  EXPECT_EQ(a.minimum_calls, 20u);
  const BreakerSettings& b = config.find("b")->breaker;
  EXPECT_TRUE(b.enabled);  // inherited
  EXPECT_EQ(b.failure_rate_threshold, 0.25);
  EXPECT_EQ(b.minimum_calls, 5u);
  EXPECT_EQ(b.window, milliseconds(30'000));
  EXPECT_EQ(b.half_open_calls, 1u);
  EXPECT_EQ(b.slow_call_duration, milliseconds(250));
  EXPECT_EQ(b.slow_call_rate_threshold, 1.0);
  EXPECT_EQ(b.force, BreakerForce::kOpen);
  EXPECT_FALSE(config.find("c")->breaker.enabled);
  EXPECT_TRUE(config.effective("unlisted").breaker.enabled);
}

TEST(ParseConfig, PartitionsTakeSharesAndHardCapsInFileOrder) {
  const Config config = parse_config(
      "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\ncritical = 0.7\n"
      "batch = { share = 0.2, hard_cap = true }\ndefault = 0.1\n",
      "t.toml");
  const auto& parts = config.find("db")->partitions;
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], (PartitionConfig{"critical", 700'000, false}));
  EXPECT_EQ(parts[1], (PartitionConfig{"batch", 200'000, true}));
  EXPECT_EQ(parts[2], (PartitionConfig{"default", 100'000, false}));
  EXPECT_TRUE(config.effective("unlisted").partitions.empty());
}

TEST(ParseConfig, MetricsCanBeTurnedOff) {
  EXPECT_EQ(parse_config("[daemon]\nmetrics_listen = \"\"\n", "t.toml").daemon.metrics_listen, "");
  EXPECT_EQ(parse_config("[daemon]\nmetrics_listen = \"0.0.0.0:0\"\n", "t.toml").daemon.metrics_listen,
            "0.0.0.0:0");
}

TEST(ParseConfig, MetricsListenOnAnAddressOrAHostName) {
  for (const char* address : {"255.255.255.255:9477", "localhost:9477", "metrics-1.example:9477", "[::]:9477",
                              "[2001:db8::1]:9477", "[::ffff:127.0.0.1]:9477"}) {
    EXPECT_EQ(parse_config(std::string("[daemon]\nmetrics_listen = \"") + address + "\"\n", "t.toml")
                  .daemon.metrics_listen,
              address);
  }
}

// Every range includes its ends: each value below is the edge of its rule.
TEST(ParseConfig, TheEdgesOfEachRangeAreAccepted) {
  // A pinned limit (min = initial = max), as a static bulkhead is; an
  // initial limit at the minimum; the most a partitioned limit may be.
  const Config limits = parse_config(
      "[dependency.pinned]\npolicy = \"fixed\"\nmin_limit = 12\ninitial_limit = 12\nmax_limit = 12\n"
      "[dependency.low]\nmin_limit = 3\ninitial_limit = 3\n"
      "[dependency.split]\nmax_limit = 32767\n[dependency.split.partitions]\ncritical = 0.5\n",
      "t.toml");
  EXPECT_EQ(limits.find("pinned")->bounds.min, 12);
  EXPECT_EQ(limits.find("pinned")->bounds.max, 12);
  EXPECT_EQ(limits.find("low")->bounds.initial, 3);
  EXPECT_EQ(limits.find("split")->bounds.max, 32767);
  // A five-digit port, a 256-byte group name.
  const Config daemon = parse_config("[daemon]\nmetrics_listen = \"127.0.0.1:65535\"\n"
                                     "segment_group = \"" + std::string(256, 'g') + "\"\n",
                                     "t.toml");
  EXPECT_EQ(daemon.daemon.metrics_listen, "127.0.0.1:65535");
  EXPECT_EQ(daemon.daemon.segment_group.size(), 256u);
  EXPECT_EQ(error_of([] { parse_config("[daemon]\nsegment_group = \"" + std::string(257, 'g') + "\"\n", "t.toml"); }),
            "t.toml:2: daemon.segment_group: is longer than 256 bytes");
  // As many dependencies as the segment has slots.
  std::string full = "[daemon]\nmax_dependencies = 3\n";
  for (const char* name : {"a", "b", "c"}) full += std::string("[dependency.") + name + "]\n";
  EXPECT_EQ(parse_config(full, "t.toml").dependencies.size(), 3u);
}

TEST_F(ConfigFileTest, AFileOfTheLargestSizeIsRead) {
  // 16 MiB exactly: a table and then comment lines.
  std::string text = "[daemon]\ntick_ms = 200\n";
  const std::string line = "# " + std::string(1021, '-') + "\n";  // 1 KiB
  while (text.size() + line.size() <= (16u << 20)) text += line;
  text += std::string((16u << 20) - text.size() - 1, '#') + "\n";
  ASSERT_EQ(text.size(), 16u << 20);
  EXPECT_EQ(load_config_file(write_file("big.toml", text)).daemon.tick.count(), 200);
  text += "\n";
  EXPECT_NE(error_of([&] { load_config_file(write_file("bigger.toml", text)); }).find("larger than 16 MiB"),
            std::string::npos);
}

// A read that fails for a reason of the machine's (here EIO: /proc/self/mem
// opens, and reading address 0 fails) is no config error: the daemon exits
// 1 for it, which systemd retries, not 78.
TEST(LoadConfigFile, AFailedReadIsNotAConfigError) {
  EXPECT_EQ(error_of([] { load_config_file("/proc/self/mem"); }),
            "not a ConfigError: /proc/self/mem: cannot read: Input/output error");
}

TEST(ParseConfig, ErrorsNameTheGivenSource) {
  EXPECT_EQ(error_of([] { parse_config("[daemon]\ntick_ms = 1\n", "<stdin>"); }),
            "<stdin>:2: daemon.tick_ms: must be in [10, 60000]");
  EXPECT_EQ(error_of([] { parse_config("[daemon\n", "<stdin>"); }).rfind("<stdin>:1:", 0), 0u);
}

// ---------------------------------------------------------------------------
// Broken configs: each one loaded from a file and refused with exactly this
// message (the directory comes first; syntax errors are checked up to the
// column, after which toml++ words them).

enum class Kind { kFile, kMissing, kDirectory, kFifo };

struct BadConfig {
  const char* name;      // the test's name
  const char* text;      // written to bad.toml
  const char* expected;  // the message starts with the directory, then this
  Kind kind = Kind::kFile;
};

void PrintTo(const BadConfig& c, std::ostream* out) { *out << c.name; }

const BadConfig kBadConfigs[] = {
    // Syntax: FILE:LINE:COL.
    {"SyntaxMissingValue", "[daemon]\ntick_ms =\n", "bad.toml:2:10: syntax error: "},
    {"SyntaxDuplicateKey", "[daemon]\ntick_ms = 100\ntick_ms = 200\n", "bad.toml:3:"},
    {"SyntaxDuplicateTable", "[daemon]\n\n[daemon]\n", "bad.toml:3:"},
    {"SyntaxNotUtf8", "[daemon]\nsegment = \"\xff\"\n", "bad.toml:2:"},

    // Tables and keys nobody knows.
    {"UnknownTable", "[daemon]\ntick_ms = 100\n\n[deamon]\n",
     "bad.toml:4: deamon: unknown table (the tables are [daemon], [defaults] and [dependency.NAME])"},
    {"UnknownTopLevelKey", "tick_ms = 100\n[daemon]\n",
     "bad.toml:1: tick_ms: unknown key (keys belong in [daemon], [defaults] or [dependency.NAME]: one above the "
     "file's first [table] line is in none)"},
    {"DaemonNotATable", "daemon = \"on\"\n", "bad.toml:1: daemon: must be a table"},
    {"UnknownDaemonKey", "[daemon]\ntick = 100\n", "bad.toml:2: daemon.tick: unknown key"},
    {"UnknownDaemonTable", "[daemon]\n[daemon.limits]\nx = 1\n",
     "bad.toml:2: daemon.limits: unknown table"},
    {"UnknownDefaultsKey", "[defaults]\npolcy = \"aimd\"\n",
     "bad.toml:2: defaults.polcy: unknown key (policy parameters are numbers)"},
    {"UnknownDefaultsTable", "[defaults.aimd]\nbackoff = 0.8\n",
     "bad.toml:1: defaults.aimd: unknown table"},
    {"UnknownDependencyKey", "[dependency.payments-db]\npolicy = \"aimd\"\nmode = \"fast\"\n",
     "bad.toml:3: dependency.payments-db.mode: unknown key (policy parameters are numbers)"},
    {"DependencyNotATable", "[dependency]\npayments-db = 5\n",
     "bad.toml:2: dependency.payments-db: must be a table: [dependency.NAME]"},
    {"DottedNameNotQuoted", "[dependency.search.v2]\nmax_limit = 50\n",
     "bad.toml:1: dependency.search.v2: unknown table (a dependency name with a dot must be "
     "quoted: [dependency.\"NAME.WITH.DOTS\"])"},

    // Types.
    {"TickNotAnInteger", "[daemon]\ntick_ms = \"100\"\n",
     "bad.toml:2: daemon.tick_ms: must be an integer"},
    {"TickFraction", "[daemon]\ntick_ms = 99.5\n", "bad.toml:2: daemon.tick_ms: must be an integer"},
    {"StrictNotABoolean", "[daemon]\nstrict = \"yes\"\n",
     "bad.toml:2: daemon.strict: must be a boolean (true or false)"},
    {"SegmentNotAString", "[daemon]\nsegment = 5\n", "bad.toml:2: daemon.segment: must be a string"},
    {"ReserveNotABoolean", "[daemon]\nsegment_reserve = 1\n",
     "bad.toml:2: daemon.segment_reserve: must be a boolean (true or false)"},
    {"MetricsHostWithASpace", "[daemon]\nmetrics_listen = \"local host:9477\"\n",
     "bad.toml:2: daemon.metrics_listen: host must not contain spaces"},
    {"ModeNotAnInteger", "[daemon]\nsegment_mode = \"0660\"\n",
     "bad.toml:2: daemon.segment_mode: must be an integer, e.g. 0o660"},
    {"MinLimitFraction", "[defaults]\nmin_limit = 1.5\n",
     "bad.toml:2: defaults.min_limit: must be an integer (a number of calls)"},
    {"MaxLimitFraction", "[dependency.db]\nmax_limit = 99.9\n",
     "bad.toml:2: dependency.db.max_limit: must be an integer (a number of calls)"},
    {"PolicyNotAString", "[dependency.db]\npolicy = 2\n",
     "bad.toml:2: dependency.db.policy: must be a string"},
    {"ParamNotANumber", "[defaults]\nsmoothing = \"0.2\"\n",
     "bad.toml:2: defaults.smoothing: unknown key: no parameter of policy balance (and policy parameters "
     "are numbers)"},
    {"ParamABoolean", "[dependency.db]\nother_hosts = true\n",
     "bad.toml:2: dependency.db.other_hosts: must be a number, not a boolean (a parameter of policy balance)"},
    {"ParamAString", "[dependency.db]\nbackoff = \"0.9\"\npolicy = \"aimd\"\n",
     "bad.toml:2: dependency.db.backoff: must be a number, not a string (a parameter of policy aimd)"},
    {"OtherPolicysParamABoolean", "[defaults]\npolicy = \"vegas\"\n\n[dependency.db]\nother_hosts = true\n",
     "bad.toml:5: dependency.db.other_hosts: unknown key: no parameter of policy vegas (and policy "
     "parameters are numbers)"},
    {"NotNumbersInFileOrder", "[dependency.db]\nother_hosts = true\nbackoff = \"0.9\"\n",
     "bad.toml:2: dependency.db.other_hosts: must be a number, not a boolean (a parameter of policy balance)"},
    {"TypoBeforeABadSetting", "[defaults]\npolcy = \"aimd\"\nmin_limit = 0\n",
     "bad.toml:2: defaults.polcy: unknown key (policy parameters are numbers)"},
    {"ParamNotFinite", "[defaults]\nsmoothing = nan\n",
     "bad.toml:2: defaults.smoothing: must be a finite number"},

    // Ranges.
    {"TickTooShort", "# ticks\n[daemon]\ntick_ms = 5\n",
     "bad.toml:3: daemon.tick_ms: must be in [10, 60000]"},
    {"TickTooLong", "[daemon]\ntick_ms = 60001\n", "bad.toml:2: daemon.tick_ms: must be in [10, 60000]"},
    {"MaxDependenciesZero", "[daemon]\nmax_dependencies = 0\n",
     "bad.toml:2: daemon.max_dependencies: must be in [1, 16384]"},
    {"MaxProcessesTooMany", "[daemon]\nmax_processes = 4097\n",
     "bad.toml:2: daemon.max_processes: must be in [1, 4096]"},
    {"StatsStripesTooMany", "[daemon]\nstats_stripes = 65\n",
     "bad.toml:2: daemon.stats_stripes: must be in [1, 64]"},
    {"StatsStripesNotAuto", "[daemon]\nstats_stripes = \"many\"\n",
     "bad.toml:2: daemon.stats_stripes: must be \"auto\" or an integer in [1, 64]"},
    {"WindowMinSamplesZero", "[defaults]\nwindow_min_samples = 0\n",
     "bad.toml:2: defaults.window_min_samples: must be in [1, 1000000]"},
    {"WindowMaxMsTooLong", "[dependency.db]\nwindow_max_ms = 600001\n",
     "bad.toml:2: dependency.db.window_max_ms: must be in [1, 600000]"},
    {"MinLimitZero", "[defaults]\nmin_limit = 0\n",
     "bad.toml:2: defaults.min_limit: must be in [1, 1000000]"},
    {"MaxLimitHuge", "[defaults]\nmax_limit = 2000000\n",
     "bad.toml:2: defaults.max_limit: must be in [1, 1000000]"},
    {"ModeNone", "[daemon]\nsegment_mode = 0o000\n",
     "bad.toml:2: daemon.segment_mode: must give the owner read and write (0o600), got 0o000"},
    {"ModeWorldWritable", "[daemon]\nsegment_mode = 0o666\n",
     "bad.toml:2: daemon.segment_mode: must not give others any access (o+rwx), got 0o666: the "
     "segment is never world-accessible"},
    {"ModeWorldReadable", "[daemon]\nsegment_mode = 0o604\n",
     "bad.toml:2: daemon.segment_mode: must not give others any access (o+rwx), got 0o604"},
    {"ModeOwnerCannotWrite", "[daemon]\nsegment_mode = 0o460\n",
     "bad.toml:2: daemon.segment_mode: must give the owner read and write (0o600), got 0o460"},
    {"ModeWrittenInDecimal", "[daemon]\nsegment_mode = 660\n",
     "bad.toml:2: daemon.segment_mode: must be permission bits in [0o000, 0o777], got 0o1224 "
     "(write it in octal, e.g. 0o660)"},
    {"ModeNegative", "[daemon]\nsegment_mode = -432\n",
     "bad.toml:2: daemon.segment_mode: must be permission bits in [0o000, 0o777], got -0o660 "},
    {"ModeMostNegative", "[daemon]\nsegment_mode = -9223372036854775808\n",
     "bad.toml:2: daemon.segment_mode: must be permission bits in [0o000, 0o777], got "
     "-0o1000000000000000000000 "},
    {"MetricsIpv6WithAStrayBracket", "[daemon]\nmetrics_listen = \"[::1]]:80\"\n",
     "bad.toml:2: daemon.metrics_listen: must be \"host:port\", or \"\" to turn metrics off"},
    {"MetricsWithoutPort", "[daemon]\nmetrics_listen = \"localhost\"\n",
     "bad.toml:2: daemon.metrics_listen: must be \"host:port\", or \"\" to turn metrics off"},
    {"MetricsPortTooHigh", "[daemon]\nmetrics_listen = \"127.0.0.1:65536\"\n",
     "bad.toml:2: daemon.metrics_listen: port must be a number in [0, 65535]"},
    {"MetricsIpv6WithoutBrackets", "[daemon]\nmetrics_listen = \"::1:9477\"\n",
     "bad.toml:2: daemon.metrics_listen: an IPv6 host must be in brackets, e.g. \"[::1]:9477\""},
    // The exporter would listen on 231.1.1.1 and 127.0.1.0 (each number
    // modulo 256), and fail to on 127.1.
    {"PolicyParametersAsATable", "[dependency.a]\npolicy = \"balance\"\nbalance.tolerance = 0.3\n",
     "bad.toml:3: dependency.a.balance: unknown table (a policy's parameters are keys of the table they tune: "
     "write tolerance = ... there, not balance.tolerance; policy = \"balance\" chooses the policy)"},
    {"PolicyParametersAsATableOfDefaults", "[defaults.aimd]\nbackoff = 0.8\n",
     "bad.toml:1: defaults.aimd: unknown table (a policy's parameters are keys of the table they tune: "
     "write backoff = ... there, not aimd.backoff; policy = \"aimd\" chooses the policy)"},
    {"MetricsIpv4NumberPast255", "[daemon]\nmetrics_listen = \"999.1.1.1:9477\"\n",
     "bad.toml:2: daemon.metrics_listen: host must be an IPv4 address of four numbers in [0, 255], e.g. "
     "127.0.0.1, or a host name"},
    {"MetricsIpv4LastNumberPast255", "[daemon]\nmetrics_listen = \"127.0.0.256:9477\"\n",
     "bad.toml:2: daemon.metrics_listen: host must be an IPv4 address of four numbers in [0, 255], e.g. "
     "127.0.0.1, or a host name"},
    {"MetricsIpv4ShortForm", "[daemon]\nmetrics_listen = \"127.1:9477\"\n",
     "bad.toml:2: daemon.metrics_listen: host must be an IPv4 address of four numbers in [0, 255], e.g. "
     "127.0.0.1, or a host name"},
    {"MetricsIpv6NotAnAddress", "[daemon]\nmetrics_listen = \"[::g]:9477\"\n",
     "bad.toml:2: daemon.metrics_listen: host in brackets must be an IPv6 address"},
    {"LogLevelUnknown", "[daemon]\nlog_level = \"verbose\"\n",
     "bad.toml:2: daemon.log_level: must be one of trace, debug, info, warn, error"},
    {"GroupWithSpace", "[daemon]\nsegment_group = \"bulk head\"\n",
     "bad.toml:2: daemon.segment_group: must be a group name: no spaces, ':', ',' or '/'"},

    // Names.
    {"SegmentWithSlash", "[daemon]\nsegment = \"bulk/head\"\n",
     "bad.toml:2: daemon.segment: name has a character other than A-Z a-z 0-9 . _ -"},
    {"SegmentDotDot", "[daemon]\nsegment = \"..\"\n",
     "bad.toml:2: daemon.segment: name must not be \".\" or \"..\""},
    {"SegmentEmpty", "[daemon]\nsegment = \"\"\n", "bad.toml:2: daemon.segment: name is empty"},
    {"DependencyNameWithSpace", "[dependency.\"payments db\"]\n",
     "bad.toml:1: dependency.\"payments db\": name has a character other than A-Z a-z 0-9 . _ -"},
    {"DependencyNameTooLong", "\n[dependency.a23456789012345678901234567890123456789012345678]\n",
     "bad.toml:2: dependency.a23456789012345678901234567890123456789012345678: name is longer "
     "than 47 bytes"},

    // Policies: the factory's reason, at the key it names.
    {"UnknownPolicyInDefaults", "[defaults]\npolicy = \"bbr\"\n",
     "bad.toml:2: defaults.policy: unknown policy \"bbr\" (known: aimd, balance, fixed, gradient, "
     "gradient2, vegas)"},
    {"UnknownPolicyInDependency", "[dependency.db]\nmax_limit = 10\npolicy = \"Aimd\"\n",
     "bad.toml:3: dependency.db.policy: unknown policy \"Aimd\" (known: aimd, balance, fixed, "
     "gradient, gradient2, vegas)"},
    {"UnknownPolicyInline", "dependency = { db = { policy = \"bbr\" } }\n",
     "bad.toml:1: dependency.db.policy: unknown policy \"bbr\""},
    {"UnknownParamInDefaults", "[defaults]\ngrowth = 0.3\nbogus = 1\n",
     "bad.toml:3: defaults.bogus: unknown parameter 'bogus' for policy 'balance' (known: "
     "backoff, baseline_follow, baseline_max_ms, drop_threshold, growth, latency_samples, "
     "other_hosts, probe_factor, probe_interval_ms, tolerance)"},
    {"ParamOfAnotherPolicy",
     "[defaults]\ngrowth = 0.3\n\n[dependency.payments-db]\npolicy = \"aimd\"\ngrowth = 0.5\n",
     "bad.toml:6: dependency.payments-db.growth: unknown parameter 'growth' for policy 'aimd'"},
    {"FixedTakesNoParams", "[dependency.cache]\npolicy = \"fixed\"\ninitial_limit = 50\nbackoff = 0.9\n",
     "bad.toml:4: dependency.cache.backoff: unknown parameter 'backoff' for policy 'fixed'"},
    {"BackoffOutOfRange", "[dependency.payments-db]\npolicy = \"aimd\"\nbackoff = 1.5\n",
     "bad.toml:3: dependency.payments-db.backoff: policy aimd: must be in [0.5, 1)"},
    {"OtherHostsNotZeroOrOne", "[dependency.db]\nother_hosts = 2\n",
     "bad.toml:2: dependency.db.other_hosts: policy balance: must be an integer in [0, 1]"},
    {"RuleBetweenTwoKeys", "[dependency.db]\npolicy = \"vegas\"\nalpha_factor = 7\nbeta_factor = 6\n",
     "bad.toml:4: dependency.db.beta_factor: policy vegas: must be >= alpha_factor (7)"},
    {"RuleBetweenTwoKeysAtADefault", "[dependency.db]\npolicy = \"vegas\"\nalpha_factor = 7\n",
     "bad.toml:1: dependency.db.beta_factor: policy vegas: must be >= alpha_factor (7) (the policy's "
     "default)"},
    {"EnforceNotBoolean", "[dependency.db]\nenforce = \"no\"\n",
     "bad.toml:2: dependency.db.enforce: must be a boolean (true or false)"},
    {"MaxQueueNegative", "[defaults]\nmax_queue = -1\n",
     "bad.toml:2: defaults.max_queue: must be in [0, 1024]"},
    {"MaxQueueFraction", "[dependency.db]\nmax_queue = 2.5\n",
     "bad.toml:2: dependency.db.max_queue: must be an integer (a number of waiting calls)"},
    {"MaxQueueOverQueueSlots", "[daemon]\nqueue_slots = 16\n\n[dependency.db]\nmax_queue = 17\n",
     "bad.toml:5: dependency.db.max_queue: must be <= daemon.queue_slots (16)"},
    {"MaxQueueOverQueueSlotsSetLater", "[defaults]\nmax_queue = 100\n[daemon]\nqueue_slots = 10\n",
     "bad.toml:2: defaults.max_queue: must be <= daemon.queue_slots (10)"},
    {"MaxQueueOverTheDefaultQueueSlots", "[dependency.db]\nmax_queue = 65\n",
     "bad.toml:2: dependency.db.max_queue: must be <= daemon.queue_slots (64)"},
    {"MaxQueueInDefaultsAfterTheDependencies", "[daemon]\nqueue_slots = 0\n[dependency.db]\nmax_queue = 0\n"
     "[defaults]\nmax_queue = 3\n",
     "bad.toml:6: defaults.max_queue: must be <= daemon.queue_slots (0)"},
    {"QueueOrderUnknown", "[dependency.db]\nqueue_order = \"random\"\n",
     "bad.toml:2: dependency.db.queue_order: must be \"fifo\" or \"lifo\", got \"random\""},
    {"QueueOrderUpperCase", "[defaults]\nqueue_order = \"FIFO\"\n",
     "bad.toml:2: defaults.queue_order: must be \"fifo\" or \"lifo\", got \"FIFO\""},
    {"QueueOrderNotAString", "[defaults]\nqueue_order = 1\n",
     "bad.toml:2: defaults.queue_order: must be a string"},
    {"QueueSlotsTooMany", "[daemon]\nqueue_slots = 1025\n",
     "bad.toml:2: daemon.queue_slots: must be in [0, 1024]"},
    {"LongWindowFraction", "[defaults]\npolicy = \"gradient2\"\nlong_window = 2.5\n",
     "bad.toml:3: defaults.long_window: policy gradient2: must be an integer >= 1"},
    {"QuotedNameInKeyPath", "[dependency.\"search.v2\"]\ntolerance = 0\n",
     "bad.toml:2: dependency.\"search.v2\".tolerance: policy balance: must be in (0, 2]"},

    // The circuit breaker.
    {"BreakerUnknownKey", "[dependency.db.breaker]\nenabled = true\nthreshold = 0.5\n",
     "bad.toml:3: dependency.db.breaker.threshold: unknown key"},
    {"BreakerRateAboveOne", "[defaults.breaker]\nfailure_rate_threshold = 50\n",
     "bad.toml:2: defaults.breaker.failure_rate_threshold: must be in (0, 1], a fraction of calls (0.5 is 50%)"},
    {"BreakerRateZero", "[dependency.db.breaker]\nslow_call_rate_threshold = 0.0\n",
     "bad.toml:2: dependency.db.breaker.slow_call_rate_threshold: must be in (0, 1]"},
    {"BreakerRateJustAboveOne", "[defaults.breaker]\nfailure_rate_threshold = 1.0000001\n",
     "bad.toml:2: defaults.breaker.failure_rate_threshold: must be in (0, 1], a fraction of calls (0.5 is 50%), "
     "got 1.0000001"},
    {"BreakerRateJustBelowZero", "[defaults.breaker]\nslow_call_rate_threshold = -0.0000001\n",
     "bad.toml:2: defaults.breaker.slow_call_rate_threshold: must be in (0, 1], a fraction of calls (0.5 is 50%), "
     "got -1e-07"},
    {"BreakerRateNotANumber", "[dependency.db.breaker]\nfailure_rate_threshold = \"half\"\n",
     "bad.toml:2: dependency.db.breaker.failure_rate_threshold: must be a number in (0, 1]"},
    {"BreakerForceUnknown", "[dependency.db.breaker]\nforce = \"half_open\"\n",
     "bad.toml:2: dependency.db.breaker.force: must be \"auto\", \"open\" or \"closed\", got \"half_open\""},
    {"BreakerEnabledNotBoolean", "[dependency.db.breaker]\nenabled = 1\n",
     "bad.toml:2: dependency.db.breaker.enabled: must be a boolean (true or false)"},
    {"BreakerMinimumCallsZero", "[dependency.db.breaker]\nminimum_calls = 0\n",
     "bad.toml:2: dependency.db.breaker.minimum_calls: must be in [1, 1000000]"},
    {"BreakerHalfOpenCallsTooMany", "[dependency.db.breaker]\nhalf_open_calls = 1001\n",
     "bad.toml:2: dependency.db.breaker.half_open_calls: must be in [1, 1000]"},
    {"BreakerSleepWindowTooShort", "[dependency.db.breaker]\nsleep_window_ms = 5\n",
     "bad.toml:2: dependency.db.breaker.sleep_window_ms: must be in [10, 3600000]"},
    {"BreakerSlowDurationNegative", "[dependency.db.breaker]\nslow_call_duration_ms = -1\n",
     "bad.toml:2: dependency.db.breaker.slow_call_duration_ms: must be in [0, 600000]"},
    {"BreakerNotATable", "[dependency.db]\nbreaker = true\n",
     "bad.toml:2: dependency.db.breaker: must be a table: [dependency.db.breaker]"},

    // Limits in order, told at the key this table set.
    {"MinAboveMax", "[defaults]\nmin_limit = 50\nmax_limit = 10\ninitial_limit = 10\n",
     "bad.toml:3: defaults.max_limit: must be >= min_limit (50)"},
    {"MinAboveBuiltinMax", "[defaults]\nmin_limit = 2000\n",
     "bad.toml:2: defaults.min_limit: must be <= max_limit (1000, the default)"},
    {"MinAboveInheritedMax", "[defaults]\nmax_limit = 100\n\n[dependency.db]\nmin_limit = 200\n",
     "bad.toml:5: dependency.db.min_limit: must be <= max_limit (100, from [defaults])"},
    {"InitialAboveMax", "[defaults]\ninitial_limit = 5000\n",
     "bad.toml:2: defaults.initial_limit: must be in [min_limit, max_limit] = [1, 1000]"},
    {"InitialBelowMin", "[dependency.db]\nmin_limit = 10\ninitial_limit = 5\n",
     "bad.toml:3: dependency.db.initial_limit: must be in [min_limit, max_limit] = [10, 1000]"},
    {"InheritedInitialAboveMax", "[dependency.db]\nmax_limit = 10\n",
     "bad.toml:2: dependency.db.max_limit: must be >= initial_limit (20, from [defaults])"},
    {"InheritedInitialBelowMin", "[dependency.db]\nmin_limit = 30\n",
     "bad.toml:2: dependency.db.min_limit: must be <= initial_limit (20, from [defaults])"},

    // Partitions.
    {"PartitionShareAboveOne", "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\na = 1.5\n",
     "bad.toml:4: dependency.db.partitions.a: must be a share of the limit in (0, 1], got 1.5"},
    {"PartitionShareJustAboveOne", "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\na = 1.0000001\n",
     "bad.toml:4: dependency.db.partitions.a: must be a share of the limit in (0, 1], got 1.0000001"},
    {"PartitionShareZero", "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\na = 0\n",
     "bad.toml:4: dependency.db.partitions.a: must be a share of the limit in (0, 1], got 0"},
    // A share in (0, 1] that would be 0 in millionths: a hard-capped partition would admit nothing.
    {"PartitionShareUnderAMillionth",
     "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\na = { share = 0.0000001, hard_cap = true }\n",
     "bad.toml:4: dependency.db.partitions.a.share: must be a share of the limit of at least 0.000001 (shares count "
     "in millionths), got 1e-07"},
    {"PartitionShareNotANumber", "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\na = \"half\"\n",
     "bad.toml:4: dependency.db.partitions.a: must be a share of the limit, a number in (0, 1], e.g. 0.3"},
    {"PartitionSharesAboveOne",
     "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\na = 0.7\nb = 0.4\n",
     "bad.toml:5: dependency.db.partitions.b: the shares sum to more than 1"},
    {"PartitionTooMany",
     "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\na = 0.1\nb = 0.1\nc = 0.1\n",
     "bad.toml:6: dependency.db.partitions.c: at most 2 partitions besides \"default\""},
    {"PartitionBadName", "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\n\"a b\" = 0.1\n",
     "bad.toml:4: dependency.db.partitions.\"a b\": name has a character other than A-Z a-z 0-9 . _ -"},
    {"PartitionNameTooLong",
     "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\nabcdefghijklmnop = 0.1\n",
     "bad.toml:4: dependency.db.partitions.abcdefghijklmnop: name is longer than 15 bytes"},
    {"PartitionUnknownKey",
     "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\na = { share = 0.1, cap = true }\n",
     "bad.toml:4: dependency.db.partitions.a.cap: unknown key (a partition has share and hard_cap)"},
    {"PartitionWithoutShare",
     "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\na = { hard_cap = true }\n",
     "bad.toml:4: dependency.db.partitions.a: needs a share"},
    {"PartitionsEmpty", "[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\n",
     "bad.toml:3: dependency.db.partitions: must name at least one partition"},
    {"PartitionsInDefaults", "[defaults]\n[defaults.partitions]\na = 0.5\n",
     "bad.toml:2: defaults.partitions: partitions belong to one dependency: not allowed in [defaults]"},
    {"PartitionedLimitAbove15Bits",
     "[dependency.db]\nmax_limit = 32768\n[dependency.db.partitions]\na = 0.5\n",
     "bad.toml:2: dependency.db.max_limit: must be <= 32767 for a dependency with partitions"},
    {"PartitionedInheritedLimitAbove15Bits",
     "[defaults]\nmax_limit = 70000\n[dependency.db]\n[dependency.db.partitions]\na = 0.5\n",
     "bad.toml:3: dependency.db.max_limit: must be <= 32767 for a dependency with partitions (their counts are "
     "signed 16-bit numbers) (from [defaults])"},
    {"PartitionedWithAQueue",
     "[defaults]\nmax_queue = 4\n[dependency.db]\nmax_limit = 100\n[dependency.db.partitions]\na = 0.5\n",
     "bad.toml:3: dependency.db.max_queue: must be 0 for a dependency with partitions (partitions have no wait "
     "queue) (from [defaults]: set max_queue = 0 here)"},

    // Patterns.
    {"PatternWithABadCharacter", "[dependency.\"db/*\"]\n",
     "bad.toml:1: dependency.\"db/*\": pattern has a character other than A-Z a-z 0-9 . _ - and * ? [ ] !"},
    {"PatternWithAnOpenBracket", "[dependency.\"db-[ab\"]\n",
     "bad.toml:1: dependency.\"db-[ab\": pattern has a [ without its ]"},
    // Brackets as fnmatch(3) reads them: a ] right after [ or [! is in the
    // set, so these never close; a ] or ! outside one is a literal no name has.
    {"PatternWithAnEmptyBracket", "[dependency.\"db-[]\"]\n",
     "bad.toml:1: dependency.\"db-[]\": pattern has a [ without its ] (a ] right after [ or [! is one of its "
     "characters)"},
    {"PatternWithAnEmptyNegatedBracket", "[dependency.\"db-[!]\"]\n",
     "bad.toml:1: dependency.\"db-[!]\": pattern has a [ without its ]"},
    {"PatternWithAStrayCloseBracket", "[dependency.\"db-]*\"]\n",
     "bad.toml:1: dependency.\"db-]*\": pattern has a ] without its ["},
    {"PatternWithABangOutsideBrackets", "[dependency.\"!db*\"]\n",
     "bad.toml:1: dependency.\"!db*\": pattern has a ! outside [...] (write [!...] for any character but those)"},
    {"PatternWithABangInsideABracket", "[dependency.\"db-[a!]\"]\n",
     "bad.toml:1: dependency.\"db-[a!]\": pattern has a ! inside [...] other than first"},
    {"PatternWithAStarInsideABracket", "[dependency.\"db-[*]\"]\n",
     "bad.toml:1: dependency.\"db-[*]\": pattern has a character other than A-Z a-z 0-9 . _ - inside [...]"},
    {"PatternTooLong", "[dependency.\"db-*-0123456789012345678901234567890123456789012\"]\n",
     "bad.toml:1: dependency.\"db-*-0123456789012345678901234567890123456789012\": pattern is longer than 47 bytes"},
    // A strict daemon gives each pattern a slot; without strict, none.
    {"PatternsUnderStrictBeyondTheTable",
     "[daemon]\nstrict = true\nmax_dependencies = 2\n[dependency.db]\n[dependency.\"db-*\"]\n[dependency.\"kv-*\"]\n",
     "bad.toml:6: dependency.\"kv-*\": 1 dependencies and 2 patterns configured, more than "
     "daemon.max_dependencies (2): with daemon.strict = true each pattern takes a slot"},
    {"PatternKeyChecked", "[dependency.\"db-*\"]\nmax_limt = 5\n",
     "bad.toml:2: dependency.\"db-*\".max_limt: unknown parameter 'max_limt' for policy 'balance'"},

    // Whole-file checks.
    {"TooManyDependencies",
     "[daemon]\nmax_dependencies = 2\n\n[dependency.c]\n[dependency.a]\n[dependency.b]\n",
     "bad.toml:6: dependency.b: 3 dependencies configured, more than daemon.max_dependencies (2)"},
    {"FirstErrorInFileOrder", "[daemon]\ntick_ms = 1\nmax_processes = 0\n",
     "bad.toml:2: daemon.tick_ms: must be in [10, 60000]"},
    {"FirstTableInFileOrder", "[dependency.b]\nmin_limit = 0\n[dependency.a]\nmin_limit = 0\n",
     "bad.toml:2: dependency.b.min_limit: must be in [1, 1000000]"},

    // Files.
    {"MissingFile", nullptr, "missing.toml: cannot read: No such file or directory", Kind::kMissing},
    {"Directory", nullptr, "bad.toml: cannot read: Is a directory", Kind::kDirectory},
    // Opened as a file is, it blocked until someone wrote it: a reload took
    // the daemon loop with it.
    {"Fifo", nullptr, "bad.toml: cannot read: not a regular file but a FIFO", Kind::kFifo},
};

class BadConfigTest : public ConfigFileTest, public ::testing::WithParamInterface<BadConfig> {};

TEST_P(BadConfigTest, IsRefusedWithFileLineKeyAndReason) {
  const BadConfig& c = GetParam();
  std::string path;
  switch (c.kind) {
    case Kind::kFile:
      path = write_file("bad.toml", c.text);
      break;
    case Kind::kMissing:
      path = path_of("missing.toml");
      break;
    case Kind::kDirectory:
      path = path_of("bad.toml");
      ASSERT_EQ(::mkdir(path.c_str(), 0700), 0);
      break;
    case Kind::kFifo:
      path = path_of("bad.toml");
      ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
      break;
  }
  const std::string message = error_of([&] { load_config_file(path); });
  const std::string expected = dir_ + "/" + c.expected;
  EXPECT_EQ(message.substr(0, expected.size()), expected) << "whole message: " << message;
}

INSTANTIATE_TEST_SUITE_P(ConfigErrors, BadConfigTest, ::testing::ValuesIn(kBadConfigs),
                         [](const ::testing::TestParamInfo<BadConfig>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace bulkhead::daemon
