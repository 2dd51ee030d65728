// bulkheadd's configuration: the TOML file, validated whole before use.
//
// A Config is immutable once built. Loading either returns a complete,
// valid Config or throws ConfigError naming the file, the line, the key and
// the reason; there is no partially applied config, so a bad reload leaves
// the running one untouched.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "control/controller.hpp"
#include "daemon/breaker.hpp"

namespace bulkhead::daemon {

// How one dependency's limit is learned. [defaults] and every
// [dependency.NAME] table have these keys.
// The order in which a dependency's wait queue admits its waiters.
enum class QueueOrder { kFifo, kLifo };

// One partition of a dependency's limit ([dependency.NAME.partitions]).
struct PartitionConfig {
  std::string name;            // "default": the calls that name none
  std::uint32_t share_ppm = 0;  // guaranteed share of the limit, in millionths
  bool hard_cap = false;        // never more than the share, even when capacity is idle
  friend bool operator==(const PartitionConfig&, const PartitionConfig&) = default;
};

struct DependencyConfig : control::LimitSettings {
  std::string name;     // empty for [defaults]
  bool enforce = true;  // false: shadow mode, admit everything and count would-be rejections
  // Calls (bh_acquire) that may wait for a permit at once, host-wide; 0: none
  // waits, as in Hystrix and resilience4j, so that queueing is a choice.
  std::uint32_t max_queue = 0;
  QueueOrder queue_order = QueueOrder::kFifo;
  // [dependency.NAME.breaker] (or [defaults.breaker]), key by key over [defaults].
  BreakerSettings breaker;
  // Empty: no partitions. Otherwise at most 3, in file order, at most 2 of
  // them other than "default" (see shm/partitions.hpp).
  std::vector<PartitionConfig> partitions;
};

// stats_stripes = "auto": stripes_for() chooses when the segment is made.
inline constexpr std::uint32_t kAutoStripes = 0;

struct DaemonConfig {
  std::string segment = "bulkhead";             // shm name: /dev/shm/<segment>
  std::chrono::milliseconds tick{100};          // control loop period
  std::string metrics_listen = "127.0.0.1:9477";  // "" turns metrics off
  bool strict = false;                          // refuse names not configured
  std::uint32_t max_dependencies = 256;         // dependency slots
  std::uint32_t max_processes = 256;            // process slots
  std::uint32_t stats_stripes = kAutoStripes;   // statistics stripes per dependency
  std::uint32_t queue_slots = 64;               // wait-queue places per dependency: max_queue's ceiling
  std::string segment_group;                    // "" : the daemon's own group
  std::uint32_t segment_group_line = 0;         // its line in the file, for the error when no such group
  std::uint32_t segment_mode = 0660;            // never world-writable
  bool segment_reserve = true;                  // all its memory in /dev/shm at once (no SIGBUS later)
  std::string log_level = "info";               // trace debug info warn error
};

struct Config {
  std::string source;  // the file it came from, or "<embedded default>"
  DaemonConfig daemon;
  DependencyConfig defaults;
  std::vector<DependencyConfig> dependencies;  // sorted by name, names unique
  // [dependency."PATTERN"] tables (a key with * ? or [), in file order;
  // `name` is the pattern. They claim no slot: they give their settings to
  // the names clients claim that match them.
  std::vector<DependencyConfig> patterns;
  // What is valid but most likely not what was meant, "FILE:LINE: KEY:
  // WHY" as errors are: a pattern table no name can reach, since an earlier
  // one matches every name it does. The daemon logs them at start and at
  // each reload; --check-config prints them.
  std::vector<std::string> warnings;

  // The configured dependency of that name, or nullptr.
  const DependencyConfig* find(std::string_view name) const;
  // The table that gives a dependency of that name its settings: its own,
  // else the first pattern table (in file order) that matches it; nullptr
  // when neither does ([defaults] then).
  const DependencyConfig* table_for(std::string_view name) const;
  // The settings a dependency of that name runs with: table_for()'s under
  // that name, else [defaults].
  DependencyConfig effective(std::string_view name) const;
};

// The statistics stripes a new segment gets: stats_stripes when set; for
// "auto", one more than the host's possible CPUs (`cpus`, 0 when unknown:
// then 8), so that every CPU has a stripe of its own and its adds need no
// lock prefix, within [1, 64] and within kAutoStripeBudget stripes over
// all dependencies (the daemon reads every stripe each tick).
inline constexpr std::uint32_t kAutoStripeBudget = 32768;
std::uint32_t stripes_for(const DaemonConfig& daemon, std::uint32_t cpus);

// "FILE:LINE: KEY: REASON" (LINE omitted when the error has no place, such as
// a file that cannot be read).
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses and validates TOML text; `source` names it in errors. For a reload,
// `running` is the daemon's config: what depends on the segment's
// capacities (the number of configured names, max_queue) is checked against
// its max_dependencies and queue_slots, which a reload cannot change, and
// against the file's too, which the next start will have.
Config parse_config(std::string_view text, std::string_view source, const DaemonConfig* running = nullptr);
// Reads and parses a file. A file that is missing, not a file, or not
// readable to the daemon is a ConfigError, as is its text; a read that fails
// for a reason a later try may not meet (EIO, ENOMEM, EMFILE) is a
// std::system_error.
Config load_config_file(const std::string& path, const DaemonConfig* running = nullptr);
// Why `address` is no daemon.metrics_listen (or --metrics-listen) value, or
// null: "" (metrics off), "host:port" or "[v6]:port", port 0..65535, the
// host a name or an address (a host of digits and dots an IPv4 address).
// Whether a name resolves or the port is free is for the exporter to find out.
const char* check_listen_address(std::string_view address);
// The config bulkheadd runs with when given no --config.
std::string_view embedded_default_config();

// For logs: the policy and the parameters the config set, in key order
// (the rest are the policy's defaults): "balance (baseline_max_ms=28,
// tolerance=0.4)", or "balance".
std::string describe_policy(const control::LimitSettings& settings);

}  // namespace bulkhead::daemon
