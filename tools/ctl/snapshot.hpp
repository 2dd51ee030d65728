// What bulkheadctl reads from a live segment, and what it derives from two
// readings some time apart (rates, latency percentiles over the interval).
//
// Sampling: a Snapshot is a series of relaxed loads, not an atomic picture.
// Counters only grow, so two snapshots give honest deltas; a call that
// completes during a read may show in one counter and not yet in another,
// an error of at most the calls in flight that the next reading corrects.
// Nothing here writes to the segment: every access goes through a const
// reference, and open_read_only() maps it without write permission.
//
// Thread safety: plain values; read_snapshot() may run on any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shm/segment.hpp"
#include "shm/stats.hpp"

namespace bulkhead::ctl {

// The segment name bulkheadctl uses without --segment: $BULKHEAD_SEGMENT,
// else "bulkhead", the same rule as the client's.
std::string default_segment_name();

// Attaches to /dev/shm/<name> read-only (validated as the client and daemon
// do). Throws shm::SegmentError whose what() is ready to print: for a
// missing or unreadable segment it adds what an operator should check.
shm::Segment open_read_only(const std::string& name);

// Whether `segment` is no longer the one under its name: removed, or
// replaced by one made anew (bulkheadd --recreate-segment, or an operator's
// rm before a restart), which the daemon and clients use instead.
bool segment_replaced(const shm::Segment& segment);

struct DaemonReading {
  std::int32_t pid = 0;  // 0: none recorded (stopped cleanly, or never ticked); in its pid namespace
  std::uint64_t pid_namespace = 0;  // as ProcessReading's (ABI 4.4; 0 from an older daemon)
  pid_t host_pid = 0;               // as ProcessReading's
  std::uint64_t start_time = 0;
  shm::Liveness liveness = shm::Liveness::kDead;  // of pid, with start_time
  std::uint64_t heartbeat = 0;                    // ticks
  std::uint64_t heartbeat_ns = 0;                 // CLOCK_MONOTONIC of the last tick
  std::uint64_t config_generation = 0;
  bool strict = false;
  // The patterns it publishes for strict clients (shm::kDependencyPattern),
  // by slot: a name no table of its own names is claimed when one matches.
  std::vector<std::string> patterns;
  std::uint32_t default_limit = 0;
  std::uint32_t metrics_port = 0;  // 0: no metrics endpoint
};

struct DependencyReading {
  std::uint32_t index = 0;  // slot
  // As the slot holds it, except that a name no client would claim (a
  // client wrote junk) has every character outside A-Z a-z 0-9 . _ -
  // replaced by '?', so that it cannot drive the terminal; name_valid says so.
  std::string name;
  bool name_valid = true;
  std::uint32_t limit = 0;
  std::uint32_t inflight = 0;
  std::uint32_t flags = 0;  // shm::kDependency*
  std::uint64_t generation = 0;
  std::uint32_t waiters = 0;    // wait-queue records taken
  std::uint32_t max_queue = 0;  // waiters allowed (0: nobody waits)
  shm::DependencyCounters counters;
  // The circuit breaker: the word the daemon publishes (shm::kBreaker*),
  // bulkheadctl's override (shm::kOverride*), half-open trial permits left.
  std::uint32_t breaker = 0;
  std::uint32_t breaker_override = 0;
  std::uint32_t trials_left = 0;
  // bulkheadctl's pin of the limit (shm::pin_word), when one holds at the
  // reading: the pinned limit and the whole seconds it has left; 0 and 0
  // without.
  std::uint32_t pin_limit = 0;
  std::uint64_t pin_left_s = 0;
  // Partitions (empty without): "default" first, then the named ones.
  struct Partition {
    std::string name;  // junk characters shown as '?', as the dependency's
    std::uint32_t guaranteed = 0;
    std::uint32_t inflight = 0;
    bool hard_cap = false;
    std::uint64_t rejected = 0;  // since the segment was created
  };
  std::vector<Partition> partitions;

  // "closed", "open", "half_open" ("closed" for a value no daemon writes,
  // as clients read it).
  const char* breaker_state() const;
  bool breaker_forced() const { return (breaker & shm::kBreakerForced) != 0; }
  // "auto", "open", "closed", or "invalid" (junk, which the daemon ignores).
  const char* breaker_override_name() const;
  bool configured() const { return (flags & shm::kDependencyConfigured) != 0; }
  bool shadow() const { return (flags & shm::kDependencyShadow) != 0; }
};

struct ProcessReading {
  std::uint32_t slot = 0;
  std::int32_t pid = 0;  // as the process recorded it: in its own pid namespace
  // 0, or the inode of the process's pid namespace when that is another
  // than bulkheadctl's (a container): pid is then that namespace's.
  std::uint64_t pid_namespace = 0;
  // The process's pid in bulkheadctl's namespace: pid, or for another
  // namespace's process the one /proc shows (0: not found).
  pid_t host_pid = 0;
  std::uint64_t start_time = 0;  // clock ticks after boot, 0 if unknown
  shm::Liveness liveness = shm::Liveness::kUnknown;
  // Its liveness lock (ABI 4.5): gone while the pid lives, it exec'd.
  shm::LockState lock = shm::LockState::kNone;
  struct Held {
    std::uint32_t dependency;  // slot index
    std::uint32_t permits;
  };
  std::vector<Held> held;  // nonzero counts only
};

struct Snapshot {
  std::string segment;  // name, without /dev/shm/
  // Whether bulkheadctl without --segment reads this one (default_segment_name()):
  // the commands it suggests then need no --segment.
  bool default_segment = false;
  std::uint16_t abi_major = 0;
  std::uint16_t abi_minor = 0;
  std::uint64_t size = 0;      // bytes
  std::uint64_t reserved = 0;  // of them, with their memory in /dev/shm (Segment::reserved_bytes())
  shm::Capacities capacities;
  std::uint64_t taken_ns = 0;     // CLOCK_MONOTONIC when read
  std::uint64_t boot_time_s = 0;  // Unix time of boot, to date process start times
  DaemonReading daemon;
  std::vector<DependencyReading> dependencies;  // ready slots, by index
  std::vector<ProcessReading> processes;        // ready slots, by index
  // Slots taken, of capacities' (ready, being claimed, or abandoned): a
  // table with none left refuses new names or processes (-ENOSPC).
  std::uint32_t dependency_slots_taken = 0;
  std::uint32_t process_slots_taken = 0;

