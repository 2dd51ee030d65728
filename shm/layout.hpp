// The shared-memory segment: one versioned layout that bulkheadd creates and
// every process on the host maps.
//
//   Header                       2 cache lines
//   DependencySlot[max_dependencies], each:
//     identity line              tag (state + name hash), name: written once
//     control line               limit, breaker, flags: written by the daemon
//     admission line             in-flight word, wait-queue futex and tickets:
//                                every process, the hot line
//     partition line             the partitions' rule, names and the limit
//                                of the fast path: written by the daemon
//     waits line                 the queue-wait sum: every process that
//                                waited (the slow path)
//     queue[queue_slots]         the wait queue: one record per waiting call
//     StatsStripe[stats_stripes] outcome counters and window extremes, two
//                                lines a stripe, striped so that processes
//                                rarely share one
//   HistogramCounts[stats_stripes][max_dependencies]
//                                latency histograms: stripe s of every
//                                dependency, then stripe s + 1, ...
//   HistogramCounts[max_dependencies]
//                                queue-wait histograms, one per dependency
//   ProcessSlot[max_processes], each:
//     identity line              pid, start time: written by its process
//     held[max_dependencies]     permits this process holds, per dependency
//                                (and per partition: the admission word's
//                                encoding)
//
// The histograms live in tables of their own, away from the slots, so that
// the pages of stripes no process ever writes (a host with fewer CPUs than
// stripes; dependencies that never wait) are never touched by anyone,
// creation included (a new object reads as zeros), and cost no memory:
// the segment is on tmpfs, which gives a page its memory at its first
// touch. The daemon reads a histogram only once its stripe's scalars (or,
// for waits, the dependency's wait sum) moved (shm/stats.hpp).
//
// Lines written by different parties never share a cache line. Sizes are
// fixed at creation from the capacities in the header; a reader recomputes
// the layout from them (segment_layout()) and refuses a segment whose stored
// sizes disagree. Everything a client can write is untrusted by the daemon.
//
// Every field that more than one process touches is a std::atomic; the
// static_asserts below make sure those are lock-free and address-free, which
// is what makes them valid across processes.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shm/histogram.hpp"
#include "shm/names.hpp"

