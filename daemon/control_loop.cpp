#include "daemon/control_loop.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>

#include <spdlog/spdlog.h>

#include "shm/names.hpp"
#include "shm/partitions.hpp"
#include "shm/pid_namespace.hpp"
#include "shm/wait_queue.hpp"

namespace bulkhead::daemon {

namespace {

// Ticks in a row, and looks within each, that must all find a
// dependency's in-flight count off what live processes hold (the same way)
// before the smallest gap seen is corrected.
constexpr int kDriftTicks = 3;
constexpr int kDriftSamples = 8;
// Held counts the drift scan reads per tick at most (2 MiB): with more
// dependencies x processes than that, each tick scans the next slice of
// the dependencies, at least kDriftMinSlice of them, and a dependency's
// kDriftTicks looks in a row are its slice's turns (at 4096 x 256, one
// tick in four: a leaked permit is back after about 12 ticks instead of
// 3). Reading every process's row of held counts every tick was 8 MiB and
// a sixth of the tick there.
constexpr std::size_t kDriftHeldBudget = std::size_t{1} << 18;
constexpr std::size_t kDriftMinSlice = 64;

// Lines about single dependencies of one kind (one adopted, one whose
// policy a reload rebuilt, one a dead process held permits of) one tick or
// one reload logs at most; one line counts the rest. A restart that adopts
// 16384 names logged 32768 lines at once, past journald's default
// RateLimitBurst= (10000 in 30 s), after which it drops every line of the
// service, warnings included, for the rest of the 30 s.
constexpr std::uint32_t kDetailLines = 100;

// A claim (of a dependency or a process slot) unfinished for this long is
// taken to be from a process that died mid-claim. Clients give up waiting
// on a claim after 1 s, so this is safely longer.
constexpr std::uint64_t kAbandonAfterNs = 2'000'000'000;

// Publishes a partitions line's shape as `fields` under a version after
// `shape`'s, so that handles that cached a field by name look it up again.
// Release pairs with the clients' acquire loads of the shape: the names and
// rule stored before it are visible with the new version.
void store_new_shape(shm::DependencyPartitions& line, std::uint64_t shape, std::uint32_t fields) {
  line.shape.store((std::uint64_t{shm::shape_version(shape) + 1} << 32) | fields, std::memory_order_release);
}

std::uint64_t abandon_after_ticks(const Config& config) {
  const auto tick_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(config.daemon.tick).count());
  return std::max<std::uint64_t>(2, kAbandonAfterNs / std::max<std::uint64_t>(tick_ns, 1));
}
// The three counts of an admission word (or a held word): the total and
// partitions 1 and 2 (shm::admission_counts()), and the most each counts.
constexpr std::uint32_t kCounts = shm::kMaxPartitions;
constexpr std::int64_t kCountMax[kCounts] = {INT32_MAX, shm::kPartitionFieldMax, shm::kPartitionFieldMax};

// The counts a dead process's held word gives back: none below zero (a
// client may have written garbage into it).
std::array<std::int64_t, kCounts> held_counts(std::uint64_t held_word) {
  auto counts = shm::admission_counts(held_word);
  for (auto& c : counts) c = std::max<std::int64_t>(c, 0);
  return counts;
}

// Moves the counts of a dependency's admission word by `change` (negative:
// permits given back), each never below zero nor past its most (a client
// may have written garbage into a held count), so that no count borrows
// from or carries into another; returns the change made. seq_cst, as a
// release in the client's give_back(): the store side of the pair with a
// waiter's announce, for a wake that follows.
std::array<std::int64_t, kCounts> move_counts(std::atomic<std::uint64_t>& word,
                                              const std::array<std::int64_t, kCounts>& change) {
  std::uint64_t w = word.load(std::memory_order_relaxed);
  std::array<std::int64_t, kCounts> made{};
  do {
    const auto now = shm::admission_counts(w);
    for (std::uint32_t k = 0; k < kCounts; ++k) {
      made[k] = std::clamp<std::int64_t>(change[k], -std::max<std::int64_t>(now[k], 0), kCountMax[k] - now[k]);
    }
  } while (!word.compare_exchange_weak(w, w + shm::admission_delta(made), std::memory_order_seq_cst));
  return made;
}

// A dead process as the log names it: its pid, and for a process of
// another pid namespace (a container) the pid it had there and that
// namespace's inode, what the container's own tools would show.
std::string describe_process(const shm::ProcessSnapshot& seen, pid_t here) {
  if (!shm::foreign_pid_namespace(seen.pid_ns, shm::own_pid_namespace())) return std::to_string(seen.pid);
  return (here > 0 ? std::to_string(here) + " " : std::string()) + "(pid " + std::to_string(seen.pid) +
         " in pid namespace " + std::to_string(seen.pid_ns.inode) + ")";
}

}  // namespace

ControlLoop::Dependency* ControlLoop::Dependencies::find(std::uint32_t index) {
  const auto it = std::lower_bound(entries_.begin(), entries_.end(), index,
                                   [](const Entry& e, std::uint32_t i) { return e.first < i; });
  return it != entries_.end() && it->first == index ? &it->second : nullptr;
}

ControlLoop::Dependency& ControlLoop::Dependencies::insert(std::uint32_t index, Dependency d) {
  const auto it = std::lower_bound(entries_.begin(), entries_.end(), index,
                                   [](const Entry& e, std::uint32_t i) { return e.first < i; });
  return entries_.emplace(it, index, std::move(d))->second;
}

ControlLoop::ControlLoop(shm::Segment& segment, const Config& config, Metrics* metrics)
    : segment_(segment), metrics_(metrics), watch_(segment.capacities().max_processes),
      closes_("/dev/shm/" + segment.name()),
      lock_sweep_left_(segment.capacities().max_processes),  // closes while no daemon ran
      lock_gone_at_claim_(segment.capacities().max_processes, 0) {
  heartbeat_ = segment_.header().heartbeat.load(std::memory_order_relaxed);
  if (!closes_.watching()) {
    spdlog::info("no inotify watch on /dev/shm/{} ({}): the clients' liveness locks are tested at every tick, not "
                 "only after a close",
                 segment_.name(), std::strerror(closes_.error()));
  }
  occupancy_.max_dependencies = segment_.capacities().max_dependencies;
  occupancy_.max_processes = segment_.capacities().max_processes;
  apply(config);
}

void ControlLoop::apply(const Config& config) {
  config_ = config;
  shm::Header& h = segment_.header();
  // Relaxed: each is a lone value; clients read them when they look up a
  // name, and a reload racing a lookup may give it either config's value.
  h.default_limit.store(static_cast<std::uint32_t>(config_.defaults.bounds.initial),
                        std::memory_order_relaxed);
  h.flags.store(config_.daemon.strict ? shm::kHeaderStrict : 0, std::memory_order_relaxed);
  const std::uint64_t generation = h.config_generation.load(std::memory_order_relaxed) + 1;
  h.config_generation.store(generation, std::memory_order_relaxed);

  unclaimed_.clear();
  claim_failures_.clear();
  for (const DependencyConfig& dc : config_.dependencies) unclaimed_.push_back(dc.name);
  unclaimed_patterns_.clear();
  pattern_slots_.clear();
  if (config_.daemon.strict) {
    for (const DependencyConfig& p : config_.patterns) unclaimed_patterns_.push_back(p.name);
  }
  claim_configured();
  withdraw_patterns();
  std::uint32_t rebuilt = 0;
  for (auto& [index, d] : dependencies_) {
    // One match of the name against the patterns: thousands of patterns
    // times thousands of names made a reload outlast WatchdogSec=.
    const DependencyConfig* table = config_.table_for(d.name);
    const DependencyConfig& settings = settings_of(table);
    if (d.controller->reconfigure(settings) && ++rebuilt <= kDetailLines) {
      spdlog::info("dependency {}: policy {}, continuing from limit {}", d.name,
                   describe_policy(d.controller->settings()), d.controller->limit());
    }
    const std::uint32_t trial_calls = d.breaker->settings().half_open_calls;
    d.breaker->reconfigure(settings.breaker);
    if (d.breaker->state() == BreakerState::kHalfOpen) resize_trials(index, trial_calls, d.breaker->settings());
    if (metrics_ != nullptr) {
      const auto& settings = d.controller->settings();
      metrics_->set_policy(d.name, settings.policy, settings.bounds.min, settings.bounds.max);
    }
    publish_limit(d);
    publish_settings(index, d.name, table);
    if (hold_pin_within_partitions(d)) publish_limit(d);  // partitions new with this config, or gone
    segment_.dependency(index).control.generation.store(generation, std::memory_order_relaxed);
    // Waiters look at the new settings at once: shadow mode admits them,
    // partitions send them to their rule, a larger limit may have room.
    shm::wake_waiters(segment_.dependency(index).admission.futex);
  }
  if (rebuilt > kDetailLines) {
    spdlog::info("{} more dependencies' policies rebuilt, continuing from their limits (at most {} are logged one "
                 "by one; bulkheadctl status shows each)",
                 rebuilt - kDetailLines, kDetailLines);
  }
}

