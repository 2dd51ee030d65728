// libbulkhead: the C ABI, and the admission hot path behind it.
//
// Hot path (bh_try_acquire + bh_release), per call:
//   acquire  one load of the fork flag (g_fork_pending: a forked child's
//            first call claims its process slot), one load of the fast
//            path's limit (admit_limit, on the
//            daemon's partition line), a compare-and-swap loop
//            on the admission word (the contended line), one add to this
//            process's held count (its own row; a line shared with 7 other
//            dependencies' held counts: see docs/architecture.md, "The hot
//            path"), one load of the stripe's
//            peak in-flight, one clock read;
//   release  one clock read, two adds (a success: histogram bucket and
//            latency sum) or one (dropped, failed, ignored) to the stripe
//            of the caller's CPU, and for a success a load each of the
//            window minimum and maximum; one add to the held count, one
//            add to the admission word (in a forked child that may hold its
//            parent's permits, a compare-and-swap on the held count first:
//            take_inherited_held()).
// When the segment has more statistics stripes than the host has CPUs,
// each CPU owns a stripe and the statistics adds carry no lock prefix:
// each is a restartable sequence (client/percpu.hpp) that commits only
// while the thread stays on that CPU; see assign_stripes() and add_stat().
// Otherwise they are locked adds, as the held count and admission word's.
// A rejection reads the admission word and counts itself on the stripe; it
// never writes the admission line. Release adds one load of the futex word,
// on the admission line it has just written, and makes a system call only
// when a waiter may be asleep (shm/wait_queue.hpp).
//
// Waiting (bh_acquire) is the slow path and lives apart from this: see
// wait_in_queue(). So are partitions (admit_partitioned()): a dependency
// without them never reaches that code, and one with them sends there only
// the calls that its fast path's limit (admit_limit) cannot decide.
//
// The circuit breaker adds one load of the breaker word, on the daemon's
// control line, before admission (pass_breaker()). Only
// an open or half-open breaker goes further: an open one refuses without
// touching the admission line; a half-open one takes a trial permit from the
// daemon's line with one compare-and-swap before the limit's.
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <sched.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "bulkhead/bulkhead.h"
#include "client/percpu.hpp"
#include "shm/partitions.hpp"
#include "shm/segment.hpp"
#include "shm/wait_queue.hpp"

namespace shm = bulkhead::shm;
namespace percpu = bulkhead::percpu;