  const DependencyReading* find(std::string_view name) const;
  const DependencyReading* at_index(std::uint32_t index) const;
};

// The host's CLOCK_MONOTONIC now, in which the segment holds times (the
// daemon's heartbeat, a pin's end): this process's, less its offset when
// it runs in a time namespace of its own (shm::monotonic_offset_ns()).
std::uint64_t monotonic_now_ns();

// How long before `now_ns` the daemon last ticked (Header::heartbeat and
// heartbeat_ns), in seconds; nullopt while it has recorded no tick, and 0
// when it ticked between the caller's clock read and its load.
std::optional<double> heartbeat_age_s(std::uint64_t heartbeat, std::uint64_t heartbeat_ns, std::uint64_t now_ns);

// Reads everything bulkheadctl shows. `now_ns` is taken_ns (CLOCK_MONOTONIC;
// tests pass their own). Loads only.
Snapshot read_snapshot(const shm::Segment& segment, std::uint64_t now_ns);

// --- Derived: two snapshots ---------------------------------------------

enum class DaemonState {
  kRunning,  // its pid lives and the heartbeat is recent
  kStale,    // its pid lives (or cannot be checked) but the heartbeat is old
  kNone,     // no pid recorded, or that process is gone
};
const char* daemon_state_name(DaemonState state);  // "running", "stale", "none"

// The order of a status's dependencies: by slot (the order names were
// claimed in, configured ones first), by name, or by one of the columns,
// the largest first (ties by name).
enum class StatusOrder { kSlot, kName, kLimit, kInflight, kAdmitted, kRejected, kP99 };
// "slot", "name", "limit", "inflight", "admitted", "rejected", "p99".
const char* status_order_name(StatusOrder order);
std::optional<StatusOrder> parse_status_order(std::string_view name);
std::vector<std::string> status_order_names();  // every order's, in the enum's order

struct StatusOptions {
  // A heartbeat older than this is stale. The segment does not publish
  // tick_ms; 5 s is 50 default ticks and half the unit's WatchdogSec=.
  double stale_after_s = 5.0;
  // Only the dependencies whose name matches one of these shell patterns
  // (fnmatch(3): * ? [...]); empty: all of them.
  std::vector<std::string> names;
  StatusOrder order = StatusOrder::kSlot;
};

struct DependencyStatus {
  DependencyReading now;            // the later reading
  shm::DependencyCounters delta;    // over the interval
  double interval_s = 0;

  // Calls that completed in the interval (admission is counted at release):
  // ok + dropped + ignored + failed, per second.
  double admitted_per_s() const;
  double rejected_limit_per_s() const;
  double rejected_queue_full_per_s() const;
  double rejected_deadline_per_s() const;
  double shadow_admitted_per_s() const;
  double failed_per_s() const;
  double rejected_open_circuit_per_s() const;
  // Latency of successful calls at quantile q over the interval, in ms;
  // nullopt when none completed in it.
  std::optional<double> interval_latency_ms(double q) const;
  // The same since the segment was created (its counters never reset).
  std::optional<double> total_latency_ms(double q) const;
};

struct Status {
  Snapshot before;
  Snapshot after;
  double interval_s = 0;
  DaemonState daemon_state = DaemonState::kNone;
  std::optional<double> heartbeat_age_s;  // nullopt: no tick recorded yet
  std::uint32_t processes_alive = 0;      // attached and alive (or unknown)
  // Those in `after` that StatusOptions::names selects, in its order.
  std::vector<DependencyStatus> dependencies;
  std::vector<std::string> names;  // StatusOptions::names
};

// Derives the status from two readings of one segment, `before` first.
// A dependency that appeared between them counts from zero.
Status derive_status(Snapshot before, Snapshot after, const StatusOptions& options = {});

// Two readings of `segment`, `wait` between them (bulkheadctl sleeps
// --interval), derived. When the segment was replaced under its name
// meanwhile, they would show one no longer in use (its daemon gone, its
// last limits) while another daemon runs on the new one: they are taken
// again of the segment under the name, which `segment` becomes (three
// times at most). Throws shm::SegmentError (open_read_only()) when the
// name holds no usable segment any more.
Status sample(shm::Segment& segment, const std::function<void()>& wait, const StatusOptions& options);

}  // namespace bulkhead::ctl
