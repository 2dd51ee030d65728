// Running a scenario for every policy and the two references, and what is
// reported of it: the summary metrics (docs/simulator.md defines each), a
// fixed-width table, the CSV time series, JSON, and a gnuplot script.
//
// Every number printed is a function of the scenario and the policies
// alone: the same inputs give the same bytes, whatever `jobs` is.
//
// Thread-safety: run_scenario() uses `jobs` threads internally and returns
// when they are done; the formatters are pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/sim/model.hpp"
#include "tools/sim/scenario.hpp"
#include "tools/sim/timeline.hpp"

namespace bulkhead::sim {

struct RunOptions {
  // Policies to run, in this order; empty: every registered policy but
  // "fixed".
  std::vector<std::string> policies;
  // Also run "none" and "static-best" (with its sweep).
  bool references = true;
  // Runs at once (threads); the output does not depend on it.
  unsigned jobs = 1;
};

// The summary of one run; NaN where a value does not exist (no success).
struct Summary {
  std::string label;  // "aimd", "none", "static-best(L=12)"
  std::string kind;   // "policy", "none", "static-best"
  std::optional<std::uint32_t> static_limit;
  double goodput_per_s = 0;
  double goodput_pct = 0;  // of the achievable rate (Timeline::mean_achievable)
  double p50_ms = 0, p99_ms = 0, p999_ms = 0;
  double p99_vs_noload = 0;  // p99 / no-load p99 of the service distribution
  std::uint64_t offered = 0, attempts = 0, admitted = 0, ok = 0, rejected = 0, timed_out = 0,
                errors = 0, wasted = 0, retries = 0;
  // Per change (Timeline::change_times_s): seconds until the limit is
  // within 20% of the ideal concurrency for at least 1 s; nullopt: never.
  // Empty for "none".
  std::vector<std::optional<double>> settle_s;
  std::optional<double> oscillation;  // mean |tick-to-tick change| / mean limit
  std::optional<double> mean_limit;
};

struct SweepPoint {
  std::uint32_t limit = 0;
  double goodput_per_s = 0;
  double p99_ms = 0;
};

struct ScenarioReport {
  Scenario scenario;
  Timeline timeline;
  std::vector<Summary> summaries;  // policies in order, then none, static-best
  std::vector<RunResult> runs;     // the same order; latencies dropped
  std::vector<SweepPoint> sweep;   // every static limit tried
};

// The static limits the sweep tries: a geometric grid (ratio sqrt 2) from 1
// to 8 x the most workers the scenario has, plus every worker count it has
// (per limiter: divided by the processes in per-process mode).
std::vector<std::uint32_t> sweep_limits(const Scenario& scenario, const Timeline& timeline);

// The policies run by default: every registered one but "fixed".
std::vector<std::string> default_policies();

ScenarioReport run_scenario(const Scenario& scenario, const RunOptions& options);

Summary summarize(const Timeline& timeline, const RunResult& run);

std::string format_table(const ScenarioReport& report);
// t_s,policy,limit,inflight,queue,p50_ms,p99_ms,goodput_per_s,rejected_per_s,timeouts_per_s
std::string format_csv(const ScenarioReport& report);
std::string format_json(const std::vector<ScenarioReport>& reports);
// Three stacked panels (limit, in-flight, p99) over time, one line per
// run, written to `png_path` (relative to gnuplot's working directory) when
// gnuplot runs the script. The data is inline: the script stands alone.
std::string gnuplot_script(const ScenarioReport& report, const std::string& png_path);

}  // namespace bulkhead::sim
