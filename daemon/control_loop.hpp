// The daemon's control loop: once per tick, turn what every process recorded
// into new limits, and keep the segment healthy.
//
// Algorithm, per tick:
//   1. Adopt dependency slots that clients claimed since the last tick (and
//      abandon claims that never finished).
//   2. Per dependency: read the counters and hand the deltas since the last
//      tick to its control::Controller (window carry-over, policy, clamp);
//      publish the limit it answers, or the limit an operator pinned
//      (bulkheadctl pin) until the pin ends.
//      Then its circuit breaker (daemon/breaker.hpp) from the same deltas
//      and the operator's override in the segment; publish its state.
//   3. Give back the permits of processes that died (or exec'd) holding them, and
//      their places in wait queues; wake the waiters.
//   4. Count the slots taken in the segment's tables (steps 1 and 3 walk
//      them); log a table that fills, since clients are what it refuses.
//   5. Advance the heartbeat; update metrics.
//
// Sampling: the counters only grow; the loop keeps the last reading per
// dependency and never writes a counter. A reading is not a snapshot: calls
// completing during the read may appear in one counter and not yet in
// another, which the next delta corrects.
//
// Locking: none. One thread (main's) calls everything here; clients touch
// only atomics in the segment. Time is passed in, never read, so tests drive
// the loop with a fake clock.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "control/controller.hpp"
#include "daemon/breaker.hpp"
#include "daemon/config.hpp"
#include "daemon/metrics.hpp"
#include "daemon/process_watch.hpp"
#include "shm/segment.hpp"
#include "shm/stats.hpp"

namespace bulkhead::daemon {

class ControlLoop {
 public:
  // The segment must outlive the loop; metrics may be null (metrics off).
  ControlLoop(shm::Segment& segment, const Config& config, Metrics* metrics);

  // Switches to a validated config: registers its dependencies, rebuilds the
  // policies whose settings changed (continuing from the published limit),
  // and bumps the segment's config generation.
  void apply(const Config& config);

  // One tick at `now_ns` on CLOCK_MONOTONIC (or a test's clock).
  void tick(std::uint64_t now_ns);

  // How the loop sees one dependency (tests, logs).
  struct View {
    std::string name;
    std::string policy;
    std::uint32_t limit;
    std::uint32_t inflight;
    std::uint64_t windows;  // windows handed to the policy so far
    std::uint64_t window_ns;  // the last one's length (0 before the first)
    BreakerState breaker;
    bool breaker_forced;
    std::uint32_t pinned;  // an operator's pin in force; 0: none
    std::uint32_t index;  // slot
    // Partitions (empty without): name, guaranteed count, in flight, capped.
    struct Partition {
      std::string name;
      std::uint32_t guaranteed;
      std::uint32_t inflight;
      bool hard_cap;
    };
    std::vector<Partition> partitions;
  };
  std::vector<View> view() const;

  // The segment's tables: slots taken (claimed, in use, or abandoned) of
  // each, as the last tick counted them (0 before the first), and the
  // segment's capacities. A name takes a dependency slot
  // for the segment's life; a process slot is freed when its process dies.
  // A full table refuses what would take a slot (-ENOSPC).
  struct Occupancy {
    std::uint32_t dependencies = 0;
    std::uint32_t max_dependencies = 0;
    std::uint32_t processes = 0;
    std::uint32_t max_processes = 0;
  };
  Occupancy occupancy() const { return occupancy_; }

  std::uint64_t permits_reclaimed() const { return permits_reclaimed_; }
  // Wait-queue places freed on behalf of processes that died waiting.
  std::uint64_t waiters_reclaimed() const { return waiters_reclaimed_; }
  // Passes over every wait queue made to free dead processes' places: one
  // per tick that finds any process dead, however many died.
  std::uint64_t dead_queue_scans() const { return dead_queue_scans_; }
  // Claims tried for configured names and a strict config's patterns.
  std::uint64_t claim_attempts() const { return claim_attempts_; }

  // Liveness locks tested a tick (shm::liveness_lock_dropped()), once a
  // descriptor that may hold one was closed (CloseWatch): those of this
  // many process slots from lock_cursor_ on, until every slot's was, so
  // that a table of 4096 slots, each test walking its thousands of locks,
  // takes about 0.4 ms a tick, not 30 (bulkhead-liveness-bench); every
  // slot's is tested within ceil(max_processes / 64) ticks of the close.
  static constexpr std::uint32_t kLockChecksPerTick = 64;
  // Slots whose liveness lock was tested so far (those that recorded one
  // or not).
  std::uint64_t lock_tests() const { return lock_tests_; }