void ControlLoop::publish_settings(std::uint32_t index, std::string_view name, const DependencyConfig* table) {
  const DependencyConfig& settings = settings_of(table);
  shm::DependencyControl& control = segment_.dependency(index).control;
  // Relaxed: lone values, read by clients on their way to a rejection or
  // into the queue; a client that reads the old one for an instant waits or
  // is refused by the old rule.
  publish_partitions(index, name, settings);
  // A reload cannot grow the segment's queue (queue_slots lives as long as
  // the segment): clamp to what it has.
  const PublishedSettings published{flags_for(table), std::min(settings.max_queue, segment_.queue_slots())};
  if (published_settings_.size() <= index) published_settings_.resize(segment_.capacities().max_dependencies);
  published_settings_[index] = published;
  // Release pairs with the acquire load of the flags in the client's
  // admit_partitioned(): a client that sees kDependencyPartitioned sees the
  // rule and shape just published.
  control.flags.store(published.flags, std::memory_order_release);
  control.max_queue.store(published.max_queue, std::memory_order_relaxed);
}

void ControlLoop::publish_partitions(std::uint32_t index, std::string_view name, const DependencyConfig& settings) {
  shm::DependencySlot& slot = segment_.dependency(index);
  shm::DependencyPartitions& line = slot.partitions;
  PartitionPlan plan;
  plan.partitioned = !settings.partitions.empty();
  const std::uint64_t shape = line.shape.load(std::memory_order_relaxed);
  std::uint32_t active = 0;
  bool renamed = false;  // a field got a name it did not have
  if (plan.partitioned) {
    // Names keep the field they had (its permits in flight are theirs);
    // new names take a field no configured name keeps. A field whose name
    // left the config drains: its permits still count in the total, and
    // the name that takes it next inherits them until they come back.
    std::array<shm::PackedName, 3> had{};
    for (std::uint32_t p = 1; p < shm::kMaxPartitions; ++p) {
      if ((shm::shape_active(shape) >> p & 1u) != 0) had[p] = shm::load_partition_name(line, p);
    }
    std::vector<const PartitionConfig*> unplaced;
    for (const PartitionConfig& pc : settings.partitions) {
      if (pc.name == shm::kDefaultPartition) {
        plan.share_ppm[0] = pc.share_ppm;
        if (pc.hard_cap) plan.caps |= 1u;
        continue;
      }
      const shm::PackedName packed = shm::pack_partition_name(pc.name);
      std::uint32_t field = 0;
      for (std::uint32_t p = 1; p < shm::kMaxPartitions; ++p) {
        if ((active >> p & 1u) == 0 && had[p] == packed) field = p;
      }
      if (field == 0) {
        unplaced.push_back(&pc);
        continue;
      }
      active |= 1u << field;
      plan.share_ppm[field] = pc.share_ppm;
      if (pc.hard_cap) plan.caps |= 1u << field;
      plan.names[field] = pc.name;
    }
    for (const PartitionConfig* pc : unplaced) {
      std::uint32_t field = 1;
      while ((active >> field & 1u) != 0) ++field;  // config allows two named: always found
      active |= 1u << field;
      plan.share_ppm[field] = pc->share_ppm;
      if (pc->hard_cap) plan.caps |= 1u << field;
      plan.names[field] = pc->name;
      renamed = true;
      shm::store_partition_name(line, field, shm::pack_partition_name(pc->name));
    }
  }
  if (plans_.size() <= index) plans_.resize(segment_.capacities().max_dependencies);
  // The series of a partition the config no longer has go with it, rather
  // than stay frozen at their last values.
  if (const PartitionPlan* before = plans_[index].get(); before != nullptr && metrics_ != nullptr) {
    for (const std::string& gone : before->names) {
      if (!gone.empty() &&
          (!plan.partitioned || std::find(plan.names.begin(), plan.names.end(), gone) == plan.names.end())) {
        metrics_->remove_partition(std::string(name), gone);
      }
    }
  }
  plan.fields = active << 8 | plan.caps;
  plans_[index] = plan.partitioned ? std::make_unique<PartitionPlan>(plan) : nullptr;
  publish_rule(index, slot.control.limit.load(std::memory_order_relaxed));
  // A new version whenever a handle's cached field may mean another name
  // now (or none). So too at this daemon's first publication: one killed
  // between a new name and its version left names that handles resolved
  // under the version before, which would go on holding for them.
  if (shapes_published_.size() <= index) shapes_published_.resize(segment_.capacities().max_dependencies);
  if ((shape & 0xffffffffu) != plan.fields || renamed || shm::shape_version(shape) == 0 ||
      !shapes_published_[index]) {
    store_new_shape(line, shape, plan.fields);
  }
  shapes_published_[index] = true;
}

void ControlLoop::publish_rule(std::uint32_t index, std::uint32_t limit) {
  shm::DependencyPartitions& line = segment_.dependency(index).partitions;
  const PartitionPlan* partitioned = plan_of(index);
  if (partitioned == nullptr) {
    // Relaxed: as the limit itself (publish_limit()). Stored only when it
    // changes: every admission reads this line, and a store takes it from
    // the cache of every CPU that does.
    if (line.admit_limit.load(std::memory_order_relaxed) != limit) {
      line.admit_limit.store(limit, std::memory_order_relaxed);
    }
    return;
  }
  const PartitionPlan& plan = *partitioned;
  // The config keeps a partitioned limit within 16 bits; clamp anyway.
  const std::uint32_t l = std::min<std::uint32_t>(limit, shm::kPartitionFieldMax);
  const std::uint64_t rule =
      shm::partition_rule(l, shm::guaranteed_count(plan.share_ppm[0], l), shm::guaranteed_count(plan.share_ppm[1], l),
                          shm::guaranteed_count(plan.share_ppm[2], l));
  // Relaxed: one word, read whole; a client reading the old one for an
  // instant admits by the old limit, as on the fast path. Stored only when
  // it changes, as above (this runs every tick).
  if (line.rule.load(std::memory_order_relaxed) != rule) line.rule.store(rule, std::memory_order_relaxed);
  const std::uint32_t admit = shm::unnamed_admit_limit(rule, plan.caps);
  if (line.admit_limit.load(std::memory_order_relaxed) != admit) {
    line.admit_limit.store(admit, std::memory_order_relaxed);
  }
}

void ControlLoop::claim_configured() {
  // Configured names get their slots now, so that clients find them with
  // their flags. A claim can fail through no fault of the config: a client
  // is claiming the name this instant (or died doing it, or wrote junk),
  // or clients filled the table. The daemon never waits on a client: it
  // tries again next tick, after adopt_new_slots() abandoned a stuck claim.
  // A failure is logged when it is new (a full table stays full until a
  // restart: not ten lines a second), and the slot when it comes at last.
  const auto failed = [&](const std::string& key, const shm::SegmentError& e) {
    ClaimFailure& last = claim_failures_[key];
    const bool news = last.what != e.what();
    last = {e.what(), e.code()};
    return news;
  };
  const auto placed = [&](const std::string& key, const char* what, std::uint32_t index) {
    if (claim_failures_.erase(key) != 0) spdlog::info("{} {}: has slot {} now", what, key, index);
  };
  // A claim a full table refused is not tried again while the last tick
  // counted the table full (no slot is ever freed: until a reload, which
  // tries every one once more). Each try probes every slot: a thousand
  // configured names a full table of 16384 refuses made every tick 74 ms.
  const bool full = occupancy_.max_dependencies != 0 && occupancy_.dependencies >= occupancy_.max_dependencies;
  const auto refused_full = [&](const std::string& key) {
    const auto it = claim_failures_.find(key);
    return it != claim_failures_.end() && it->second.code == ENOSPC;
  };
  std::erase_if(unclaimed_, [&](const std::string& name) {
    if (full && refused_full(name)) return false;
    ++claim_attempts_;
    try {
      const DependencyConfig* table = config_.table_for(name);  // its own: found before any pattern
      const DependencyConfig& settings = settings_of(table);
      const auto initial = static_cast<std::uint32_t>(settings.bounds.initial);
      const auto claim =
          shm::find_or_claim_dependency(segment_, name, initial, flags_for(table), std::chrono::milliseconds(0));
      publish_settings(claim.index, name, table);
      placed(name, "dependency", claim.index);
      return true;
    } catch (const shm::SegmentError& e) {
      if (failed(name, e)) {
        spdlog::warn("dependency {}: no slot yet ({}); trying again {}", name, e.what(),
                     e.code() == ENOSPC ? "at each reload (a full table stays full)" : "each tick");
      }
      return false;
    }
  });
  // A strict config's patterns get a slot each, where strict clients match
  // the names they do not find against them (shm::matches_pattern()).
  std::erase_if(unclaimed_patterns_, [&](const std::string& pattern) {
    if (full && refused_full(pattern)) return false;
    ++claim_attempts_;
    try {
      const auto claim = shm::find_or_claim_pattern(segment_, pattern, std::chrono::milliseconds(0));
      // A slot a previous config left without the flag takes it again.
      segment_.dependency(claim.index).control.flags.store(shm::kDependencyPattern, std::memory_order_relaxed);
      pattern_slots_.push_back(claim.index);
      if (claim.created) spdlog::info("pattern {}: published for strict clients (slot {})", pattern, claim.index);
      placed(pattern, "pattern", claim.index);
      return true;
    } catch (const shm::SegmentError& e) {
      if (failed(pattern, e)) {
        spdlog::warn("pattern {}: no slot yet ({}); strict clients are refused the names it matches until it has "
                     "one; trying again {}",
                     pattern, e.what(), e.code() == ENOSPC ? "at each reload (a full table stays full)" : "each tick");
      }
      return false;
    }
  });
}

