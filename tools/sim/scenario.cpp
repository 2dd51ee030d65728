// Reading scenario files.
//
// Built on tomlread/ (errors, keys in file order, typed readers), which
// bulkheadd's config reader (daemon/config.cpp) shares. In two passes so that
// the error reported is the first in the file: every key on its own in file
// order (known, right type, in range), then what needs the whole file
// (changes inside the run and in order, required keys, limits and policy
// parameters as the registry checks them).
#include "tools/sim/scenario.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>
#include <toml++/toml.h>
#include <utility>

#include "policies/params.hpp"
#include "shm/layout.hpp"
#include "tomlread/reader.hpp"
#include "tools/sim/timeline.hpp"

namespace bulkhead::sim {

control::LimitSettings Scenario::settings_for(std::string_view policy) const {
  control::LimitSettings s = limits;
  s.policy = std::string(policy);
  const auto it = policy_params.find(policy);
  s.params = it != policy_params.end() ? it->second : policies::ParamMap{};
  return s;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMaxDurationS = 3600;
constexpr std::int64_t kMaxLimit = shm::kMaxLimit;  // calls, as bulkheadd's config
// The most attempts a run may offer on average (calls x (1 + retries)).
// Every call is kept in memory (the workload, then each run's calls): 2e7
// calls took 1.7 GB and 1.5 s a run, so this bound keeps a scenario within
// a few GB and minutes instead of swapping the host to death; and far below
// 2^32, the calls' 32-bit indices.
constexpr double kMaxAttempts = 50'000'000;
// The most workers the ramps of [[dependency.change]] may move in all. A
// ramp moves one worker at a time, an event in each of the ~50 runs of a
// scenario: a million took 10 s, and a 12 kB file of 200 ramps between 1
// and 100000 workers would take minutes.
constexpr std::uint64_t kMaxRampedWorkers = 1'000'000;

using Reporter = tomlread::Reporter<ScenarioError>;
using tomlread::Entry;
using tomlread::in_file_order;
using tomlread::read_integer;
using tomlread::read_string;
using tomlread::read_table;
using tomlread::unknown;

// Range errors say the value written, as read_real's do.
constexpr bool kSayValue = true;

// Keys as written, unquoted (unlike tomlread::key_path, which daemon errors use).
std::string join(std::string_view parent, std::string_view key) {
  std::string out(parent);
  if (!out.empty()) out += '.';
  out += key;
  return out;
}

// As errors print a number: integers in full (3600000, not 3.6e+06), others
// in their shortest exact form.
std::string number(double v) {
  if (std::trunc(v) == v && std::abs(v) < 1e15) return std::to_string(static_cast<std::int64_t>(v));
  return policies::format_number(v);
}

// A real number (integer or float) in [lo, hi], or (lo, hi] when lo_open.
double read_real(const Reporter& report, const Entry& e, const std::string& path, double lo,
                 double hi, bool lo_open = false) {
  double v = 0;
  if (const auto* i = e.node->as_integer()) {
    v = static_cast<double>(i->get());
  } else if (const auto* f = e.node->as_floating_point()) {
    v = f->get();
  } else {
    report.fail(e.line, path, "must be a number");
  }
  if (!std::isfinite(v)) report.fail(e.line, path, "must be a finite number");
  const bool below = lo_open ? !(v > lo) : !(v >= lo);
  if (below || v > hi) {
    std::string rule;
    if (hi == kInf) {
      rule = (lo_open ? "> " : ">= ") + number(lo);
    } else {
      rule = std::string("in ") + (lo_open ? "(" : "[") + number(lo) + ", " + number(hi) + "]";
    }
    report.fail(e.line, path, "must be " + rule + ", got " + number(v));
  }
  return v;
}

// Output files are named after the scenario: keep the name to a safe set.
const char* check_name(std::string_view name) {
  if (name.empty()) return "must not be empty";
  if (name.size() > 64) return "must be at most 64 characters";
  if (name.front() == '.' || name.front() == '-') return "must not start with '.' or '-'";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return "may hold only letters, digits, '-', '_' and '.'";
  }
  return nullptr;
}

// A control character as an error shows it: \r, \0 or \xNN.
std::string printable_byte(unsigned char c) {
  switch (c) {
    case '\r':
      return "\\r";
    case '\0':
      return "\\0";
    default: {
      static constexpr char kHex[] = "0123456789abcdef";
      return std::string("\\x") + kHex[c >> 4] + kHex[c & 0xf];
    }
  }
}

std::string stem_of(std::string_view source) {
  const std::size_t slash = source.rfind('/');
  std::string_view base = slash == std::string_view::npos ? source : source.substr(slash + 1);
  if (base.size() > 5 && base.substr(base.size() - 5) == ".toml") base.remove_suffix(5);
  return std::string(base);
}

// Where each key was written, for the checks of pass two.
struct Lines {
  std::uint32_t table = 0;  // the table's header
  std::map<std::string, std::uint32_t, std::less<>> keys;