 private:
  struct Dependency {
    std::uint32_t index = 0;
    std::string name;
    std::unique_ptr<control::Controller> controller;
    std::unique_ptr<shm::StatsReader> stats;  // its stripes, read since the previous tick
    // Per count of the admission word (the total, partitions 1 and 2):
    std::array<int, 3> drift_ticks{};          // ticks in a row it was off the held counts
    std::array<std::int64_t, 3> drift_min{};   // the smallest gap over those ticks
    Metrics::Dependency* metrics = nullptr;
    std::uint64_t service_ns = 0;  // published as DependencyControl::service_ns
    std::optional<Breaker> breaker;
    std::uint32_t bad_override = 0;  // an unknown override value already logged
    std::uint64_t pin = 0;           // the pin word in force (0: none), as last read
    std::uint32_t queue_scan = 0;    // wait-queue records the waiters gauge counts (count_waiters())
    // The last tick found junk in the published limit, settings, or
    // partitions' shape and names, and said so.
    bool junk_limit_logged = false;
    bool junk_settings_logged = false;
    bool junk_partitions_logged = false;
  };

  void adopt_new_slots(std::uint64_t now_ns);
  // Logs a table's filling up and, for processes, its emptying (once
  // each way), and publishes the counts to the metrics.
  void report_occupancy(const Occupancy& before);
  void claim_configured();
  // Adopts a ready slot, unless it holds a pattern or its name is junk
  // (then nothing is adopted).
  enum class Adoption { kAdopted, kPattern, kJunk };
  Adoption track(std::uint32_t index, std::uint64_t now_ns);
  void update(Dependency& d, std::uint64_t now_ns);
  // Calls waiting in the dependency's queue, for the metrics.
  std::uint32_t count_waiters(Dependency& d);
  void reclaim_dead_processes();
  // Whether process slot `p`, whose process is not dead by its pid (it
  // runs, or cannot be seen), has dropped its liveness lock at two ticks
  // in a row: it exec'd (or exited unseen). Tests the slots of this tick's
  // window, and those found without it at the last.
  bool lock_gone_twice(std::uint32_t p, const shm::ProcessSnapshot& seen);
  // A process found dead, or that exec'd (its liveness lock dropped), its
  // slot taken from it (shm::take_process_slot()).
  struct DeadProcess {
    std::uint32_t slot = 0;
    std::string pid;  // as the log names it
    const char* left = "died";  // or "exec'd" (its liveness lock gone), as the log says it
    // The places in wait queues freed for it: (dependency slot, places), in
    // slot order.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> waits;
  };
  // Frees the dead processes' places in the wait queues and gives back the
  // permits they held; their slots are the caller's to free.
  void give_back_dead(std::vector<DeadProcess>& dead);
  // Whether the claim of process slot `p`, unfinished for long, may be
  // abandoned: its process recorded no pid, or is dead (its held counts,
  // which a killed daemon's take of the slot left, are then zeroed).
  bool claimer_gone(std::uint32_t p);
  // Frees wait-queue records that name no live process slot (junk, or
  // left by a daemon killed mid-reclaim).
  void free_stray_records();
  // Gives back permits counted in flight that no process holds.
  void scan_drift();
  void publish_limit(const Dependency& d);
  // Puts back the limit, settings and partitions publish_limit(),
  // publish_settings() and publish_partitions() stored, where a client wrote
  // over them; logs it.
  void repair_published(Dependency& d, bool limit_moved);
  // The partitions' half of that: true when it put something back.
  bool repair_partitions(std::uint32_t index);
  // Follows bulkheadctl's pin in the segment: pins or unpins the
  // controller, publishes the limit when that changes it, and clears a pin
  // that has ended.
  void follow_pin(Dependency& d, std::uint64_t now_ns);
  // Holds the operator's pin (d.pin) at what a partitioned dependency's
  // limit can be, or whole again once a reload took the partitions away;
  // true when the pinned limit moved (it is then to be published).
  bool hold_pin_within_partitions(Dependency& d);
  // Runs the breaker on a tick's deltas; publishes its state (and trial
  // permits on entering half open); logs and counts transitions.
  void update_breaker(Dependency& d, const shm::DependencyCounters& delta, std::uint64_t now_ns);
  // A dependency's partitions, as the config gives them: what the rule
  // needs besides the limit, kept so that each new limit can be published
  // with its guarantees.
  struct PartitionPlan {
    bool partitioned = false;
    std::array<std::uint32_t, 3> share_ppm{};  // by field: 0 "default", 1, 2
    std::uint32_t caps = 0;
    std::array<std::string, 3> names{"default", "", ""};
    std::uint32_t fields = 0;  // the shape's low word, as published: fields in use << 8 | caps
    // By field: the partition's series, once the first tick under this
    // plan found them (the series of names a new plan drops are removed
    // before it is in force).
    std::array<std::optional<Metrics::Partition>, 3> series;
  };
  // Publishes the partitions' names, caps and field assignment (names keep
  // their fields across reloads), then the rule for the current limit.
  void publish_partitions(std::uint32_t index, std::string_view name, const DependencyConfig& settings);
  // The rule and admit_limit for `limit` under the slot's plan.
  void publish_rule(std::uint32_t index, std::uint32_t limit);
  // Flags and max_queue, as the config gives them to a dependency. `table`:
  // config_.table_for(name), looked up once by the caller.
  void publish_settings(std::uint32_t index, std::string_view name, const DependencyConfig* table);
  // The service time clients estimate their wait from.
  void publish_service_time(Dependency& d, const shm::DependencyCounters& delta);
  // A reload changed a half-open breaker's half_open_calls from `before`:
  // its episode's permits left follow, so that the trials out and left add
  // up to the new count.
  void resize_trials(std::uint32_t index, std::uint32_t before, const BreakerSettings& now);
  // Clears kDependencyPattern on every slot but this config's patterns'.
  void withdraw_patterns();
  // The kDependency* flags the config gives a dependency whose table_for()
  // is `table` (nullptr: [defaults]).
  std::uint32_t flags_for(const DependencyConfig* table) const;
  // The settings of a dependency whose table_for() is `table`.
  const DependencyConfig& settings_of(const DependencyConfig* table) const {
    return table != nullptr ? *table : config_.defaults;
  }