void ControlLoop::withdraw_patterns() {
  // After claim_configured() published this config's patterns, so that a
  // pattern both configs have is never missing for a strict client's lookup.
  // Any slot's, not only this daemon's: one that ran before may have
  // published patterns this config no longer has.
  for (std::uint32_t i = 0; i < segment_.capacities().max_dependencies; ++i) {
    std::atomic<std::uint32_t>& flags = segment_.dependency(i).control.flags;
    // Relaxed: the daemon's word, read by strict clients' lookups.
    if ((flags.load(std::memory_order_relaxed) & shm::kDependencyPattern) == 0) continue;
    if (std::ranges::find(pattern_slots_, i) != pattern_slots_.end()) continue;
    flags.fetch_and(~shm::kDependencyPattern, std::memory_order_relaxed);
    if (const auto pattern = shm::slot_pattern(segment_, i)) {
      spdlog::info("pattern {}: no longer published for strict clients (slot {})", *pattern, i);
    }
  }
}

ControlLoop::Adoption ControlLoop::track(std::uint32_t index, std::uint64_t now_ns) {
  shm::DependencySlot& slot = segment_.dependency(index);
  Dependency d;
  d.index = index;
  d.name.assign(slot.identity.name, std::min<std::uint32_t>(slot.identity.name_length,
                                                            shm::kMaxNameLength));
  // A strict daemon's pattern (this one's, or an earlier config's): no
  // dependency.
  if (shm::slot_pattern(segment_, index)) return Adoption::kPattern;
  // The name is a client's to write: one no client library would claim is
  // junk, kept out of the metrics and the control loop.
  if (d.name.size() != slot.identity.name_length || shm::check_dependency_name(d.name) != nullptr) {
    return Adoption::kJunk;
  }
  // A previous daemon may have let waiters in anywhere.
  d.queue_scan = segment_.queue_slots();
  const bool governed = slot.control.generation.load(std::memory_order_relaxed) != 0;
  // Where counting starts. A slot no daemon has governed that a tick after
  // this daemon's first finds was claimed since the previous tick scanned
  // the table (it was not ready then; nothing is recorded on a slot before
  // it is ready): what its counters hold is that tick's calls, counted from
  // zero, so that the first window, the breaker and the metrics see every
  // outcome since the claim. Any other slot starts from now: an adopted
  // segment's history is not a window (a previous daemon's slot, or one
  // clients claimed and used while no daemon ran, for however long).
  const bool claimed_since_last_tick = !governed && previous_tick_ns_.has_value();
  d.stats = std::make_unique<shm::StatsReader>(
      segment_, index, claimed_since_last_tick ? shm::StatsReader::Start::kZero : shm::StatsReader::Start::kNow);
  // Its window extremes too: the peak in-flight a policy reads as the
  // window's use may be hours old.
  if (!claimed_since_last_tick) shm::take_window_extremes(segment_, index);
  // Continue from the limit a daemon (a previous one, or this one's claim)
  // left in force, not from initial_limit. A slot no daemon has governed
  // yet (generation 0) holds what a client claimed it with: the header's
  // default_limit, which is [defaults]' and not a pattern table's, so it
  // starts at the config's initial_limit (0 tells the controller so).
  // Counted from zero, its first window opened with the previous tick: the
  // calls this tick takes are that long's, not an instant's (a policy that
  // divides by a window's length would find a rate of calls per nanosecond).
  const DependencyConfig* table = config_.table_for(d.name);
  const DependencyConfig& settings = settings_of(table);
  d.controller = std::make_unique<control::Controller>(
      settings, governed ? slot.control.limit.load(std::memory_order_relaxed) : 0,
      claimed_since_last_tick ? *previous_tick_ns_ : now_ns);
  // A breaker a previous daemon left open stays open for a sleep window,
  // unless an operator forced it so and the force has ended since: then
  // the first tick releases it, as it would have under that daemon.
  const std::uint32_t found = slot.control.breaker.load(std::memory_order_relaxed);
  const bool found_open = shm::breaker_stops(found);
  d.breaker.emplace(settings.breaker, found_open ? BreakerState::kOpen : BreakerState::kClosed, now_ns,
                    (found & shm::kBreakerForced) != 0);
  if (metrics_ != nullptr) {
    d.metrics = &metrics_->dependency(d.name);
    metrics_->set_policy(d.name, settings.policy, settings.bounds.min, settings.bounds.max);
  }
  publish_limit(d);
  publish_settings(index, d.name, table);
  slot.control.generation.store(segment_.header().config_generation.load(std::memory_order_relaxed),
                                std::memory_order_relaxed);
  dependencies_.insert(index, std::move(d));
  if (tracked_.size() <= index) tracked_.resize(segment_.capacities().max_dependencies, false);
  tracked_[index] = true;
  return Adoption::kAdopted;
}

std::uint32_t ControlLoop::flags_for(const DependencyConfig* table) const {
  std::uint32_t flags = 0;
  if (table != nullptr) flags |= shm::kDependencyConfigured;
  const DependencyConfig& settings = settings_of(table);
  if (!settings.enforce) flags |= shm::kDependencyShadow;
  if (settings.queue_order == QueueOrder::kLifo) flags |= shm::kDependencyLifo;
  if (!settings.partitions.empty()) flags |= shm::kDependencyPartitioned;
  return flags;
}

void ControlLoop::adopt_new_slots(std::uint64_t now_ns) {
  const std::uint32_t capacity = segment_.capacities().max_dependencies;
  const std::uint64_t patience = abandon_after_ticks(config_);
  std::uint32_t taken = 0;
  // Logged one by one: at most kDetailLines of each.
  std::uint32_t adopted = 0, junk = 0, abandoned = 0;
  for (std::uint32_t i = 0; i < capacity; ++i) {
    // A bitmap, not dependencies_.contains(): this runs over every slot
    // every tick, and a tree lookup each was a millisecond at 4096.
    if (i < tracked_.size() && tracked_[i]) {
      ++taken;
      continue;
    }
    auto& tag = segment_.dependency(i).identity.tag;
    // Pairs with the release CAS to kSlotReady in find_or_claim_dependency().
    std::uint64_t t = tag.load(std::memory_order_acquire);
    const auto state = t & 0xff;
    taken += state != shm::kSlotFree;
    if (state == shm::kSlotReady) {
      claiming_since_.erase(i);
      if (ignored_.contains(i)) continue;
      const Adoption adoption = track(i, now_ns);
      if (adoption != Adoption::kAdopted) {
        ignored_.insert(i);
        if (adoption == Adoption::kJunk && ++junk <= kDetailLines) {
          spdlog::warn("dependency slot {}: ready, but its name is not a valid one; ignored", i);
        }
        continue;
      }
      if (++adopted <= kDetailLines) {
        const Dependency& d = *dependencies_.find(i);
        const control::LimitSettings& settings = d.controller->settings();
        spdlog::info("dependency {}: new slot {}, policy {}, limit {} in [{}, {}]", d.name, i,
                     describe_policy(settings), d.controller->limit(), settings.bounds.min, settings.bounds.max);
      }
    } else if (state == shm::kSlotClaiming) {
      auto [it, fresh] = claiming_since_.try_emplace(i, heartbeat_);
      if (!fresh && heartbeat_ - it->second >= patience &&
          tag.compare_exchange_strong(t, (t & ~std::uint64_t{0xff}) | shm::kSlotAbandoned,
                                      std::memory_order_relaxed)) {
        if (++abandoned <= kDetailLines) spdlog::warn("dependency slot {}: claim never finished; abandoned", i);
        claiming_since_.erase(it);
      }
    }
  }
  occupancy_.dependencies = taken;
  if (adopted > kDetailLines) {
    spdlog::info("{} more dependencies adopted (at most {} are logged one by one; bulkheadctl status shows each)",
                 adopted - kDetailLines, kDetailLines);
  }
  if (junk > kDetailLines) {
    spdlog::warn("{} more dependency slots ready with a name that is not a valid one; ignored (at most {} are "
                 "logged one by one)",
                 junk - kDetailLines, kDetailLines);
  }
  if (abandoned > kDetailLines) {
    spdlog::warn("{} more dependency slots whose claim never finished; abandoned (at most {} are logged one by one)",
                 abandoned - kDetailLines, kDetailLines);
  }
}