namespace {

// The slot a standalone client keeps in its own memory, shaped like the
// segment's so that the hot path is the same code.
struct LocalSlot {
  shm::DependencyControl control{};
  shm::DependencyAdmission admission{};
  shm::DependencyPartitions partitions{};
  std::atomic<std::uint64_t> held{0};
  shm::StatsStripe stripe{};
  shm::HistogramCounts latency{};
  shm::DependencyWaits waits{};
  shm::HistogramCounts wait{};
};

thread_local std::string t_last_error;

int fail(int code, std::string why) {
  t_last_error = std::move(why);
  return -code;
}

std::uint64_t monotonic_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

// Raises an atomic to `value` if it is below; one load when it is not.
template <typename T>
void raise_to(std::atomic<T>& a, T value) {
  T seen = a.load(std::memory_order_relaxed);
  while (value > seen && !a.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// Release: the window minimum, like the latency sum, tells the daemon's
// StatsReader::take() that a bucket of this stripe moved (the same lock
// cmpxchg as relaxed on x86).
template <typename T>
void lower_to(std::atomic<T>& a, T value) {
  T seen = a.load(std::memory_order_relaxed);
  while (value < seen && !a.compare_exchange_weak(seen, value, std::memory_order_release,
                                                  std::memory_order_relaxed)) {
  }
}

}  // namespace

namespace {

// Where a dependency's handle finds its lines (in the segment, or in its
// LocalSlot standalone) and what this process records under: pointers and
// numbers only, so that a partition handle (bh_partition()) takes its
// dependency's whole, in one copy.
struct DependencyLines {
  std::atomic<std::uint64_t>* admission;
  // The fast path's limit: DependencyPartitions::admit_limit, the limit
  // itself unless the dependency has partitions; a partition handle's is
  // kNoFastPath, so that its calls always take the partitioned admission.
  const std::atomic<std::uint32_t>* admit_limit;
  const std::atomic<std::uint32_t>* flags;  // the daemon's kDependency* flags
  std::atomic<std::uint64_t>* held;         // the admission word's encoding
  // The statistics stripe this process writes, or with cpu_stripes, the
  // dependency's first stripe: stats_of() picks one per call.
  shm::StatsStripe* stats;
  // Stripe 0 of the dependency and its latency histogram: stripe i's is
  // i x latency_stride bytes further (shm::Segment::latency_histogram();
  // histogram_at()).
  shm::StatsStripe* stripe0;
  shm::HistogramCounts* latency0;
  std::size_t latency_stride;
  std::uint32_t cpu_stripes;  // 0: always *stats; else the stripe of the CPU, of this many
  // Not 0: stripes 0 to owned_cpus - 1 are each one CPU's own, added to by
  // restartable sequences only, and `spare` (stripe owned_cpus) is the stripe for
  // a locked add when a sequence does not commit (assign_stripes()).
  std::uint32_t owned_cpus;
  shm::StatsStripe* spare;
  // The dependency's queue waits: their sum and histogram.
  shm::DependencyWaits* waits;
  shm::HistogramCounts* wait_histogram;
  std::uint32_t index;  // slot in the segment; unused standalone
  // Not 0 in a process forked while its parent held permits of the
  // dependency (or forked from such a process): a permit it releases may
  // be one the parent holds and gives back itself. Its releases take the
  // held count by compare-and-swap, never below zero (take_inherited_held()).
  std::uint32_t inherited;
  // The wait queue: its futex and tickets, its records (none standalone),
  // max_queue and service time on the daemon's line.
  shm::DependencyAdmission* line;
  const shm::DependencyControl* control;
  std::atomic<std::uint64_t>* trials;  // the breaker's half-open trial permits
  std::atomic<std::uint64_t>* queue;
  std::uint32_t queue_slots;
  std::uint32_t process;  // this process's slot, named in its queue records
  const shm::DependencyPartitions* partitions;
  bh_client* client;
};

}  // namespace

struct bh_dep : DependencyLines {
  std::unique_ptr<LocalSlot> local;  // standalone: the lines above point into it
  // A partition handle (bh_partition()): the dependency's own handle, the
  // partition's name, and the field that name had under the shape version
  // last seen: version << 32 | kResolved | field. nullptr for a dependency.
  bh_dep* parent = nullptr;
  shm::PackedName partition_name;
  std::atomic<std::uint64_t> resolved{0};
  // Whether this process held permits of the dependency when it last forked
  // (read in the child only: see inherited).
  bool held_at_fork = false;
  // What `held` points at in a forked child until it claims a slot of its
  // own (claim_after_fork()): no permit of the child's is counted before.
  std::atomic<std::uint64_t> held_before_claim{0};
};

struct bh_client {
  std::optional<shm::Segment> segment;
  shm::ProcessClaim process;  // its slot in the process table
  shm::LivenessLock lock;  // the claim's: exec() drops it (shm::LivenessLock)
  std::uint32_t static_limit = UINT32_MAX;
  std::string static_limit_ignored;  // a $BULKHEAD_STATIC_LIMIT that is no limit, for the status
  bool require_segment = false;  // opened with BH_OPEN_REQUIRE_SEGMENT
  std::string status;
  // In a forked child, until its first call claims a process slot
  // (claim_after_fork()); `process` is then no claim of this process's.
  // Guarded by g_clients_mutex.
  bool fork_pending = false;
  std::mutex mutex;  // guards deps: cold path only
  std::map<std::string, std::unique_ptr<bh_dep>, std::less<>> deps;
  // Partition handles, by "dependency/partition".
  std::map<std::string, std::unique_ptr<bh_dep>, std::less<>> partitions;
};

namespace {

// Which stripes of the segment's dependency slot `d` records on, for
// process slot `process`. With S stripes and N CPUs on the host:
//   S > N   stripe c < N is CPU c's own: only restartable sequences that
//           commit on CPU c add to it (client/percpu.hpp), no lock prefix.
//           Stripe N, the spare, takes every locked add: from a process
//           without an rseq area, and a sequence that did not commit (rare:
//           the thread was preempted, moved or signalled in a few
//           instructions). Every process on the host computes the same
//           split, so a CPU's stripe never sees a locked add from another
//           CPU, which could lose an add of a sequence. Stripes past N are
//           never written: their pages stay untouched, and cost nothing.
//   S <= N  locked adds only, on the stripe cpu % S (the CPU read from the
//           rseq area), or without rseq on p % S.
// The window extremes (rtt_min_ns, rtt_max_ns, max_inflight) are always
// compare-and-swaps on stats_of()'s stripe: the daemon exchanges them, and
// nothing adds to them without a lock.
void assign_stripes(bh_dep* d, const shm::Segment& segment, std::uint32_t process) {
  const std::uint32_t stripes = segment.capacities().stats_stripes;
  const std::uint32_t cpus = percpu::possible_cpus();
  shm::StatsStripe* first = &segment.stripe(d->index, 0);
  d->stripe0 = first;
  d->latency0 = &segment.latency_histogram(d->index, 0);
  d->latency_stride = static_cast<std::size_t>(segment.capacities().max_dependencies) * sizeof(shm::HistogramCounts);
  const bool rseq = percpu::registered();
  if (cpus > 0 && stripes > cpus) {
    d->spare = first + cpus;
    d->owned_cpus = rseq && percpu::kBuilt ? cpus : 0;
    d->cpu_stripes = d->owned_cpus != 0 ? stripes : 0;
    d->stats = d->owned_cpus != 0 ? first : d->spare;
  } else {
    d->owned_cpus = 0;
    d->cpu_stripes = stripes > 1 && rseq ? stripes : 0;
    d->stats = d->cpu_stripes != 0 ? first : first + segment.stripe_of_process(process);
    d->spare = d->stats;
  }
}

// Points `dep`'s lines at a LocalSlot of its own that admits up to
// `limit`: a standalone client's dependency (no segment), or one of a
// forked child that got no process slot. Keeps `inherited`.
void bind_local(bh_dep* dep, std::uint32_t limit) {
  dep->local = std::make_unique<LocalSlot>();
  dep->local->control.limit.store(limit, std::memory_order_relaxed);
  dep->local->partitions.admit_limit.store(limit, std::memory_order_relaxed);
  dep->local->stripe.rtt_min_ns.store(UINT64_MAX, std::memory_order_relaxed);
  dep->index = 0;
  dep->admission = &dep->local->admission.word;
  dep->admit_limit = &dep->local->partitions.admit_limit;
  dep->flags = &dep->local->control.flags;
  dep->held = &dep->local->held;
  dep->stats = &dep->local->stripe;
  dep->stripe0 = dep->stats;
  dep->latency0 = &dep->local->latency;
  dep->latency_stride = 0;
  dep->cpu_stripes = 0;
  dep->owned_cpus = 0;
  dep->spare = dep->stats;
  dep->waits = &dep->local->waits;
  dep->wait_histogram = &dep->local->wait;
  // No queue standalone: bh_acquire() at the limit is refused at once.
  dep->line = &dep->local->admission;
  dep->control = &dep->local->control;
  dep->trials = &dep->local->control.trials;  // breaker always closed: never used
  dep->queue = nullptr;
  dep->queue_slots = 0;
  dep->process = 0;
  dep->partitions = &dep->local->partitions;  // never partitioned
}

// The limit a dependency of standalone client `c` admits up to: its static
// limit; none for one opened with BH_OPEN_REQUIRE_SEGMENT (standalone only
// in a forked child that got no process slot of its own).
std::uint32_t local_limit(const bh_client& c) { return c.require_segment ? 0 : c.static_limit; }

// What local_limit() admits, for the status of a standalone client.
std::string describe_local_limit(const bh_client& c) {
  if (c.require_segment) return "refusing every call: the client requires the segment";
  std::string limit =
      "static limit " + (c.static_limit == UINT32_MAX ? std::string("none") : std::to_string(c.static_limit));
  if (!c.static_limit_ignored.empty()) {
    limit += " ($BULKHEAD_STATIC_LIMIT=\"" + c.static_limit_ignored + "\" ignored: not a positive whole number)";
  }
  return limit;
}

// The name /etc/passwd (`user`) or /etc/group gives uid or gid `id`, or its
// number. Read from the file, not asked of NSS (getpwuid_r()), which may
// wait on a directory service (LDAP, sssd) on the way to an error, and in
// a statically linked program loads the NSS modules of whatever glibc the
// host has (the linker warns of it).
std::string local_name(bool user, unsigned id) {
  std::string name = std::to_string(id);
  std::FILE* file = std::fopen(user ? "/etc/passwd" : "/etc/group", "re");
  if (file == nullptr) return name;
  char buffer[4096];
  if (user) {
    struct passwd entry {};
    struct passwd* read = nullptr;
    while (::fgetpwent_r(file, &entry, buffer, sizeof buffer, &read) == 0) {
      if (entry.pw_uid == id) {
        name = entry.pw_name;
        break;
      }
    }
  } else {
    struct group entry {};
    struct group* read = nullptr;
    // A line longer than the buffer (ERANGE) ends the search: the number.
    while (::fgetgrent_r(file, &entry, buffer, sizeof buffer, &read) == 0) {
      if (entry.gr_gid == id) {
        name = entry.gr_name;
        break;
      }
    }
  }
  std::fclose(file);
  return name;
}

// What would let this process open segment `name`, which it was refused
// (EACCES): its mode, owner and group, and that a client, which reads and
// writes it, runs in that group, or needs a mode that lets the group do both.
// Empty when the file cannot be looked at.
std::string access_hint(const std::string& name) {
  struct stat st {};
  if (::stat(("/dev/shm/" + name).c_str(), &st) != 0) return "";
  const std::string owner = local_name(true, st.st_uid), group = local_name(false, st.st_gid);
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return std::string(" (mode ") + mode + ", owner " + owner + ", group " + group + ": " +
         ((st.st_mode & 0060) == 0060 ? "a client reads and writes it: run as a member of group " + group
                                      : "group " + group + " may not read and write it, as a client does; "
                                        "daemon.segment_mode = 0o660 lets it") +
         ")";
}

// The segment's daemon, for a shared client's status: its pid, or that none
// runs (a clean stop leaves pid 0; a daemon of this pid namespace that is
// gone was killed), whose limits hold until the next one adopts the segment.
// Pid 0 and no tick yet is a segment a daemon made and has not governed:
// it publishes its pid just after it makes the segment, and no daemon ran
// on it before, so none stopped.
std::string describe_daemon(const shm::Header& header) {
  const shm::ProcessSnapshot daemon = shm::read_daemon(header);
  const std::string last_limits = ": the limits are the last it published, until bulkheadd runs again";
  if (daemon.pid <= 0 && header.heartbeat.load(std::memory_order_relaxed) == 0) {
    return "no daemon has governed it yet: the limits are those it was made with, until bulkheadd ticks";
  }
  if (daemon.pid <= 0) return "no daemon, the last one stopped" + last_limits;
  if (daemon.pid_ns.known() && daemon.pid_ns == shm::own_pid_namespace() &&
      shm::process_liveness(daemon.pid, daemon.start_time) == shm::Liveness::kDead) {
    return "daemon pid " + std::to_string(daemon.pid) + " is gone" + last_limits;
  }
  return "daemon pid " + std::to_string(daemon.pid);
}

// A forked child inherits its parent's process slot; permits it takes must
// be counted against a slot of its own, or the daemon would give them back
// when the parent dies (and miss them when the child does). Every open
// client is re-registered in the child, or goes standalone there when the
// process table is full: at the child's first call into the library
// (claim_after_fork()), not at fork(), so that a child that only execs
// another program (whose pid and start time stay the child's, so that the
// daemon would take it for the client) takes no slot.
// Never destroyed: a thread may open or close a client, or fork, while
// exit() runs the static destructors.
std::mutex& g_clients_mutex = *new std::mutex;
std::vector<bh_client*>& g_clients = *new std::vector<bh_client*>;
// True in a forked child from fork() until claim_after_fork() has given
// every client its slot; every entry that admits or reads a dependency's
// lines checks it first. Acquire on that side pairs with the release store
// that ends the claim: a thread that reads false sees the lines rebound.
std::atomic<bool> g_fork_pending{false};

// Before fork, in the parent, with g_clients_mutex held: takes every
// client's mutex, held across fork() (a thread in bh_dependency() or
// bh_partition() would otherwise leave it locked forever in the child, by a
// thread the child has not, and its map of dependencies half written), then
// notes which dependencies the client holds permits of. The thread that
// forks holds the same ones during and after the snapshot (it is in
// fork()); other threads' permits do not matter, the child has no copy of
// those threads.
void lock_and_snapshot_before_fork() {
  for (bh_client* c : g_clients) {
    c->mutex.lock();
    for (auto& [name, dep] : c->deps) dep->held_at_fork = dep->held->load(std::memory_order_relaxed) != 0;
  }
}

// After fork, in the parent, and in the child after rebind_after_fork().
void unlock_after_fork() {
  for (bh_client* c : g_clients) c->mutex.unlock();
  g_clients_mutex.unlock();
}

// A forked child's client `c` of a segment: a process slot of its own, or
// standalone when the table is full.
void rebind_to_own_slot(bh_client* c) {
  try {
    c->process = shm::claim_process_slot(*c->segment);
    c->lock = shm::LivenessLock(*c->segment, c->process);
    for (auto& [name, dep] : c->deps) {
      dep->held = &c->segment->held(c->process.index, dep->index);
      assign_stripes(dep.get(), *c->segment, c->process.index);
      dep->process = c->process.index;
    }
  } catch (const shm::SegmentError& e) {
    // No slot for the child (the process table is full). Counting its
    // permits in its parent's slot would leak those it holds when it
    // dies (the daemon gives back a slot's permits when its process
    // exits, and the parent lives on), and its bh_client_close() would
    // free the parent's slot. The child goes standalone instead, as
    // bh_client_open() does without a segment: its own static limit, no
    // daemon, no breaker, no queue. Or, opened with
    // BH_OPEN_REQUIRE_SEGMENT, it refuses every call. Inherited permits
    // stay the parent's: the child's held counts start at zero.
    c->segment.reset();
    for (auto& [name, dep] : c->deps) bind_local(dep.get(), local_limit(*c));
    c->status = std::string("standalone after fork: no process slot of its own (") + e.what() + "), " +
                describe_local_limit(*c);
  }
}

// Partition handles take their dependency's lines, rebound; each keeps its
// own fast-path limit (kNoFastPath).
void copy_lines_to_partitions(bh_client* c) {
  for (auto& [name, handle] : c->partitions) {
    const std::atomic<std::uint32_t>* fast_path = handle->admit_limit;
    static_cast<DependencyLines&>(*handle) = *handle->parent;
    handle->admit_limit = fast_path;
  }
}

void rebind_after_fork() {
  // The child has one thread: the one that forked, which holds
  // g_clients_mutex and every client's mutex (the prepare handler).
  for (bh_client* c : g_clients) {
    // The child holds copies of its parent's permits: its releases must
    // not give them back.
    for (auto& [name, dep] : c->deps) dep->inherited |= dep->held_at_fork ? 1u : 0u;
    if (c->segment) {
      // No slot yet (claim_after_fork()), and nothing held: the parent's
      // slot is not the child's to count in, nor to free. Nor its lock to
      // keep: the parent's would outlive its exec while the child runs.
      c->fork_pending = true;
      c->process = {};
      c->lock.drop_copy();
      for (auto& [name, dep] : c->deps) {
        dep->held_before_claim.store(0, std::memory_order_relaxed);
        dep->held = &dep->held_before_claim;
      }
      g_fork_pending.store(true, std::memory_order_relaxed);  // the child has one thread
    } else {
      // Standalone, the counts are the process's own: the child's start
      // from none (its parent's calls in flight are not its own), and its
      // releases of inherited permits give back nothing.
      for (auto& [name, dep] : c->deps) bind_local(dep.get(), local_limit(*c));
    }
    copy_lines_to_partitions(c);
  }
  unlock_after_fork();
}

// A forked child's first call into the library (any thread's): each client
// the fork left without a slot claims one, or goes standalone. The lines
// are rewritten while every other thread that would read them waits here
// (they read g_fork_pending first), or holds only permits inherited from
// the parent, whose release reads nothing else (take_inherited_held()).
[[gnu::noinline]] void claim_after_fork() {
  {
    std::lock_guard all(g_clients_mutex);
    for (bh_client* c : g_clients) {
      if (!c->fork_pending) continue;
      std::lock_guard lock(c->mutex);
      rebind_to_own_slot(c);
      copy_lines_to_partitions(c);
      c->fork_pending = false;
    }
    g_fork_pending.store(false, std::memory_order_release);
  }
}

// Relaxed on the way in would let a thread read lines still being
// rewritten: acquire (a plain load on x86).
inline void claim_if_forked() {
  if (g_fork_pending.load(std::memory_order_acquire)) [[unlikely]] claim_after_fork();
}

void install_fork_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork(
        [] {
          g_clients_mutex.lock();
          lock_and_snapshot_before_fork();
        },
        unlock_after_fork, rebind_after_fork);
  });
}