  bool has(std::string_view key) const { return keys.find(key) != keys.end(); }
  std::uint32_t of(std::string_view key) const {
    const auto it = keys.find(key);
    return it != keys.end() ? it->second : table;
  }
};

// One [[...change]] element as written.
struct RawChange {
  std::string path;
  Lines lines;
};

struct Raw {
  Lines top, dependency, clients, limits;
  std::vector<RawChange> dependency_changes, rate_changes;
  std::map<std::string, Lines, std::less<>> policies;
};

// Reads an array of [[X.change]] tables into `out`, and where each key of
// each stands into `raw_out`. Every change has at_s and ramp_s;
// read_key(change, key, path) takes the others and answers false for a key
// it does not know.
template <typename Change, typename ReadKey>
void read_changes(const Reporter& report, const Entry& e, const std::string& path,
                  std::vector<Change>& out, std::vector<RawChange>& raw_out, ReadKey read_key) {
  const auto* array = e.node->as_array();
  if (array == nullptr || !array->is_array_of_tables()) {
    report.fail(e.line, path, "must be an array of tables: [[" + path + "]]");
  }
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& n = *array->get(i);
    RawChange rc{path + "#" + std::to_string(i + 1), {}};
    rc.lines.table = n.source().begin.line != 0 ? n.source().begin.line : e.line;
    Change c;
    for (const Entry& k : in_file_order(*n.as_table())) {
      const std::string kp = join(rc.path, k.key);
      rc.lines.keys.emplace(std::string(k.key), k.line);
      if (k.key == "at_s") {
        c.at_s = read_real(report, k, kp, 0, kMaxDurationS);
      } else if (k.key == "ramp_s") {
        c.ramp_s = read_real(report, k, kp, 0, kMaxDurationS);
      } else if (!read_key(c, k, kp)) {
        unknown(report, k, kp);
      }
    }
    out.push_back(c);
    raw_out.push_back(std::move(rc));
  }
}

