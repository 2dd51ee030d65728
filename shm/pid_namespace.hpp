// Processes that recorded their pid in another pid namespace than the
// reader's: a client in a container (its own pid namespace, the host's
// /dev/shm) records getpid(), its number in its namespace, which names
// another process, or none, in the daemon's.
//
// Such a process is looked up in /proc: the entry N whose /proc/N/status
// gives the recorded pid as its last NSpid field (the pid in the process's
// own namespace), whose start time (/proc/N/stat) is the recorded one, and
// whose /proc/N/ns/pid is the recorded namespace. That last test needs
// ptrace access to N (the daemon as root, or as N's user): without it the
// entry is matched by pid and start time alone, "unconfirmed".
//
// A scan reads /proc/N/ns/pid of every process, and the status and stat of
// those that may match: about a millisecond per 100 processes. The daemon
// scans once per claim of a slot (daemon/process_watch.hpp), not per tick.
//
// Thread safety: none needed; no state.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "shm/segment.hpp"

namespace bulkhead::shm {

// The inode of the initial pid namespace, the host's (PROC_PID_INIT_INO in
// the kernel's include/linux/proc_ns.h, fixed since Linux 3.8; systemd
// tells the host's namespaces by these numbers too).
inline constexpr std::uint64_t kInitialPidNamespaceInode = 0xEFFFFFFCu;

// Whether a process recorded in namespace `ns` must be looked up from a
// process in `own`: both known and different. An unknown one (a client of
// ABI 4.2 or older, or a /proc that cannot tell) is taken as the same, as
// before namespaces were recorded.
bool foreign_pid_namespace(const PidNamespace& ns, const PidNamespace& own);

// What a scan of /proc found of the process recorded as `pid` in `ns`,
// started at `start_time` (0: not recorded, then any start time matches).
struct PidLookup {
  // kFound: `pid` below. kGone: no such process runs. kUnknown: none was
  // found, but /proc may hide it; whoever acts must take it as alive.
  enum class Result { kFound, kGone, kUnknown };
  Result result = Result::kUnknown;
  pid_t pid = 0;           // kFound: the process's pid in the caller's namespace
  bool confirmed = false;  // kFound: its namespace was read and is `ns`
};
// kFound prefers a confirmed match, then an unconfirmed one that has not
// exited (two processes of two namespaces may share pid and start time,
// which are in clock ticks), then any. kGone when none matched and either
// an entry of `ns` now has the recorded pid with another start time (the
// pid was reused there), or the scan saw every process that could be it:
// each status it listed was readable, /proc is not mounted with hidepid,
// and the caller is in the host's (initial) pid namespace, whose /proc
// lists the processes of every namespace, or the scan met a process of
// `ns`, which is then one that the caller's /proc lists. kUnknown
// otherwise: a namespace the caller cannot see into (the caller in a
// container, the process outside it), or one that /proc hides.
PidLookup find_in_pid_namespace(const PidNamespace& ns, pid_t pid, std::uint64_t start_time);

// process_liveness() of the process a slot names, looked up first (above)
// when it recorded another namespace than `own`: kDead when it is gone,
// kUnknown when it cannot be found for sure. `pid_here`, when given, gets
// the process's pid in the caller's namespace (0: not found). One scan of
// /proc per call for another namespace: for a look now and then
// (bulkheadctl); the daemon keeps the answer per claim.
Liveness process_liveness(const ProcessSnapshot& seen, const PidNamespace& own, pid_t* pid_here = nullptr);

// process_liveness() of the header's daemon (read_daemon()), or of a
// slot's process, for a namespace it may not have written. A daemon of
// ABI 4.3 or older records its pid and start time but no namespace: one
// that adopted the segment after a daemon of another namespace was killed
// (a clean stop clears the namespace) runs under that namespace, where it
// is not found. Likewise a client of ABI 4.2 or older in a process slot
// whose last process was of another namespace, freed by a daemon of ABI
// 4.2 or older (which leaves the namespace there), or abandoned mid-claim.
// So a process gone from the namespace it names is looked for in the
// caller's too, by pid and start time; found there, `seen` takes the
// caller's namespace, and the process is alive. Otherwise as
// process_liveness().
Liveness liveness_here_too(ProcessSnapshot& seen, const PidNamespace& own, pid_t* pid_here = nullptr);

// liveness_here_too() of the header's daemon (read_daemon()), and, gone
// from both namespaces, looked for in every namespace the caller's /proc
// shows: a daemon of ABI 4.3 or older in a container, under the namespace
// of a daemon before it that was killed (the host's, say), records its
// pid there and no namespace. A process whose pid in its own namespace
// and start time are the recorded ones is that daemon: `seen` takes its
// namespace. One scan of /proc: for a daemon about to adopt the segment,
// and bulkheadctl.
Liveness daemon_liveness(ProcessSnapshot& seen, const PidNamespace& own, pid_t* pid_here = nullptr);

}  // namespace bulkhead::shm