// $BULKHEAD_STATIC_LIMIT, or no limit (UINT32_MAX). A value that is no
// positive whole number is no limit either, rather than a limit of 0 that
// would refuse every call; it is kept in `ignored`, for the status to say.
std::uint32_t env_static_limit(std::string& ignored) {
  const char* text = std::getenv("BULKHEAD_STATIC_LIMIT");
  if (text == nullptr || *text == '\0') return UINT32_MAX;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value <= 0) {
    ignored = text;
    return UINT32_MAX;
  }
  return value >= static_cast<long>(UINT32_MAX) ? UINT32_MAX : static_cast<std::uint32_t>(value);
}

// The stripe this call records on: with more than one, the stripe of the
// CPU the thread runs on, as the kernel keeps it in the thread's rseq area
// (glibc registers one per thread): one load, no system call. Processes
// running at the same instant are on different CPUs, so with at least as
// many stripes as CPUs they never write the same stripe, however many
// processes there are and whatever their slots (slot p % stats_stripes
// gave two processes whose slots differ by a multiple of the stripes one
// line, 4x the cost of a line each: bulkhead-record-bench). A thread moved
// right after the load writes the stripe of the CPU it left: an instant of
// sharing, never a lost count (these adds and compare-and-swaps are
// locked; add_stat() is how a counter is added to).
inline shm::StatsStripe* stats_of(const bh_dep* d) {
  if (d->cpu_stripes == 0) return d->stats;
  std::uint32_t cpu = percpu::cpu_start();  // always a valid CPU number (0 before registration)
  if (cpu >= d->cpu_stripes) cpu %= d->cpu_stripes;
  return d->stats + cpu;
}

// Adds `value` to the counter `field` names in *d->stats (the first
// stripe, or the only one) on the stripe this call records on, and returns
// that stripe. With CPUs' own stripes (assign_stripes()): a restartable
// sequence on the stripe of the thread's CPU, no lock prefix; one that does
// not commit (the thread was preempted, moved or signalled in those few
// instructions, or has no rseq area) adds with a lock to the spare
// stripe instead, so no add is ever lost or made twice. Otherwise a
// locked add on stats_of()'s stripe, with `order`; a committed sequence is
// a plain store, a release store on x86 (client/percpu.hpp), so `order`
// holds for it too.
template <typename T>
inline shm::StatsStripe* add_stat(const bh_dep* d, std::atomic<T>& field, std::type_identity_t<T> value,
                                  std::memory_order order) {
  const std::ptrdiff_t offset = reinterpret_cast<char*>(&field) - reinterpret_cast<char*>(d->stats);
  const auto in = [offset](shm::StatsStripe* s) {
    return reinterpret_cast<std::atomic<T>*>(reinterpret_cast<char*>(s) + offset);
  };
  shm::StatsStripe* s;
  if (d->owned_cpus != 0) {
    const std::uint32_t cpu = percpu::cpu_start();
    if (cpu < d->owned_cpus && percpu::add_on_cpu(in(d->stats + cpu), value, cpu)) [[likely]] {
      return d->stats + cpu;
    }
    s = d->spare;
  } else {
    s = stats_of(d);
  }
  in(s)->fetch_add(value, order);
  return s;
}

// A stripe's window minimum lowered to `value`, written even when it is
// not lower, with release: after it, the daemon's next take reads this
// stripe's histogram (it finds the minimum not neutral) and, acquiring the
// minimum, sees the bucket added before. For a call whose latency sum
// could not go to the stripe of its bucket (record()).
void mark_stripe_moved(std::atomic<std::uint64_t>& rtt_min_ns, std::uint64_t value) {
  std::uint64_t seen = rtt_min_ns.load(std::memory_order_relaxed);
  while (!rtt_min_ns.compare_exchange_weak(seen, std::min(seen, value), std::memory_order_release,
                                           std::memory_order_relaxed)) {
  }
}

// The latency histogram of the dependency's stripe `stripe`.
inline shm::HistogramCounts* histogram_at(const bh_dep* d, std::size_t stripe) {
  return reinterpret_cast<shm::HistogramCounts*>(reinterpret_cast<char*>(d->latency0) + stripe * d->latency_stride);
}

// The latency histogram of stripe `s` of the dependency (the histograms
// are in tables of their own, one per stripe: shm/layout.hpp).
inline shm::HistogramCounts* histogram_of(const bh_dep* d, const shm::StatsStripe* s) {
  return histogram_at(d, static_cast<std::size_t>(s - d->stripe0));
}

// Adds one to bucket `b` of the latency histogram of the stripe this call
// records on, as add_stat() adds a counter, and returns that stripe. (One
// template for the two, taking "the counter on stripe i", measured slower
// per call in bulkhead-bench: they stay apart.)
inline shm::StatsStripe* add_bucket(const bh_dep* d, std::uint32_t b) {
  shm::StatsStripe* s;
  if (d->owned_cpus != 0) {
    const std::uint32_t cpu = percpu::cpu_start();
    if (cpu < d->owned_cpus &&
        percpu::add_on_cpu(&histogram_at(d, cpu)->bucket[b], std::uint32_t{1}, cpu)) [[likely]] {
      return d->stats + cpu;
    }
    s = d->spare;
  } else {
    s = stats_of(d);
  }
  histogram_of(d, s)->bucket[b].fetch_add(1, std::memory_order_relaxed);
  return s;
}

void record(bh_dep* d, int outcome, std::uint64_t latency_ns) {
  // Relaxed: statistics are counters read on their own by the daemon; they
  // publish no other memory. Except the latency sum, release: it pairs with
  // the acquire load in the daemon's StatsReader::take(), which reads a
  // stripe's histogram only once a sum (or the minimum) moved, so the
  // bucket added before it, on the same stripe, must be visible with it.
  // A release add is the same lock xadd as a relaxed one on x86; a
  // committed sequence (add_stat()) a plain store, release on x86.
  switch (outcome) {
    case BH_SUCCESS: {
      shm::StatsStripe* s = add_bucket(d, shm::histogram_bucket(latency_ns));
      shm::StatsStripe* sum = add_stat(d, d->stats->rtt_sum_ns, latency_ns, std::memory_order_release);
      // The thread moved (or a sequence did not commit) between the two
      // adds: the sum is on another stripe than the bucket, so tell the
      // daemon to read the bucket's stripe. Rare: an instant's window.
      if (sum != s) mark_stripe_moved(s->rtt_min_ns, latency_ns);
      lower_to(sum->rtt_min_ns, latency_ns);
      raise_to(sum->rtt_max_ns, latency_ns);
      break;
    }
    case BH_DROPPED:
      add_stat(d, d->stats->dropped, 1, std::memory_order_relaxed);
      break;
    case BH_FAILED:
      add_stat(d, d->stats->failed, 1, std::memory_order_relaxed);
      break;
    default:  // BH_IGNORE, and any value the caller made up
      add_stat(d, d->stats->ignored, 1, std::memory_order_relaxed);
      break;
  }
}