void ControlLoop::report_occupancy(const Occupancy& before) {
  const Occupancy& now = occupancy_;
  if (now.dependencies == now.max_dependencies && before.dependencies < now.max_dependencies) {
    spdlog::error("dependency table full: all {} slots taken; a new name is refused (-ENOSPC) until the "
                  "segment is made again with a larger daemon.max_dependencies",
                  now.max_dependencies);
  }
  if (now.processes == now.max_processes && before.processes < now.max_processes) {
    spdlog::error("process table full: all {} slots taken; bh_client_open is refused (-ENOSPC) and a child "
                  "forked now runs standalone until a process exits (daemon.max_processes)",
                  now.max_processes);
  } else if (now.processes < now.max_processes && before.processes == now.max_processes) {
    spdlog::info("process table no longer full: {} of {} slots taken", now.processes, now.max_processes);
  }
  if (metrics_ != nullptr) {
    metrics_->set_occupancy(now.dependencies, now.max_dependencies, now.processes, now.max_processes);
  }
}

void ControlLoop::tick(std::uint64_t now_ns) {
  const Occupancy before = occupancy_;
  if (!unclaimed_.empty() || !unclaimed_patterns_.empty()) claim_configured();
  for (const std::uint32_t index : pattern_slots_) {
    // A client's write undone, as publish_settings() does for dependencies.
    std::atomic<std::uint32_t>& flags = segment_.dependency(index).control.flags;
    if (flags.load(std::memory_order_relaxed) != shm::kDependencyPattern) {
      flags.store(shm::kDependencyPattern, std::memory_order_relaxed);
    }
  }
  adopt_new_slots(now_ns);
  // Every slot ready now is adopted (or ignored): a slot no daemon governed
  // that a later tick finds was claimed since this one (track()).
  previous_tick_ns_ = now_ns;
  for (auto& [index, d] : dependencies_) update(d, now_ns);
  reclaim_dead_processes();
  free_stray_records();
  scan_drift();
  report_occupancy(before);
  ++heartbeat_;
  shm::Header& h = segment_.header();
  // Relaxed: observers (bulkheadctl, clients' staleness checks) read each on
  // its own.
  h.heartbeat.store(heartbeat_, std::memory_order_relaxed);
  h.heartbeat_ns.store(now_ns, std::memory_order_relaxed);
}

std::uint32_t ControlLoop::count_waiters(Dependency& d) {
  // Waiters claim records among the first max_queue only (shm/wait_queue.hpp),
  // so the records past it are counted until a tick finds them all free
  // (a reload that lowered max_queue: its waiters leave by their
  // deadlines), then no more: most dependencies have no queue, and reading
  // 64 records each tick was 6% of the tick at 4096 dependencies. A waiter
  // that read the old, larger max_queue just before a reload lowered it
  // and claims a record past the new one after that tick is missing from
  // this gauge (only) until it leaves.
  const std::atomic<std::uint64_t>* records = segment_.queue(d.index);
  // Relaxed: the daemon's own value; a client may have written junk into
  // it, which the clamp bounds.
  const std::uint32_t max_queue = std::min(
      segment_.dependency(d.index).control.max_queue.load(std::memory_order_relaxed), segment_.queue_slots());
  d.queue_scan = std::max(d.queue_scan, max_queue);
  const std::uint32_t waiting = shm::queue_length(records, max_queue);
  if (d.queue_scan == max_queue) return waiting;
  const std::uint32_t past = shm::queue_length(records + max_queue, d.queue_scan - max_queue);
  if (past == 0) d.queue_scan = max_queue;
  return waiting + past;
}

void ControlLoop::update(Dependency& d, std::uint64_t now_ns) {
  const shm::DependencySlot& slot = segment_.dependency(d.index);
  // One observation for every dependency, cleared by the buckets the last
  // one used: zeroing two 200-bucket histograms per dependency per tick
  // was 13 MB of writes a tick at 4096 dependencies.
  control::TickObservation& o = observation_;
  o.delta.clear();
  o.extremes = {};
  d.stats->take(segment_, d.index, o.delta, o.extremes);
  o.inflight = shm::admission_inflight(slot.admission.word.load(std::memory_order_relaxed));
  follow_pin(d, now_ns);
  repair_published(d, d.controller->observe(o, now_ns));
  publish_service_time(d, o.delta);
  update_breaker(d, o.delta, now_ns);

  if (d.metrics != nullptr) {
    Metrics::Tick t;
    t.limit = d.controller->limit();
    t.pinned = d.controller->pinned() != 0;
    t.inflight = o.inflight;
    t.waiters = count_waiters(d);
    t.queue = published_settings_[d.index].max_queue != 0;
    t.success = o.delta.ok;
    t.dropped = o.delta.dropped;
    t.ignored = o.delta.ignored;
    // Every refusal, the partitions' under the limit too: with partitions
    // each one counts in its partition, those at the limit in `rejected` as
    // well.
    const std::uint64_t partition_rejected =
        std::accumulate(o.delta.partition_rejected.begin(), o.delta.partition_rejected.end(), std::uint64_t{0});
    t.rejected = std::max(o.delta.rejected, partition_rejected);
    t.failed = o.delta.failed;
    t.shadow = o.delta.shadow_admitted;
    t.queue_full = o.delta.queue_full;
    t.deadline = o.delta.deadline_rejected;
    t.breaker_rejected = o.delta.open_rejected;
    t.breaker_shadow = o.delta.shadow_open;
    const BreakerState state = d.breaker->state();
    t.breaker_state = state == BreakerState::kOpen ? 1 : state == BreakerState::kHalfOpen ? 2 : 0;
    t.breaker_forced = d.breaker->forced();
    const policies::Baseline baseline = d.controller->policy().baseline();
    t.baseline_ns = baseline.latency_ns;
    t.measuring = baseline.measuring;
    if (o.delta.ok != 0) {
      t.latency = o.delta.histogram_used();
      t.latency_first = o.delta.histogram_first;
      t.latency_sum_ns = o.delta.rtt_sum_ns;
    }
    if (o.delta.waited != 0) {
      t.wait = o.delta.wait_histogram;
      t.wait_sum_ns = o.delta.wait_sum_ns;
    }
    metrics_->observe(*d.metrics, t);
    if (PartitionPlan* plan = d.index < plans_.size() ? plans_[d.index].get() : nullptr) {
      const std::uint64_t word = slot.admission.word.load(std::memory_order_relaxed);
      const std::uint64_t rule = slot.partitions.rule.load(std::memory_order_relaxed);
      for (std::uint32_t p = 0; p < shm::kMaxPartitions; ++p) {
        const std::string& partition = plan->names[p];
        if (partition.empty()) continue;
        if (!plan->series[p]) plan->series[p] = metrics_->partition(d.name, partition);
        metrics_->observe_partition(*plan->series[p], shm::partition_inflight(word, p),
                                    shm::rule_guarantee(rule, p), o.delta.partition_rejected[p]);
      }
    }
  }
}

namespace {

// Successful calls of the tick at least `slow` long: the histogram buckets
// that start at or above it. A bucket is at most 12.5 % wide, so a call up
// to that much over the threshold may not count as slow.
std::uint64_t slow_calls(const shm::DependencyCounters& delta, std::chrono::milliseconds slow) {
  if (slow.count() <= 0) return 0;
  const auto slow_ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(slow).count());
  std::uint64_t n = 0;
  for (std::uint32_t b = delta.histogram_first; b < delta.histogram_end; ++b) {
    if (shm::histogram_bucket_lower_ns(b) >= slow_ns) n += delta.histogram[b];
  }
  return n;
}

