#include "tools/sim/report.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <numbers>
#include <thread>

#include "policies/fixed.hpp"
#include "policies/policy.hpp"
#include "tomlread/reader.hpp"

namespace bulkhead::sim {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Settled: the limit within this fraction of the ideal concurrency ...
constexpr double kSettleBand = 0.2;
// ... for at least this long, in nanoseconds.
constexpr std::uint64_t kSettleHoldNs = 1'000'000'000;
// The static sweep goes up to this multiple of the most workers ...
constexpr double kSweepCeiling = 8;
// ... and refines between the grid neighbours of the grid's best with this
// ratio (dimensionless) ...
const double kSweepFineRatio = std::exp2(1.0 / 8);
// ... and the best is the lowest p99 among limits whose goodput is within
// this fraction of the most (a fraction of a percent is Poisson noise, not
// a reason to queue more).
constexpr double kSweepTie = 0.01;
// The plots' limit and in-flight axes end at this multiple of the largest
// ideal concurrency (dimensionless).
constexpr double kPlotHeadroom = 4;

std::string printf_string(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string printf_string(const char* format, ...) {
  char buffer[256];
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  std::string out;
  if (n >= static_cast<int>(sizeof buffer)) {
    out.resize(static_cast<std::size_t>(n) + 1);
    std::vsnprintf(out.data(), out.size(), format, again);
    out.resize(static_cast<std::size_t>(n));
  } else if (n > 0) {
    out.assign(buffer, static_cast<std::size_t>(n));
  }
  va_end(again);
  return out;
}

// The sample at quantile q of sorted values (rank ceil(q n)), in ms; NaN
// when there are none.
double quantile_ms(const std::vector<std::uint64_t>& sorted, double q) {
  if (sorted.empty()) return kNaN;
  const auto n = static_cast<double>(sorted.size());
  const auto rank = static_cast<std::size_t>(std::max(1.0, std::ceil(q * n)));
  return static_cast<double>(sorted[std::min(rank, sorted.size()) - 1]) / kNsPerMs;
}

// Runs every task on up to `jobs` threads; rethrows the first failure.
void run_parallel(std::size_t count, unsigned jobs, const std::function<void(std::size_t)>& task) {
  jobs = std::max(1u, std::min<unsigned>(jobs, static_cast<unsigned>(count)));
  if (jobs <= 1) {
    for (std::size_t i = 0; i < count; ++i) task(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  std::vector<std::thread> threads;
  for (unsigned j = 0; j < jobs; ++j) {
    threads.emplace_back([&] {
      for (std::size_t i = next++; i < count; i = next++) {
        try {
          task(i);
        } catch (...) {
          const std::lock_guard lock(failure_mutex);
          if (!failure) failure = std::current_exception();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

std::vector<std::optional<double>> settle_times(const Timeline& timeline, const RunResult& run) {
  std::vector<std::optional<double>> out;
  const std::vector<double>& changes = timeline.change_times_s();
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const std::uint64_t start = to_ns(changes[i]);
    const bool last = i + 1 == changes.size();
    const std::uint64_t end = last ? timeline.duration_ns() : to_ns(changes[i + 1]);
    // The limit in force at the change, then after each tick of the phase.
    double in_force = run.initial_limit;
    for (const TickRow& row : run.series) {
      if (row.t_ns > start) break;
      in_force = row.limit;
    }
    bool in_band = false;
    std::uint64_t band_since = 0;  // when the limit entered the band, if in_band
    std::optional<double> settled;
    const auto visit = [&](std::uint64_t t, double limit) {
      const double ideal = timeline.ideal_concurrency(t);
      if (std::abs(limit - ideal) <= kSettleBand * ideal) {
        if (!in_band) band_since = t;
        in_band = true;
        if (t - band_since >= kSettleHoldNs) settled = static_cast<double>(band_since - start) / kNsPerS;
      } else {
        in_band = false;
      }
    };
    visit(start, in_force);
    for (const TickRow& row : run.series) {
      if (settled) break;
      if (row.t_ns <= start) continue;
      if (last ? row.t_ns > end : row.t_ns >= end) break;
      visit(row.t_ns, row.limit);
    }
    out.push_back(settled);
  }
  return out;
}

}  // namespace

std::vector<std::string> default_policies() {
  std::vector<std::string> names;
  for (const std::string& name : policies::builtin_registry().names()) {
    if (name != policies::FixedPolicy::kName) names.push_back(name);
  }
  return names;
}

std::vector<std::uint32_t> sweep_limits(const Scenario& s, const Timeline& timeline) {
  std::uint32_t most = 0;
  std::vector<std::uint32_t> limits;
  const std::uint32_t per = s.limiter == LimiterMode::kHost ? 1 : s.processes;
  for (const Timeline::WorkerStep& step : timeline.worker_steps()) most = std::max(most, step.workers);
  // Of worker counts, only those the scenario names, not every step of a ramp.
  const auto add_workers = [&](std::uint32_t w) {
    limits.push_back(std::max<std::uint32_t>(1, w / per));
    limits.push_back(std::max<std::uint32_t>(1, (w + per - 1) / per));
  };
  add_workers(s.workers);
  for (const DependencyChange& c : s.dependency_changes) {
    if (c.workers) add_workers(*c.workers);
  }
  const double ceiling = kSweepCeiling * most / per;
  for (double v = 1; v <= ceiling + 1e-9; v *= std::numbers::sqrt2) {
    limits.push_back(static_cast<std::uint32_t>(std::lround(v)));
  }
  std::sort(limits.begin(), limits.end());
  limits.erase(std::unique(limits.begin(), limits.end()), limits.end());
  return limits;
}

Summary summarize(const Timeline& timeline, const RunResult& run) {
  Summary m;
  m.label = run.label;
  const double duration_s = static_cast<double>(run.duration_ns) / kNsPerS;
  m.goodput_per_s = static_cast<double>(run.ok) / duration_s;
  m.goodput_pct = timeline.mean_achievable() > 0 ? 100 * m.goodput_per_s / timeline.mean_achievable() : kNaN;
  m.p50_ms = quantile_ms(run.latencies_ns, 0.50);
  m.p99_ms = quantile_ms(run.latencies_ns, 0.99);
  m.p999_ms = quantile_ms(run.latencies_ns, 0.999);
  m.p99_vs_noload = m.p99_ms / timeline.noload_p99_ms();
  m.offered = run.arrivals;
  m.attempts = run.attempts;
  m.admitted = run.admitted;
  m.ok = run.ok;
  m.rejected = run.rejected;
  m.timed_out = run.timed_out;
  m.errors = run.errors;
  m.wasted = run.wasted;
  m.retries = run.retries;
  if (run.initial_limit != kNoLimit) {
    double previous = run.initial_limit;
    double moves = 0, sum = 0;
    for (const TickRow& row : run.series) {
      moves += std::abs(row.limit - previous);
      sum += row.limit;
      previous = row.limit;
    }
    if (!run.series.empty()) {
      const auto n = static_cast<double>(run.series.size());
      m.mean_limit = sum / n;
      m.oscillation = *m.mean_limit > 0 ? (moves / n) / *m.mean_limit : 0;
    }
    m.settle_s = settle_times(timeline, run);
  }
  return m;
}

namespace {

RunSpec static_spec(const Scenario& s, std::uint32_t limit) {
  control::LimitSettings settings = s.limits;
  settings.policy = std::string(policies::FixedPolicy::kName);
  settings.params.clear();
  settings.bounds = {1, static_cast<double>(limit), static_cast<double>(limit)};
  const char* per = s.limiter == LimiterMode::kHost ? "" : "/process";
  return {"static-best(L=" + std::to_string(limit) + per + ")", true, settings};
}

struct Done {
  RunResult result;
  Summary summary;
};

// Runs every spec; the series is kept of the first `keep_series` only. The
// static sweep's runs are compared by their summaries, and the one chosen
// is run again for its series (a run is a function of its inputs): the
// series of every limit tried would hold ~50 series where one is reported,
// a GB for an hour of 10-ms ticks.
std::vector<Done> run_all(const Scenario& s, const Timeline& timeline, const Workload& workload,
                          const std::vector<RunSpec>& specs, unsigned jobs, std::size_t keep_series) {
  std::vector<Done> done(specs.size());
  run_parallel(specs.size(), jobs, [&](std::size_t i) {
    done[i].result = simulate(s, timeline, workload, specs[i]);
    done[i].summary = summarize(timeline, done[i].result);
    // Summarized; the series is what remains. Not `= {}`: that assigns an
    // empty initializer list and keeps the capacity, a vector reserved for
    // every call of the run.
    done[i].result.latencies_ns = std::vector<std::uint64_t>();
    if (i >= keep_series) done[i].result.series = std::vector<TickRow>();
  });
  return done;
}

// The index of the best static run: the lowest p99 among those within
// kSweepTie of the most goodput, then the lower limit (runs are in limit
// order).
std::size_t best_static(const std::vector<Done>& runs) {
  std::uint64_t most = 0;
  for (const Done& d : runs) most = std::max(most, d.summary.ok);
  std::size_t best = runs.size();
  const auto p99 = [](const Done& d) { return std::isnan(d.summary.p99_ms) ? kNoLimit : d.summary.p99_ms; };
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (static_cast<double>(runs[i].summary.ok) < (1 - kSweepTie) * static_cast<double>(most)) continue;
    if (best == runs.size() || p99(runs[i]) < p99(runs[best])) best = i;
  }
  return best;
}

}  // namespace

ScenarioReport run_scenario(const Scenario& s, const RunOptions& options) {
  ScenarioReport report{s, Timeline(s), {}, {}, {}};
  const Timeline& timeline = report.timeline;
  const Workload workload = make_workload(s, timeline);

  std::vector<RunSpec> specs;
  for (const std::string& name : options.policies.empty() ? default_policies() : options.policies) {
    specs.push_back({name, true, s.settings_for(name)});
  }
  const std::size_t policy_runs = specs.size();
  std::vector<std::uint32_t> grid;
  if (options.references) {
    specs.push_back({"none", false, {}});
    grid = sweep_limits(s, timeline);
    for (std::uint32_t limit : grid) specs.push_back(static_spec(s, limit));
  }
  std::vector<Done> done = run_all(s, timeline, workload, specs, options.jobs,
                                   options.references ? policy_runs + 1 : specs.size());
  for (std::size_t i = 0; i < policy_runs; ++i) done[i].summary.kind = "policy";
  if (!options.references) {
    for (Done& d : done) {
      report.summaries.push_back(std::move(d.summary));
      report.runs.push_back(std::move(d.result));
    }
    return report;
  }
  done[policy_runs].summary.kind = "none";

  // The sweep: the grid, then finer steps (ratio 2^(1/8)) between the
  // grid neighbours of the grid's best.
  std::vector<std::pair<std::uint32_t, Done>> sweep;
  for (std::size_t k = 0; k < grid.size(); ++k) sweep.emplace_back(grid[k], std::move(done[policy_runs + 1 + k]));
  done.resize(policy_runs + 1);
  {
    std::vector<Done> grid_runs;
    for (auto& [limit, d] : sweep) grid_runs.push_back(Done{{}, d.summary});
    const std::size_t b = best_static(grid_runs);
    const std::uint32_t lo = grid[b == 0 ? 0 : b - 1];
    const std::uint32_t hi = grid[b + 1 == grid.size() ? b : b + 1];
    std::vector<RunSpec> finer;
    std::vector<std::uint32_t> finer_limits;
    for (double v = lo; v < hi; v *= kSweepFineRatio) {
      const auto limit = static_cast<std::uint32_t>(std::lround(v));
      if (limit >= hi || std::binary_search(grid.begin(), grid.end(), limit) ||
          (!finer_limits.empty() && finer_limits.back() == limit)) {
        continue;
      }
      finer_limits.push_back(limit);
      finer.push_back(static_spec(s, limit));
    }
    std::vector<Done> more = run_all(s, timeline, workload, finer, options.jobs, 0);
    for (std::size_t k = 0; k < more.size(); ++k) sweep.emplace_back(finer_limits[k], std::move(more[k]));
    std::sort(sweep.begin(), sweep.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  std::vector<Done> sweep_runs;
  for (auto& [limit, d] : sweep) {
    report.sweep.push_back({limit, d.summary.goodput_per_s, d.summary.p99_ms});
    sweep_runs.push_back(std::move(d));
  }
  const std::size_t best = best_static(sweep_runs);
  // Its series, which the sweep did not keep: the same run again.
  sweep_runs[best].result = simulate(s, timeline, workload, static_spec(s, report.sweep[best].limit));
  sweep_runs[best].result.latencies_ns = std::vector<std::uint64_t>();
  sweep_runs[best].summary.kind = "static-best";
  sweep_runs[best].summary.static_limit = report.sweep[best].limit;
  done.push_back(std::move(sweep_runs[best]));
  for (Done& d : done) {
    report.summaries.push_back(std::move(d.summary));
    report.runs.push_back(std::move(d.result));
  }
  return report;
}

namespace {

std::string fmt_ms(double ms) {
  if (std::isnan(ms)) return "-";
  return ms < 10 ? printf_string("%.2f", ms) : printf_string("%.1f", ms);
}

std::string fmt_settle(const Summary& m) {
  if (m.settle_s.empty()) return "-";
  std::string out;
  for (const auto& v : m.settle_s) {
    if (!out.empty()) out += " / ";
    out += v ? printf_string("%.1f", *v) : "never";
  }
  return out;
}

// A number the scenario gives (a duration, a change's time, a timeout) as
// %g writes it, with as many digits as it takes to read back exactly:
// %g's six would make 3599.999 s 3600.
std::string fmt_given(double v) {
  for (int digits = 6;; ++digits) {
    std::string text = printf_string("%.*g", digits, v);
    if (digits >= 17 || std::strtod(text.c_str(), nullptr) == v) return text;
  }
}

const char* limiter_name(LimiterMode mode) { return mode == LimiterMode::kHost ? "host" : "per-process"; }

const char* service_name(ServiceKind kind) {
  switch (kind) {
    case ServiceKind::kConstant:
      return "constant";
    case ServiceKind::kExponential:
      return "exponential";
    case ServiceKind::kLognormal:
      return "lognormal";
  }
  return "?";
}

}  // namespace

std::string format_table(const ScenarioReport& r) {
  const Scenario& s = r.scenario;
  const Timeline& t = r.timeline;
  std::string out = "== " + s.name;
  if (!s.description.empty()) out += ": " + s.description;
  out += "\n";
  out += printf_string("   %s s simulated, seed %llu, tick %u ms; %u process%s, %s; timeout %s ms",
                       fmt_given(s.duration_s).c_str(), static_cast<unsigned long long>(s.seed),
                       s.tick_ms, s.processes, s.processes == 1 ? "" : "es",
                       s.limiter == LimiterMode::kHost ? "one host-wide limit" : "a limiter per process",
                       fmt_given(s.timeout_ms).c_str());
  out += s.retries == 0 ? ", no retries\n"
                        : printf_string(", %u retr%s after %s ms\n", s.retries, s.retries == 1 ? "y" : "ies",
                                        fmt_given(s.retry_delay_ms).c_str());
  out += printf_string("   %s service, no-load p99 %s ms; capacity %.1f/s, offered %.1f/s on average\n",
                       service_name(s.service), fmt_ms(t.noload_p99_ms()).c_str(), t.mean_capacity(),
                       t.mean_offered());
  out += printf_string("   %%cap = goodput / %.1f/s, the time average of min(capacity, offered)\n",
                       t.mean_achievable());
  out += "   ideal concurrency:";
  for (double c : t.change_times_s()) {
    const std::uint64_t at = to_ns(c);
    out += printf_string(" %.1f at %s s%s,", t.ideal_concurrency(at), fmt_given(c).c_str(),
                         t.saturated(at) ? "" : " (below capacity)");
  }
  out += printf_string(" %.1f at the end\n", t.ideal_concurrency(t.duration_ns()));

  std::size_t width = 6;
  for (const Summary& m : r.summaries) width = std::max(width, m.label.size());
  std::string settle_head = "settle s after";
  for (double c : t.change_times_s()) {
    settle_head += " " + fmt_given(c) + (c == t.change_times_s().back() ? "" : " /");
  }
  out += printf_string("%-*s %9s %6s %7s %7s %8s %6s %9s %9s %7s %6s  %s\n", static_cast<int>(width),
                       "policy", "goodput/s", "%cap", "p50 ms", "p99 ms", "p999 ms", "p99/nl", "rejected",
                       "timed out", "errors", "osc", settle_head.c_str());
  for (const Summary& m : r.summaries) {
    // %cap does not exist when nothing was offered (a rate of 0 all along).
    const std::string pct = std::isnan(m.goodput_pct) ? "-" : printf_string("%.1f", m.goodput_pct);
    out += printf_string("%-*s %9.1f %6s %7s %7s %8s %6s %9llu %9llu %7llu %6s  %s\n",
                         static_cast<int>(width), m.label.c_str(), m.goodput_per_s, pct.c_str(),
                         fmt_ms(m.p50_ms).c_str(), fmt_ms(m.p99_ms).c_str(), fmt_ms(m.p999_ms).c_str(),
                         std::isnan(m.p99_vs_noload) ? "-" : printf_string("%.2f", m.p99_vs_noload).c_str(),
                         static_cast<unsigned long long>(m.rejected),
                         static_cast<unsigned long long>(m.timed_out),
                         static_cast<unsigned long long>(m.errors),
                         m.oscillation ? printf_string("%.3f", *m.oscillation).c_str() : "-",
                         fmt_settle(m).c_str());
  }
  return out;
}

std::string format_csv(const ScenarioReport& r) {
  std::string out =
      "t_s,policy,limit,inflight,queue,p50_ms,p99_ms,goodput_per_s,rejected_per_s,timeouts_per_s,baseline_ms\n";
  for (const RunResult& run : r.runs) {
    for (const TickRow& row : run.series) {
      out += printf_string("%.3f,", static_cast<double>(row.t_ns) / kNsPerS);
      out += run.label;
      out += row.limit == kNoLimit ? std::string(",inf") : printf_string(",%.0f", row.limit);
      out += printf_string(",%u,%u,%.3f,%.3f,%.1f,%.1f,%.1f,%.3f\n", row.inflight, row.queue, row.p50_ms,
                           row.p99_ms, row.goodput_per_s, row.rejected_per_s, row.timeouts_per_s,
                           row.baseline_ms);
    }
  }
  return out;
}

namespace {

// JSON is UTF-8: a byte that is not (a file name is any bytes) becomes
// U+FFFD, the replacement character, rather than making the document
// unreadable.
std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      const std::size_t n = tomlread::utf8_length(text.substr(i));
      if (n == 0) {
        out += "\\ufffd";
      } else {
        out.append(text.substr(i, n));
        i += n - 1;
      }
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += printf_string("\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  return printf_string("%.6g", v);
}

std::string json_optional(const std::optional<double>& v) { return v ? json_number(*v) : "null"; }

std::string json_run(const Summary& m, const std::string& indent) {
  std::string o = "{\n";
  const std::string in = indent + "  ";
  const auto field = [&](const char* key, const std::string& value, bool last = false) {
    o += in + json_string(key) + ": " + value + (last ? "\n" : ",\n");
  };
  const auto count = [](std::uint64_t v) { return std::to_string(v); };
  field("policy", json_string(m.label));
  field("kind", json_string(m.kind));
  field("static_limit", m.static_limit ? std::to_string(*m.static_limit) : "null");
  field("goodput_per_s", json_number(m.goodput_per_s));
  field("goodput_pct", json_number(m.goodput_pct));
  field("p50_ms", json_number(m.p50_ms));
  field("p99_ms", json_number(m.p99_ms));
  field("p999_ms", json_number(m.p999_ms));
  field("p99_vs_noload", json_number(m.p99_vs_noload));
  field("offered", count(m.offered));
  field("attempts", count(m.attempts));
  field("admitted", count(m.admitted));
  field("ok", count(m.ok));
  field("rejected", count(m.rejected));
  field("timed_out", count(m.timed_out));
  field("errors", count(m.errors));
  field("wasted", count(m.wasted));
  field("retries", count(m.retries));
  std::string settle = "[";
  for (std::size_t i = 0; i < m.settle_s.size(); ++i) {
    settle += (i ? ", " : "") + json_optional(m.settle_s[i]);
  }
  field("settle_s", settle + "]");
  field("oscillation", json_optional(m.oscillation));
  field("mean_limit", json_optional(m.mean_limit), true);
  return o + indent + "}";
}

}  // namespace

std::string format_json(const std::vector<ScenarioReport>& reports) {
  std::string o = "{\n  \"scenarios\": [";
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const ScenarioReport& r = reports[i];
    const Scenario& s = r.scenario;
    const Timeline& t = r.timeline;
    o += i ? ",\n    {\n" : "\n    {\n";
    const std::string in = "      ";
    const auto field = [&](const char* key, const std::string& value) {
      o += in + json_string(key) + ": " + value + ",\n";
    };
    field("name", json_string(s.name));
    field("file", json_string(s.source));
    field("description", json_string(s.description));
    field("duration_s", fmt_given(s.duration_s));
    field("seed", std::to_string(s.seed));
    field("tick_ms", std::to_string(s.tick_ms));
    field("processes", std::to_string(s.processes));
    field("limiter", json_string(limiter_name(s.limiter)));
    field("capacity_per_s", json_number(t.mean_capacity()));
    field("offered_per_s", json_number(t.mean_offered()));
    field("achievable_per_s", json_number(t.mean_achievable()));
    field("noload_p99_ms", json_number(t.noload_p99_ms()));
    std::string changes = "[", ideal = "[";
    for (std::size_t k = 0; k < t.change_times_s().size(); ++k) {
      const double c = t.change_times_s()[k];
      changes += (k ? ", " : "") + fmt_given(c);
      ideal += (k ? ", " : "") + json_number(t.ideal_concurrency(to_ns(c)));
    }
    field("changes_s", changes + "]");
    field("ideal_concurrency", ideal + "]");
    o += in + "\"runs\": [";
    for (std::size_t k = 0; k < r.summaries.size(); ++k) {
      o += (k ? ", " : "") + json_run(r.summaries[k], in);
    }
    o += "],\n" + in + "\"static_sweep\": [";
    for (std::size_t k = 0; k < r.sweep.size(); ++k) {
      const SweepPoint& p = r.sweep[k];
      o += (k ? ", " : "") + std::string("{\"limit\": ") + std::to_string(p.limit) +
           ", \"goodput_per_s\": " + json_number(p.goodput_per_s) + ", \"p99_ms\": " + json_number(p.p99_ms) + "}";
    }
    o += "]\n    }";
  }
  o += reports.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return o;
}

std::string gnuplot_script(const ScenarioReport& r, const std::string& png_path) {
  const auto quoted = [](std::string_view text) {
    // gnuplot single-quoted strings take '' for a quote and nothing else.
    std::string out = "'";
    for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
  };
  std::string o = "# Written by bulkhead-sim; run: gnuplot THIS_FILE\n";
  o += "set terminal pngcairo size 1200,1000 noenhanced font ',10'\n";
  o += "set output " + quoted(png_path) + "\n";
  for (std::size_t i = 0; i < r.runs.size(); ++i) {
    o += "$run" + std::to_string(i) + " << EOD\n";
    for (const TickRow& row : r.runs[i].series) {
      o += printf_string("%.3f ", static_cast<double>(row.t_ns) / kNsPerS);
      o += row.limit == kNoLimit ? std::string("NaN") : printf_string("%.0f", row.limit);
      o += printf_string(" %u ", row.inflight);
      o += row.goodput_per_s > 0 ? printf_string("%.3f\n", row.p99_ms) : std::string("NaN\n");
    }
    o += "EOD\n";
  }
  o += "$ideal << EOD\n";
  const std::uint64_t tick_ns = std::uint64_t{r.scenario.tick_ms} * 1'000'000;
  double most_ideal = 1;
  for (std::uint64_t t = 0; t <= r.timeline.duration_ns(); t += tick_ns) {
    const double ideal = r.timeline.ideal_concurrency(t);
    most_ideal = std::max(most_ideal, ideal);
    o += printf_string("%.3f %.3f\n", static_cast<double>(t) / kNsPerS, ideal);
  }
  o += "EOD\n";
  // Limits and in-flight counts far above the ideal (no limiter, a runaway
  // policy) would squash the interesting range: the axis stops at 4x the
  // ideal and such lines leave the top of the panel.
  const std::string cut = printf_string("%.0f", std::ceil(kPlotHeadroom * most_ideal));
  std::string title = r.scenario.name;
  if (!r.scenario.description.empty()) title += ": " + r.scenario.description;
  o += "set multiplot layout 3,1 title " + quoted(title) + "\n";
  o += "set key outside right top\nset grid\nset xrange [0:" + fmt_given(r.scenario.duration_s) + "]\n";
  const auto panel = [&](const char* ylabel, int column, bool with_ideal, bool log) {
    o += std::string("set ylabel ") + quoted(ylabel) + "\n";
    o += log ? "set logscale y\nset yrange [*:*]\n" : "unset logscale y\nset yrange [0:" + cut + "]\n";
    o += "plot ";
    bool first = true;
    for (std::size_t i = 0; i < r.runs.size(); ++i) {
      if (column == 2 && r.runs[i].initial_limit == kNoLimit) continue;  // no limit to draw
      o += first ? "" : ", \\\n     ";
      first = false;
      // One line type per run, the same in every panel.
      o += "$run" + std::to_string(i) + " using 1:" + std::to_string(column) + " with steps lt " +
           std::to_string(i + 1) + " title " + quoted(r.runs[i].label);
    }
    if (with_ideal) {
      o += first ? "" : ", \\\n     ";
      o += "$ideal using 1:2 with lines dashtype 2 lc rgb 'black' title 'ideal (Little)'";
    }
    o += "\n";
  };
  panel("limit (calls)", 2, true, false);
  panel("in flight (calls)", 3, true, false);
  o += "set xlabel 'time (s)'\n";
  // A tick without a success has no latency (NaN above). When no run has
  // one (every call timed out, or no call came), gnuplot refuses a panel
  // with no point at all: that one says so instead.
  const bool any_latency = std::any_of(r.runs.begin(), r.runs.end(), [](const auto& run) {
    return std::any_of(run.series.begin(), run.series.end(), [](const TickRow& row) { return row.goodput_per_s > 0; });
  });
  if (any_latency) {
    panel("p99 latency (ms)", 4, false, true);
  } else {
    o += "set ylabel 'p99 latency (ms)'\nset logscale y\nset yrange [1:10]\n"
         "set label 1 'no call succeeded: no latency to show' at graph 0.5, graph 0.5 center\n"
         "plot 1/0 notitle\nunset label 1\n";
  }
  o += "unset multiplot\n";
  return o;
}

}  // namespace bulkhead::sim