// take_held() in a process forked while it held permits
// (DependencyLines::inherited): one permit of partition `p` off this
// process's held count, unless it holds none there. Then the permit was
// the parent's, inherited in memory but not in the child's held counts
// (they start at zero in a slot of its own, rebind_after_fork()), and the
// parent gives it back. Permits of one dependency are interchangeable, so a
// child that took permits of its own and releases an inherited one first
// only moves which of its releases is the one that does nothing; it never
// gives back more than it took. A compare-and-swap, so the count is never
// below zero, even for an instant: the daemon may read it at any time.
[[gnu::noinline]] bool take_inherited_held(bh_dep* d, std::uint64_t unit, std::uint32_t p) {
  // Before the child's first call it holds nothing of its own, and `held`
  // may be being rebound (claim_after_fork()): not read.
  if (g_fork_pending.load(std::memory_order_acquire)) return false;
  std::uint64_t held = d->held->load(std::memory_order_relaxed);
  do {
    if (shm::partition_inflight(held, p) == 0) return false;
  } while (!d->held->compare_exchange_weak(held, held - unit, std::memory_order_release,
                                           std::memory_order_relaxed));
  return true;
}

// The first half of a release: one permit of partition `p` (`unit`,
// shm::admission_unit(p)) off this process's held count. False when the
// permit is not this process's to give back (take_inherited_held()).
// Release pairs with the daemon's acquire loads in its reclaim scan.
inline bool take_held(bh_dep* d, std::uint64_t unit, std::uint32_t p) {
  if (d->inherited != 0) [[unlikely]] return take_inherited_held(d, unit, p);
  d->held->fetch_sub(unit, std::memory_order_release);
  return true;
}

// Gives one permit back; false when it was not this process's to give
// (take_held()).
bool give_back(bh_dep* d) {
  // Held count first, then the shared word: a process that dies between the
  // two leaves the shared count larger than the sum of held counts, which
  // the daemon's reclaim can only under-correct, never over-correct.
  if (!take_held(d, shm::kAdmissionAcquire, 0)) return false;
  // seq_cst (the same lock xadd as release on x86): the store side of the
  // Dekker pair with a waiter, completed by the load in wake_waiters().
  d->admission->fetch_add(shm::kAdmissionRelease, std::memory_order_seq_cst);
  shm::wake_waiters(d->line->futex);
  return true;
}

// give_back() of a permit of named partition `p`: the same order, moving
// the partition's field with the total.
[[gnu::noinline]] bool give_back_partition(bh_dep* d, std::uint32_t p) {
  const std::uint64_t unit = shm::admission_unit(p);
  if (!take_held(d, unit, p)) return false;
  // seq_cst: as in give_back(). The permit holds one in T and one in the
  // field, so neither borrows from the other.
  d->admission->fetch_sub(unit, std::memory_order_seq_cst);
  shm::wake_waiters(d->line->futex);
  return true;
}

// give_back() of a permit of `partition` (0: none named); false when it was
// not this process's to give.
inline bool give_back_permit(bh_dep* d, std::uint32_t partition) {
  return partition == 0 ? give_back(d) : give_back_partition(d, partition);
}

// After a successful compare-and-swap from `word`: the held count (shared
// word first, then held; see give_back()) and the stripe's peak.
// `unit` is what the CAS added to the word's partition fields
// (shm::admission_unit()): held counts use the same encoding.
inline void count_admission(bh_dep* d, std::uint64_t word, std::uint64_t unit = shm::admission_unit(0)) {
  // Release pairs with the daemon's acquire load of held: if it sees this
  // add it sees the CAS.
  d->held->fetch_add(unit, std::memory_order_release);
  raise_to(stats_of(d)->max_inflight, shm::admission_inflight(word) + 1);
}

// admit() and wait_in_queue(): not decided here, take the partitioned
// admission (never returned to a caller; every BH_REJECT_* is below it).
constexpr int kDivert = 0x100;
// wait_in_queue(): shadow mode was turned on while the call waited; in
// shadow mode nothing waits: take admit()'s answer (never returned to a
// caller either).
constexpr int kShadow = 0x101;
// A partition handle's fast-path limit: nothing is admitted without the rule.
const std::atomic<std::uint32_t> kNoFastPath{0};

// bh_acquire() marks the permits it fills by the low bit of dep_ (a bh_dep
// is aligned): they carry a deadline in deadline_ns_, which bh_try_acquire()
// never writes (a caller built before the field has no room for it).
constexpr std::uintptr_t kPermitHasDeadline = 1;
// Bits 1 and 2 of dep_: the named partition (1 or 2) the permit counts in;
// 0 for every other permit. dep_ then points at the dependency's own
// handle, never a partition handle.
constexpr std::uintptr_t kPermitPartitionShift = 1;
constexpr std::uintptr_t kPermitBits = 7;
static_assert(alignof(bh_dep) > kPermitBits);
// start_ns_ of a permit from bh_try_acquire_untimed().
constexpr std::uint64_t kUntimed = UINT64_MAX;

bh_dep* permit_dep(const bh_permit* p) {
  return reinterpret_cast<bh_dep*>(reinterpret_cast<std::uintptr_t>(p->dep_) & ~kPermitBits);
}

std::uint32_t permit_partition(const bh_permit* p) {
  return static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(p->dep_) >> kPermitPartitionShift) & 3u;
}

bh_dep* tagged_dep(bh_dep* d, std::uint32_t partition) {
  return reinterpret_cast<bh_dep*>(reinterpret_cast<std::uintptr_t>(d) |
                                   (std::uintptr_t{partition} << kPermitPartitionShift));
}

// `start_ns`: the call's start when the caller has just read the clock
// (bh_acquire() admitted at once: the read that checked the deadline),
// else 0 to read it here.
void fill_permit(bh_permit* out, bh_dep* d, std::uint64_t deadline_ns, std::uint64_t start_ns = 0) {
  out->dep_ = reinterpret_cast<bh_dep*>(reinterpret_cast<std::uintptr_t>(d) | kPermitHasDeadline);
  out->deadline_ns_ = deadline_ns;
  out->start_ns_ = start_ns != 0 ? start_ns : monotonic_ns();
}

void record_wait(bh_dep* d, std::uint64_t waited_ns) {
  // Relaxed: statistics, as in record(); the sum release, as the latency
  // sum there. One histogram for the dependency, shared by every process:
  // waiting is the slow path.
  d->wait_histogram->bucket[shm::histogram_bucket(waited_ns)].fetch_add(1, std::memory_order_relaxed);
  d->waits->wait_sum_ns.fetch_add(waited_ns, std::memory_order_release);
}

int reject_queue_full(bh_dep* d) {
  add_stat(d, d->stats->queue_full, 1, std::memory_order_relaxed);
  return BH_REJECT_QUEUE_FULL;
}

int reject_deadline(bh_dep* d) {
  add_stat(d, d->stats->deadline_rejected, 1, std::memory_order_relaxed);
  return BH_REJECT_DEADLINE;
}

// Whether a call that joins the queue now can expect a permit before
// `deadline_ns`: the calls ahead of it that no free permit covers, each
// lasting the recent service time, served `limit` at a time. An estimate:
// when the daemon has not published a service time (no successful call
// yet), every call may try.
bool expected_wait_fits(const bh_dep* d, std::uint32_t limit, std::uint32_t inflight, bool lifo,
                        std::uint64_t now_ns, std::uint64_t deadline_ns) {
  // Relaxed: a lone estimate the daemon publishes.
  const std::uint64_t service_ns = d->control->service_ns.load(std::memory_order_relaxed);
  if (service_ns == 0 || deadline_ns == BH_NO_DEADLINE) return true;
  // LIFO serves a newcomer first.
  const std::uint64_t ahead = lifo ? 0 : shm::queue_length(d->queue, d->queue_slots);
  const std::uint64_t free_permits = limit > inflight ? limit - inflight : 0;
  if (ahead < free_permits) return true;
  const double expected_ns = static_cast<double>(ahead + 1 - free_permits) *
                             static_cast<double>(service_ns) / static_cast<double>(std::max(limit, 1u));
  return expected_ns <= static_cast<double>(deadline_ns - now_ns);
}

// A bh_cancel, seen through atomics. Its protocol, with the wait queue's
// (shm/wait_queue.hpp):
//   - A waiting call puts its dependency's futex word in a free entry of
//     `waiting_` (Watch), then, each time before it sleeps, announces
//     itself as a sleeper and only then loads `state_`.
//   - bh_cancel_request() sets `state_`, then wakes the futex of every
//     entry. The two sides are sequentially consistent (Dekker): either the
//     call sees the request, or the request sees the entry and the call's
//     sleeper bit and wakes it.
//   - A call that leaves clears its entry, then waits while `busy_` counts
//     a request still using the entries: the request may hold its futex
//     word's address, which must stay mapped until it is done with it.
//   - A call that finds no free entry sleeps kCancelPollNs at most.
// No lock, no allocation: the request may be made in a signal handler.
class Cancel {
 public:
  static constexpr std::uint32_t kRequested = 1;
  static constexpr std::uint64_t kCancelPollNs = 10'000'000;  // 10 ms

  explicit Cancel(bh_cancel* c) : c_(c) {}

  bool requested() const {
    // seq_cst: the load side of the Dekker pair with request(), after the
    // waiter's announce_waiter().
    return c_ != nullptr && state().load(std::memory_order_seq_cst) != 0;
  }

