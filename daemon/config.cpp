// Loading and validating bulkheadd's TOML configuration.
//
// Validation runs in two passes, so that the error reported is the first one
// in the file, as a compiler would report it:
//   1. every table and key in file order, each key on its own: is it known,
//      of the right type, in range; a dependency name, a policy name;
//   2. what needs the whole file: each dependency's settings as inherited
//      from [defaults] (limits in order, policy and parameters accepted by
//      the policy's own factory), then the number of dependencies.
// Nothing is kept from a file that fails: parse_config returns a whole
// Config or throws.
//
// Thread safety: the functions here share no state; builtin_registry() is
// only read.

#include "daemon/config.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <toml++/toml.h>
#include <utility>
#include <vector>

#include "policies/params.hpp"
#include "shm/layout.hpp"
#include "shm/names.hpp"
#include "shm/partitions.hpp"
#include "tomlread/reader.hpp"

namespace bulkhead::daemon {
namespace {

// A limit is a count of concurrent calls to one dependency from one host.
constexpr std::int64_t kMaxLimit = shm::kMaxLimit;  // calls
// A config file with 16384 dependencies is a few MiB; anything much larger is
// not a config file (or is /dev/zero), and is refused before parsing.
constexpr std::size_t kMaxFileBytes = 16u << 20;

// The most wait-queue places a segment may have per dependency (and so the
// most calls that may wait for one dependency, host-wide).
constexpr std::int64_t kMaxQueueSlots = shm::kMaxQueueSlotsLimit;

constexpr std::string_view kLimitKeys[] = {"min_limit", "max_limit", "initial_limit"};

using Reporter = tomlread::Reporter<ConfigError>;
using tomlread::Entry;
using tomlread::in_file_order;
using tomlread::key_path;
using tomlread::read_integer;
using tomlread::read_string;
using tomlread::read_table;
using tomlread::unknown;

std::string octal(std::int64_t mode) {
  std::string digits;
  // The magnitude as unsigned: -INT64_MIN does not fit an int64_t.
  const std::uint64_t magnitude = mode < 0 ? 0 - static_cast<std::uint64_t>(mode) : static_cast<std::uint64_t>(mode);
  for (std::uint64_t v = magnitude; v > 0; v /= 8) digits.insert(digits.begin(), char('0' + v % 8));
  while (digits.size() < 3) digits.insert(digits.begin(), '0');
  return (mode < 0 ? "-0o" : "0o") + digits;
}

// Returns the value or fails at the entry's line, as tomlread's readers.
bool read_boolean(const Reporter& report, const Entry& e, const std::string& path) {
  const auto* value = e.node->as_boolean();
  if (value == nullptr) report.fail(e.line, path, "must be a boolean (true or false)");
  return value->get();
}

// Loose on purpose: the daemon looks the group up when it creates the
// segment; here only what no group database accepts is refused.
const char* check_group_name(std::string_view group) {
  if (group.size() > 256) return "is longer than 256 bytes";
  if (!group.empty() && group.front() == '-') return "must not start with '-'";
  for (char c : group) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == ':' || c == ',' || c == '/') {
      return "must be a group name: no spaces, ':', ',' or '/'";
    }
  }
  return nullptr;
}