std::uint32_t state_word(BreakerState state) {
  switch (state) {
    case BreakerState::kOpen:
      return shm::kBreakerOpen;
    case BreakerState::kHalfOpen:
      return shm::kBreakerHalfOpen;
    case BreakerState::kClosed:
      break;
  }
  return shm::kBreakerClosed;
}

}  // namespace

void ControlLoop::update_breaker(Dependency& d, const shm::DependencyCounters& delta, std::uint64_t now_ns) {
  shm::DependencyControl& control = segment_.dependency(d.index).control;
  Breaker& b = *d.breaker;
  // bulkheadctl's override wins over the config's force. Relaxed: a lone
  // value; any value but the three known is junk (anyone who may write the
  // segment may write it) and counts as none.
  const std::uint32_t override_value = control.breaker_override.load(std::memory_order_relaxed);
  BreakerForce force = b.settings().force;
  const char* forced_by = "the config (breaker.force)";
  if (override_value == shm::kOverrideOpen) {
    force = BreakerForce::kOpen;
    forced_by = "bulkheadctl";
  } else if (override_value == shm::kOverrideClosed) {
    force = BreakerForce::kClosed;
    forced_by = "bulkheadctl";
  } else if (override_value != shm::kOverrideAuto && override_value != d.bad_override) {
    spdlog::warn("dependency {}: breaker override {} is not one bulkheadctl writes; ignored", d.name,
                 override_value);
    d.bad_override = override_value;
  }
  // Relaxed: the counter alone; a take racing this read shows next tick.
  const std::uint64_t trials = control.trials.load(std::memory_order_relaxed);
  const BreakerCounts counts{delta.ok, delta.failed + delta.dropped,
                             slow_calls(delta, b.settings().slow_call_duration)};
  const auto transition = b.observe(counts, force, forced_by, shm::trials_left(trials), now_ns);
  if (transition) {
    if (transition->to == BreakerState::kHalfOpen) {
      // A fresh episode: permits of the last one that clients give back
      // no longer count. Stored before the state (release below).
      control.trials.store(shm::trials_word(shm::trials_episode(trials) + 1, b.settings().half_open_calls),
                           std::memory_order_relaxed);
    } else if (transition->from == BreakerState::kHalfOpen) {
      control.trials.store(shm::trials_word(shm::trials_episode(trials) + 1, 0), std::memory_order_relaxed);
    }
    const auto log_level = transition->to == BreakerState::kClosed ? spdlog::level::info : spdlog::level::warn;
    spdlog::log(log_level, "dependency {}: circuit breaker {} -> {}: {}", d.name,
                breaker_state_name(transition->from), breaker_state_name(transition->to), transition->reason);
    if (metrics_ != nullptr) metrics_->count_breaker_transition(d.name, breaker_state_name(transition->to));
  } else if (b.state() == BreakerState::kHalfOpen && shm::trials_left(trials) > b.settings().half_open_calls) {
    // More permits than were handed out: a client wrote junk. Put the bound
    // back (the CAS leaves a concurrent take alone; next tick looks again).
    std::uint64_t seen = trials;
    if (control.trials.compare_exchange_strong(
            seen, shm::trials_word(shm::trials_episode(trials), b.settings().half_open_calls),
            std::memory_order_relaxed)) {
      spdlog::warn("dependency {}: {} trial permits left, more than half_open_calls ({}): reset", d.name,
                   shm::trials_left(trials), b.settings().half_open_calls);
    }
  }
  // Every tick, not only on a transition: a client may have written junk
  // into the word. Release pairs with the acquire load in the client's
  // breaker_gate(): a client that sees half open sees its trial permits.
  const std::uint32_t word = state_word(b.state()) | (b.forced() ? shm::kBreakerForced : 0);
  if (control.breaker.load(std::memory_order_relaxed) != word) {
    control.breaker.store(word, std::memory_order_release);
    // Waiters that may now be admitted, or must now leave, look again.
    shm::wake_waiters(segment_.dependency(d.index).admission.futex);
  }
}

void ControlLoop::resize_trials(std::uint32_t index, std::uint32_t before, const BreakerSettings& now) {
  // The breaker now closes at now.half_open_calls successes: hand out (or
  // take back) the difference in this episode's permits, or trials that all
  // succeed could never close it (it reopens for want of a verdict), or a
  // lowered count would still admit the old one.
  const std::uint32_t after = now.half_open_calls;
  if (after == before) return;
  std::atomic<std::uint64_t>& trials = segment_.dependency(index).control.trials;
  std::uint64_t w = trials.load(std::memory_order_relaxed);
  std::uint64_t resized;
  do {
    const std::uint32_t left = std::min(shm::trials_left(w), before);  // more is junk, put back each tick
    const std::uint32_t taken = before - left;
    resized = shm::trials_word(shm::trials_episode(w), after > taken ? after - taken : 0);
    // Relaxed: as the daemon's other stores of the word; the CAS keeps a
    // take or give-back in between.
  } while (!trials.compare_exchange_weak(w, resized, std::memory_order_relaxed));
}

void ControlLoop::publish_service_time(Dependency& d, const shm::DependencyCounters& delta) {
  // The mean latency of the tick's successful calls, smoothed over ticks
  // (weight 1/4 each) so that one odd tick does not swing the expected-wait
  // estimate; kept through ticks without a call.
  if (delta.ok == 0) return;
  const std::uint64_t mean_ns = delta.rtt_sum_ns / delta.ok;
  d.service_ns = d.service_ns == 0 ? mean_ns : d.service_ns - d.service_ns / 4 + mean_ns / 4;
  // Relaxed: a lone estimate, read by clients deciding whether to queue.
  segment_.dependency(d.index).control.service_ns.store(d.service_ns, std::memory_order_relaxed);
}

void ControlLoop::repair_published(Dependency& d, bool limit_moved) {
  // Every tick, not only when the policy moves the limit or a reload the
  // settings: a client may have written junk over them (any process that
  // may attach read-write can), which would stand until then, on an idle
  // dependency for good. Loads, and a store only where one differs.
  shm::DependencyControl& control = segment_.dependency(d.index).control;
  const std::uint32_t limit = control.limit.load(std::memory_order_relaxed);
  const bool junk_limit = !limit_moved && limit != d.controller->limit();
  publish_limit(d);  // the limit and the admission rule, where they differ
  const PublishedSettings& published = published_settings_[d.index];  // track() published them
  const std::uint32_t flags = control.flags.load(std::memory_order_relaxed);
  const std::uint32_t max_queue = control.max_queue.load(std::memory_order_relaxed);
  const bool junk_settings = flags != published.flags || max_queue != published.max_queue;
  // Logged when junk first appears, not every tick a writer keeps at it.
  if (junk_limit && !d.junk_limit_logged) {
    spdlog::warn("dependency {}: limit {} in the segment is not the {} published; restored (until a tick finds "
                 "what it published, not logged again)",
                 d.name, limit, d.controller->limit());
  }
  if (junk_settings && !d.junk_settings_logged) {
    spdlog::warn("dependency {}: flags {:#x} and max_queue {} in the segment are not the {:#x} and {} published; "
                 "restored (until a tick finds what it published, not logged again)",
                 d.name, flags, max_queue, published.flags, published.max_queue);
  }
  d.junk_limit_logged = junk_limit;
  d.junk_settings_logged = junk_settings;
  const bool junk_partitions = repair_partitions(d.index);
  if (junk_partitions && !d.junk_partitions_logged) {
    spdlog::warn("dependency {}: partitions' names or caps in the segment are not those published; restored "
                 "(until a tick finds what it published, not logged again)",
                 d.name);
  }
  d.junk_partitions_logged = junk_partitions;
  if (!junk_settings) return;
  // Release, as in publish_settings().
  if (flags != published.flags) control.flags.store(published.flags, std::memory_order_release);
  if (max_queue != published.max_queue) control.max_queue.store(published.max_queue, std::memory_order_relaxed);
  shm::wake_waiters(segment_.dependency(d.index).admission.futex);  // they look at the settings again
}

bool ControlLoop::repair_partitions(std::uint32_t index) {
  const PartitionPlan* plan = plan_of(index);
  if (plan == nullptr) return false;  // clients look at the shape only when the flags say partitioned
  shm::DependencyPartitions& line = segment_.dependency(index).partitions;
  const std::uint64_t shape = line.shape.load(std::memory_order_relaxed);
  bool junk = (shape & 0xffffffffu) != plan->fields || shm::shape_version(shape) == 0;
  for (std::uint32_t p = 1; p < shm::kMaxPartitions; ++p) {
    if ((shm::shape_active(plan->fields) >> p & 1u) == 0) continue;
    const shm::PackedName name = shm::pack_partition_name(plan->names[p]);
    if (shm::load_partition_name(line, p) == name) continue;
    junk = true;
    shm::store_partition_name(line, p, name);
  }
  if (junk) store_new_shape(line, shape, plan->fields);  // handles look junk names up again
  return junk;
}

