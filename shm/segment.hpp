// Creating, attaching to and validating the segment (Boost.Interprocess),
// and the two slot tables' claim protocols, shared by the daemon, the client
// and the tools.
//
// Thread safety: a Segment is a mapping; its methods only compute addresses
// and may be called from any thread. What is done through those addresses
// is governed by the atomics in layout.hpp.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "shm/layout.hpp"

namespace bulkhead::shm {

// A segment that could not be created, opened or trusted. code() is an
// errno value: ENOENT (no segment), EACCES (permissions), EEXIST (create over
// an existing one), EPROTO (a different ABI major), EBADMSG (not a bulkhead
// segment, or one whose header contradicts itself or its size), EAGAIN (being
// created right now), or what the system call said.
class SegmentError : public std::runtime_error {
 public:
  SegmentError(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Empty when `size` bytes at `base` hold a segment this code can use;
// otherwise the reason, e.g. "ABI major 2, this library speaks 1", with its
// errno value in *code. Reads only the header; never writes.
std::string validate_segment(const void* base, std::uint64_t size, int* code);

// A segment's size as the daemon, bulkheadctl and errors give it: "2.8 MiB".
std::string mebibytes(std::uint64_t bytes);

struct CreateOptions {
  Capacities capacities;
  std::uint32_t mode = 0660;  // permission bits, applied past the umask
  std::optional<gid_t> group;  // chown to this group
  // Give every page its memory in /dev/shm at creation (Segment::reserve()).
  // Without it a page gets memory at its first touch, which meets a full
  // /dev/shm as a SIGBUS in whichever process touched it.
  bool reserve = true;
};

enum class Access { kReadOnly, kReadWrite };

class Segment {
 public:
  // Creates /dev/shm/<name>, sizes it, lays out the header and stores the
  // magic last, under a name of its own (<name>@making-PID-N), which it then
  // links to <name>: the name never shows a segment half made. Removes what
  // creators of <name> that died midway left. Throws SegmentError (EEXIST
  // if it exists).
  static Segment create(const std::string& name, const CreateOptions& options);
  // Maps an existing segment and validates it. Throws SegmentError.
  static Segment attach(const std::string& name, Access access);
  // Removes the name; mappings stay valid. False if there was nothing.
  static bool remove(const std::string& name);

  // Gives every page of the segment its memory in /dev/shm now (tmpfs
  // allocates at fallocate(2); pages already there keep their contents),
  // so that no process's first write to a page can find /dev/shm full: a
  // write to a shared tmpfs page that cannot get memory is a SIGBUS, in a
  // client as much as in the daemon. Read-write mappings only. Throws
  // SegmentError: ENOSPC, with the space /dev/shm has free, when it has too
  // little (tmpfs then gives back what it had allocated).
  void reserve() const;
  // Bytes of the segment that have their memory in /dev/shm: size() once
  // reserved, the pages written so far otherwise.
  std::uint64_t reserved_bytes() const;
  // The file's permission bits, group and owner, and its names in
  // /dev/shm: 0 once removed (or replaced by a segment made anew).
  struct FileAccess {
    std::uint32_t mode = 0;
    gid_t group = 0;
    uid_t owner = 0;
    std::uint64_t links = 0;
  };
  FileAccess file_access() const;
  // Gives the file `mode` and `group`, as create() does a new one, changing
  // only what differs. Throws SegmentError (EPERM when this process may
  // not: it must own the file, and be in a new group or privileged); a
  // refused change of group leaves the mode as it was too. A new group
  // never has, even for an instant, more than both modes give.
  void set_file_access(std::uint32_t mode, gid_t group) const;

  Segment(Segment&&) noexcept;
  Segment& operator=(Segment&&) noexcept;
  ~Segment();

  const std::string& name() const { return name_; }
  // The descriptor the mapping was made from (close-on-exec).
  int descriptor() const;
  std::uint64_t size() const { return size_; }
  Header& header() const { return *reinterpret_cast<Header*>(base_); }
  // The capacities and layout as validated when the segment was created or
  // attached. Every address below comes from these, never from the header
  // again: any process in the group can write the header, and a layout
  // field changed after validation must not move the tables.
  Capacities capacities() const { return capacities_; }

  DependencySlot& dependency(std::uint32_t index) const;
  // The wait-queue records of a dependency: queue_slots() of them.
  std::atomic<std::uint64_t>* queue(std::uint32_t dependency) const;
  std::uint32_t queue_slots() const { return capacities_.queue_slots; }
  StatsStripe& stripe(std::uint32_t dependency, std::uint32_t stripe) const;
  // The latency histogram of a dependency's stripe; the histograms of one
  // stripe of consecutive dependencies are consecutive, and stripe s + 1 of
  // a dependency is max_dependencies histograms past stripe s.
  HistogramCounts& latency_histogram(std::uint32_t dependency, std::uint32_t stripe) const;
  // The queue-wait histogram of a dependency.
  HistogramCounts& wait_histogram(std::uint32_t dependency) const;
  ProcessSlot& process(std::uint32_t index) const;
  // held[dependency] of a process slot: the admission word's encoding.
  std::atomic<std::uint64_t>& held(std::uint32_t process, std::uint32_t dependency) const;

  // The stripe a process slot writes its statistics to.
  std::uint32_t stripe_of_process(std::uint32_t process) const {
    return process % capacities_.stats_stripes;
  }

 private:
  struct Mapping;
  Segment(std::string name, std::unique_ptr<Mapping> mapping, const Capacities& capacities);

  std::string name_;
  std::unique_ptr<Mapping> mapping_;
  char* base_ = nullptr;
  std::uint64_t size_ = 0;
  Capacities capacities_;
  Layout layout_;
};

// --- The dependency table ------------------------------------------------
//
// Open addressing by name hash, linear probing. Slots are claimed, never
// freed while the segment lives, so a probe sequence only ever grows and
// two processes that look up the same new name at once walk the same
// sequence and meet on the same slot: one compare-and-swap wins the claim,
// the other waits for the winner to publish the name.

// FNV-1a of the name, folded to the 56 bits the tag holds (never 0).
std::uint64_t dependency_name_hash(std::string_view name);

// The ready slot that holds `name`, or nullopt. A slot another process is
// claiming for a name of the same hash is waited for, up to `patience`.
std::optional<std::uint32_t> find_dependency(const Segment& segment, std::string_view name,
                                             std::chrono::milliseconds patience = std::chrono::seconds(1));

struct ClaimResult {
  std::uint32_t index = 0;
  bool created = false;  // this call claimed it
};

// The slot of `name`, claiming and filling a free one (limit `initial_limit`,
// flags `flags`) when it has none. Throws SegmentError: ENOSPC when the table
// is full, EAGAIN when another process's claim of the same name has not
// finished within `patience` (the daemon passes 0: it never waits on a
// client), EINVAL for an invalid name.
ClaimResult find_or_claim_dependency(Segment& segment, std::string_view name,
                                     std::uint32_t initial_limit, std::uint32_t flags,
                                     std::chrono::milliseconds patience = std::chrono::seconds(1));

// The slot of `pattern` (shm::check_pattern()) for strict clients to match
// names against, claiming a free one (limit 0, flags kDependencyPattern)
// when it has none; the daemon's, for a strict config's pattern tables.
// Throws as find_or_claim_dependency(), EINVAL for an invalid pattern.
ClaimResult find_or_claim_pattern(Segment& segment, std::string_view pattern,
                                  std::chrono::milliseconds patience = std::chrono::seconds(1));

// The pattern a ready slot holds, or nullopt when it holds a dependency's
// name, junk, or nothing yet. Whether the daemon publishes it is the
// kDependencyPattern flag.
std::optional<std::string> slot_pattern(const Segment& segment, std::uint32_t index);

// Whether a pattern the daemon publishes (kDependencyPattern) matches
// `name`: a strict client's lookup of a name it did not find. One pass over
// the table: a lookup, not the hot path.
bool matches_pattern(const Segment& segment, std::string_view name);

// --- The process table ---------------------------------------------------

// What /proc/<pid>/stat says of a process: its state letter (R, S, D, Z
// for a zombie, ...), its thread count, and its start time in clock ticks
// after boot, which with the pid names a process uniquely. The start time
// is the host's: /proc shows it shifted by the reader's boottime offset
// when the reader runs in a time namespace of its own (unshare --time, a
// container CRIU restored), which is taken off (boottime_offset_ns()),
// so that processes on either side of one agree on it. nullopt when it
// cannot be read (no such process, or a /proc that hides it). The state is
// the main thread's: Z with more than one thread is a main thread that
// called pthread_exit() while the others run on.
struct ProcessStat {
  char state;
  std::uint64_t start_time;
  std::uint32_t threads = 1;
};
std::optional<ProcessStat> read_process_stat(pid_t pid);
// read_process_stat(pid)->start_time.
std::optional<std::uint64_t> process_start_time(pid_t pid);
// The calling process's, from /proc/self: /proc/<getpid()> is another
// process when /proc belongs to another pid namespace than the caller.
std::optional<std::uint64_t> own_start_time();
// The calling process's boottime offset in nanoseconds: what /proc adds to
// the start times it shows this process, and takes off the boot time
// (btime of /proc/stat) (/proc/self/timens_offsets; 0 outside a time
// namespace, or where the kernel has none). Read once per process.
std::int64_t boottime_offset_ns();
// The calling process's monotonic offset in nanoseconds: how far its
// CLOCK_MONOTONIC reads ahead of the host's, which the segment's times are
// in (the daemon's heartbeat, a pin's end) (/proc/self/timens_offsets; 0
// outside a time namespace). Read once per process.
std::int64_t monotonic_offset_ns();

// Whether the process a slot names (pid and the start time recorded with
// it, 0 if unknown) still runs. kDead: no such pid, a zombie, or the pid
// was reused (another start time). kUnknown: the pid exists but /proc hides
// it (a hidepid mount); whoever acts on the answer must treat that as alive.
enum class Liveness { kAlive, kDead, kUnknown };
Liveness process_liveness(pid_t pid, std::uint64_t start_time);

// A pid namespace, as stat() of /proc/PID/ns/pid names it: device and
// inode together (namespaces(7)). inode 0: unknown.
struct PidNamespace {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  bool known() const { return inode != 0; }
  friend bool operator==(const PidNamespace&, const PidNamespace&) = default;
};
// The calling process's pid namespace, read afresh (a process that unshared
// one and forked has a child in another); {} when /proc cannot tell.
PidNamespace own_pid_namespace();

// A process slot as one claim of it: its index, and its count of claims
// (ProcessIdentity::claims) once that claim was made.
struct ProcessClaim {
  std::uint32_t index = 0;
  std::uint32_t claims = 0;
};

// Claims a free process slot for the calling process: its pid, start time
// and pid namespace. Throws SegmentError ENOSPC when the table is full.
ProcessClaim claim_process_slot(Segment& segment);
// Gives the slot back at a clean exit, if it is still this claim's (the
// daemon frees the slot of a process it finds dead). The caller must hold
// no permits.
void release_process_slot(Segment& segment, const ProcessClaim& claim);

// The daemon's side. A ready slot as read before checking its process:
// nullopt unless it is ready.
struct ProcessSnapshot {
  ProcessClaim claim;
  std::int32_t pid = 0;  // in pid_ns
  std::uint64_t start_time = 0;
  PidNamespace pid_ns;  // unknown: the reader's own (a client of ABI 4.2 or older)
  std::uint64_t lock_claim = 0;  // ProcessIdentity::lock_claim
};
std::optional<ProcessSnapshot> read_process_slot(const Segment& segment, std::uint32_t index);
// The slot's fields whatever its state: for one being claimed (or
// released), whose process may have written them, or not yet.
ProcessSnapshot read_process_fields(const Segment& segment, std::uint32_t index);
// Takes the slot from the claim `seen` read, to give back what its dead
// process left: true when the slot is still that claim's, and now
// kSlotClaiming, the caller's to clear and then free (free_process_slot()).
// False when it was released or claimed again since: the process
// holding it now is another one, which may be alive.
bool take_process_slot(Segment& segment, const ProcessSnapshot& seen);
// Frees a slot take_process_slot() gave the caller, its fields cleared.
void free_process_slot(Segment& segment, std::uint32_t index);
// Frees a slot whose claim never finished, if it is still kSlotClaiming.
void abandon_process_claim(Segment& segment, std::uint32_t index);

// A claim's liveness lock (ABI 4.5). exec() keeps a process's pid and start
// time, so by those a program that a client became is still the client:
// its slot, and the permits its threads held (exec ends them), stayed until
// that program exited. A claim therefore holds a read lock (an open file
// description lock, F_OFD_SETLK) on its slot's byte of the segment's file
// (kLivenessLockBase + index), through a descriptor of its own, opened
// close-on-exec: the kernel drops the lock when the process execs or
// exits, and the daemon tests it (liveness_lock_dropped()). A descriptor
// of its own, since such a lock belongs to the open file description, and
// is dropped only with the last descriptor of it: one a forked child
// shares would keep its parent's lock. A program that closes the
// descriptor (closing every descriptor it did not open) is taken for one
// that exec'd.
class LivenessLock {
 public:
  LivenessLock() = default;
  // Takes `claim`'s lock, then records it in the slot (lock_claim). Takes
  // none, and records none, when the segment's name now opens another file
  // than `segment` (made anew since), or the open or the lock fails: the
  // daemon then goes by the pid alone, as for a client of ABI 4.4.
  LivenessLock(Segment& segment, const ProcessClaim& claim) noexcept;
  LivenessLock(LivenessLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  LivenessLock& operator=(LivenessLock&& other) noexcept;
  ~LivenessLock();

  bool held() const { return fd_ >= 0; }
  // In a forked child: closes its copy of the descriptor, which leaves the
  // parent's lock held. Async-signal-safe, as a pthread_atfork child
  // handler must be.
  void drop_copy() noexcept;

 private:
  int fd_ = -1;
};

// A claim's liveness lock as a reader finds it: none recorded for the
// claim `seen` (or the test failed), held, or recorded and held by no
// process now.
enum class LockState { kNone, kHeld, kDropped };
LockState liveness_lock_state(const Segment& segment, const ProcessSnapshot& seen);
// The daemon's side: whether the claim `seen` recorded a liveness lock that
// no process holds now: its process exec'd (or closed the descriptor; a
// dead one's went with it). False when it recorded none, or the test fails.
// One fcntl(F_OFD_GETLK), which walks the file's locks: about 0.5 us with
// 256 of them, 7 us with 4096, and twice that for a lock that is gone (the
// whole list walked; bulkhead-liveness-bench).
bool liveness_lock_dropped(const Segment& segment, const ProcessSnapshot& seen);

// The header's daemon, as a slot's process (no claim): pid 0 when none
// runs. Its pid namespace is unknown, the reader's own, when a daemon of
// ABI 4.3 or older wrote it.
ProcessSnapshot read_daemon(const Header& header);
// Records the calling process as the daemon in the header: its pid, start
// time and pid namespace.
void publish_daemon(Header& header);
// A daemon's clean stop: no daemon recorded (pid 0), and no namespace, so
// that a daemon of ABI 4.3 or older that adopts the segment next (it
// records none) is not looked up in this one's.
void withdraw_daemon(Header& header);

}  // namespace bulkhead::shm