DaemonConfig read_daemon(const Reporter& report, const toml::table& table) {
  DaemonConfig d;
  for (const Entry& e : in_file_order(table)) {
    const std::string path = key_path("daemon", e.key);
    if (e.key == "segment") {
      d.segment = read_string(report, e, path);
      if (const char* why = shm::check_dependency_name(d.segment)) {
        report.fail(e.line, path, std::string("name ") + why);
      }
      // Allowed characters, but /dev/shm/. and /dev/shm/.. are directories.
      if (d.segment == "." || d.segment == "..") {
        report.fail(e.line, path, "name must not be \".\" or \"..\"");
      }
    } else if (e.key == "tick_ms") {
      d.tick = std::chrono::milliseconds(read_integer(report, e, path, {10, 60'000}));
    } else if (e.key == "metrics_listen") {
      d.metrics_listen = read_string(report, e, path);
      if (const char* why = check_listen_address(d.metrics_listen)) report.fail(e.line, path, why);
    } else if (e.key == "strict") {
      d.strict = read_boolean(report, e, path);
    } else if (e.key == "max_dependencies") {
      d.max_dependencies = static_cast<std::uint32_t>(read_integer(report, e, path, {1, 16'384}));
    } else if (e.key == "max_processes") {
      d.max_processes = static_cast<std::uint32_t>(read_integer(report, e, path, {1, 4'096}));
    } else if (e.key == "stats_stripes") {
      if (const auto* text = e.node->as_string(); text != nullptr && text->get() == "auto") {
        d.stats_stripes = kAutoStripes;
      } else if (e.node->is_string()) {
        report.fail(e.line, path, "must be \"auto\" or an integer in [1, 64]");
      } else {
        d.stats_stripes = static_cast<std::uint32_t>(read_integer(report, e, path, {1, 64}));
      }
    } else if (e.key == "queue_slots") {
      d.queue_slots = static_cast<std::uint32_t>(read_integer(report, e, path, {0, kMaxQueueSlots}));
    } else if (e.key == "segment_group") {
      d.segment_group = read_string(report, e, path);
      d.segment_group_line = e.line;
      if (const char* why = check_group_name(d.segment_group)) report.fail(e.line, path, why);
    } else if (e.key == "segment_mode") {
      const auto* value = e.node->as_integer();
      if (value == nullptr) report.fail(e.line, path, "must be an integer, e.g. 0o660");
      const std::int64_t mode = value->get();
      if (mode < 0 || mode > 0777) {
        report.fail(e.line, path,
                    "must be permission bits in [0o000, 0o777], got " + octal(mode) +
                        " (write it in octal, e.g. 0o660)");
      }
      if ((mode & 07) != 0) {
        report.fail(e.line, path,
                    "must not give others any access (o+rwx), got " + octal(mode) +
                        ": the segment is never world-accessible");
      }
      if ((mode & 0600) != 0600) {
        report.fail(e.line, path, "must give the owner read and write (0o600), got " + octal(mode));
      }
      d.segment_mode = static_cast<std::uint32_t>(mode);
    } else if (e.key == "segment_reserve") {
      d.segment_reserve = read_boolean(report, e, path);
    } else if (e.key == "log_level") {
      d.log_level = read_string(report, e, path);
      static constexpr std::string_view kLevels[] = {"trace", "debug", "info", "warn", "error"};
      if (std::find(std::begin(kLevels), std::end(kLevels), d.log_level) == std::end(kLevels)) {
        report.fail(e.line, path, "must be one of trace, debug, info, warn, error");
      }
    } else {
      unknown(report, e, path);
    }
  }
  return d;
}

// [defaults] or one [dependency.NAME] as written: only the keys it sets.
struct RawTable {
  std::string path;        // "defaults" or "dependency.NAME", as in errors
  std::string name;        // "" for [defaults]
  std::uint32_t line = 0;  // of the table's header; 0 when there is none
  std::optional<std::string> policy;
  std::optional<std::int64_t> min_limit;
  std::optional<std::int64_t> max_limit;
  std::optional<std::int64_t> initial_limit;
  std::optional<std::int64_t> window_min_samples;
  std::optional<std::int64_t> window_max_ms;
  std::optional<bool> enforce;
  std::optional<std::int64_t> max_queue;
  std::optional<QueueOrder> queue_order;
  // [TABLE.breaker]: only the keys it sets; their lines are in `lines` as
  // "breaker.KEY".
  struct Breaker {
    std::optional<bool> enabled;
    std::optional<double> failure_rate_threshold;
    std::optional<std::int64_t> minimum_calls;
    std::optional<std::int64_t> window_ms;
    std::optional<std::int64_t> sleep_window_ms;
    std::optional<std::int64_t> half_open_calls;
    std::optional<std::int64_t> slow_call_duration_ms;
    std::optional<double> slow_call_rate_threshold;
    std::optional<BreakerForce> force;
  } breaker;
  std::optional<std::vector<PartitionConfig>> partitions;
  policies::ParamMap params;
  // Parameters of some policy whose value is no number, with what it is
  // instead ("a boolean"), in file order; pass two tells whether this
  // table's policy has them.
  std::vector<std::pair<std::string, std::string>> not_numbers;
  std::map<std::string, std::uint32_t, std::less<>> lines;  // every key set: its line

  bool sets(std::string_view key) const { return lines.find(key) != lines.end(); }
  // The line of `key` when this table sets it, else the table's own line.
  std::uint32_t line_of(std::string_view key) const {
    const auto it = lines.find(key);
    return it != lines.end() ? it->second : line;
  }
};

// A fraction in (0, 1]: a rate threshold.
double read_fraction(const Reporter& report, const Entry& e, const std::string& path) {
  double v = 0;
  if (const auto* f = e.node->as_floating_point()) {
    v = f->get();
  } else if (const auto* i = e.node->as_integer()) {
    v = static_cast<double>(i->get());
  } else {
    report.fail(e.line, path, "must be a number in (0, 1], a fraction of calls (0.5 is 50%)");
  }
  if (!(v > 0.0 && v <= 1.0)) {
    report.fail(e.line, path,
                "must be in (0, 1], a fraction of calls (0.5 is 50%), got " + policies::format_number(v));
  }
  return v;
}

void read_breaker_table(const Reporter& report, const toml::table& table, const std::string& path,
                        RawTable& raw) {
  RawTable::Breaker& b = raw.breaker;
  for (const Entry& e : in_file_order(table)) {
    const std::string path_here = key_path(path, e.key);
    raw.lines.emplace("breaker." + std::string(e.key), e.line);
    if (e.key == "enabled") {
      b.enabled = read_boolean(report, e, path_here);
    } else if (e.key == "failure_rate_threshold") {
      b.failure_rate_threshold = read_fraction(report, e, path_here);
    } else if (e.key == "slow_call_rate_threshold") {
      b.slow_call_rate_threshold = read_fraction(report, e, path_here);
    } else if (e.key == "minimum_calls") {
      b.minimum_calls = read_integer(report, e, path_here, {1, 1'000'000}, "must be an integer (a number of calls)");
    } else if (e.key == "window_ms") {
      b.window_ms = read_integer(report, e, path_here, {10, 3'600'000});
    } else if (e.key == "sleep_window_ms") {
      b.sleep_window_ms = read_integer(report, e, path_here, {10, 3'600'000});
    } else if (e.key == "half_open_calls") {
      b.half_open_calls = read_integer(report, e, path_here, {1, 1'000}, "must be an integer (a number of calls)");
    } else if (e.key == "slow_call_duration_ms") {
      b.slow_call_duration_ms = read_integer(report, e, path_here, {0, 600'000});
    } else if (e.key == "force") {
      const std::string& force = read_string(report, e, path_here);
      if (force != "auto" && force != "open" && force != "closed") {
        report.fail(e.line, path_here, "must be \"auto\", \"open\" or \"closed\", got \"" + force + "\"");
      }
      b.force = force == "open" ? BreakerForce::kOpen : force == "closed" ? BreakerForce::kClosed : BreakerForce::kAuto;
    } else {
      unknown(report, e, path_here);
    }
  }
}

// A share: a number in (0, 1], as millionths.
std::uint32_t read_share(const Reporter& report, const Entry& e, const std::string& path) {
  if (!e.node->is_integer() && !e.node->is_floating_point()) {
    report.fail(e.line, path, "must be a share of the limit, a number in (0, 1], e.g. 0.3");
  }
  const double v = e.node->is_integer() ? static_cast<double>(e.node->as_integer()->get())
                                        : e.node->as_floating_point()->get();
  if (!(v > 0.0 && v <= 1.0)) {
    report.fail(e.line, path, "must be a share of the limit in (0, 1], got " + policies::format_number(v));
  }
  // Kept in millionths: one that rounds to none would be a share of 0, refused above.
  const auto ppm = static_cast<std::uint32_t>(std::llround(v * shm::kShareOne));
  if (ppm == 0) {
    report.fail(e.line, path, "must be a share of the limit of at least 0.000001 (shares count in millionths), got " +
                                  policies::format_number(v));
  }
  return ppm;
}

// [dependency.NAME.partitions]: NAME = share, or NAME = { share = S,
// hard_cap = B }, in file order.
std::vector<PartitionConfig> read_partitions(const Reporter& report, const Entry& table,
                                             const std::string& path) {
  const toml::table& t = read_table(report, table, path);
  std::vector<PartitionConfig> out;
  std::uint64_t sum = 0;
  std::size_t named = 0;
  for (const Entry& e : in_file_order(t)) {
    const std::string here = key_path(path, e.key);
    PartitionConfig p;
    p.name = std::string(e.key);
    if (const char* why = shm::check_partition_name(p.name)) report.fail(e.line, here, std::string("name ") + why);
    if (p.name != shm::kDefaultPartition && ++named > shm::kMaxPartitions - 1) {
      report.fail(e.line, here,
                  "at most 2 partitions besides \"default\" (each counts in 16 bits of the "
                  "dependency's admission word)");
    }
    if (const toml::table* inline_table = e.node->as_table()) {
      bool has_share = false;
      for (const Entry& f : in_file_order(*inline_table)) {
        const std::string field = key_path(here, f.key);
        if (f.key == "share") {
          p.share_ppm = read_share(report, f, field);
          has_share = true;
        } else if (f.key == "hard_cap") {
          p.hard_cap = read_boolean(report, f, field);
        } else {
          report.fail(f.line, field, "unknown key (a partition has share and hard_cap)");
        }
      }
      if (!has_share) report.fail(e.line, here, "needs a share, e.g. { share = 0.3, hard_cap = true }");
    } else {
      p.share_ppm = read_share(report, e, here);
    }
    sum += p.share_ppm;
    if (sum > shm::kShareOne) {
      report.fail(e.line, here, "the shares sum to more than 1 (they are guaranteed parts of one limit)");
    }
    out.push_back(std::move(p));
  }
  if (out.empty()) report.fail(table.line, path, "must name at least one partition, e.g. critical = 0.7");
  return out;
}

// Whether `policy` has a parameter `key`: built with that key alone, at a
// value no parameter takes, it refuses the value rather than the key.
bool has_parameter(std::string_view policy, std::string_view key) {
  try {
    policies::builtin_registry().create(policy, policies::Bounds{},
                                        {{std::string(key), std::numeric_limits<double>::quiet_NaN()}});
  } catch (const policies::UnknownParamError&) {
    return false;
  } catch (const policies::ParamError&) {
  }
  return true;
}

RawTable read_dependency_table(const Reporter& report, const toml::table& table, std::string path,
                               std::string name, std::uint32_t line) {
  RawTable raw;
  raw.path = std::move(path);
  raw.name = std::move(name);
  raw.line = line;
  const bool is_dependency = !raw.name.empty();
  for (const Entry& e : in_file_order(table)) {
    const std::string path_here = key_path(raw.path, e.key);
    raw.lines.emplace(std::string(e.key), e.line);
    if (e.key == "policy") {
      const std::string& policy = read_string(report, e, path_here);
      if (!policies::builtin_registry().contains(policy)) {
        report.fail(e.line, path_here,
                    "unknown policy \"" + policy + "\" (known: " + policies::builtin_registry().known() + ")");
      }
      raw.policy = policy;
    } else if (e.key == "min_limit" || e.key == "max_limit" || e.key == "initial_limit") {
      // Limits count calls: a fraction of a call means a typo, not a wish.
      const std::int64_t v =
          read_integer(report, e, path_here, {1, kMaxLimit}, "must be an integer (a number of calls)");
      (e.key == "min_limit" ? raw.min_limit : e.key == "max_limit" ? raw.max_limit : raw.initial_limit) = v;
    } else if (e.key == "window_min_samples") {
      raw.window_min_samples = read_integer(report, e, path_here, {1, 1'000'000});
    } else if (e.key == "window_max_ms") {
      raw.window_max_ms = read_integer(report, e, path_here, {1, 600'000});
    } else if (e.key == "enforce") {
      raw.enforce = read_boolean(report, e, path_here);
    } else if (e.key == "max_queue") {
      raw.max_queue = read_integer(report, e, path_here, {0, kMaxQueueSlots},
                                   "must be an integer (a number of waiting calls)");
    } else if (e.key == "queue_order") {
      const std::string& order = read_string(report, e, path_here);
      if (order != "fifo" && order != "lifo") {
        report.fail(e.line, path_here, "must be \"fifo\" or \"lifo\", got \"" + order + "\"");
      }
      raw.queue_order = order == "lifo" ? QueueOrder::kLifo : QueueOrder::kFifo;
    } else if (e.key == "breaker" && e.node->is_table()) {
      read_breaker_table(report, *e.node->as_table(), path_here, raw);
    } else if (e.key == "breaker") {
      report.fail(e.line, path_here, "must be a table: [" + path_here + "]");
    } else if (e.key == "partitions" && is_dependency) {
      raw.partitions = read_partitions(report, e, path_here);
    } else if (e.key == "partitions") {
      report.fail(e.line, path_here, "partitions belong to one dependency: not allowed in [defaults]");
    } else if (e.node->is_table() && policies::builtin_registry().contains(e.key)) {
      // balance.tolerance = 0.3, or [dependency.x.balance]: a policy's
      // parameters as a table of their own, as some configs write them.
      const std::vector<tomlread::Entry> inner = tomlread::in_file_order(*e.node->as_table());
      const std::string example = inner.empty() ? "PARAMETER" : std::string(inner.front().key);
      report.fail(e.line, path_here,
                  "unknown table (a policy's parameters are keys of the table they tune: write " + example +
                      " = ... there, not " + std::string(e.key) + "." + example + "; policy = \"" +
                      std::string(e.key) + "\" chooses the policy)");
    } else if (e.node->is_table()) {
      // [dependency.search.v2] makes "v2" a table inside dependency "search".
      report.fail(e.line, path_here,
                  is_dependency ? "unknown table (a dependency name with a dot must be quoted: "
                                  "[dependency.\"NAME.WITH.DOTS\"])"
                                : "unknown table");
    } else if (e.node->is_integer() || e.node->is_floating_point()) {
      // Any other number is a parameter of the policy; whether the policy
      // knows it is for the policy's factory to say, in pass two.
      const double v = e.node->is_integer() ? static_cast<double>(e.node->as_integer()->get())
                                            : e.node->as_floating_point()->get();
      if (!std::isfinite(v)) report.fail(e.line, path_here, "must be a finite number");
      raw.params.insert_or_assign(std::string(e.key), v);
    } else if (std::ranges::none_of(policies::builtin_registry().names(),
                                    [&](const std::string& policy) { return has_parameter(policy, e.key); })) {
      report.fail(e.line, path_here, "unknown key (policy parameters are numbers)");
    } else {
      raw.not_numbers.emplace_back(std::string(e.key), e.node->is_boolean()  ? "a boolean"
                                                           : e.node->is_string() ? "a string"
                                                           : e.node->is_array()  ? "an array"
                                                                                 : "a date or time");
    }
  }
  return raw;
}

// A parameter of some policy written as something else than a number
// (other_hosts = true): whether it is one of this table's policy, whose name
// may come after it or from [defaults], is for pass two to say.
void check_not_numbers(const Reporter& report, const RawTable& raw, const DependencyConfig& dep) {
  for (const auto& [key, what] : raw.not_numbers) {
    const std::string path = key_path(raw.path, key);
    if (!has_parameter(dep.policy, key)) {
      report.fail(raw.line_of(key), path,
                  "unknown key: no parameter of policy " + dep.policy + " (and policy parameters are numbers)");
    }
    report.fail(raw.line_of(key), path,
                "must be a number, not " + what + " (a parameter of policy " + dep.policy + ")");
  }
}

// The message without a leading "KEY: " or "KEY = VALUE: ", since the error
// already names the key and the line shows the value.
std::string_view strip_key(std::string_view message, std::string_view key) {
  if (message.substr(0, key.size()) != key) return message;
  std::string_view rest = message.substr(key.size());
  if (rest.substr(0, 2) == ": ") return rest.substr(2);
  if (rest.substr(0, 3) == " = ") {
    const std::size_t colon = rest.find(": ");
    if (colon != std::string_view::npos) return rest.substr(colon + 2);
  }
  return message;
}

// Builds the policy as the daemon will, so that every problem its factory
// would find at run time is found here, and points at the key it names.
void check_policy(const Reporter& report, const RawTable& raw, const DependencyConfig& dep,
                  std::string_view inherited) {
  std::string prefix = "policy " + dep.policy + ": ";
  try {
    policies::builtin_registry().create(dep.policy, dep.bounds, dep.params);
  } catch (const policies::ParamError& error) {
    const std::string_view message = error.what();
    const std::string& named = error.key();
    if (message.find("policy '" + dep.policy + "'") != std::string_view::npos) prefix.clear();  // says it already
    if (named.empty()) report.fail(raw.line, raw.path, prefix + std::string(message));
    std::string reason = prefix + std::string(strip_key(message, named));
    // A parameter the config sets nowhere is at the policy's default (and
    // at fault beside another key: vegas's beta_factor under alpha_factor).
    const bool is_default = !raw.sets(named) && !dep.params.contains(named) &&
                            std::ranges::find(kLimitKeys, named) == std::end(kLimitKeys);
    if (is_default) {
      reason += " (the policy's default)";
    } else if (!raw.sets(named)) {
      reason += " (" + std::string(inherited) + ")";
    }
    report.fail(raw.line_of(named), key_path(raw.path, named), reason);
  } catch (const std::exception& error) {
    report.fail(raw.line, raw.path, prefix + error.what());
  }
}

// min_limit <= initial_limit <= max_limit, told at the key this table set
// (the other side may come from [defaults] or the built-in default).
void check_bounds(const Reporter& report, const RawTable& raw, const DependencyConfig& dep,
                  std::string_view inherited) {
  const auto min = static_cast<std::int64_t>(dep.bounds.min);
  const auto max = static_cast<std::int64_t>(dep.bounds.max);
  const auto initial = static_cast<std::int64_t>(dep.bounds.initial);
  const auto describe = [&](std::string_view key, std::int64_t value) {
    std::string out = std::string(key) + " (" + std::to_string(value);
    if (!raw.sets(key)) out += ", " + std::string(inherited);
    return out + ")";
  };
  const auto fail_at = [&](std::string_view key, const std::string& reason) {
    report.fail(raw.line_of(key), key_path(raw.path, key), reason);
  };
  if (min > max) {
    if (raw.sets("max_limit")) fail_at("max_limit", "must be >= " + describe("min_limit", min));
    fail_at("min_limit", "must be <= " + describe("max_limit", max));
  }
  if (initial < min || initial > max) {
    if (raw.sets("initial_limit")) {
      fail_at("initial_limit", "must be in [min_limit, max_limit] = [" + std::to_string(min) + ", " +
                                   std::to_string(max) + "]");
    }
    if (initial < min) fail_at("min_limit", "must be <= " + describe("initial_limit", initial));
    fail_at("max_limit", "must be >= " + describe("initial_limit", initial));
  }
}

// A table's settings on top of `base`: the struct defaults for [defaults],
// the resolved [defaults] for a dependency. Policy parameters carry over only
// to the same policy: another policy's parameters mean nothing to this one.
// The segment capacities a config is checked against: its own, or, for a
// reload, the running daemon's, which a reload cannot change; `whose` says
// which in errors.
struct Capacities {
  std::uint32_t max_dependencies;
  std::uint32_t queue_slots;
  std::string whose;  // "" or ", the running value: ..."
};

// max_queue fits in the segment's queue_slots. Only a table that sets it
// can fail: the built-in 0 always fits, and [defaults] is checked before
// the dependencies that inherit from it.
void check_queue(const Reporter& report, const RawTable& raw, const DependencyConfig& dep,
                 const Capacities& capacities) {
  if (dep.max_queue <= capacities.queue_slots) return;
  report.fail(raw.line_of("max_queue"), key_path(raw.path, "max_queue"),
              "must be <= daemon.queue_slots (" + std::to_string(capacities.queue_slots) + capacities.whose + ")");
}

// A partitioned dependency's limit fits the 16-bit rule and counts; it has
// no wait queue.
void check_partitions(const Reporter& report, const RawTable& raw, const DependencyConfig& dep,
                      std::string_view inherited) {
  if (dep.partitions.empty()) return;
  if (dep.bounds.max > shm::kPartitionFieldMax) {
    std::string reason = "must be <= " + std::to_string(shm::kPartitionFieldMax) +
                         " for a dependency with partitions (their counts are signed 16-bit numbers)";
    if (!raw.sets("max_limit")) reason += " (" + std::string(inherited) + ")";
    report.fail(raw.line_of("max_limit"), key_path(raw.path, "max_limit"), reason);
  }
  if (dep.max_queue > 0) {
    std::string reason = "must be 0 for a dependency with partitions (partitions have no wait queue)";
    if (!raw.sets("max_queue")) reason += " (" + std::string(inherited) + ": set max_queue = 0 here)";
    report.fail(raw.line_of("max_queue"), key_path(raw.path, "max_queue"), reason);
  }
}

DependencyConfig resolve(const Reporter& report, const DependencyConfig& base, const RawTable& raw,
                         const Capacities& capacities, std::string_view inherited) {
  DependencyConfig dep = base;
  dep.name = raw.name;
  if (raw.policy) dep.policy = *raw.policy;
  if (dep.policy != base.policy) dep.params.clear();
  for (const auto& [key, value] : raw.params) dep.params.insert_or_assign(key, value);
  if (raw.min_limit) dep.bounds.min = static_cast<double>(*raw.min_limit);
  if (raw.max_limit) dep.bounds.max = static_cast<double>(*raw.max_limit);
  if (raw.initial_limit) dep.bounds.initial = static_cast<double>(*raw.initial_limit);
  if (raw.window_min_samples) dep.window_min_samples = static_cast<std::uint32_t>(*raw.window_min_samples);
  if (raw.window_max_ms) dep.window_max_age = std::chrono::milliseconds(*raw.window_max_ms);
  if (raw.enforce) dep.enforce = *raw.enforce;
  if (raw.max_queue) dep.max_queue = static_cast<std::uint32_t>(*raw.max_queue);
  if (raw.queue_order) dep.queue_order = *raw.queue_order;
  const RawTable::Breaker& b = raw.breaker;
  if (b.enabled) dep.breaker.enabled = *b.enabled;
  if (b.failure_rate_threshold) dep.breaker.failure_rate_threshold = *b.failure_rate_threshold;
  if (b.minimum_calls) dep.breaker.minimum_calls = static_cast<std::uint32_t>(*b.minimum_calls);
  if (b.window_ms) dep.breaker.window = std::chrono::milliseconds(*b.window_ms);
  if (b.sleep_window_ms) dep.breaker.sleep_window = std::chrono::milliseconds(*b.sleep_window_ms);
  if (b.half_open_calls) dep.breaker.half_open_calls = static_cast<std::uint32_t>(*b.half_open_calls);
  if (b.slow_call_duration_ms) dep.breaker.slow_call_duration = std::chrono::milliseconds(*b.slow_call_duration_ms);
  if (b.slow_call_rate_threshold) dep.breaker.slow_call_rate_threshold = *b.slow_call_rate_threshold;
  if (b.force) dep.breaker.force = *b.force;
  if (raw.partitions) dep.partitions = *raw.partitions;
  check_bounds(report, raw, dep, inherited);
  check_queue(report, raw, dep, capacities);
  check_partitions(report, raw, dep, inherited);
  check_not_numbers(report, raw, dep);
  check_policy(report, raw, dep, inherited);
  return dep;
}

[[noreturn]] void fail_to_read(const std::string& path, int error) {
  switch (error) {
    case ENOENT:
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
    case ENAMETOOLONG:
    case EACCES:
    case EPERM:
      // What a restart would find again: the operator's to mend.
      throw ConfigError(path + ": cannot read: " + std::generic_category().message(error));
    default:
      // EIO, ENOMEM, EMFILE and the like: the machine's, and maybe passing.
      throw std::system_error(error, std::generic_category(), path + ": cannot read");
  }
}

}  // namespace

const char* check_listen_address(std::string_view address) {
  if (address.empty()) return nullptr;
  constexpr const char* kShape = "must be \"host:port\", or \"\" to turn metrics off";
  const std::size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return kShape;
  const std::string_view host = address.substr(0, colon);
  const std::string_view port = address.substr(colon + 1);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']' || host.substr(1, host.size() - 2).find_first_of("[]") != host.npos) {
      return kShape;
    }
  } else if (host.find(':') != std::string_view::npos) {
    return "an IPv6 host must be in brackets, e.g. \"[::1]:9477\"";
  }
  for (char c : host) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return "host must not contain spaces";
  }
  // Addresses are checked whole here: the exporter (civetweb) reads each
  // number of an IPv4 address modulo 256, and listened on 231.1.1.1 for
  // 999.1.1.1, or on 127.0.1.0 for 127.0.0.256.
  unsigned char address_bytes[sizeof(in6_addr)];
  if (host.front() == '[') {
    const std::string v6(host.substr(1, host.size() - 2));
    if (::inet_pton(AF_INET6, v6.c_str(), address_bytes) != 1) return "host in brackets must be an IPv6 address";
  } else if (host.find_first_not_of("0123456789.") == std::string_view::npos &&
             ::inet_pton(AF_INET, std::string(host).c_str(), address_bytes) != 1) {
    return "host must be an IPv4 address of four numbers in [0, 255], e.g. 127.0.0.1, or a host name";
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(std::string(port)) > 65535) {
    return "port must be a number in [0, 65535]";
  }
  return nullptr;
}

std::uint32_t stripes_for(const DaemonConfig& daemon, std::uint32_t cpus) {
  if (daemon.stats_stripes != kAutoStripes) return daemon.stats_stripes;
  const std::uint32_t wanted = cpus == 0 ? 8 : std::min(cpus + 1, shm::kMaxStatsStripesLimit);
  return std::max(1u, std::min(wanted, kAutoStripeBudget / std::max(1u, daemon.max_dependencies)));
}

std::string describe_policy(const control::LimitSettings& settings) {
  std::string params;
  for (const auto& [key, value] : settings.params) {
    params += (params.empty() ? "" : ", ") + key + "=" + policies::format_number(value);
  }
  return params.empty() ? settings.policy : settings.policy + " (" + params + ")";
}

const DependencyConfig* Config::find(std::string_view name) const {
  const auto it = std::lower_bound(dependencies.begin(), dependencies.end(), name,
                                   [](const DependencyConfig& d, std::string_view n) { return d.name < n; });
  return it != dependencies.end() && it->name == name ? &*it : nullptr;
}

const DependencyConfig* Config::table_for(std::string_view name) const {
  if (const DependencyConfig* dep = find(name)) return dep;
  const std::string n(name);
  for (const DependencyConfig& p : patterns) {
    if (::fnmatch(p.name.c_str(), n.c_str(), 0) == 0) return &p;
  }
  return nullptr;
}

DependencyConfig Config::effective(std::string_view name) const {
  const DependencyConfig* table = table_for(name);
  DependencyConfig dep = table != nullptr ? *table : defaults;
  dep.name = name;
  return dep;
}

namespace {

// The tokens of a checked pattern (shm::check_pattern()): a character, `?`,
// `*`, or a bracket `[...]` whole.
std::vector<std::string_view> pattern_tokens(std::string_view pattern) {
  std::vector<std::string_view> tokens;
  for (std::size_t i = 0; i < pattern.size();) {
    std::size_t end = i + 1;
    if (pattern[i] == '[') {
      end = pattern.find(']', i + (i + 1 < pattern.size() && pattern[i + 1] == '!' ? 3 : 2));
      end = end == std::string_view::npos ? pattern.size() : end + 1;
    }
    tokens.push_back(pattern.substr(i, end - i));
    i = end;
  }
  return tokens;
}

// True when every name `later` matches, `earlier` matches too, as far as
// can be told for sure: `earlier` of characters and `*` only (`db-*`,
// `*-cache`, `*`), each of its characters against the same character of
// `later`, each `*` over any run of `later`'s tokens. False otherwise, even
// where `earlier` does cover `later` (`db-[ab]*` before `db-a*`).
bool covers(std::string_view earlier, std::string_view later) {
  if (earlier.find_first_of("?[") != std::string_view::npos) return false;
  const std::vector<std::string_view> tokens = pattern_tokens(later);
  // match[j]: earlier's first i characters match later's first j tokens.
  std::vector<char> match(tokens.size() + 1, 0);
  match[0] = 1;
  for (const char c : earlier) {
    std::vector<char> next(tokens.size() + 1, 0);
    for (std::size_t j = 0; j <= tokens.size(); ++j) {
      if (c == '*') {
        next[j] = match[j] || (j > 0 && next[j - 1]);
      } else {
        next[j] = j > 0 && match[j - 1] && tokens[j - 1].size() == 1 && tokens[j - 1][0] == c;
      }
    }
    match = std::move(next);
  }
  return match[tokens.size()] != 0;
}

// A warning for each pattern table that an earlier one shadows: the first
// pattern that matches a name gives it its settings.
void warn_of_shadowed_patterns(Config& config, const std::vector<RawTable>& patterns) {
  // A pattern covers another only if what comes before its first `*` and
  // after its last starts and ends the other: checked first, from where
  // its stars are, found once. Most pairs differ there, and a config of
  // thousands of patterns has millions of pairs (5000: a second and a
  // half a reload, when each pair was matched whole).
  struct Ends {
    std::string_view head, tail;
    bool may_cover = false;  // of characters and `*`, one at least (covers())
  };
  std::vector<Ends> ends(patterns.size());
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    const std::string_view p = patterns[i].name;
    const std::size_t first = p.find('*'), last = p.rfind('*');
    if (first == std::string_view::npos || p.find_first_of("?[") != std::string_view::npos) continue;
    ends[i] = {p.substr(0, first), p.substr(last + 1), true};
  }
  for (std::size_t later = 0; later < patterns.size(); ++later) {
    const std::string_view name = patterns[later].name;
    for (std::size_t earlier = 0; earlier < later; ++earlier) {
      const Ends& e = ends[earlier];
      if (!e.may_cover || name.size() < e.head.size() + e.tail.size() || !name.starts_with(e.head) ||
          !name.ends_with(e.tail) || !covers(patterns[earlier].name, name)) {
        continue;
      }
      config.warnings.push_back(config.source + ":" + std::to_string(patterns[later].line) + ": " +
                                patterns[later].path + ": never applies: every name it matches takes " +
                                "[" + patterns[earlier].path + "] (line " + std::to_string(patterns[earlier].line) +
                                "), the first pattern in the file that matches it");
      break;
    }
  }
}

}  // namespace

Config parse_config(std::string_view text, std::string_view source, const DaemonConfig* running) {
  // A reload's file must also start a daemon: the next restart (a reboot,
  // an upgrade) reads it with its own capacities, and a file it refuses
  // would stop the daemon there (exit 78, which the unit does not retry).
  if (running != nullptr) parse_config(text, source, nullptr);
  const Reporter report(source);
  const toml::table root = tomlread::parse<ConfigError>(text, source);

  // Pass 1: every key on its own, in file order.
  Config config;
  config.source = source;
  RawTable raw_defaults;  // [defaults] may be left out
  raw_defaults.path = "defaults";
  std::vector<RawTable> raw_dependencies;
  std::vector<RawTable> raw_patterns;
  for (const Entry& e : in_file_order(root)) {
    const std::string path = key_path("", e.key);
    if (e.key == "daemon") {
      config.daemon = read_daemon(report, read_table(report, e, path));
    } else if (e.key == "defaults") {
      raw_defaults = read_dependency_table(report, read_table(report, e, path), path, "", e.line);
    } else if (e.key == "dependency") {
      for (const Entry& d : in_file_order(read_table(report, e, path))) {
        const std::string dep_path = key_path(path, d.key);
        if (!d.node->is_table()) report.fail(d.line, dep_path, "must be a table: [dependency.NAME]");
        const bool pattern = shm::is_pattern(d.key);
        if (const char* why = pattern ? shm::check_pattern(d.key) : shm::check_dependency_name(d.key)) {
          report.fail(d.line, dep_path, std::string(pattern ? "pattern " : "name ") + why);
        }
        (pattern ? raw_patterns : raw_dependencies)
            .push_back(read_dependency_table(report, *d.node->as_table(), dep_path, std::string(d.key), d.line));
      }
    } else {
      // A misspelt table, or a key written above the first [table] line.
      report.fail(e.line, path,
                  e.node->is_table() ? "unknown table (the tables are [daemon], [defaults] and [dependency.NAME])"
                                     : "unknown key (keys belong in [daemon], [defaults] or [dependency.NAME]: "
                                       "one above the file's first [table] line is in none)");
    }
  }

  // Pass 2: what needs the whole file.
  const DaemonConfig& segment = running != nullptr ? *running : config.daemon;
  const Capacities capacities{segment.max_dependencies, segment.queue_slots,
                              running != nullptr ? ", the running value: it changes only on restart" : ""};
  if (raw_dependencies.size() > capacities.max_dependencies) {
    const RawTable& first_extra = raw_dependencies[capacities.max_dependencies];  // in file order
    report.fail(first_extra.line, first_extra.path,
                std::to_string(raw_dependencies.size()) +
                    " dependencies configured, more than daemon.max_dependencies (" +
                    std::to_string(capacities.max_dependencies) + capacities.whose + ")");
  }
  config.defaults = resolve(report, DependencyConfig{}, raw_defaults, capacities, "the default");
  config.dependencies.reserve(raw_dependencies.size());
  for (const RawTable& raw : raw_dependencies) {
    config.dependencies.push_back(resolve(report, config.defaults, raw, capacities, "from [defaults]"));
  }
  std::sort(config.dependencies.begin(), config.dependencies.end(),
            [](const DependencyConfig& a, const DependencyConfig& b) { return a.name < b.name; });
  // A strict daemon gives each pattern a slot of its own, where strict
  // clients find it (shm::find_or_claim_pattern()).
  if (config.daemon.strict && raw_dependencies.size() + raw_patterns.size() > capacities.max_dependencies &&
      raw_dependencies.size() <= capacities.max_dependencies) {
    const RawTable& first_extra = raw_patterns[capacities.max_dependencies - raw_dependencies.size()];
    report.fail(first_extra.line, first_extra.path,
                std::to_string(raw_dependencies.size()) + " dependencies and " +
                    std::to_string(raw_patterns.size()) +
                    " patterns configured, more than daemon.max_dependencies (" +
                    std::to_string(capacities.max_dependencies) + capacities.whose +
                    "): with daemon.strict = true each pattern takes a slot");
  }
  for (const RawTable& raw : raw_patterns) {
    config.patterns.push_back(resolve(report, config.defaults, raw, capacities, "from [defaults]"));
  }
  warn_of_shadowed_patterns(config, raw_patterns);
  return config;
}

Config load_config_file(const std::string& path, const DaemonConfig* running) {
  // O_NONBLOCK: opening a FIFO no one writes would block until one did (a
  // reload, the whole daemon loop with it); it is refused below, as any
  // file that is not a regular one (a device, a socket) is.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail_to_read(path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    fail_to_read(path, error);
  }
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {  // a directory's read says so
    ::close(fd);
    throw ConfigError(path + ": cannot read: not a regular file but " +
                      (S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" : "a device"));
  }
  std::string text;
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      fail_to_read(path, error);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > kMaxFileBytes) {
      ::close(fd);
      throw ConfigError(path + ": cannot read: larger than " + std::to_string(kMaxFileBytes >> 20) +
                        " MiB, not a config file");
    }
  }
  ::close(fd);
  return parse_config(text, path, running);
}

}  // namespace bulkhead::daemon