  void request() {
    // seq_cst: the store side of the pair (see requested()), and of the
    // pair with Watch::~Watch() by busy_.
    state().fetch_or(kRequested, std::memory_order_seq_cst);
    busy().fetch_add(1, std::memory_order_seq_cst);
    for (void*& slot : c_->waiting_) {
      if (void* futex = std::atomic_ref<void*>(slot).load(std::memory_order_seq_cst); futex != nullptr) {
        shm::wake_waiters(*static_cast<std::atomic<std::uint32_t>*>(futex));
      }
    }
    // Release: the request's loads of the entries come before a waiter
    // that reads busy_ 0 lets its segment go.
    busy().fetch_sub(1, std::memory_order_release);
  }

  // A waiting call's entry, from its construction to its destruction.
  class Watch {
   public:
    Watch(bh_cancel* c, std::atomic<std::uint32_t>& futex) : c_(c) {
      if (c_ == nullptr) return;
      for (void*& slot : c_->waiting_) {
        void* none = nullptr;
        // seq_cst: the entry is part of what request() pairs with.
        if (std::atomic_ref<void*>(slot).compare_exchange_strong(none, &futex, std::memory_order_seq_cst)) {
          entry_ = &slot;
          return;
        }
      }
    }
    ~Watch() {
      if (entry_ == nullptr) return;
      // seq_cst: either a request in progress is counted in busy_ here, or
      // its load of the entry finds it clear.
      std::atomic_ref<void*>(*entry_).store(nullptr, std::memory_order_seq_cst);
      // seq_cst: the load side of that pair (an acquire load may be ordered
      // before the store above, and miss a request that read the entry);
      // and acquire, with request()'s release of busy_.
      // A request is a few loads and wake-ups: yield to it, then sleep, so
      // that a waiter of a higher real-time priority than the request's
      // thread, which sched_yield() would not let it run, cannot spin for
      // ever beside it on one CPU.
      for (int spins = 0; std::atomic_ref<std::uint32_t>(c_->busy_).load(std::memory_order_seq_cst) != 0; ++spins) {
        if (spins < 100) {
          sched_yield();
        } else {
          const timespec pause{0, 50'000};
          ::nanosleep(&pause, nullptr);
        }
      }
    }
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;

    // How long the call may sleep before it looks at the request again.
    std::uint64_t poll_ns() const {
      return c_ == nullptr || entry_ != nullptr ? shm::kWaitPollNs : kCancelPollNs;
    }

   private:
    bh_cancel* c_;
    void** entry_ = nullptr;
  };

 private:
  std::atomic_ref<std::uint32_t> state() const { return std::atomic_ref<std::uint32_t>(c_->state_); }
  std::atomic_ref<std::uint32_t> busy() const { return std::atomic_ref<std::uint32_t>(c_->busy_); }

  bh_cancel* c_;
};

// The slow path of bh_acquire(): at the limit, or others wait already.
// Takes a place in the queue, then sleeps until a permit is free and fewer
// waiters come before this one than there are free permits, or until the
// deadline, or until `cancel` is requested (BH_REJECT_CANCELLED).
// shm/wait_queue.hpp has the protocol.
//
// A waiter that joined without a trial permit leaves with
// BH_REJECT_OPEN_CIRCUIT when the breaker opens or half opens meanwhile:
// only trial calls pass a breaker that is not closed.
int wait_in_queue(bh_dep* d, std::uint64_t now_ns, std::uint64_t deadline_ns, bh_cancel* cancel, bh_permit* out,
                  bool trial) {
  // Partitions have no wait queue (docs/architecture.md, "Partitions").
  if (d->parent != nullptr ||
      (d->flags->load(std::memory_order_relaxed) & shm::kDependencyPartitioned) != 0) {
    return kDivert;
  }
  const std::uint64_t joined_ns = now_ns;
  // Relaxed: lone values from the daemon; one a little stale changes how
  // long this call may wait, never how many are admitted.
  const std::uint32_t max_queue =
      std::min(d->control->max_queue.load(std::memory_order_relaxed), d->queue_slots);
  if (max_queue == 0) return reject_queue_full(d);
  const bool lifo = (d->flags->load(std::memory_order_relaxed) & shm::kDependencyLifo) != 0;
  const std::uint32_t limit = d->control->limit.load(std::memory_order_relaxed);
  const std::uint32_t inflight =
      shm::admission_inflight(d->admission->load(std::memory_order_relaxed));
  if (!expected_wait_fits(d, limit, inflight, lifo, now_ns, deadline_ns)) return reject_deadline(d);

  // Relaxed: the ticket only orders waiters among themselves; the record
  // that carries it is published by the seq_cst CAS below.
  const std::uint64_t ticket = d->line->tickets.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t record = shm::queue_record(ticket, d->process);
  std::atomic<std::uint64_t>* place = nullptr;
  for (std::uint32_t i = 0; i < max_queue && place == nullptr; ++i) {
    std::uint64_t free = 0;
    // seq_cst: the records are part of what wake_waiters() pairs with.
    if (d->queue[i].load(std::memory_order_relaxed) == 0 &&
        d->queue[i].compare_exchange_strong(free, record, std::memory_order_seq_cst)) {
      place = &d->queue[i];
    }
  }
  if (place == nullptr) return reject_queue_full(d);

  bool admitted = false;
  bool partitioned = false;
  bool shadow = false;
  bool open_circuit = false;
  bool cancelled = false;
  std::uint64_t word = 0;
  std::optional<Cancel::Watch> watch;
  watch.emplace(cancel, d->line->futex);
  for (;;) {
    const std::uint32_t seen = shm::announce_waiter(d->line->futex);
    if (Cancel(cancel).requested()) {
      cancelled = true;
      break;
    }
    // A reload gave the dependency partitions while this call waited: its
    // queue is gone (max_queue 0), and this compare-and-swap would not
    // know the partitions' rule. Leave, and take the rule's answer.
    if ((d->flags->load(std::memory_order_relaxed) & shm::kDependencyPartitioned) != 0) {
      partitioned = true;
      break;
    }
    // Relaxed: a lone state; the daemon wakes the queue when it changes.
    if (!trial && shm::breaker_stops(d->control->breaker.load(std::memory_order_relaxed)) &&
        (d->flags->load(std::memory_order_relaxed) & shm::kDependencyShadow) == 0) {
      open_circuit = true;
      break;
    }
    // A reload turned shadow mode on while this call waited: leave, and be
    // admitted past the limit.
    if ((d->flags->load(std::memory_order_relaxed) & shm::kDependencyShadow) != 0) {
      shadow = true;
      break;
    }
    const std::uint32_t limit_now = d->control->limit.load(std::memory_order_relaxed);
    // The order as it is now, not as it was when this call joined: after a
    // reload from lifo to fifo, a waiter counting by the old order and one
    // that joined since, counting by the new, would each count the other as
    // ahead, and both sleep on a free permit.
    const bool lifo_now = (d->flags->load(std::memory_order_relaxed) & shm::kDependencyLifo) != 0;
    // seq_cst: the load side of the Dekker pair with give_back().
    word = d->admission->load(std::memory_order_seq_cst);
    while (shm::admission_inflight(word) < limit_now) {
      const std::uint32_t free_permits = limit_now - shm::admission_inflight(word);
      if (shm::waiters_ahead(d->queue, d->queue_slots, ticket, lifo_now) >= free_permits) break;
      // seq_cst, for the same pairing as the load.
      if (d->admission->compare_exchange_weak(word, word + shm::kAdmissionAcquire,
                                              std::memory_order_seq_cst)) {
        count_admission(d, word);  // the held count at once, as bh_try_acquire()
        admitted = true;
        break;
      }
    }
    if (admitted) break;
    shm::futex_sleep(d->line->futex, seen, std::min(deadline_ns, now_ns + watch->poll_ns()));
    // The deadline before another look: a waiter that runs again past it
    // (its timeout, or a wake-up it was scheduled too late for) leaves
    // without a permit, even one free now, rather than be admitted late.
    now_ns = monotonic_ns();
    if (now_ns >= deadline_ns) {
      // A cancel that came meanwhile wins over the deadline this call woke
      // past: the caller gave up on the call, and a deadline refusal would
      // count against the dependency what says nothing of it.
      cancelled = Cancel(cancel).requested();
      break;
    }
  }
  watch.reset();
  // Leave the queue; the waiters behind this one move up. seq_cst: the
  // store side of the pair with their announce_waiter(), for wake_waiters().
  place->store(0, std::memory_order_seq_cst);
  record_wait(d, monotonic_ns() - joined_ns);
  // Another waiter may take a permit still free: let it look.
  if (shm::admission_inflight(d->admission->load(std::memory_order_seq_cst)) <
      d->control->limit.load(std::memory_order_relaxed)) {
    shm::wake_waiters(d->line->futex);
  }
  if (partitioned) return kDivert;
  if (shadow) return kShadow;
  if (cancelled) return BH_REJECT_CANCELLED;
  if (open_circuit) {
    add_stat(d, d->stats->open_rejected, 1, std::memory_order_relaxed);
    return BH_REJECT_OPEN_CIRCUIT;
  }
  if (!admitted) return reject_deadline(d);
  fill_permit(out, d, deadline_ns);
  return 0;
}

}  // namespace