  shm::Segment& segment_;
  Config config_;
  Metrics* metrics_;
  ProcessWatch watch_;  // which attached processes still run
  CloseWatch closes_;  // of the segment's file, read-only descriptors
  std::uint32_t lock_cursor_ = 0;  // the first process slot whose lock the next tick tests
  std::uint32_t lock_sweep_left_;  // slots whose lock is still to test since the last close
  std::uint32_t lock_window_ = 0;  // this tick's: slots from lock_cursor_ on
  std::uint64_t lock_tests_ = 0;
  // By process slot: the claim whose lock was found gone at the last tick
  // (tested again at this one), or 0.
  std::vector<std::uint32_t> lock_gone_at_claim_;
  // The tracked dependencies, ordered by slot index: a vector, so that the
  // tick walks them in one pass over contiguous memory (a std::map's nodes
  // cost a cache miss each, 8% of the tick at 4096 dependencies). Slots
  // are never freed, and adoption walks the slots in order: an insert
  // moves elements only for a slot claimed below one already tracked.
  class Dependencies {
   public:
    using Entry = std::pair<std::uint32_t, Dependency>;
    std::size_t size() const { return entries_.size(); }
    auto begin() { return entries_.begin(); }
    auto end() { return entries_.end(); }
    auto begin() const { return entries_.begin(); }
    auto end() const { return entries_.end(); }
    // The dependency of slot `index`, or null.
    Dependency* find(std::uint32_t index);
    Dependency& insert(std::uint32_t index, Dependency d);

   private:
    std::vector<Entry> entries_;
  };
  Dependencies dependencies_;
  std::vector<bool> tracked_;                         // by slot index: in dependencies_
  // scan_drift()'s first look, by slot index (from its slice's first): the
  // admission word less the held words (mod 2^64), kept to reuse its memory.
  std::vector<std::uint64_t> drift_first_gap_;
  std::size_t drift_next_ = 0;  // the drift scan's next slice starts at this tracked dependency
  // Slots seen mid-claim, with the heartbeat at which they were first seen.
  std::map<std::uint32_t, std::uint64_t> claiming_since_;
  std::vector<std::string> unclaimed_;  // configured names without a slot yet
  // A strict config's patterns without a slot yet, and the slots of those
  // that have one, whose kDependencyPattern flag each tick puts back if a
  // client cleared it.
  std::vector<std::string> unclaimed_patterns_;
  std::vector<std::uint32_t> pattern_slots_;
  // Why each configured name or pattern last failed to get a slot: the
  // warning is logged when that changes, not at every tick it is retried.
  // Its errno too: a table full (ENOSPC) is not tried again until a reload.
  struct ClaimFailure {
    std::string what;
    int code = 0;
  };
  std::map<std::string, ClaimFailure> claim_failures_;
  std::set<std::uint32_t> ignored_;     // ready slots with junk names
  std::map<std::uint32_t, std::uint64_t> process_claiming_since_;
  // By slot index: the plan of a partitioned dependency, null for the others.
  std::vector<std::unique_ptr<PartitionPlan>> plans_;
  // By slot index: whether this daemon has published the partitions' shape
  // yet (its first publication always brings a new version).
  std::vector<bool> shapes_published_;
  // By slot index: the flags and max_queue publish_settings() stored, which
  // each tick puts back if a client changed them.
  struct PublishedSettings {
    std::uint32_t flags = 0;
    std::uint32_t max_queue = 0;
  };
  std::vector<PublishedSettings> published_settings_;
  const PartitionPlan* plan_of(std::uint32_t index) const {
    return index < plans_.size() ? plans_[index].get() : nullptr;
  }
  std::uint64_t heartbeat_ = 0;
  // The last tick's time, once a tick has scanned the dependency table: a
  // slot no daemon governed that a later tick finds was claimed since
  // (track()).
  std::optional<std::uint64_t> previous_tick_ns_;
  control::TickObservation observation_;  // update()'s, reused for every dependency
  std::uint64_t permits_reclaimed_ = 0;
  std::uint64_t waiters_reclaimed_ = 0;
  std::uint64_t dead_queue_scans_ = 0;
  std::uint64_t claim_attempts_ = 0;
  Occupancy occupancy_;
};

}  // namespace bulkhead::daemon