namespace bulkhead::shm {

inline constexpr std::size_t kCacheLine = 64;
// "BULKHEAD" read as a little-endian integer.
inline constexpr std::uint64_t kMagic = 0x444145484B4C5542ull;
// A different major is refused; a newer minor only adds fields in reserved
// space, so a reader accepts any minor of its major.
// Major 2: the wait queue. A client of major 1 would neither wake waiters
// on release nor know the records, so the two cannot share a segment.
// ABI 2.1 (major 2, minor 1): the circuit breaker (DependencyControl::breaker, trials,
// breaker_override; StatsStripe::failed, open_rejected, shadow_open). A
// minor-0 client ignored the breaker and counted BH_FAILED as ignored.
// Major 3: partitions. The admission word's high half holds the partitions'
// in-flight counts instead of an operation counter that a major-2 client
// would go on adding into them; held counts are 64 bits in the same
// encoding; a partition line joins each dependency slot. Major 3 carries
// both the partitions and the breaker's fields (minor 0 of major 3 has
// them all).
// Major 4: 32-bit histogram buckets, in tables of their own (latency per
// stripe, queue wait per dependency, no longer per stripe); stripes of two
// lines; the wait sum on a line of the slot. A major-3 client would add
// 64-bit counts where 32-bit ones are, past the end of a shorter stripe.
// ABI 4.1: DependencyControl::limit_pin (bulkheadctl pin). A minor-0 daemon
// ignores it, so bulkheadctl refuses to pin in a minor-0 segment (a 4.1
// daemon that adopts one raises its minor).
// ABI 4.2: kDependencyPattern, a strict daemon's pattern in a slot of its
// own. A minor-1 client refuses every name a strict daemon has no table of
// its own for, as strict daemons of minor 1 asked.
inline constexpr std::uint16_t kAbiMajor = 4;
// ABI 4.3: ProcessIdentity::claims. A client of minor 2 or less claims
// without counting: its slot has the race with the dead-process scan that
// the count closes (a slot freed and claimed again between the daemon's
// read of it and its check of the process). And ProcessIdentity::pid_ns_*,
// the client's pid namespace: a client of minor 2 or less records none, and
// its pid is taken as one in the daemon's namespace, so such a client in a
// container (another pid namespace) is found dead while it runs, or, when
// it reads the host's /proc, taken for the host's process of its pid (its
// permits never given back when it dies).
// ABI 4.4: Header::daemon_pid_ns_*, the daemon's pid namespace, by which a
// daemon or bulkheadctl of another namespace finds it. Of a daemon of minor
// 3 or less, the pid is taken as one in the reader's namespace; one under
// another daemon's namespace, not its own, is looked for in the reader's
// and then in any (shm::daemon_liveness()).
// ABI 4.5: ProcessIdentity::lock_claim, the claim's liveness lock
// (shm::LivenessLock): the daemon frees the slot of a process that exec'd.
// A client of minor 4 or less records none, and its slot stays until its
// pid exits, as before.
inline constexpr std::uint16_t kAbiMinor = 5;
// The first minor of this major whose daemon reads DependencyControl::limit_pin.
inline constexpr std::uint16_t kPinAbiMinor = 1;

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// Header flags (Header::flags).
// Names that have no slot and match no published pattern
// (kDependencyPattern) are refused.
inline constexpr std::uint32_t kHeaderStrict = 1u << 0;

struct alignas(kCacheLine) Header {
  // Line 0: what the segment is. Written once by the daemon before it stores
  // `magic`; never changed after, but for abi_minor, which a daemon of a
  // newer minor raises to its own when it adopts the segment.
  std::atomic<std::uint64_t> magic;  // stored last at creation (release)
  std::uint16_t abi_major;
  std::uint16_t abi_minor;
  std::uint32_t header_size;
  std::uint64_t total_size;  // bytes
  std::uint32_t max_dependencies;
  std::uint32_t max_processes;
  std::uint32_t stats_stripes;
  std::uint16_t histogram_buckets;
  std::uint16_t queue_slots;           // wait-queue records per dependency
  std::uint32_t dependency_slot_size;  // bytes
  std::uint32_t process_slot_size;     // bytes
  std::uint64_t dependency_table_offset;  // bytes from the segment's start
  std::uint64_t process_table_offset;     // bytes from the segment's start