extern "C" {

int bh_client_open(const char* segment, bh_client** out) {
  bh_options options{};
  options.segment = segment;
  return bh_client_open_opts(&options, out);
}

int bh_client_open_opts(const bh_options* options, bh_client** out) {
  if (out == nullptr) return fail(EINVAL, "bh_client_open: out is NULL");
  *out = nullptr;
  const bh_options defaults{};
  if (options == nullptr) options = &defaults;
  std::string name;
  std::string from;  // where a name the caller did not give came from, for its errors
  if (options->segment != nullptr) {
    name = options->segment;
  } else if (const char* env = std::getenv("BULKHEAD_SEGMENT"); env != nullptr && *env != '\0') {
    name = env;
    from = " (the name from $BULKHEAD_SEGMENT)";
  } else {
    name = "bulkhead";
  }

  auto client = std::unique_ptr<bh_client>(new (std::nothrow) bh_client());
  if (!client) return fail(ENOMEM, "bh_client_open: out of memory");
  client->require_segment = (options->flags & BH_OPEN_REQUIRE_SEGMENT) != 0;
  client->static_limit = options->static_limit > 0
                             ? static_cast<std::uint32_t>(std::min<long>(options->static_limit, UINT32_MAX))
                             : env_static_limit(client->static_limit_ignored);
  try {
    client->segment = shm::Segment::attach(name, shm::Access::kReadWrite);
    client->process = shm::claim_process_slot(*client->segment);
    client->status = "shared: attached to /dev/shm/" + name + " (" + describe_daemon(client->segment->header()) + ")";
  } catch (const shm::SegmentError& e) {
    if (e.code() != ENOENT || (options->flags & BH_OPEN_REQUIRE_SEGMENT) != 0) {
      std::string hint;
      if (e.code() == EACCES) hint = access_hint(name);
      if (e.code() == ENOENT) hint = " (bulkheadd makes it: is bulkheadd running, on this segment name?)";
      // The process table's refusal names no segment; the others do.
      const std::string what = e.what();
      const std::string where = what.starts_with("segment ") ? "" : "segment /dev/shm/" + name + ": ";
      return fail(e.code(), where + what + hint + from);
    }
    client->segment.reset();
    client->status = "standalone: no segment /dev/shm/" + name + ", " + describe_local_limit(*client);
  } catch (const std::exception& e) {
    return fail(EIO, e.what());
  }
  install_fork_handlers();
  {
    // The liveness lock's descriptor opened with the client registered, in
    // one hold of the mutex the fork handlers take: a fork by another
    // thread in between would leave its child a copy that no handler
    // closes, and that keeps the lock past this process's exec.
    std::lock_guard lock(g_clients_mutex);
    if (client->segment) client->lock = shm::LivenessLock(*client->segment, client->process);
    g_clients.push_back(client.get());
  }
  *out = client.release();
  return 0;
}

void bh_client_close(bh_client* c) {
  if (c == nullptr) return;
  {
    // Unregistered and its liveness lock closed in one hold of the mutex
    // the fork handlers take: a fork by another thread in between would
    // leave its child a copy of the lock's descriptor that no handler
    // closes, and that keeps the lock, and the permits the slot holds.
    std::lock_guard lock(g_clients_mutex);
    std::erase(g_clients, c);
    // A forked child's with no slot yet has nothing to free.
    if (c->segment && !c->fork_pending) {
      bool holds = false;
      for (auto& [name, dep] : c->deps) holds |= dep->held->load(std::memory_order_relaxed) != 0;
      // A slot that still holds permits stays taken: the daemon gives them
      // back once the slot's liveness lock, closed here, is gone (or,
      // without a lock, when this process exits), as for a crash.
      if (!holds) shm::release_process_slot(*c->segment, c->process);
    }
    c->lock = shm::LivenessLock();
  }
  delete c;
}

int bh_client_mode(const bh_client* c) {
  if (c == nullptr) return fail(EINVAL, "bh_client_mode: the client is NULL (a bulkhead::Client moved from has none)");
  claim_if_forked();  // a forked child's goes standalone when it gets no slot
  return c->segment ? BH_MODE_SHARED : BH_MODE_STANDALONE;
}

const char* bh_client_status(const bh_client* c) {
  if (c == nullptr) return "no client";
  claim_if_forked();
  return c->status.c_str();
}

int bh_dependency(bh_client* c, const char* name, bh_dep** out) {
  if (c == nullptr) {
    return fail(EINVAL, "bh_dependency: the client is NULL (a bulkhead::Client moved from has none)");
  }
  if (name == nullptr || out == nullptr) {
    return fail(EINVAL, std::string("bh_dependency: ") + (name == nullptr ? "the name" : "out") + " is NULL");
  }
  *out = nullptr;
  if (const char* why = shm::check_dependency_name(name)) {
    return fail(EINVAL, shm::name_error("dependency name", name, why));
  }
  claim_if_forked();  // before the client's mutex, which the claim takes after g_clients_mutex
  std::lock_guard lock(c->mutex);
  if (auto it = c->deps.find(std::string_view(name)); it != c->deps.end()) {
    *out = it->second.get();
    return 0;
  }
  auto dep = std::make_unique<bh_dep>();
  try {
    if (c->segment) {
      shm::Segment& s = *c->segment;
      const shm::Header& h = s.header();
      std::optional<std::uint32_t> found;
      if ((h.flags.load(std::memory_order_relaxed) & shm::kHeaderStrict) != 0) {
        // A strict daemon's patterns: a name one matches is claimed, as
        // by any client of a daemon that is not strict.
        found = shm::find_dependency(s, name);
        if (!found && !shm::matches_pattern(s, name)) {
          return fail(ENOENT, std::string("dependency '") + name +
                                  "' is not in bulkheadd's config, nor matches a pattern table of it, and the "
                                  "daemon is strict");
        }
      }
      const std::uint32_t index =
          found ? *found
                : shm::find_or_claim_dependency(s, name, h.default_limit.load(std::memory_order_relaxed), 0).index;
      shm::DependencySlot& slot = s.dependency(index);
      dep->index = index;
      dep->admission = &slot.admission.word;
      dep->admit_limit = &slot.partitions.admit_limit;
      dep->flags = &slot.control.flags;
      dep->held = &s.held(c->process.index, index);
      assign_stripes(dep.get(), s, c->process.index);
      dep->waits = &slot.waits;
      dep->wait_histogram = &s.wait_histogram(index);
      dep->line = &slot.admission;
      dep->control = &slot.control;
      dep->trials = &slot.control.trials;
      dep->queue = s.queue(index);
      dep->queue_slots = s.queue_slots();
      dep->process = c->process.index;
      dep->partitions = &slot.partitions;
    } else {
      bind_local(dep.get(), local_limit(*c));
    }
    dep->client = c;
  } catch (const shm::SegmentError& e) {
    // A full table, or a claim another process left unfinished: whose.
    return fail(e.code(), (c->segment ? "segment /dev/shm/" + c->segment->name() + ": " : std::string()) + e.what());
  } catch (const std::exception& e) {
    return fail(ENOMEM, e.what());
  }
  *out = dep.get();
  c->deps.emplace(name, std::move(dep));
  return 0;
}

namespace {

// The admission of bh_try_acquire(), bh_acquire() and
// bh_try_acquire_untimed(): a compare-and-swap under the limit (past it in
// shadow mode), then the held count. At the limit it refuses, counting the
// rejection when `count_rejection` (bh_acquire() queues instead), or
// answers kDivert when the partitioned admission must decide (a partition
// handle, or a dependency with partitions): only on the way to a
// rejection, so an admitted call pays nothing for partitions. The permit's
// dep_ and times are the caller's to fill.
[[gnu::always_inline]] inline int admit(bh_dep* d, bool count_rejection) {
  // Relaxed: the limit is a lone value; a stale one for an instant after
  // the daemon changes it is harmless (the next call sees the new one).
  const std::uint32_t limit = d->admit_limit->load(std::memory_order_relaxed);
  // Relaxed: the admission word protects no other memory; its atomicity
  // alone keeps in-flight under the limit.
  std::uint64_t word = d->admission->load(std::memory_order_relaxed);
  bool over = false;
  do {
    over = shm::admission_at_limit(word, limit);
    if (over) {
      // Shadow mode admits past the limit: read only on the way to a
      // rejection, so the admitted path pays nothing for it. Relaxed: a
      // lone flag, like the limit.
      const std::uint32_t flags = d->flags->load(std::memory_order_relaxed);
      if ((flags & shm::kDependencyPartitioned) != 0 || d->parent != nullptr) return kDivert;
      if ((flags & shm::kDependencyShadow) == 0) {
        if (count_rejection) add_stat(d, d->stats->rejected, 1, std::memory_order_relaxed);
        return BH_REJECT_LIMIT;
      }
    }
  } while (!d->admission->compare_exchange_weak(word, word + shm::kAdmissionAcquire,
                                                std::memory_order_relaxed));
  if (over) add_stat(d, d->stats->shadow_admitted, 1, std::memory_order_relaxed);
  count_admission(d, word);
  return 0;
}

// pass_breaker()'s "no trial permit taken".
constexpr std::uint64_t kNoTrial = UINT64_MAX;

// The breaker when it is not closed: a half-open one gives a trial permit
// while any is left; otherwise the call is refused, or in shadow mode
// admitted and counted. Out of line: the closed path stays small.
[[gnu::noinline]] int breaker_gate(bh_dep* d, std::uint64_t& trial) {
  // Read again with acquire (the closed path's load stays relaxed): pairs
  // with the daemon's release store of the state in update_breaker(), so
  // that the trials word it stored before a half-open state is the one read
  // here. (A fence would do the same, but ThreadSanitizer cannot see one.)
  const std::uint32_t breaker = d->control->breaker.load(std::memory_order_acquire);
  if (!shm::breaker_stops(breaker)) return 0;
  if ((breaker & shm::kBreakerStateMask) == shm::kBreakerHalfOpen) {
    // Relaxed: the counter alone bounds the trial calls; it publishes no
    // other memory.
    std::uint64_t w = d->trials->load(std::memory_order_relaxed);
    while (shm::trials_left(w) > 0) {
      if (d->trials->compare_exchange_weak(w, w - 1, std::memory_order_relaxed)) {
        trial = w - 1;
        return 0;
      }
    }
  }
  // Relaxed: lone flag and counters, as in admit().
  if ((d->flags->load(std::memory_order_relaxed) & shm::kDependencyShadow) != 0) {
    add_stat(d, d->stats->shadow_open, 1, std::memory_order_relaxed);
    return 0;
  }
  add_stat(d, d->stats->open_rejected, 1, std::memory_order_relaxed);
  return BH_REJECT_OPEN_CIRCUIT;
}

// Before admit(): 0 to go on to the limit (with `trial` the trials word as
// taken, or kNoTrial), or BH_REJECT_OPEN_CIRCUIT. A closed breaker costs one
// relaxed load on the line the limit is read from.
inline int pass_breaker(bh_dep* d, std::uint64_t& trial) {
  trial = kNoTrial;
  // Relaxed: a lone state, like the limit; a client that sees a change an
  // instant late admits or refuses one call by the old state.
  if (!shm::breaker_stops(d->control->breaker.load(std::memory_order_relaxed))) [[likely]] return 0;
  return breaker_gate(d, trial);
}

// Gives back a trial permit the limit then refused, unless the daemon has
// started another episode since (its permits are counted afresh).
void return_trial(bh_dep* d, std::uint64_t trial) {
  if (trial == kNoTrial) return;
  std::uint64_t w = d->trials->load(std::memory_order_relaxed);
  while (shm::trials_episode(w) == shm::trials_episode(trial) && shm::trials_left(w) < UINT32_MAX) {
    // Relaxed: as the take in breaker_gate().
    if (d->trials->compare_exchange_weak(w, w + 1, std::memory_order_relaxed)) return;
  }
}

constexpr std::uint64_t kResolved = std::uint64_t{1} << 8;

// The field (0, 1 or 2) of a partition handle's name under `shape`: found
// again whenever the shape's version moved (a reload renamed, added or
// removed partitions). A name no longer there is partition 0: its calls
// go on as calls that name none. Lock-free; the names are read between two
// loads of the shape, and read again if it moved.
std::uint32_t resolve(bh_dep* h, std::uint64_t shape) {
  const std::uint64_t cached = h->resolved.load(std::memory_order_relaxed);
  if ((cached & kResolved) != 0 && (cached >> 32) == shm::shape_version(shape)) {
    return static_cast<std::uint32_t>(cached & 3);
  }
  const shm::DependencyPartitions& line = *h->parent->partitions;
  std::uint32_t field = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    field = 0;
    for (std::uint32_t p = 1; p < shm::kMaxPartitions; ++p) {
      if ((shm::shape_active(shape) >> p & 1u) != 0 && shm::load_partition_name(line, p) == h->partition_name) {
        field = p;
      }
    }
    // Acquire pairs with the daemon's release store of the shape after the
    // names: names read before this load are those of `shape` if it holds.
    const std::uint64_t again = line.shape.load(std::memory_order_acquire);
    if (again == shape) break;
    shape = again;
  }
  // Relaxed: a cache of this process's; a thread that misses it resolves again.
  h->resolved.store(std::uint64_t{shm::shape_version(shape)} << 32 | kResolved | field,
                    std::memory_order_relaxed);
  return field;
}

// The partitioned admission of a call of `handle` (a partition handle, or
// a dependency's own handle for a call that names no partition): one
// compare-and-swap of the admission word under the rule of shm/partitions.hpp,
// then the held count. Returns 0 and the permit's tagged dep_ in *tagged,
// or a BH_REJECT_* reason (counted when `count_rejection`). A dependency
// without partitions (a reload removed them) admits as without a name.
[[gnu::noinline]] int admit_partitioned(bh_dep* handle, bool count_rejection, bh_dep** tagged) {
  bh_dep* d = handle->parent != nullptr ? handle->parent : handle;
  const shm::DependencyPartitions& line = *d->partitions;
  // Acquire pairs with the daemon's release store of the flags (in
  // publish_settings()), made after the rule and shape: a client that sees
  // the partitioned flag sees them.
  const bool partitioned = (d->flags->load(std::memory_order_acquire) & shm::kDependencyPartitioned) != 0;
  // Acquire pairs with the daemon's release store of the shape: the names
  // and rule it published before are visible.
  const std::uint64_t shape = line.shape.load(std::memory_order_acquire);
  if (!partitioned) {
    const int rc = admit(d, count_rejection);
    if (rc == 0) *tagged = d;
    return rc == kDivert ? BH_REJECT_LIMIT : rc;  // kDivert: partitions came back just now
  }
  const std::uint32_t p = handle->parent != nullptr ? resolve(handle, shape) : 0;
  // Relaxed: one word, so one consistent rule; a stale one for an instant
  // is a stale limit, as on the fast path.
  const std::uint64_t rule = line.rule.load(std::memory_order_relaxed);
  const std::uint32_t caps = shm::shape_caps(shape);
  std::uint64_t word = d->admission->load(std::memory_order_relaxed);
  shm::PartitionVerdict verdict;
  bool over = false;
  do {
    verdict = shm::partition_verdict(word, rule, caps, p);
    over = verdict != shm::PartitionVerdict::kAdmit;
    if (over && (verdict == shm::PartitionVerdict::kFieldFull ||
                 (d->flags->load(std::memory_order_relaxed) & shm::kDependencyShadow) == 0)) {
      if (count_rejection) {
        // Relaxed: statistics, as in record(). `rejected` is the refusals
        // at the limit (layout.hpp), which a policy reads as demand that
        // reached it; a share or cap refusing under the limit is the
        // partition's alone (the daemon's requests_total adds them back).
        if (verdict == shm::PartitionVerdict::kAtLimit) add_stat(d, d->stats->rejected, 1, std::memory_order_relaxed);
        add_stat(d, d->stats->partition_rejected[p], 1, std::memory_order_relaxed);
      }
      // A call that names no partition keeps the reason it always had.
      return verdict == shm::PartitionVerdict::kAtLimit || handle->parent == nullptr ? BH_REJECT_LIMIT
                                                                                      : BH_REJECT_PARTITION;
    }
    // Relaxed: as in admit().
  } while (!d->admission->compare_exchange_weak(word, word + shm::admission_unit(p),
                                                std::memory_order_relaxed));
  if (over) add_stat(d, d->stats->shadow_admitted, 1, std::memory_order_relaxed);
  count_admission(d, word, shm::admission_unit(p));
  *tagged = tagged_dep(d, p);
  return 0;
}

// bh_try_acquire() and, without the clock read, bh_try_acquire_untimed().
inline int try_acquire(bh_dep* d, bh_permit* out, bool timed) {
  claim_if_forked();
  std::uint64_t trial;
  int rc = pass_breaker(d, trial);
  bh_dep* dep = d;
  if (rc == 0) {
    rc = admit(d, true);
    if (rc != 0) [[unlikely]] {
      if (rc == kDivert) rc = admit_partitioned(d, true, &dep);
      // A refusal by the limit or the partitions' rule gives the trial back.
      if (rc != 0) return_trial(d, trial);
    }
  }
  out->dep_ = rc == 0 ? dep : nullptr;
  if (rc == 0) out->start_ns_ = timed ? monotonic_ns() : kUntimed;
  return rc;
}

// A permit that misuse leaves empty, as a rejection does, so that the
// caller's unconditional bh_release() of it does nothing.
int fail_permit(bh_permit* out, const char* why) {
  if (out != nullptr) out->dep_ = nullptr;
  return fail(EINVAL, why);
}

}  // namespace