void ControlLoop::publish_limit(const Dependency& d) {
  auto& limit = segment_.dependency(d.index).control.limit;
  // Relaxed: the limit is a lone value that clients read with a relaxed
  // load in bh_try_acquire(); nothing else is published with it. The wake
  // below makes its own order (seq_cst there).
  // Stored only when it changes (the daemon is its only writer): clients
  // read this line on every admission, and a store, or an exchange, takes
  // it from the cache of every CPU that does.
  const std::uint32_t before = limit.load(std::memory_order_relaxed);
  if (before != d.controller->limit()) limit.store(d.controller->limit(), std::memory_order_relaxed);
  publish_rule(d.index, d.controller->limit());
  if (before != d.controller->limit() && spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("dependency {}: limit {}", d.name, d.controller->limit());
  }
  // A higher limit lets waiters in: tell them now rather than at their
  // next poll.
  if (d.controller->limit() > before) shm::wake_waiters(segment_.dependency(d.index).admission.futex);
}

void ControlLoop::follow_pin(Dependency& d, std::uint64_t now_ns) {
  std::atomic<std::uint64_t>& word = segment_.dependency(d.index).control.limit_pin;
  // Relaxed: a lone value that bulkheadctl writes. Anyone who may write
  // the segment may pin (as they may force a breaker); what they write is
  // clamped into a limit, and a word no bulkheadctl writes is cleared.
  std::uint64_t pin = word.load(std::memory_order_relaxed);
  const bool junk = pin != 0 && shm::pin_junk(pin, now_ns);
  const bool ended = pin != 0 && (junk || !shm::pin_holds(pin, now_ns));
  if (junk) {
    spdlog::warn("dependency {}: limit pin {:#x} is not one bulkheadctl writes (a limit of 0, or more than {} s "
                 "to go); cleared",
                 d.name, pin, shm::kMaxPinSeconds);
  }
  if (ended) {
    // Cleared only if no new pin replaced it since the load.
    word.compare_exchange_strong(pin, 0, std::memory_order_relaxed);
    pin = 0;
  }
  if (pin == d.pin) return;
  d.pin = pin;
  if (pin == 0) {
    const std::uint32_t pinned = d.controller->pinned();
    d.controller->unpin(now_ns);
    spdlog::info("dependency {}: pin of the limit at {} {}; policy {} continues from {}", d.name, pinned,
                 ended ? "ended" : "lifted", d.controller->settings().policy, d.controller->limit());
  } else {
    d.controller->pin(shm::pin_limit(pin));
    spdlog::info("dependency {}: limit pinned at {} by an operator for {} s (bulkheadctl pin)", d.name,
                 d.controller->limit(), shm::pin_until_s(pin) - now_ns / 1'000'000'000);
    hold_pin_within_partitions(d);
  }
  publish_limit(d);
}

bool ControlLoop::hold_pin_within_partitions(Dependency& d) {
  // Partitions count in 16-bit fields (the config keeps a partitioned
  // max_limit within them): a pin past that would publish a limit the
  // partitions' rule does not enforce. Without partitions the pin is the
  // operator's word again, whole: a reload that removes them does not
  // leave the limit held at the most they could count.
  if (d.pin == 0) return false;
  const std::uint32_t asked = std::max<std::uint32_t>(shm::pin_limit(d.pin), 1);
  const bool partitioned = plan_of(d.index) != nullptr;
  const std::uint32_t held = partitioned ? std::min(asked, shm::kPartitionFieldMax) : asked;
  if (d.controller->pinned() == held) return false;
  if (held < asked) {
    spdlog::warn("dependency {}: limit pin {} is more than a dependency with partitions can have; pinned at {}",
                 d.name, asked, held);
  } else {
    spdlog::info("dependency {}: limit pinned at {} again, as the operator asked (no partitions now)", d.name, held);
  }
  d.controller->pin(held);
  return true;
}

void ControlLoop::reclaim_dead_processes() {
  const std::uint32_t processes = segment_.capacities().max_processes;
  const std::uint64_t patience = abandon_after_ticks(config_);
  watch_.poll();
  if (closes_.closed_since()) lock_sweep_left_ = processes;
  lock_window_ = std::min(kLockChecksPerTick, lock_sweep_left_);
  std::uint32_t taken = 0;
  // The processes found dead, their slots taken (kSlotClaiming) until
  // give_back_dead() has given back what they held and freed their places.
  std::vector<DeadProcess> dead;
  for (std::uint32_t p = 0; p < processes; ++p) {
    const std::optional<shm::ProcessSnapshot> seen = shm::read_process_slot(segment_, p);
    if (!seen) {
      watch_.forget(p);
      const std::uint32_t state = segment_.process(p).identity.state.load(std::memory_order_relaxed);
      if (state != shm::kSlotClaiming) {
        process_claiming_since_.erase(p);
        taken += state != shm::kSlotFree;
        continue;
      }
      // Nothing is held yet in a slot being claimed (or cleared by its
      // process on its way out); free it if that never finishes.
      ++taken;
      auto [it, fresh] = process_claiming_since_.try_emplace(p, heartbeat_);
      if (!fresh && heartbeat_ - it->second >= patience && claimer_gone(p)) {
        process_claiming_since_.erase(it);
        shm::abandon_process_claim(segment_, p);
        --taken;
      }
      continue;
    }
    process_claiming_since_.erase(p);
    ++taken;  // less the slot if it is freed below
    // A process /proc hides (kUnknown) counts as alive: giving back the
    // permits of a live process would admit over the limit. So does one of
    // another pid namespace the daemon cannot find for sure. Unless its
    // liveness lock is gone: whatever runs under its pid now (exec keeps
    // it) is another program, with none of its permits. And the slot is
    // cleared only if it still holds the claim checked: between the
    // snapshot and the check, the process may have exited and another
    // taken its slot (a forked child takes one within microseconds).
    const shm::Liveness liveness = watch_.check(*seen);
    const bool lock_gone = liveness != shm::Liveness::kDead && lock_gone_twice(p, *seen);
    if ((liveness != shm::Liveness::kDead && !lock_gone) || !shm::take_process_slot(segment_, *seen)) continue;
    // Of a process that runs by its pid, the lock says it exec'd; of one
    // the daemon cannot see, that it exited or exec'd.
    const char* left = !lock_gone ? "died" : liveness == shm::Liveness::kAlive ? "exec'd" : "exited or exec'd";
    dead.push_back({p, describe_process(*seen, watch_.pid_here(p, seen->pid)), left, {}});
    if (lock_gone) {
      spdlog::warn("process {} {} (its liveness lock is gone: the descriptor libbulkhead holds it with was closed, "
                   "as exec and exit close it); its slot is freed, and what it held given back",
                   dead.back().pid, left);
    }
  }
  lock_cursor_ = (lock_cursor_ + lock_window_) % processes;
  lock_sweep_left_ -= lock_window_;
  if (!dead.empty()) {
    give_back_dead(dead);
    for (const DeadProcess& gone : dead) {
      shm::free_process_slot(segment_, gone.slot);
      --taken;
      watch_.forget(gone.slot);
    }
  }
  occupancy_.processes = taken;
}

bool ControlLoop::lock_gone_twice(std::uint32_t p, const shm::ProcessSnapshot& seen) {
  const std::uint32_t processes = segment_.capacities().max_processes;
  std::uint32_t& marked = lock_gone_at_claim_[p];
  if (marked != 0 && marked != seen.claim.claims) marked = 0;  // another claim's
  if (marked == 0 && (p + processes - lock_cursor_) % processes >= lock_window_) return false;
  ++lock_tests_;
  if (!shm::liveness_lock_dropped(segment_, seen)) {
    marked = 0;
    return false;
  }
  // A dying process drops its descriptors a moment before the kernel says
  // it has exited: found without its lock once, it is tested again at the
  // next tick, which finds it dead by its pid if it was exiting.
  if (marked == 0) {
    marked = seen.claim.claims;
    return false;
  }
  marked = 0;
  return true;
}

void ControlLoop::give_back_dead(std::vector<DeadProcess>& dead) {
  // Their places in the wait queues first (the waiters behind them move
  // up), in one pass over every dependency's records for all of them: a
  // pass reads max_dependencies x queue_slots records (128 MiB at 16384 x
  // 1024), and one per dead process made a tick in which hundreds died
  // (a service's workers killed at once) last for seconds, past the unit's
  // WatchdogSec=.
  const std::uint32_t processes = segment_.capacities().max_processes;
  const std::uint32_t capacity = segment_.capacities().max_dependencies;
  constexpr std::uint32_t kAlive = UINT32_MAX;
  std::vector<std::uint32_t> which(processes, kAlive);  // by process slot: its place in `dead`
  for (std::uint32_t i = 0; i < dead.size(); ++i) which[dead[i].slot] = i;
  ++dead_queue_scans_;
  for (std::uint32_t d = 0; d < capacity; ++d) {
    std::atomic<std::uint64_t>* records = segment_.queue(d);
    for (std::uint32_t r = 0; r < segment_.queue_slots(); ++r) {
      std::uint64_t record = records[r].load(std::memory_order_relaxed);
      if (record == 0) continue;
      const std::uint32_t p = shm::record_process(record);
      if (p >= processes || which[p] == kAlive) continue;
      // Only that exact record, as shm::free_records_of(). seq_cst: the
      // waiters are woken next (wake_waiters()).
      if (!records[r].compare_exchange_strong(record, 0, std::memory_order_seq_cst)) continue;
      auto& waits = dead[which[p]].waits;
      if (waits.empty() || waits.back().first != d) waits.emplace_back(d, 0);
      ++waits.back().second;
    }
  }
  std::uint32_t lines = 0;  // logged one by one: at most kDetailLines
  std::uint64_t unlogged_permits = 0, unlogged_places = 0;
  for (DeadProcess& gone : dead) {
    const std::uint32_t p = gone.slot;
    std::uint64_t total = 0;
    auto waits = gone.waits.begin();  // in dependency order
    for (std::uint32_t d = 0; d < capacity; ++d) {
      const std::uint32_t waited = waits != gone.waits.end() && waits->first == d ? (waits++)->second : 0;
      // Acquire pairs with the release adds of held in bh_try_acquire() and
      // give_back(): the shared word's matching update is visible. Its row
      // is read first and taken only where it holds something: no one else
      // writes the row of a slot taken from a dead process.
      std::atomic<std::uint64_t>& held_at = segment_.held(p, d);
      const std::uint64_t held_word =
          held_at.load(std::memory_order_acquire) != 0 ? held_at.exchange(0, std::memory_order_acquire) : 0;
      const auto held = held_counts(held_word);
      if (held[0] == 0 && waited == 0) continue;
      // A slot the loop does not track (its name is junk) is named by its
      // number in the log, and has no series (its name is not a label).
      const Dependency* tracked = dependencies_.find(d);
      const std::string name = tracked != nullptr ? tracked->name : "slot " + std::to_string(d);
      Metrics* series = tracked != nullptr ? metrics_ : nullptr;
      if (waited != 0) {
        waiters_reclaimed_ += waited;
        if (series != nullptr) series->count_reclaimed_waiters(name, waited);
      }
      std::uint64_t take = 0;
      if (held[0] != 0) {
        auto& word = segment_.dependency(d).admission.word;
        // The partitions' counts with the total: the held word has the
        // admission word's encoding.
        const auto made = move_counts(word, {-held[0], -held[1], -held[2]});
        take = static_cast<std::uint64_t>(-made[0]);
        total += take;
        if (series != nullptr) series->count_reclaimed(name, take);
      }
      // One line for the process and dependency, also when it both held
      // permits and waited (a thread in the queue behind its own permit).
      if (++lines > kDetailLines) {
        unlogged_places += waited;
        unlogged_permits += take;
      } else if (held[0] == 0) {
        spdlog::warn("process {} {} waiting for {} ({} place(s) in its queue): freed", gone.pid, gone.left, name,
                     waited);
      } else if (waited == 0) {
        spdlog::warn("process {} {} holding {} permit(s) of {}: given back", gone.pid, gone.left, take, name);
      } else {
        spdlog::warn("process {} {} holding {} permit(s) of {} and waiting ({} place(s) in its queue): given "
                     "back and freed",
                     gone.pid, gone.left, take, name, waited);
      }
      shm::wake_waiters(segment_.dependency(d).admission.futex);
    }
    permits_reclaimed_ += total;
  }
  if (lines > kDetailLines) {
    spdlog::warn("{} more dependencies of the {} dead process(es) not logged one by one: {} permit(s) given back "
                 "and {} wait-queue place(s) freed (at most {} lines a tick; bulkhead_permits_reclaimed_total and "
                 "bulkhead_waiters_reclaimed_total count them all)",
                 lines - kDetailLines, dead.size(), unlogged_permits, unlogged_places, kDetailLines);
  }
}

bool ControlLoop::claimer_gone(std::uint32_t p) {
  // A claim or a release whose process wrote its pid, or has not cleared
  // it yet, is left to that process while it runs, however long it stalls
  // (stopped, swapped out): freed under it, the slot could be claimed by
  // another process before it resumes, and its store of the state then
  // ready (a claim) or free (a release) would take that one's slot. With
  // no pid (a claimer between its compare-and-swap and its first store)
  // nothing tells whose claim it is, and a dead one's would hold the slot
  // for good: it is abandoned.
  //
  // A daemon killed in reclaim_dead_processes() after it took a dead
  // process's slot (ready -> claiming) and before it gave back every permit
  // leaves the slot claiming with that process's pid, start time and held
  // counts. Not ready, the slot's counts are in no sum of the drift scan,
  // which gives their permits back (or has): zeroed here, without moving
  // the admission word, they are not handed to the slot's next process,
  // whose releases of permits it never took would count short, and the
  // scan restore them as held by it. Only when the claimer is known dead:
  // a live one, stalled mid-claim, may finish it and start holding.
  //
  // Or when its claim's liveness lock is gone: a release cut short by an
  // exec in another thread (exec ends the releasing thread, and closes the
  // lock's descriptor) leaves the slot claiming with the pid of the program
  // that runs on, which will never finish it. The lock is recorded only for
  // a claim that was ready, and given up after its release: a claim under
  // way has none yet, and a release under way holds it.
  const shm::ProcessSnapshot seen = shm::read_process_fields(segment_, p);
  if (seen.pid <= 0) return true;
  const bool dead = watch_.check(seen) == shm::Liveness::kDead || shm::liveness_lock_dropped(segment_, seen);
  watch_.forget(p);
  if (!dead) return false;
  for (std::uint32_t d = 0; d < segment_.capacities().max_dependencies; ++d) {
    const std::uint64_t held = segment_.held(p, d).exchange(0, std::memory_order_relaxed);
    if (held != 0) spdlog::warn("process slot {}: held count {:#x} of dependency slot {} left by a claim "
                                "that never finished: cleared", p, held, d);
  }
  return true;
}

void ControlLoop::free_stray_records() {
  // A record names the process slot of its waiter. One that names no slot
  // (an index past the table: junk a client wrote) or a slot no process
  // holds (a daemon killed after taking a dead waiter's slot and before
  // freeing its records) is freed by nobody else, and would count as a
  // waiter ahead of every later one for good. Every record, not the first
  // max_queue only: waiters count them all (shm::waiters_ahead()). Only
  // where waiters may be: a dependency without a queue never reads them.
  const std::uint32_t processes = segment_.capacities().max_processes;
  for (auto& [index, d] : dependencies_) {
    if (published_settings_[index].max_queue == 0) continue;
    std::atomic<std::uint64_t>* records = segment_.queue(index);
    std::uint32_t freed = 0;
    for (std::uint32_t i = 0; i < segment_.queue_slots(); ++i) {
      // seq_cst, as the waiters' CAS: a record seen here was written after
      // its process's slot was ready (the claim's release store), so the
      // state read next is that one or a later one.
      std::uint64_t r = records[i].load(std::memory_order_seq_cst);
      if (r == 0) continue;
      const std::uint32_t p = shm::record_process(r);
      if (p < processes) {
        const std::uint32_t state = segment_.process(p).identity.state.load(std::memory_order_acquire);
        if (state == shm::kSlotReady || state == shm::kSlotClaiming) continue;
      }
      // That exact record only: tickets are never taken twice.
      freed += records[i].compare_exchange_strong(r, 0, std::memory_order_seq_cst) ? 1 : 0;
    }
    if (freed == 0) continue;
    spdlog::warn("dependency {}: {} place(s) in its queue held by no live process: freed", d.name, freed);
    shm::wake_waiters(segment_.dependency(index).admission.futex);
  }
}

void ControlLoop::scan_drift() {
  // Acquire moves the shared word first, then the process's held count;
  // release moves held first. A thread killed between the two leaves the
  // word one higher than the sum of held counts, which the dead-process
  // scan cannot see. Every call in progress makes such a gap for a few
  // nanoseconds (longer if its thread is descheduled there), so a gap is
  // corrected only when every one of kDriftSamples looks in each of
  // kDriftTicks ticks in a row found one of the same sign, and only by the
  // smallest seen. Corrections that a stalled thread later proves wrong
  // (the word now short of what is held) are undone the same way.
  const std::uint32_t processes = segment_.capacities().max_processes;
  std::vector<std::uint32_t> ready;
  for (std::uint32_t p = 0; p < processes; ++p) {
    if (segment_.process(p).identity.state.load(std::memory_order_acquire) == shm::kSlotReady) {
      ready.push_back(p);
    }
  }
  // The same for each count of the word: the total, and the fields of
  // partitions 1 and 2 (a thread killed mid-call of a partition leaves its
  // field one high too), each on its own. The gap is the word less the
  // held words, modulo 2^64 as the clients' arithmetic is, read as signed
  // counts (shm::admission_counts()): a release after a correction that a
  // stalled thread proved wrong takes a count below zero, which borrows
  // from the fields above it, and reads as one call short, not 2^32 - 1 over.
  //
  // A first look at every dependency at once: all the in-flight counts,
  // then the held counts process by process, each process's a contiguous
  // row (per dependency, 256 processes' counts are 256 cache misses). A
  // count this finds without a gap is done for this tick, as if its first
  // look below had found none; a dependency whose three counts are all
  // without one is done, and only the others are looked at one by one.
  // The longer time between the two reads here can only make a gap look
  // smaller or of the other sign (a call that acquired in between), which
  // delays a correction, never makes one.
  //
  // This tick's slice: the next dependencies in slot order, as many as
  // kDriftHeldBudget held counts allow (all of them on most hosts).
  const std::size_t tracked = dependencies_.size();
  if (tracked == 0) return;
  const std::size_t slice =
      ready.empty() ? tracked : std::clamp(kDriftHeldBudget / ready.size(), std::min(kDriftMinSlice, tracked), tracked);
  const std::size_t from = drift_next_ < tracked ? drift_next_ : 0;
  const std::size_t to = std::min(from + slice, tracked);
  drift_next_ = to == tracked ? 0 : to;
  const auto first = dependencies_.begin() + static_cast<std::ptrdiff_t>(from);
  const auto last = dependencies_.begin() + static_cast<std::ptrdiff_t>(to);
  const std::uint32_t lo = first->first;  // slots [lo, hi): each process's held counts there are one run
  const std::uint32_t hi = (last - 1)->first + 1;
  std::vector<std::uint64_t>& first_gap = drift_first_gap_;
  first_gap.assign(hi - lo, 0);
  for (auto it = first; it != last; ++it) {
    first_gap[it->first - lo] = segment_.dependency(it->first).admission.word.load(std::memory_order_acquire);
  }
  for (std::uint32_t p : ready) {
    const std::atomic<std::uint64_t>* held = &segment_.held(p, lo);
    for (std::uint32_t i = 0; i < hi - lo; ++i) {
      const std::uint64_t h = held[i].load(std::memory_order_acquire);
      first_gap[i] -= h;
    }
  }
  bool checked_stopped = false;
  for (auto it = first; it != last; ++it) {
    const std::uint32_t index = it->first;
    Dependency& d = it->second;
    auto& word = segment_.dependency(index).admission.word;
    std::array<std::int64_t, kCounts> gap{};
    std::array<bool, kCounts> steady{};
    const auto first_look = shm::admission_counts(first_gap[index - lo]);
    for (std::uint32_t k = 0; k < kCounts; ++k) {
      steady[k] = first_look[k] != 0;
      if (!steady[k]) d.drift_ticks[k] = 0;
    }
    if (!steady[0] && !steady[1] && !steady[2]) continue;
    for (int sample = 0; sample < kDriftSamples; ++sample) {
      std::uint64_t diff = word.load(std::memory_order_acquire);
      for (std::uint32_t p : ready) diff -= segment_.held(p, index).load(std::memory_order_acquire);
      const auto look = shm::admission_counts(diff);
      for (std::uint32_t k = 0; k < kCounts; ++k) {
        if (!steady[k]) continue;
        const std::int64_t g = look[k];
        if (g == 0 || (sample > 0 && (g > 0) != (gap[k] > 0))) {
          steady[k] = false;  // no gap, or gaps both ways: calls in progress
          gap[k] = 0;
          continue;
        }
        if (sample == 0 || std::abs(g) < std::abs(gap[k])) gap[k] = g;
      }
      if (!steady[0] && !steady[1] && !steady[2]) break;
    }
    std::array<std::int64_t, kCounts> change{};
    bool due = false;
    for (std::uint32_t k = 0; k < kCounts; ++k) {
      if (gap[k] == 0 || (d.drift_ticks[k] > 0 && (gap[k] > 0) != (d.drift_min[k] > 0))) {
        d.drift_ticks[k] = 0;
        if (gap[k] == 0) continue;
      }
      d.drift_min[k] = d.drift_ticks[k] == 0 || std::abs(gap[k]) < std::abs(d.drift_min[k]) ? gap[k] : d.drift_min[k];
      if (++d.drift_ticks[k] < kDriftTicks) continue;
      change[k] = -d.drift_min[k];
      due = true;
    }
    if (!due) continue;
    // A stopped process (SIGSTOP, a debugger) can sit between its two
    // updates for as long as it stays stopped: wait until none is.
    if (!checked_stopped) {
      checked_stopped = true;
      for (std::uint32_t p : ready) {
        // Its pid here, for a process of another pid namespace (0 when not
        // found: read nothing).
        const pid_t pid = watch_.pid_here(p, segment_.process(p).identity.pid.load(std::memory_order_relaxed));
        const auto stat = pid > 0 ? shm::read_process_stat(pid) : std::nullopt;
        if (stat && (stat->state == 'T' || stat->state == 't')) {
          for (auto& [i, other] : dependencies_) other.drift_ticks = {};
          return;
        }
      }
    }
    for (std::uint32_t k = 0; k < kCounts; ++k) {
      if (change[k] != 0) d.drift_ticks[k] = 0;
    }
    // Added mod 2^64, as the gaps were read: a count that a release took
    // below zero gets back what it borrowed from the fields above it.
    // seq_cst, as a release in the client's give_back(): the store side of
    // the pair with a waiter's announce, for the wake below.
    word.fetch_add(shm::admission_delta(change), std::memory_order_seq_cst);
    if (change[0] < 0 || change[1] < 0 || change[2] < 0) {
      // Permits came back: a waiter may take them now.
      shm::wake_waiters(segment_.dependency(index).admission.futex);
    }
    if (change[0] < 0) {
      permits_reclaimed_ += static_cast<std::uint64_t>(-change[0]);
      spdlog::warn("dependency {}: {} permit(s) in flight that no process holds (a thread killed mid-call): "
                   "given back", d.name, -change[0]);
      if (metrics_ != nullptr) metrics_->count_reclaimed(d.name, static_cast<std::uint64_t>(-change[0]));
    } else if (change[0] > 0) {
      spdlog::warn("dependency {}: in-flight count {} short of what processes hold: restored", d.name, change[0]);
    }
    for (std::uint32_t k = 1; k < kCounts; ++k) {
      if (change[k] != 0) {
        spdlog::warn("dependency {}: partition field {} off what processes hold by {}: corrected", d.name, k,
                     -change[k]);
      }
    }
  }
}

std::vector<ControlLoop::View> ControlLoop::view() const {
  std::vector<View> out;
  for (const auto& [index, d] : dependencies_) {
    const shm::DependencySlot& slot = segment_.dependency(index);
    const std::uint64_t word = slot.admission.word.load(std::memory_order_relaxed);
    View v{d.name,
           d.controller->settings().policy,
           d.controller->limit(),
           shm::admission_inflight(word),
           d.controller->windows(),
           d.controller->last_window().duration_ns,
           d.breaker->state(),
           d.breaker->forced(),
           d.controller->pinned(),
           index,
           {}};
    if (const PartitionPlan* plan = plan_of(index)) {
      const std::uint64_t rule = slot.partitions.rule.load(std::memory_order_relaxed);
      for (std::uint32_t p = 0; p < shm::kMaxPartitions; ++p) {
        if (p != 0 && plan->names[p].empty()) continue;
        v.partitions.push_back({plan->names[p], shm::rule_guarantee(rule, p), shm::partition_inflight(word, p),
                                (plan->caps >> p & 1u) != 0});
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace bulkhead::daemon