  // Line 1: the daemon's live state. Written by the daemon only.
  alignas(kCacheLine) std::atomic<std::int32_t> daemon_pid;
  std::atomic<std::uint32_t> flags;           // kHeader*
  std::atomic<std::uint64_t> daemon_start_time;  // /proc/<pid>/stat starttime, the host's (read_process_stat())
  std::atomic<std::uint64_t> heartbeat;       // ticks since the daemon started
  std::atomic<std::uint64_t> heartbeat_ns;    // CLOCK_MONOTONIC of the last tick
  std::atomic<std::uint64_t> config_generation;  // bumped on every (re)load
  std::atomic<std::uint32_t> default_limit;   // limit a new name starts with
  std::atomic<std::uint32_t> metrics_port;    // 0: no metrics endpoint
  // The pid namespace daemon_pid is in (ABI 4.4), as ProcessIdentity's.
  std::atomic<std::uint64_t> daemon_pid_ns_device;
  std::atomic<std::uint64_t> daemon_pid_ns_inode;
};

// Slot states, the low byte of DependencyIdentity::tag and ProcessIdentity::state.
enum SlotState : std::uint32_t {
  kSlotFree = 0,       // never used
  kSlotClaiming = 1,   // taken by a writer that has not finished filling it
  kSlotReady = 2,      // filled; readable
  kSlotAbandoned = 3,  // a claim that never finished; skipped forever
};

struct alignas(kCacheLine) DependencyIdentity {
  // (name hash << 8) | SlotState. A claim is one compare-and-swap from 0 to
  // (hash << 8) | kSlotClaiming, so two processes claiming the same new
  // name meet on the same slot.
  std::atomic<std::uint64_t> tag;
  std::uint32_t name_length;
  char name[kMaxNameLength + 1];  // NUL-terminated
  std::uint8_t reserved[4];
};

// DependencyControl::flags
inline constexpr std::uint32_t kDependencyConfigured = 1u << 0;  // has a table of its own, or a pattern's
// Shadow mode (enforce = false): admit past the limit, counting each such
// admission in StatsStripe::shadow_admitted.
inline constexpr std::uint32_t kDependencyShadow = 1u << 1;
// The wait queue admits the newest waiter first (queue_order = "lifo").
inline constexpr std::uint32_t kDependencyLifo = 1u << 2;
// The dependency has partitions (DependencyPartitions): read by a call
// that names none on its way to a rejection, to take the partitioned
// admission instead.
inline constexpr std::uint32_t kDependencyPartitioned = 1u << 3;
// The slot holds no dependency: its name is a pattern of a strict daemon's
// config ([dependency."db-*"]), which a strict client matches a name it
// does not find against before it claims the name (shm::matches_pattern()).
// Set and cleared by the daemon only; a slot keeps its name, so a pattern
// that a reload removes stays there without this flag.
inline constexpr std::uint32_t kDependencyPattern = 1u << 4;

// DependencyControl::breaker: the state in the low byte, kBreakerForced
// when an operator forced it (config `force`, or bulkheadctl). Clients test
// only the state; any other state value counts as closed (a client admits
// rather than trusts a value it does not know).
inline constexpr std::uint32_t kBreakerClosed = 0;
inline constexpr std::uint32_t kBreakerOpen = 1;
inline constexpr std::uint32_t kBreakerHalfOpen = 2;
inline constexpr std::uint32_t kBreakerStateMask = 0xff;
inline constexpr std::uint32_t kBreakerForced = 1u << 8;
// Whether a breaker word stops calls that hold no trial permit: open, or
// half open (only trial calls pass). Any other state counts as closed.
constexpr bool breaker_stops(std::uint32_t breaker) {
  const std::uint32_t state = breaker & kBreakerStateMask;
  return state == kBreakerOpen || state == kBreakerHalfOpen;
}

// DependencyControl::trials: (episode << 32) | trial permits left. The
// daemon stores a fresh episode with half_open_calls permits when the
// breaker half-opens (and an empty one when it leaves half-open); a client
// takes one with a compare-and-swap while it is above zero, and gives it
// back (same episode only) when the limit then refuses the call. So no more
// than half_open_calls trial calls are admitted per half-open episode, host-wide.
constexpr std::uint32_t trials_left(std::uint64_t word) { return static_cast<std::uint32_t>(word); }
constexpr std::uint32_t trials_episode(std::uint64_t word) { return static_cast<std::uint32_t>(word >> 32); }
constexpr std::uint64_t trials_word(std::uint32_t episode, std::uint32_t left) {
  return (std::uint64_t{episode} << 32) | left;
}

// DependencyControl::breaker_override: what bulkheadctl asks for. The
// daemon reads it each tick; it wins over the config's `force`.
inline constexpr std::uint32_t kOverrideAuto = 0;
inline constexpr std::uint32_t kOverrideOpen = 1;
inline constexpr std::uint32_t kOverrideClosed = 2;

// The largest limit anything publishes: the config's max_limit and an
// operator's pin. A million calls in flight to one dependency from one host
// is far above any real limit and far inside the 32-bit in-flight count.
inline constexpr std::uint32_t kMaxLimit = 1'000'000;

// DependencyControl::limit_pin: an operator's pin of the limit (bulkheadctl
// pin), (until << 32) | limit, `until` in whole seconds of CLOCK_MONOTONIC
// (the host's: a process in a time namespace of its own takes its offset
// off, shm::monotonic_offset_ns()). 0: no pin. While now is before
// `until`, the daemon publishes `limit` (at most kMaxLimit) whatever the
// policy says; once it passes, or when the word is junk (pin_junk()), the
// daemon clears the word.
// The limit the word pins, as the daemon publishes it: at most kMaxLimit.
constexpr std::uint32_t pin_limit(std::uint64_t word) {
  return std::min(static_cast<std::uint32_t>(word), kMaxLimit);
}
constexpr std::uint32_t pin_until_s(std::uint64_t word) { return static_cast<std::uint32_t>(word >> 32); }
constexpr std::uint64_t pin_word(std::uint32_t limit, std::uint32_t until_s) {
  return (std::uint64_t{until_s} << 32) | limit;
}
// The longest pin bulkheadctl writes. A pin is for an incident: one that
// ends further away than this (and a second's rounding) is junk.
inline constexpr std::uint32_t kMaxPinSeconds = 7 * 86400;
// Whether `word` holds the limit at `now_ns` (CLOCK_MONOTONIC).
constexpr bool pin_holds(std::uint64_t word, std::uint64_t now_ns) {
  return pin_limit(word) != 0 && now_ns / 1'000'000'000 < pin_until_s(word);
}
// Whether `word`, nonzero, is junk at `now_ns`: a limit of 0, or an end
// further away than kMaxPinSeconds.
constexpr bool pin_junk(std::uint64_t word, std::uint64_t now_ns) {
  return pin_limit(word) == 0 || pin_until_s(word) > now_ns / 1'000'000'000 + kMaxPinSeconds + 1;
}

struct alignas(kCacheLine) DependencyControl {
  std::atomic<std::uint32_t> limit;       // calls admitted at once, host-wide
  std::atomic<std::uint32_t> breaker;     // kBreaker* state | kBreakerForced: written by the daemon
  std::atomic<std::uint32_t> max_queue;   // calls allowed to wait at once, host-wide
  std::atomic<std::uint32_t> flags;       // kDependency*
  std::atomic<std::uint64_t> generation;  // config generation that last set it
  // Mean latency of the dependency's recent successful calls, in ns (0: not
  // known yet): how long a permit is held, for the expected-wait estimate.
  std::atomic<std::uint64_t> service_ns;
  // Half-open trial permits (see trials_word()): the daemon stores, clients
  // take and give back. Written by clients only while the breaker is half
  // open, a few times per episode: the line stays the daemon's otherwise.
  std::atomic<std::uint64_t> trials;
  // kOverride*: written by bulkheadctl (`bulkheadctl breaker`), read by the
  // daemon. Untrusted: an unknown value counts as kOverrideAuto.
  std::atomic<std::uint32_t> breaker_override;
  std::uint32_t reserved0;
  // pin_word(): written by bulkheadctl (`bulkheadctl pin`), read and, once
  // it ends, cleared by the daemon. Untrusted: the daemon clamps the limit.
  std::atomic<std::uint64_t> limit_pin;
  std::uint8_t reserved[8];
};

// The admission word: low 32 bits the host-wide in-flight count T, every
// call's; the high half the in-flight counts of the named partitions 1 and
// 2, 16 bits each (docs/architecture.md, "Partitions"). A call that names
// no partition (or partition 0, "default") moves T only: its count is T
// minus the two fields. An admission adds admission_unit(p) in one
// compare-and-swap, a release subtracts it in one add, so the word is
// always one consistent view of every count. The same encoding counts a
// process's held permits (ProcessSlot::held).
//
// The word is what every client added and took away, modulo 2^64, and each
// count is a two's-complement number of its field's width: a count goes
// below zero when the daemon's drift scan took a permit from a thread
// stalled mid-call that later gives it back (docs/architecture.md,
// "Permits that survive crashes"), and its release then borrows from the
// fields above it. Read field by field, that word would be 2^32 - 1 calls
// in flight, over every limit; read signed, it is one call short, which
// the scan restores. So a field counts at most kPartitionFieldMax, half its
// range.
inline constexpr std::uint32_t kMaxPartitions = 3;           // "default" and two named
inline constexpr std::uint32_t kPartitionFieldMax = 0x7fff;  // calls in flight per named partition
constexpr std::uint32_t partition_shift(std::uint32_t p) { return 16 + 16 * p; }  // p = 1, 2
constexpr std::uint64_t admission_unit(std::uint32_t p) {
  return p == 0 ? 1 : 1 + (std::uint64_t{1} << partition_shift(p));
}
// A call that names no partition: + 1 on admission, - 1 (mod 2^64) on release.
inline constexpr std::uint64_t kAdmissionAcquire = admission_unit(0);
inline constexpr std::uint64_t kAdmissionRelease = ~std::uint64_t{0};
// The signed counts of an admission word, or of a difference of such words
// (the daemon's drift scan): T, then the fields of partitions 1 and 2, each
// once what the fields below it borrowed is taken off. Exact while every
// count is under half its field's range.
constexpr std::array<std::int64_t, kMaxPartitions> admission_counts(std::uint64_t word) {
  const std::int64_t total = static_cast<std::int32_t>(static_cast<std::uint32_t>(word));
  word = (word - static_cast<std::uint64_t>(total)) >> 32;
  const std::int64_t first = static_cast<std::int16_t>(static_cast<std::uint16_t>(word));
  word = (word - static_cast<std::uint64_t>(first)) >> 16;
  return {total, first, static_cast<std::int16_t>(static_cast<std::uint16_t>(word))};
}
// What adding `counts` (T, then partitions 1 and 2, each signed) to a word
// adds, modulo 2^64: admission_counts() reads it back.
constexpr std::uint64_t admission_delta(const std::array<std::int64_t, kMaxPartitions>& counts) {
  return static_cast<std::uint64_t>(counts[0]) + (static_cast<std::uint64_t>(counts[1]) << partition_shift(1)) +
         (static_cast<std::uint64_t>(counts[2]) << partition_shift(2));
}
// T, or 0 while it reads below zero (the hot path: the low half alone).
constexpr std::uint32_t admission_inflight(std::uint64_t word) {
  const auto total = static_cast<std::int32_t>(static_cast<std::uint32_t>(word));
  return total > 0 ? static_cast<std::uint32_t>(total) : 0;
}
// admission_inflight(word) >= limit, for the hot path: the usual answer,
// under the limit, from one compare of the low half, as if T could not be
// below zero. A T below zero reads as 2^31 or more and is sorted out on
// the way to a rejection (a limit of 0 refuses it too).
constexpr bool admission_at_limit(std::uint64_t word, std::uint32_t limit) {
  const auto total = static_cast<std::uint32_t>(word);
  return total >= limit && (limit == 0 || static_cast<std::int32_t>(total) >= 0);
}
// In-flight count of partition p: a field for 1 and 2; for 0 what T leaves.
// Never below 0 (a count taken below zero, above, or junk a client wrote).
constexpr std::uint32_t partition_inflight(std::uint64_t word, std::uint32_t p) {
  const auto counts = admission_counts(word);
  const std::int64_t count = p != 0 ? counts[p] : counts[0] - counts[1] - counts[2];
  return count > 0 ? static_cast<std::uint32_t>(count) : 0;
}

// DependencyAdmission::futex: bit 0 says "a waiter may sleep on this word"
// (set by waiters, cleared by the one who wakes them); the other bits count
// wake-ups, so that a waiter about to sleep sees that one happened. See
// shm/wait_queue.hpp.
inline constexpr std::uint32_t kFutexSleepers = 1u;

struct alignas(kCacheLine) DependencyAdmission {
  std::atomic<std::uint64_t> word;
  std::atomic<std::uint32_t> futex;    // kFutexSleepers | wake count << 1
  std::uint32_t reserved0;
  std::atomic<std::uint64_t> tickets;  // arrival order of waiters: taken by each
  std::uint8_t reserved[40];
};

// Outcome statistics, written by the processes whose CPU (or slot) maps
// to this stripe; its latency histogram is in the histogram table
// (Segment::latency_histogram()). Counters only grow: the daemon takes
// differences between ticks and never resets them. The three "window"
// fields are the exception: the daemon exchanges them back to their
// neutral value each tick.
struct alignas(kCacheLine) StatsStripe {
  std::atomic<std::uint64_t> dropped;
  std::atomic<std::uint64_t> ignored;
  std::atomic<std::uint64_t> rejected;     // refused at the limit
  std::atomic<std::uint64_t> rtt_sum_ns;   // ok calls only
  std::atomic<std::uint64_t> rtt_min_ns;   // window; neutral UINT64_MAX
  std::atomic<std::uint64_t> rtt_max_ns;   // window; neutral 0
  std::atomic<std::uint32_t> max_inflight; // window; neutral 0
  std::uint8_t reserved[4];
  std::atomic<std::uint64_t> shadow_admitted;  // over the limit, admitted in shadow mode
  // Line 1: refusals of the wait queue (bh_acquire), the circuit breaker,
  // the partitions.
  alignas(kCacheLine) std::atomic<std::uint64_t> queue_full;  // refused: queue at max_queue
  std::atomic<std::uint64_t> deadline_rejected;  // refused: deadline passed or could not be met
  std::atomic<std::uint64_t> failed;         // released BH_FAILED: the dependency answered an error
  std::atomic<std::uint64_t> open_rejected;  // refused: the breaker was open (or half open, no trial left)
  std::atomic<std::uint64_t> shadow_open;    // the same, admitted in shadow mode
  // Partitions: calls refused, by partition (0 "default", 1, 2).
  std::atomic<std::uint64_t> partition_rejected[kMaxPartitions];
};

// A dependency's partitions, written by the daemon only (at a reload, and
// the rule whenever the limit changes). Clients read it when they admit a
// call of a partitioned dependency, or a call that names no partition at
// admit_limit.
//
// rule: the limit L and each partition's guaranteed count g_p, packed so
// that one load gives a consistent view: L | g0 << 16 | g1 << 32 | g2 << 48
// (so a partitioned dependency's limit is at most kPartitionFieldMax).
// shape: version << 32 | active << 8 | caps. caps bit p: partition p is
// hard-capped at g_p; active bit p (1, 2): field p has a name. The version
// grows whenever names or caps change, so a client that resolved a name
// knows when to resolve it again.
constexpr std::uint64_t partition_rule(std::uint32_t limit, std::uint32_t g0, std::uint32_t g1,
                                       std::uint32_t g2) {
  return std::uint64_t{limit & 0xffff} | std::uint64_t{g0 & 0xffff} << 16 |
         std::uint64_t{g1 & 0xffff} << 32 | std::uint64_t{g2 & 0xffff} << 48;
}
constexpr std::uint32_t rule_limit(std::uint64_t rule) { return rule & 0xffff; }
constexpr std::uint32_t rule_guarantee(std::uint64_t rule, std::uint32_t p) {
  return (rule >> (16 + 16 * p)) & 0xffff;
}
constexpr std::uint32_t shape_caps(std::uint64_t shape) { return shape & 0xff; }
constexpr std::uint32_t shape_active(std::uint64_t shape) { return (shape >> 8) & 0xff; }
constexpr std::uint32_t shape_version(std::uint64_t shape) { return static_cast<std::uint32_t>(shape >> 32); }
inline constexpr std::size_t kMaxPartitionNameLength = 15;

struct alignas(kCacheLine) DependencyPartitions {
  // The limit that a call naming no partition is admitted under without
  // looking further: the limit itself for a dependency without partitions;
  // L - g1 - g2 with partitions (0 when "default" is hard-capped), under
  // which the partition rule admits such a call anyway. At or past it the
  // call takes the partitioned admission.
  std::atomic<std::uint32_t> admit_limit;
  std::uint32_t reserved0;
  std::atomic<std::uint64_t> rule;
  std::atomic<std::uint64_t> shape;
  // Names of partitions 1 and 2, NUL-padded, 16 bytes each (kMaxPartitionNameLength).
  std::atomic<std::uint64_t> names[2][2];
  std::uint8_t reserved[8];
};

// The queue waits of a dependency, all processes' together: waiting is the
// slow path (a call already at the limit, about to sleep), where a locked
// add on a shared line costs nothing that matters.
struct alignas(kCacheLine) DependencyWaits {
  // Time spent in the queue, all waits, in ns. Added after the wait's
  // histogram bucket (release): a reader that sees it move reads the
  // histogram.
  std::atomic<std::uint64_t> wait_sum_ns;
  std::uint8_t reserved[56];
};

struct DependencySlot {
  DependencyIdentity identity;
  DependencyControl control;
  DependencyAdmission admission;
  DependencyPartitions partitions;
  DependencyWaits waits;
  // std::atomic<std::uint64_t> queue[queue_slots] follow, padded to a whole
  // cache line: 0 for a free place, else queue_record() of a waiting call.
  // Then StatsStripe stripes[stats_stripes].
};

// A histogram of 32-bit counts, in the encoding of shm/histogram.hpp.
// Readers take differences modulo 2^32: exact while a bucket takes fewer
// than 2^32 adds between two readings (the daemon reads every tick, at
// most 60 s apart; a cache line takes at most about 10^8 adds a second).
// Totals summed from them (read_counters()) are modulo 2^32 per bucket
// and stripe: only their differences (DependencyCounters::since()) mean
// anything.
struct alignas(kCacheLine) HistogramCounts {
  std::atomic<std::uint32_t> bucket[kHistogramBuckets];
  std::uint8_t reserved[32];
};

// Process slot i's liveness lock is byte kLivenessLockBase + i of the
// segment's file: past any segment's end (a lock needs no data there).
inline constexpr std::uint64_t kLivenessLockBase = 1ull << 48;

struct alignas(kCacheLine) ProcessIdentity {
  std::atomic<std::uint32_t> state;        // SlotState
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint64_t> start_time;   // /proc/<pid>/stat starttime, the host's (read_process_stat())
  // Claims of the slot so far (ABI 4.3): a claim adds one before it fills
  // pid and start time, so the daemon can tell the process it checked from
  // one that took the slot since (shm::take_process_slot()).
  std::atomic<std::uint32_t> claims;
  std::uint32_t reserved0;
  // The process's pid namespace (ABI 4.3), as stat() of /proc/self/ns/pid
  // names it: `pid` is that namespace's number for the process, which the
  // daemon, in another namespace, must look up (shm/pid_namespace.hpp).
  // 0: not recorded (a client of minor 2 or less, or no /proc), read as
  // the daemon's own namespace.
  std::atomic<std::uint64_t> pid_ns_device;
  std::atomic<std::uint64_t> pid_ns_inode;
  // The claim's liveness lock (ABI 4.5): claims << 32 | (pid mixed with
  // start time) of the claim whose process holds a read lock on byte
  // kLivenessLockBase + the slot's index of the segment's file, through a
  // descriptor that exec() closes (shm::LivenessLock); 0, or another
  // claim's, for none. Written after the state is ready, with release.
  std::atomic<std::uint64_t> lock_claim;
  std::uint8_t reserved[16];
};

struct ProcessSlot {
  ProcessIdentity identity;
  // std::atomic<std::uint64_t> held[max_dependencies] follow, padded to a
  // whole cache line: the admission word's encoding (total in the low 32
  // bits, partitions 1 and 2 in the high half).
};

static_assert(sizeof(Header) == 2 * kCacheLine);
static_assert(offsetof(Header, daemon_pid) == kCacheLine);
static_assert(sizeof(DependencyIdentity) == kCacheLine);
static_assert(sizeof(DependencyControl) == kCacheLine);
static_assert(sizeof(DependencyAdmission) == kCacheLine);
static_assert(offsetof(DependencySlot, control) == 1 * kCacheLine);
static_assert(offsetof(DependencySlot, admission) == 2 * kCacheLine);
static_assert(sizeof(DependencyPartitions) == kCacheLine);
static_assert(offsetof(DependencySlot, partitions) == 3 * kCacheLine);
static_assert(sizeof(DependencyWaits) == kCacheLine);
static_assert(offsetof(DependencySlot, waits) == 4 * kCacheLine);
static_assert(sizeof(DependencySlot) == 5 * kCacheLine);
static_assert(offsetof(DependencyPartitions, rule) == 8);
static_assert(offsetof(DependencyPartitions, names) == 24);
static_assert(offsetof(DependencyControl, service_ns) == 24);
static_assert(offsetof(DependencyControl, trials) == 32);
static_assert(offsetof(DependencyControl, breaker_override) == 40);
static_assert(offsetof(DependencyControl, limit_pin) == 48);
static_assert(offsetof(DependencyAdmission, futex) == 8);
static_assert(offsetof(DependencyAdmission, tickets) == 16);
static_assert(offsetof(StatsStripe, shadow_admitted) == 56);
static_assert(offsetof(StatsStripe, queue_full) == kCacheLine);
static_assert(offsetof(StatsStripe, failed) == kCacheLine + 16);
static_assert(offsetof(StatsStripe, shadow_open) == kCacheLine + 32);
static_assert(offsetof(StatsStripe, partition_rejected) == kCacheLine + 40);
static_assert(sizeof(StatsStripe) == 2 * kCacheLine);
static_assert(sizeof(HistogramCounts) == 13 * kCacheLine);
static_assert(offsetof(ProcessIdentity, claims) == 16);
static_assert(offsetof(ProcessIdentity, pid_ns_device) == 24);
static_assert(offsetof(ProcessIdentity, pid_ns_inode) == 32);
static_assert(offsetof(ProcessIdentity, lock_claim) == 40);
static_assert(sizeof(ProcessIdentity) == kCacheLine);
static_assert(sizeof(ProcessSlot) == kCacheLine);

// How many of each table a segment holds.
struct Capacities {
  std::uint32_t max_dependencies = 256;
  std::uint32_t max_processes = 256;
  std::uint32_t stats_stripes = 8;
  std::uint32_t queue_slots = 64;  // wait-queue records per dependency: max_queue's ceiling
  friend bool operator==(const Capacities&, const Capacities&) = default;
};

// Upper bounds a reader accepts, so that a corrupt header cannot make it
// compute a huge layout.
inline constexpr std::uint32_t kMaxDependenciesLimit = 16384;
inline constexpr std::uint32_t kMaxProcessesLimit = 4096;
inline constexpr std::uint32_t kMaxStatsStripesLimit = 64;
inline constexpr std::uint32_t kMaxQueueSlotsLimit = 1024;

struct Layout {
  std::uint32_t dependency_slot_size;
  std::uint32_t process_slot_size;
  std::uint64_t dependency_table_offset;
  // Not in the header: follow from the capacities, like every size.
  std::uint64_t latency_table_offset;  // HistogramCounts[stats_stripes][max_dependencies]
  std::uint64_t wait_table_offset;     // HistogramCounts[max_dependencies]
  std::uint64_t process_table_offset;
  std::uint64_t total_size;
};

constexpr std::uint64_t round_up_to_line(std::uint64_t n) {
  return (n + kCacheLine - 1) / kCacheLine * kCacheLine;
}

// The wait-queue records of one dependency slot, whole cache lines.
constexpr std::uint64_t queue_bytes(std::uint32_t queue_slots) {
  return round_up_to_line(std::uint64_t{queue_slots} * 8);
}

constexpr Layout segment_layout(const Capacities& c) {
  Layout l{};
  l.dependency_slot_size = static_cast<std::uint32_t>(
      sizeof(DependencySlot) + queue_bytes(c.queue_slots) + c.stats_stripes * sizeof(StatsStripe));
  l.process_slot_size = static_cast<std::uint32_t>(
      sizeof(ProcessSlot) + round_up_to_line(std::uint64_t{c.max_dependencies} * 8));
  l.dependency_table_offset = sizeof(Header);
  l.latency_table_offset =
      l.dependency_table_offset + std::uint64_t{c.max_dependencies} * l.dependency_slot_size;
  l.wait_table_offset = l.latency_table_offset +
                        std::uint64_t{c.stats_stripes} * c.max_dependencies * sizeof(HistogramCounts);
  l.process_table_offset = l.wait_table_offset + std::uint64_t{c.max_dependencies} * sizeof(HistogramCounts);
  l.total_size = l.process_table_offset + std::uint64_t{c.max_processes} * l.process_slot_size;
  return l;
}

}  // namespace bulkhead::shm
