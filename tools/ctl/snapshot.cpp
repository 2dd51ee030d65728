#include "tools/ctl/snapshot.hpp"

#include <fnmatch.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string_view>
#include <utility>

#include "shm/histogram.hpp"
#include "shm/partitions.hpp"
#include "shm/pid_namespace.hpp"
#include "shm/wait_queue.hpp"

namespace bulkhead::ctl {

namespace {

std::string user_name(uid_t uid) {
  const passwd* p = ::getpwuid(uid);
  return p != nullptr ? p->pw_name : std::to_string(uid);
}

std::string group_name(gid_t gid) {
  const group* g = ::getgrgid(gid);
  return g != nullptr ? g->gr_name : std::to_string(gid);
}

// Unix time of the host's boot (btime in /proc/stat); 0 when unknown.
// /proc/stat shows it shifted back by the reader's boottime offset (a time
// namespace of its own), while every start time in the segment is the
// host's (shm::read_process_stat()): the offset is added back, to the
// nearest second.
std::uint64_t boot_time_s() {
  std::ifstream in("/proc/stat");
  std::string key;
  while (in >> key) {
    if (key == "btime") {
      std::int64_t t = 0;
      in >> t;
      const std::int64_t offset_ns = shm::boottime_offset_ns();
      const std::int64_t offset_s = (offset_ns + (offset_ns < 0 ? -500'000'000 : 500'000'000)) / 1'000'000'000;
      return t > 0 && t + offset_s > 0 ? static_cast<std::uint64_t>(t + offset_s) : 0;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

double per_second(std::uint64_t n, double interval_s) {
  return interval_s > 0 ? static_cast<double>(n) / interval_s : 0.0;
}

std::optional<double> quantile_ms(const std::array<std::uint64_t, shm::kHistogramBuckets>& counts,
                                  double q) {
  for (std::uint64_t c : counts) {
    if (c != 0) return static_cast<double>(shm::histogram_quantile_ns(counts, q)) / 1e6;
  }
  return std::nullopt;
}

}  // namespace

std::string default_segment_name() {
  const char* env = std::getenv("BULKHEAD_SEGMENT");
  return env != nullptr && *env != '\0' ? env : "bulkhead";
}

shm::Segment open_read_only(const std::string& name) {
  try {
    return shm::Segment::attach(name, shm::Access::kReadOnly);
  } catch (const shm::SegmentError& e) {
    std::string hint;
    if (e.code() == ENOENT) {
      hint = " (is bulkheadd running? --segment or $BULKHEAD_SEGMENT names another segment)";
    } else if (e.code() == EACCES) {
      struct stat st {};
      if (::stat(("/dev/shm/" + name).c_str(), &st) == 0) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        const std::string owner = user_name(st.st_uid), group = group_name(st.st_gid);
        // A group without the read bit is no help to its members.
        hint = std::string(" (mode ") + mode + ", owner " + owner + ", group " + group + ": " +
               ((st.st_mode & 0040) != 0 ? "run as a member of group " + group
                                         : "group " + group + " may not read it; daemon.segment_mode = 0o660 lets it") +
               ")";
      }
    } else if (e.code() == EAGAIN) {
      hint = " (try again in a moment; if it stays so, bulkheadd --recreate-segment replaces it)";
    }
    throw shm::SegmentError(e.code(), e.what() + hint);
  }
}

bool segment_replaced(const shm::Segment& segment) {
  try {
    return segment.file_access().links == 0;
  } catch (const shm::SegmentError&) {
    return false;
  }
}

const DependencyReading* Snapshot::find(std::string_view name) const {
  for (const auto& d : dependencies) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const DependencyReading* Snapshot::at_index(std::uint32_t index) const {
  for (const auto& d : dependencies) {
    if (d.index == index) return &d;
  }
  return nullptr;
}

std::optional<double> heartbeat_age_s(std::uint64_t heartbeat, std::uint64_t heartbeat_ns, std::uint64_t now_ns) {
  if (heartbeat == 0 || heartbeat_ns == 0) return std::nullopt;
  return now_ns > heartbeat_ns ? static_cast<double>(now_ns - heartbeat_ns) / 1e9 : 0.0;
}

std::uint64_t monotonic_now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  // In a time namespace of its own (unshare --time, a container CRIU
  // restored) this process's clock runs its offset ahead of the host's,
  // which the heartbeat and the pins are in: the offset comes off.
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec) -
         static_cast<std::uint64_t>(shm::monotonic_offset_ns());
}

Snapshot read_snapshot(const shm::Segment& segment, std::uint64_t now_ns) {
  // Relaxed loads throughout, except the slot states below: every value is
  // shown on its own, and the daemon validates what it reads the same way.
  const shm::Header& h = segment.header();
  Snapshot s;
  s.segment = segment.name();
  s.default_segment = s.segment == default_segment_name();
  s.abi_major = h.abi_major;
  s.abi_minor = h.abi_minor;
  s.size = segment.size();
  s.reserved = segment.reserved_bytes();
  s.capacities = segment.capacities();
  s.taken_ns = now_ns;
  s.boot_time_s = boot_time_s();

  // Processes of another pid namespace (a container), the daemon as much
  // as a client, are looked up as the daemon looks clients up, and shown
  // with their pid here too.
  const shm::PidNamespace own_ns = shm::own_pid_namespace();
  DaemonReading& d = s.daemon;
  shm::ProcessSnapshot daemon = shm::read_daemon(h);
  d.pid = daemon.pid;
  d.start_time = daemon.start_time;
  d.liveness = d.pid > 0 ? shm::daemon_liveness(daemon, own_ns, &d.host_pid) : shm::Liveness::kDead;
  if (shm::foreign_pid_namespace(daemon.pid_ns, own_ns)) d.pid_namespace = daemon.pid_ns.inode;
  d.heartbeat = h.heartbeat.load(std::memory_order_relaxed);
  d.heartbeat_ns = h.heartbeat_ns.load(std::memory_order_relaxed);
  d.config_generation = h.config_generation.load(std::memory_order_relaxed);
  d.strict = (h.flags.load(std::memory_order_relaxed) & shm::kHeaderStrict) != 0;
  d.default_limit = h.default_limit.load(std::memory_order_relaxed);
  d.metrics_port = h.metrics_port.load(std::memory_order_relaxed);

  const std::uint32_t dependencies = s.capacities.max_dependencies;
  for (std::uint32_t i = 0; i < dependencies; ++i) {
    const shm::DependencySlot& slot = segment.dependency(i);
    // Acquire pairs with the release CAS to kSlotReady in
    // find_or_claim_dependency(): a ready tag means the name is written.
    const std::uint64_t tag = slot.identity.tag.load(std::memory_order_acquire);
    s.dependency_slots_taken += (tag & 0xff) != shm::kSlotFree;
    if ((tag & 0xff) != shm::kSlotReady) continue;
    // A strict daemon's pattern takes a slot but is no dependency; it is
    // published while the slot has the flag.
    if (auto pattern = shm::slot_pattern(segment, i)) {
      if ((slot.control.flags.load(std::memory_order_relaxed) & shm::kDependencyPattern) != 0) {
        d.patterns.push_back(std::move(*pattern));
      }
      continue;
    }
    DependencyReading r;
    r.index = i;
    // The segment is untrusted: never read past the name field.
    const std::uint32_t length = std::min<std::uint32_t>(slot.identity.name_length,
                                                         static_cast<std::uint32_t>(shm::kMaxNameLength));
    r.name.assign(slot.identity.name, length);
    r.name_valid = length == slot.identity.name_length && shm::check_dependency_name(r.name) == nullptr;
    if (!r.name_valid) {
      for (char& c : r.name) {
        if (shm::check_dependency_name(std::string_view(&c, 1)) != nullptr) c = '?';
      }
    }
    r.limit = slot.control.limit.load(std::memory_order_relaxed);
    r.inflight = shm::admission_inflight(slot.admission.word.load(std::memory_order_relaxed));
    r.waiters = shm::queue_length(segment.queue(i), segment.queue_slots());
    r.max_queue = slot.control.max_queue.load(std::memory_order_relaxed);
    r.flags = slot.control.flags.load(std::memory_order_relaxed);
    r.generation = slot.control.generation.load(std::memory_order_relaxed);
    r.counters = shm::read_counters(segment, i);
    r.breaker = slot.control.breaker.load(std::memory_order_relaxed);
    r.breaker_override = slot.control.breaker_override.load(std::memory_order_relaxed);
    r.trials_left = shm::trials_left(slot.control.trials.load(std::memory_order_relaxed));
    // A junk word pins nothing (the daemon clears it at its next tick).
    if (const std::uint64_t pin = slot.control.limit_pin.load(std::memory_order_relaxed);
        shm::pin_holds(pin, now_ns) && !shm::pin_junk(pin, now_ns)) {
      r.pin_limit = shm::pin_limit(pin);
      r.pin_left_s = shm::pin_until_s(pin) - now_ns / 1'000'000'000;
    }
    if ((r.flags & shm::kDependencyPartitioned) != 0) {
      const std::uint64_t word = slot.admission.word.load(std::memory_order_relaxed);
      const std::uint64_t rule = slot.partitions.rule.load(std::memory_order_relaxed);
      const std::uint64_t shape = slot.partitions.shape.load(std::memory_order_relaxed);
      for (std::uint32_t p = 0; p < shm::kMaxPartitions; ++p) {
        DependencyReading::Partition part;
        if (p == 0) {
          part.name = std::string(shm::kDefaultPartition);
        } else {
          if ((shm::shape_active(shape) >> p & 1u) == 0) continue;
          char buffer[16];
          part.name = std::string(shm::unpack_partition_name(shm::load_partition_name(slot.partitions, p), buffer));
          for (char& c : part.name) {
            if (shm::check_partition_name(std::string_view(&c, 1)) != nullptr) c = '?';
          }
        }
        part.guaranteed = shm::rule_guarantee(rule, p);
        part.inflight = shm::partition_inflight(word, p);
        part.hard_cap = (shm::shape_caps(shape) >> p & 1u) != 0;
        part.rejected = r.counters.partition_rejected[p];
        r.partitions.push_back(std::move(part));
      }
    }
    s.dependencies.push_back(std::move(r));
  }

  const std::uint32_t processes = s.capacities.max_processes;
  for (std::uint32_t p = 0; p < processes; ++p) {
    // As the daemon reads a slot (its count of claims, then its state,
    // then its fields); a slot taken counts whatever its state.
    std::optional<shm::ProcessSnapshot> ready = shm::read_process_slot(segment, p);
    s.process_slots_taken +=
        ready || segment.process(p).identity.state.load(std::memory_order_relaxed) != shm::kSlotFree;
    if (!ready) continue;
    shm::ProcessSnapshot& seen = *ready;  // liveness_here_too() may correct its namespace
    ProcessReading r;
    r.slot = p;
    r.pid = seen.pid;
    r.start_time = seen.start_time;
    r.liveness = shm::liveness_here_too(seen, own_ns, &r.host_pid);
    r.lock = shm::liveness_lock_state(segment, seen);
    if (shm::foreign_pid_namespace(seen.pid_ns, own_ns)) r.pid_namespace = seen.pid_ns.inode;
    for (std::uint32_t i = 0; i < dependencies; ++i) {
      // The total of the held word (partitions' counts in its high half).
      const std::uint32_t held = shm::admission_inflight(segment.held(p, i).load(std::memory_order_relaxed));
      if (held != 0) r.held.push_back({i, held});
    }
    s.processes.push_back(std::move(r));
  }
  return s;
}

const char* daemon_state_name(DaemonState state) {
  switch (state) {
    case DaemonState::kRunning: return "running";
    case DaemonState::kStale: return "stale";
    case DaemonState::kNone: return "none";
  }
  return "none";
}

double DependencyStatus::admitted_per_s() const {
  return per_second(delta.ok + delta.dropped + delta.ignored + delta.failed, interval_s);
}
double DependencyStatus::rejected_limit_per_s() const { return per_second(delta.rejected, interval_s); }
double DependencyStatus::rejected_queue_full_per_s() const { return per_second(delta.queue_full, interval_s); }
double DependencyStatus::rejected_deadline_per_s() const {
  return per_second(delta.deadline_rejected, interval_s);
}
const char* DependencyReading::breaker_state() const {
  switch (breaker & shm::kBreakerStateMask) {
    case shm::kBreakerOpen:
      return "open";
    case shm::kBreakerHalfOpen:
      return "half_open";
    default:
      return "closed";
  }
}

const char* DependencyReading::breaker_override_name() const {
  switch (breaker_override) {
    case shm::kOverrideAuto:
      return "auto";
    case shm::kOverrideOpen:
      return "open";
    case shm::kOverrideClosed:
      return "closed";
    default:
      return "invalid";
  }
}

double DependencyStatus::failed_per_s() const { return per_second(delta.failed, interval_s); }

double DependencyStatus::rejected_open_circuit_per_s() const {
  return per_second(delta.open_rejected, interval_s);
}

double DependencyStatus::shadow_admitted_per_s() const {
  return per_second(delta.shadow_admitted, interval_s);
}
std::optional<double> DependencyStatus::interval_latency_ms(double q) const {
  return quantile_ms(delta.histogram, q);
}
std::optional<double> DependencyStatus::total_latency_ms(double q) const {
  return quantile_ms(now.counters.histogram, q);
}

namespace {

constexpr std::array<std::pair<StatusOrder, const char*>, 7> kOrders{{
    {StatusOrder::kSlot, "slot"},
    {StatusOrder::kName, "name"},
    {StatusOrder::kLimit, "limit"},
    {StatusOrder::kInflight, "inflight"},
    {StatusOrder::kAdmitted, "admitted"},
    {StatusOrder::kRejected, "rejected"},
    {StatusOrder::kP99, "p99"},
}};

// The value a column order ranks by, the largest first. Rejected counts
// every refusal (limit, queue, deadline, open breaker); a p99 with no call
// in the interval ranks last.
double order_key(const DependencyStatus& d, StatusOrder order) {
  switch (order) {
    case StatusOrder::kLimit: return d.now.limit;
    case StatusOrder::kInflight: return d.now.inflight;
    case StatusOrder::kAdmitted: return d.admitted_per_s();
    case StatusOrder::kRejected:
      return d.rejected_limit_per_s() + d.rejected_queue_full_per_s() + d.rejected_deadline_per_s() +
             d.rejected_open_circuit_per_s();
    case StatusOrder::kP99: return d.interval_latency_ms(0.99).value_or(-1.0);
    case StatusOrder::kSlot:
    case StatusOrder::kName: break;
  }
  return 0;
}

void order_dependencies(std::vector<DependencyStatus>& deps, StatusOrder order) {
  if (order == StatusOrder::kSlot) return;  // as read
  const auto by_name = [](const DependencyStatus& a, const DependencyStatus& b) {
    return a.now.name != b.now.name ? a.now.name < b.now.name : a.now.index < b.now.index;
  };
  if (order == StatusOrder::kName) {
    std::sort(deps.begin(), deps.end(), by_name);
    return;
  }
  std::sort(deps.begin(), deps.end(), [&](const DependencyStatus& a, const DependencyStatus& b) {
    const double ka = order_key(a, order), kb = order_key(b, order);
    return ka != kb ? ka > kb : by_name(a, b);
  });
}

}  // namespace

const char* status_order_name(StatusOrder order) {
  for (const auto& [o, name] : kOrders) {
    if (o == order) return name;
  }
  return "slot";
}

std::vector<std::string> status_order_names() {
  std::vector<std::string> names;
  for (const auto& [o, name] : kOrders) names.emplace_back(name);
  return names;
}

std::optional<StatusOrder> parse_status_order(std::string_view name) {
  for (const auto& [o, n] : kOrders) {
    if (name == n) return o;
  }
  return std::nullopt;
}

Status derive_status(Snapshot before, Snapshot after, const StatusOptions& options) {
  Status st;
  st.interval_s = after.taken_ns > before.taken_ns
                      ? static_cast<double>(after.taken_ns - before.taken_ns) / 1e9
                      : 0.0;
  const DaemonReading& d = after.daemon;
  st.heartbeat_age_s = heartbeat_age_s(d.heartbeat, d.heartbeat_ns, after.taken_ns);
  if (d.pid <= 0 || d.liveness == shm::Liveness::kDead) {
    st.daemon_state = DaemonState::kNone;
  } else if (!st.heartbeat_age_s || *st.heartbeat_age_s > options.stale_after_s) {
    st.daemon_state = DaemonState::kStale;
  } else {
    st.daemon_state = DaemonState::kRunning;
  }
  for (const ProcessReading& p : after.processes) {
    if (p.liveness != shm::Liveness::kDead) ++st.processes_alive;
  }
  st.names = options.names;
  const auto wanted = [&](const std::string& name) {
    return std::any_of(options.names.begin(), options.names.end(),
                       [&](const std::string& pattern) { return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0; });
  };
  // Both lists are in slot order: walk them together.
  auto earlier = before.dependencies.begin();
  for (const DependencyReading& r : after.dependencies) {
    if (!st.names.empty() && !wanted(r.name)) continue;
    DependencyStatus ds;
    ds.now = r;
    ds.interval_s = st.interval_s;
    while (earlier != before.dependencies.end() && earlier->index < r.index) ++earlier;
    const bool seen = earlier != before.dependencies.end() && earlier->index == r.index;
    ds.delta = r.counters.since(seen ? earlier->counters : shm::DependencyCounters{});
    st.dependencies.push_back(std::move(ds));
  }
  order_dependencies(st.dependencies, options.order);
  st.before = std::move(before);
  st.after = std::move(after);
  return st;
}

Status sample(shm::Segment& segment, const std::function<void()>& wait, const StatusOptions& options) {
  for (int attempt = 1;; ++attempt) {
    Snapshot before = read_snapshot(segment, monotonic_now_ns());
    wait();
    Snapshot after = read_snapshot(segment, monotonic_now_ns());
    if (attempt == 3 || !segment_replaced(segment)) return derive_status(std::move(before), std::move(after), options);
    segment = open_read_only(segment.name());
  }
}

}  // namespace bulkhead::ctl