int bh_try_acquire(bh_dep* d, bh_permit* out) {
  if (d == nullptr || out == nullptr) return fail_permit(out, "bh_try_acquire: NULL argument");
  return try_acquire(d, out, true);
}

int bh_try_acquire_untimed(bh_dep* d, bh_permit* out) {
  if (d == nullptr || out == nullptr) return fail_permit(out, "bh_try_acquire_untimed: NULL argument");
  return try_acquire(d, out, false);
}

void bh_cancel_init(bh_cancel* c) {
  if (c != nullptr) *c = bh_cancel{};
}

void bh_cancel_request(bh_cancel* c) {
  if (c != nullptr) Cancel(c).request();
}

int bh_cancel_requested(const bh_cancel* c) {
  return Cancel(const_cast<bh_cancel*>(c)).requested() ? 1 : 0;
}

namespace {

// bh_acquire() and bh_acquire_cancellable(), the arguments checked.
int acquire(bh_dep* handle, std::uint64_t deadline_ns, bh_cancel* cancel, bh_permit* out) {
  out->dep_ = nullptr;
  // A cancelled call never reaches the dependency, and counts nowhere.
  if (Cancel(cancel).requested()) return BH_REJECT_CANCELLED;
  claim_if_forked();
  // A partition handle of a dependency a reload left without partitions
  // admits as "default", the dependency's own handle: waiting in its queue
  // too. Partitions that come back meanwhile send it to the rule under its
  // own name (kDivert below). Acquire, as in admit_partitioned().
  bh_dep* d = handle;
  if (handle->parent != nullptr &&
      (handle->flags->load(std::memory_order_acquire) & shm::kDependencyPartitioned) == 0) {
    d = handle->parent;
  }
  std::uint64_t now_ns = monotonic_ns();
  // A call whose budget is spent never reaches the dependency.
  if (now_ns >= deadline_ns) return reject_deadline(d);
  // An open breaker refuses at once: nobody waits for it to close.
  std::uint64_t trial;
  if (const int rc = pass_breaker(d, trial); rc != 0) return rc;
  // With no one waiting (as far as the futex word says), or in shadow mode,
  // where nothing waits, the admission of bh_try_acquire() (past the limit
  // in shadow mode), without counting a rejection. Relaxed: a hint; a
  // waiter that is missed here is one a newcomer passes, as a
  // bh_try_acquire() caller may; and a lone flag, as in admit().
  int rc = BH_REJECT_LIMIT;  // not admitted yet
  if ((d->line->futex.load(std::memory_order_relaxed) & shm::kFutexSleepers) == 0 ||
      (d->flags->load(std::memory_order_relaxed) & shm::kDependencyShadow) != 0) {
    rc = admit(d, false);
    if (rc == 0) {
      // The clock read that checked the deadline is the call's start: no
      // second read (one costs about what the rest of the call does).
      fill_permit(out, d, deadline_ns, now_ns);
      return 0;
    }
  }
  while (rc != kDivert) {
    rc = wait_in_queue(d, now_ns, deadline_ns, cancel, out, trial != kNoTrial);
    if (rc != kShadow) break;
    // Shadow mode came on while it waited: admitted past the limit, unless
    // a reload took it off again this instant (then it waits again).
    rc = admit(d, false);
    if (rc == 0) {
      fill_permit(out, d, deadline_ns);
      return 0;
    }
    // Waiting again from now: a budget spent meanwhile never reaches the
    // dependency, as at the call's start (and the expected wait is
    // measured against what is left of it).
    now_ns = monotonic_ns();
    if (now_ns >= deadline_ns) {
      rc = reject_deadline(d);
      break;
    }
  }
  if (rc == kDivert) {
    // Partitions: no wait queue. One partitioned admission, or its reason
    // at once, whatever the deadline.
    bh_dep* tagged = nullptr;
    rc = admit_partitioned(handle, true, &tagged);
    if (rc == 0) fill_permit(out, tagged, deadline_ns);
  }
  if (rc != 0) return_trial(d, trial);
  return rc;
}

}  // namespace

