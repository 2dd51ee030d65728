// Whether the processes named in the segment's process slots still run:
// the daemon's dead-process scan asks this of every attached process every
// tick.
//
// Reading /proc/PID/stat (the pid's start time, to tell a reused pid, and
// its state, to tell a zombie) costs about 10 us, kernel time mostly: 2.8
// ms a tick at 256 processes, 45 ms at 4096 (bulkhead-scale-bench). So
// /proc is read once per process: when the slot is first seen, or names
// another process than before. When /proc says it is the process the slot
// names, the watch opens a pidfd on it (pidfd_open, Linux 5.3), which
// refers to that process and no other whatever happens to its pid; each
// tick one poll() over every pidfd tells which exited (zombies included).
// A pidfd polls readable once every thread of the process has exited: a
// process whose main thread is a zombie while another thread is still on
// its way out (a moment, or longer for one stuck in an uninterruptible
// sleep) counts as dead a tick or so later than /proc would say; none of
// its threads can release a permit meanwhile. Where there is no pidfd (an older kernel, no descriptor left, a process
// /proc hides, a slot without a start time) it reads /proc every tick, as
// before.
//
// A process that recorded another pid namespace than the daemon's (a
// client in a container) recorded its pid there: the watch looks it up in
// /proc once per claim of its slot (shm::find_in_pid_namespace(), a scan of
// every process), then watches the pid found as above. At most
// kLookupsPerTick scans a tick, so that slots a client fills with junk
// cannot stall the tick: a slot waiting for its scan counts as alive
// (kUnknown). A process found by pid and start time alone (the daemon may
// not read its namespace) is looked up again when it exits: it may have
// been another namespace's process with both, while the slot's runs on.
//
// Thread safety: one thread (the control loop) owns a watch.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shm/pid_namespace.hpp"
#include "shm/segment.hpp"

namespace bulkhead::daemon {

class ProcessWatch {
 public:
  // For a segment of `slots` process slots. Raises the soft limit of open
  // files toward the hard one when it is below what that many pidfds need.
  explicit ProcessWatch(std::uint32_t slots);
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  // At most this many scans of /proc for processes of other pid
  // namespaces a tick: about a millisecond per 100 processes each.
  static constexpr std::uint32_t kLookupsPerTick = 4;

  // Once per tick, before the checks: which watched processes exited.
  void poll();
  // Whether the process a ready slot names runs, as shm::process_liveness()
  // answers it; one of another pid namespace is looked up first (above).
  shm::Liveness check(const shm::ProcessSnapshot& seen);
  // The same for a process of the daemon's namespace, pid and start time.
  shm::Liveness check(std::uint32_t slot, pid_t pid, std::uint64_t start_time);
  // The pid in the daemon's namespace of the process the last check() of
  // `slot` was about: `recorded` for a process of this namespace (or a slot
  // not checked), 0 when it could not be found.
  pid_t pid_here(std::uint32_t slot, pid_t recorded) const;
  // The slot is free (or was freed): stop watching its process.
  void forget(std::uint32_t slot);
  // Scans of /proc made so far (lookups of processes of other namespaces).
  std::uint64_t lookups() const { return lookups_made_; }

 private:
  struct Watched {
    pid_t pid = 0;
    std::uint64_t start_time = 0;
    int fd = -1;  // pidfd of that process, or -1
    bool exited = false;
  };
  // Where a slot's process of another namespace was found, for one claim.
  struct Lookup {
    bool foreign = false;  // the slot's process is of another namespace
    bool valid = false;    // and was looked up, for the claim below
    std::uint32_t claims = 0;
    pid_t pid = 0;  // as recorded, in its namespace
    std::uint64_t start_time = 0;
    shm::PidNamespace ns;
    shm::PidLookup found;
    bool for_claim(const shm::ProcessSnapshot& seen) const {
      return valid && claims == seen.claim.claims && pid == seen.pid && start_time == seen.start_time &&
             ns == seen.pid_ns;
    }
  };
  // A process gone from the namespace it names, looked for in the
  // daemon's by its pid and start time; found, `lookup` keeps it.
  shm::Liveness here_instead(const shm::ProcessSnapshot& seen, Lookup& lookup);
  // A scan for `seen` into `lookup`, if the tick has one left.
  bool look_up(const shm::ProcessSnapshot& seen, Lookup& lookup);
  void unwatch(std::uint32_t slot);

  shm::PidNamespace own_;  // the daemon's pid namespace
  std::vector<Watched> slots_;
  std::vector<Lookup> found_;  // per slot
  std::vector<std::uint32_t> polled_;  // poll()'s scratch: slot of each pollfd
  std::uint32_t lookups_left_ = kLookupsPerTick;  // this tick's
  std::uint64_t lookups_made_ = 0;
};

// Whether a descriptor of the segment's file opened read-only has been
// closed since the last look (inotify, IN_CLOSE_NOWRITE): a client's
// liveness lock (shm::LivenessLock) is held through one, and goes with its
// close, whether by exec, exit or bh_client_close(). So the daemon tests
// the locks, a walk of the file's list of them each, only after such a
// close: none in a tick with none. The mapping's descriptors are
// read-write, and their closes are not these. Where inotify cannot watch
// the file (no instance left, fs.inotify.max_user_instances), every look
// says yes.
//
// Thread safety: one thread (the control loop) owns a watch.
class CloseWatch {
 public:
  explicit CloseWatch(const std::string& path);
  ~CloseWatch();
  CloseWatch(const CloseWatch&) = delete;
  CloseWatch& operator=(const CloseWatch&) = delete;

  // Whether one was closed since the last call (the first: since the
  // watch began, or true without a watch). Reads every pending event.
  bool closed_since();
  // Whether inotify watches the file (else every look says yes), and if
  // not from the start, the errno value that said why.
  bool watching() const { return fd_ >= 0; }
  int error() const { return error_; }

 private:
  int fd_ = -1;  // the inotify instance, nonblocking
  int error_ = 0;
};

}  // namespace bulkhead::daemon