void read_dependency(const Reporter& report, const toml::table& table, Scenario& s, Raw& raw) {
  for (const Entry& e : in_file_order(table)) {
    const std::string path = join("dependency", e.key);
    raw.dependency.keys.emplace(std::string(e.key), e.line);
    if (e.key == "workers") {
      s.workers =
          static_cast<std::uint32_t>(read_integer(report, e, path, {1, 100'000, kSayValue}));
    } else if (e.key == "base_latency_ms") {
      s.base_latency_ms = read_real(report, e, path, 0, 3'600'000, true);
    } else if (e.key == "service") {
      const std::string& kind = read_string(report, e, path);
      if (kind == "constant") {
        s.service = ServiceKind::kConstant;
      } else if (kind == "exponential") {
        s.service = ServiceKind::kExponential;
      } else if (kind == "lognormal") {
        s.service = ServiceKind::kLognormal;
      } else {
        report.fail(e.line, path, "must be one of constant, exponential, lognormal");
      }
    } else if (e.key == "sigma") {
      s.sigma = read_real(report, e, path, 0, 4, true);
    } else if (e.key == "network_ms") {
      s.network_ms = read_real(report, e, path, 0, 3'600'000);
    } else if (e.key == "queue_limit") {
      s.queue_limit =
          static_cast<std::uint32_t>(read_integer(report, e, path, {0, 10'000'000, kSayValue}));
    } else if (e.key == "change") {
      read_changes(report, e, path, s.dependency_changes, raw.dependency_changes,
                   [&](DependencyChange& c, const Entry& k, const std::string& kp) {
                     if (k.key == "workers") {
                       c.workers = static_cast<std::uint32_t>(
                           read_integer(report, k, kp, {1, 100'000, kSayValue}));
                     } else if (k.key == "base_latency_ms") {
                       c.base_latency_ms = read_real(report, k, kp, 0, 3'600'000, true);
                     } else if (k.key == "network_ms") {
                       c.network_ms = read_real(report, k, kp, 0, 3'600'000);
                     } else {
                       return false;
                     }
                     return true;
                   });
    } else {
      unknown(report, e, path);
    }
  }
}

void read_clients(const Reporter& report, const toml::table& table, Scenario& s, Raw& raw) {
  for (const Entry& e : in_file_order(table)) {
    const std::string path = join("clients", e.key);
    raw.clients.keys.emplace(std::string(e.key), e.line);
    if (e.key == "processes") {
      s.processes = static_cast<std::uint32_t>(read_integer(report, e, path, {1, 1024, kSayValue}));
    } else if (e.key == "limiter") {
      const std::string& mode = read_string(report, e, path);
      if (mode == "host") {
        s.limiter = LimiterMode::kHost;
      } else if (mode == "per-process") {
        s.limiter = LimiterMode::kPerProcess;
      } else {
        report.fail(e.line, path, "must be \"host\" or \"per-process\"");
      }
    } else if (e.key == "rate") {
      s.rate = read_real(report, e, path, 0, 10'000'000);
    } else if (e.key == "timeout_ms") {
      s.timeout_ms = read_real(report, e, path, 0, 600'000, true);
    } else if (e.key == "retries") {
      s.retries = static_cast<std::uint32_t>(read_integer(report, e, path, {0, 10, kSayValue}));
    } else if (e.key == "retry_delay_ms") {
      s.retry_delay_ms = read_real(report, e, path, 0, 600'000);
    } else if (e.key == "change") {
      read_changes(report, e, path, s.rate_changes, raw.rate_changes,
                   [&](RateChange& c, const Entry& k, const std::string& kp) {
                     if (k.key != "rate") return false;
                     c.rate = read_real(report, k, kp, 0, 10'000'000);
                     return true;
                   });
    } else {
      unknown(report, e, path);
    }
  }
}

void read_limits(const Reporter& report, const toml::table& table, Scenario& s, Raw& raw) {
  for (const Entry& e : in_file_order(table)) {
    const std::string path = join("limits", e.key);
    raw.limits.keys.emplace(std::string(e.key), e.line);
    if (e.key == "min_limit") {
      s.limits.bounds.min =
          static_cast<double>(read_integer(report, e, path, {1, kMaxLimit, kSayValue}));
    } else if (e.key == "max_limit") {
      s.limits.bounds.max =
          static_cast<double>(read_integer(report, e, path, {1, kMaxLimit, kSayValue}));
    } else if (e.key == "initial_limit") {
      s.limits.bounds.initial =
          static_cast<double>(read_integer(report, e, path, {1, kMaxLimit, kSayValue}));
    } else if (e.key == "window_min_samples") {
      s.limits.window_min_samples =
          static_cast<std::uint32_t>(read_integer(report, e, path, {1, 1'000'000, kSayValue}));
    } else if (e.key == "window_max_ms") {
      s.limits.window_max_age =
          std::chrono::milliseconds(read_integer(report, e, path, {1, 600'000, kSayValue}));
    } else {
      unknown(report, e, path);
    }
  }
}

// "unknown policy "NAME" (known: aimd, balance, ...)".
std::string unknown_policy(std::string_view name) {
  return "unknown policy \"" + std::string(name) + "\" (known: " + policies::builtin_registry().known() + ")";
}

void read_policies(const Reporter& report, const toml::table& table, Scenario& s, Raw& raw) {
  for (const Entry& e : in_file_order(table)) {
    const std::string path = join("policy", e.key);
    if (!e.node->is_table()) report.fail(e.line, path, "must be a table: [policy.NAME]");
    if (!policies::builtin_registry().contains(e.key)) report.fail(e.line, path, unknown_policy(e.key));
    Lines& lines = raw.policies[std::string(e.key)];
    lines.table = e.line;
    policies::ParamMap& params = s.policy_params[std::string(e.key)];
    for (const Entry& k : in_file_order(*e.node->as_table())) {
      const std::string kp = join(path, k.key);
      lines.keys.emplace(std::string(k.key), k.line);
      if (!k.node->is_integer() && !k.node->is_floating_point()) {
        report.fail(k.line, kp, "must be a number (policy parameters are numbers)");
      }
      params.insert_or_assign(std::string(k.key), read_real(report, k, kp, -kInf, kInf));
    }
  }
}

// Changes must lie inside the run, each after the previous one (ramp
// included). Returns nothing; fails at the key at fault.
template <typename Change>
void check_changes(const Reporter& report, const std::vector<Change>& changes,
                   const std::vector<RawChange>& raw, double duration_s) {
  double free_from = 0;  // the previous change's end
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const Change& c = changes[i];
    const RawChange& r = raw[i];
    if (!r.lines.has("at_s")) report.fail(r.lines.table, r.path, "needs at_s");
    if (c.at_s >= duration_s) {
      report.fail(r.lines.of("at_s"), join(r.path, "at_s"),
                  "must be < duration_s (" + number(duration_s) + "), got " + number(c.at_s));
    }
    // Compared in whole nanoseconds, the simulator's clock: 1.1 + 2.2 is
    // 3.3000000000000003, and a change at 3.3 comes right after that ramp.
    if (i > 0 && to_ns(c.at_s) < to_ns(free_from)) {
      report.fail(r.lines.of("at_s"), join(r.path, "at_s"),
                  "must be >= " + number(static_cast<double>(to_ns(free_from)) / kNsPerS) +
                      " (the previous change's at_s + ramp_s): changes are in time order and "
                      "do not overlap");
    }
    if (to_ns(c.at_s + c.ramp_s) > to_ns(duration_s)) {
      report.fail(r.lines.of("ramp_s"), join(r.path, "ramp_s"),
                  "the ramp must end by duration_s (" + number(duration_s) + ")");
    }
    free_from = c.at_s + c.ramp_s;
  }
}

void check_whole(const Reporter& report, Scenario& s, const Raw& raw) {
  if (!raw.top.has("duration_s")) report.fail(0, "duration_s", "is required");
  // The policies see the calls only at the ticks: a run without one would
  // report every policy at its initial limit, as if it had been judged.
  if (to_ns(s.duration_s) < std::uint64_t{s.tick_ms} * 1'000'000) {
    report.fail(raw.top.of("duration_s"), "duration_s",
                "must be at least one tick (tick_ms = " + std::to_string(s.tick_ms) +
                    (raw.top.has("tick_ms") ? "" : ", the default") + "), got " + number(s.duration_s) + " s");
  }
  if (!raw.dependency.has("workers")) report.fail(raw.dependency.table, "dependency.workers", "is required");
  if (!raw.dependency.has("base_latency_ms")) {
    report.fail(raw.dependency.table, "dependency.base_latency_ms", "is required");
  }
  if (!raw.clients.has("rate")) report.fail(raw.clients.table, "clients.rate", "is required");
  if (raw.dependency.has("sigma") && s.service != ServiceKind::kLognormal) {
    report.fail(raw.dependency.of("sigma"), "dependency.sigma", "only for service = \"lognormal\"");
  }
  check_changes(report, s.dependency_changes, raw.dependency_changes, s.duration_s);
  for (std::size_t i = 0; i < s.dependency_changes.size(); ++i) {
    const DependencyChange& c = s.dependency_changes[i];
    if (!c.workers && !c.base_latency_ms && !c.network_ms) {
      report.fail(raw.dependency_changes[i].lines.table, raw.dependency_changes[i].path,
                  "sets none of workers, base_latency_ms, network_ms");
    }
  }
  std::uint32_t workers = s.workers;
  std::uint64_t ramped = 0;
  for (std::size_t i = 0; i < s.dependency_changes.size(); ++i) {
    const DependencyChange& c = s.dependency_changes[i];
    if (!c.workers) continue;
    if (c.ramp_s > 0) ramped += *c.workers > workers ? *c.workers - workers : workers - *c.workers;
    workers = *c.workers;
    if (ramped > kMaxRampedWorkers) {
      report.fail(raw.dependency_changes[i].lines.of("workers"), join(raw.dependency_changes[i].path, "workers"),
                  "the ramps so far move " + std::to_string(ramped) + " workers one at a time: more than the " +
                      std::to_string(kMaxRampedWorkers) + " the simulator schedules; ramp fewer, or change "
                      "the workers at once (ramp_s = 0)");
    }
  }
  check_changes(report, s.rate_changes, raw.rate_changes, s.duration_s);
  for (std::size_t i = 0; i < s.rate_changes.size(); ++i) {
    if (!raw.rate_changes[i].lines.has("rate")) {
      report.fail(raw.rate_changes[i].lines.table, raw.rate_changes[i].path, "needs rate");
    }
  }
  Piecewise rate;
  rate.add(0, s.rate);
  for (const RateChange& c : s.rate_changes) rate.ramp_to(c.at_s, c.ramp_s, c.rate);
  const double calls = rate.integral(s.duration_s);
  if (const double attempts = calls * (1 + s.retries); attempts > kMaxAttempts) {
    std::string what = number(std::round(calls)) + " calls on average (the rate over duration_s, " +
                       number(s.duration_s) + " s)";
    if (s.retries > 0) what += ", " + number(std::round(attempts)) + " attempts with the retries";
    report.fail(raw.clients.of("rate"), "clients.rate",
                "the run offers " + what + ": more than the " + number(kMaxAttempts) +
                    " the simulator holds in memory; shorten duration_s or lower the rate");
  }

  // min_limit <= initial_limit <= max_limit, told at a key the file sets
  // (the other side may be a default).
  const policies::Bounds& b = s.limits.bounds;
  const auto describe = [&](std::string_view key, double value) {
    return std::string(key) + " (" + number(value) + (raw.limits.has(key) ? ")" : ", the default)");
  };
  const auto fail_at = [&](std::string_view key, const std::string& reason) {
    report.fail(raw.limits.of(key), join("limits", key), reason);
  };
  if (b.min > b.max) {
    if (raw.limits.has("max_limit")) fail_at("max_limit", "must be >= " + describe("min_limit", b.min));
    fail_at("min_limit", "must be <= " + describe("max_limit", b.max));
  }
  if (b.initial < b.min || b.initial > b.max) {
    if (raw.limits.has("initial_limit")) {
      fail_at("initial_limit",
              "must be in [min_limit, max_limit] = [" + number(b.min) + ", " + number(b.max) + "]");
    }
    if (b.initial < b.min) fail_at("min_limit", "must be <= " + describe("initial_limit", b.initial));
    fail_at("max_limit", "must be >= " + describe("initial_limit", b.initial));
  }
  // Each [policy.NAME] as the registry will build it.
  for (const auto& [name, params] : s.policy_params) {
    const Lines& lines = raw.policies.at(name);
    try {
      policies::builtin_registry().create(name, s.limits.bounds, params);
    } catch (const policies::ParamError& error) {
      const std::string& named = error.key();
      const std::string path = join("policy", name);
      if (!params.contains(named)) report.fail(lines.table, path, error.what());  // not in this table
      report.fail(lines.of(named), join(path, named), error.what());
    }
  }
}

}  // namespace

Scenario parse_scenario(std::string_view text, std::string_view source) {
  const Reporter report(source);
  const toml::table root = tomlread::parse<ScenarioError>(text, source);

  Scenario s;
  s.source = source;
  s.name = stem_of(source);
  Raw raw;
  for (const Entry& e : in_file_order(root)) {
    const std::string path(e.key);
    raw.top.keys.emplace(path, e.line);
    if (e.key == "name") {
      s.name = read_string(report, e, path);
      if (const char* why = check_name(s.name)) report.fail(e.line, path, why);
    } else if (e.key == "description") {
      s.description = read_string(report, e, path);
      // It heads the table and titles the plot: one line of text. A
      // carriage return would rewrite the table's first line on a terminal;
      // a tab is as good as a space.
      const auto control = [](char c) { return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f; };
      if (const auto bad = std::find_if(s.description.begin(), s.description.end(), control);
          bad != s.description.end()) {
        report.fail(e.line, path,
                    *bad == '\n' ? std::string("must be one line")
                                  : "must be one line of text: control character " +
                                        printable_byte(static_cast<unsigned char>(*bad)) + " at byte " +
                                        std::to_string(bad - s.description.begin() + 1));
      }
    } else if (e.key == "duration_s") {
      s.duration_s = read_real(report, e, path, 0, kMaxDurationS, true);
    } else if (e.key == "seed") {
      s.seed = static_cast<std::uint64_t>(
          read_integer(report, e, path, {0, std::numeric_limits<std::int64_t>::max(), kSayValue}));
    } else if (e.key == "tick_ms") {
      s.tick_ms =
          static_cast<std::uint32_t>(read_integer(report, e, path, {10, 60'000, kSayValue}));
    } else if (e.key == "dependency") {
      raw.dependency.table = e.line;
      read_dependency(report, read_table(report, e, path), s, raw);
    } else if (e.key == "clients") {
      raw.clients.table = e.line;
      read_clients(report, read_table(report, e, path), s, raw);
    } else if (e.key == "limits") {
      raw.limits.table = e.line;
      read_limits(report, read_table(report, e, path), s, raw);
    } else if (e.key == "policy") {
      read_policies(report, read_table(report, e, path), s, raw);
    } else {
      unknown(report, e, path);
    }
  }
  if (!raw.top.has("name")) {
    if (const char* why = check_name(s.name)) {
      report.fail(0, "name", std::string("the file's name ") + why + "; set name = \"...\"");
    }
  }
  check_whole(report, s, raw);
  return s;
}

Scenario load_scenario_file(const std::string& path) {
  // An ifstream opens a directory and reads nothing from it.
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    throw ScenarioError(path + ": cannot read: it is a directory (give its .toml files)");
  }
  std::ifstream in(path, std::ios::binary);
  // Why: a missing file and one without read permission are fixed differently.
  if (!in) throw ScenarioError(path + ": cannot read: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ScenarioError(path + ": cannot read");
  return parse_scenario(text.str(), path);
}

std::optional<std::pair<std::string, double>> parse_param(std::string_view spec) {
  const std::size_t eq = spec.find('=');
  if (eq == 0 || eq == std::string_view::npos || eq + 1 == spec.size()) return std::nullopt;
  double value = 0;
  const char* last = spec.data() + spec.size();
  if (std::from_chars(spec.data() + eq + 1, last, value).ptr != last) return std::nullopt;
  return std::pair(std::string(spec.substr(0, eq)), value);
}

void set_policy_param(Scenario& scenario, std::string_view spec) {
  const std::string where = "--param " + std::string(spec) + ": ";
  // The policy's name ends at the first dot before the '='.
  const std::size_t dot = spec.substr(0, spec.find('=')).find('.');
  const auto param = dot == 0 || dot == std::string_view::npos ? std::nullopt : parse_param(spec.substr(dot + 1));
  if (!param) throw ScenarioError(where + "must be POLICY.KEY=NUMBER, e.g. balance.tolerance=0.4");
  const std::string policy(spec.substr(0, dot));
  if (!policies::builtin_registry().contains(policy)) throw ScenarioError(where + unknown_policy(policy));
  const auto it = scenario.policy_params.find(policy);
  policies::ParamMap params = it != scenario.policy_params.end() ? it->second : policies::ParamMap{};
  params.insert_or_assign(param->first, param->second);
  try {
    policies::builtin_registry().create(policy, scenario.limits.bounds, params);
  } catch (const policies::ParamError& error) {
    throw ScenarioError(where + error.what());
  }
  scenario.policy_params[policy] = std::move(params);
}

}  // namespace bulkhead::sim