int bh_record_refusal(bh_dep* d, int reason) {
  if (d == nullptr) return fail(EINVAL, "bh_record_refusal: the dependency is NULL");
  claim_if_forked();
  if (reason == BH_REJECT_QUEUE_FULL) {
    reject_queue_full(d);
  } else if (reason == BH_REJECT_DEADLINE) {
    reject_deadline(d);
  } else {
    return fail(EINVAL, "bh_record_refusal: reason " + std::to_string(reason) +
                            " is neither BH_REJECT_QUEUE_FULL (2) nor BH_REJECT_DEADLINE (3)");
  }
  return 0;
}

int bh_acquire(bh_dep* handle, std::uint64_t deadline_ns, bh_permit* out) {
  if (handle == nullptr || out == nullptr) return fail_permit(out, "bh_acquire: NULL argument");
  return acquire(handle, deadline_ns, nullptr, out);
}

int bh_acquire_cancellable(bh_dep* handle, std::uint64_t deadline_ns, bh_cancel* cancel, bh_permit* out) {
  if (handle == nullptr || out == nullptr) return fail_permit(out, "bh_acquire_cancellable: NULL argument");
  return acquire(handle, deadline_ns, cancel, out);
}

std::uint64_t bh_permit_remaining_ns(const bh_permit* p) {
  if (p == nullptr || p->dep_ == nullptr) return 0;
  if ((reinterpret_cast<std::uintptr_t>(p->dep_) & kPermitHasDeadline) == 0 ||
      p->deadline_ns_ == BH_NO_DEADLINE) {
    return UINT64_MAX;
  }
  const std::uint64_t now = monotonic_ns();
  return p->deadline_ns_ > now ? p->deadline_ns_ - now : 0;
}

std::uint64_t bh_now_ns(void) { return monotonic_ns(); }

void bh_release(bh_permit* p, int outcome) {
  if (p == nullptr || p->dep_ == nullptr) return;
  // An untimed permit has no start: its success is no latency sample.
  if (p->start_ns_ == kUntimed && outcome == BH_SUCCESS) outcome = BH_IGNORE;
  const std::uint64_t now = outcome == BH_SUCCESS ? monotonic_ns() : 0;
  bh_release_latency(p, outcome, now - p->start_ns_);
}

void bh_release_latency(bh_permit* p, int outcome, std::uint64_t latency_ns) {
  if (p == nullptr || p->dep_ == nullptr) return;
  // 2^63 ns (292 years) or more is a negative difference that the caller's
  // unsigned arithmetic wrapped (an end read before its start): 0, as the
  // C++ and Python wrappers take a negative latency, rather than a sample
  // that would swamp every latency sum it joins.
  if (latency_ns > static_cast<std::uint64_t>(INT64_MAX)) latency_ns = 0;
  bh_dep* d = permit_dep(p);
  const std::uint32_t partition = permit_partition(p);
  p->dep_ = nullptr;
  if (d->inherited != 0) [[unlikely]] {
    // In a forked child: a permit inherited from the parent is the
    // parent's, and so is the call's outcome. Its release gives nothing
    // back and records nothing (the parent's release of it does both).
    if (give_back_permit(d, partition)) record(d, outcome, latency_ns);
    return;
  }
  record(d, outcome, latency_ns);
  give_back_permit(d, partition);
}

int bh_partition(bh_dep* d, const char* name, bh_dep** out) {
  if (d == nullptr || name == nullptr || out == nullptr) return fail(EINVAL, "bh_partition: NULL argument");
  *out = nullptr;
  if (d->parent != nullptr) return fail(EINVAL, "bh_partition: the handle is a partition's already");
  if (const char* why = shm::check_partition_name(name)) {
    return fail(EINVAL, shm::name_error("partition name", name, why));
  }
  claim_if_forked();
  // Standalone, or "default": the calls that name no partition are the
  // dependency's own.
  if (d->local != nullptr || name == shm::kDefaultPartition) {
    *out = d;
    return 0;
  }
  bh_client* c = d->client;
  const shm::DependencySlot& slot = c->segment->dependency(d->index);
  const std::string dep_name(slot.identity.name,
                             std::min<std::size_t>(slot.identity.name_length, shm::kMaxNameLength));
  const shm::PackedName packed = shm::pack_partition_name(name);
  // The flag before the shape, both acquire, as in admit_partitioned(): the
  // daemon publishes the shape, then the flag (release), so the shape read
  // after a flag that says partitioned is that config's, not an older one
  // with no names yet.
  const bool partitioned =
      (d->flags->load(std::memory_order_acquire) & shm::kDependencyPartitioned) != 0;
  const std::uint64_t shape = d->partitions->shape.load(std::memory_order_acquire);
  std::string known;
  bool found = false;
  if (partitioned) {
    known = std::string(shm::kDefaultPartition);
    for (std::uint32_t p = 1; p < shm::kMaxPartitions; ++p) {
      if ((shm::shape_active(shape) >> p & 1u) == 0) continue;
      const shm::PackedName there = shm::load_partition_name(*d->partitions, p);
      char buffer[16];
      known += ", " + std::string(shm::unpack_partition_name(there, buffer));
      found |= there == packed;
    }
  }
  if (!found) {
    return fail(ENOENT, "dependency '" + dep_name + "' has no partition '" + name + "' (" +
                            (known.empty() ? std::string("it has no partitions in bulkheadd's config")
                                           : "its partitions: " + known) +
                            ")");
  }
  std::lock_guard lock(c->mutex);
  const std::string key = dep_name + "/" + name;
  if (auto it = c->partitions.find(key); it != c->partitions.end()) {
    *out = it->second.get();
    return 0;
  }
  auto h = std::unique_ptr<bh_dep>(new (std::nothrow) bh_dep());
  if (!h) return fail(ENOMEM, "bh_partition: out of memory");
  // Every line of the dependency's, but the fast path's limit.
  static_cast<DependencyLines&>(*h) = *d;
  h->admit_limit = &kNoFastPath;
  h->parent = d;
  h->partition_name = packed;
  try {
    *out = h.get();
    c->partitions.emplace(key, std::move(h));
  } catch (const std::exception& e) {
    *out = nullptr;
    return fail(ENOMEM, e.what());
  }
  return 0;
}

int bh_breaker_state(const bh_dep* d) {
  if (d == nullptr) return fail(EINVAL, "bh_breaker_state: NULL dependency");
  claim_if_forked();
  const std::uint32_t state = d->control->breaker.load(std::memory_order_relaxed) & shm::kBreakerStateMask;
  return state == shm::kBreakerOpen ? BH_BREAKER_OPEN
         : state == shm::kBreakerHalfOpen ? BH_BREAKER_HALF_OPEN
                                          : BH_BREAKER_CLOSED;
}

long bh_limit(const bh_dep* d) {
  if (d == nullptr) return fail(EINVAL, "bh_limit: NULL dependency");
  claim_if_forked();
  return static_cast<long>(d->control->limit.load(std::memory_order_relaxed));
}

long bh_inflight(const bh_dep* d) {
  if (d == nullptr) return fail(EINVAL, "bh_inflight: NULL dependency");
  claim_if_forked();
  return static_cast<long>(shm::admission_inflight(d->admission->load(std::memory_order_relaxed)));
}

const char* bh_last_error(void) { return t_last_error.c_str(); }

}  // extern "C"
