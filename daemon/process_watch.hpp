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
// Thread safety: one thread (the control loop) owns a watch.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

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

  // Once per tick, before the checks: which watched processes exited.
  void poll();
  // Whether the process that slot `slot` names (pid and start time) runs,
  // as shm::process_liveness() answers it.
  shm::Liveness check(std::uint32_t slot, pid_t pid, std::uint64_t start_time);
  // The slot is free (or was freed): stop watching its process.
  void forget(std::uint32_t slot);

 private:
  struct Watched {
    pid_t pid = 0;
    std::uint64_t start_time = 0;
    int fd = -1;  // pidfd of that process, or -1
    bool exited = false;
  };
  std::vector<Watched> slots_;
  std::vector<std::uint32_t> polled_;  // poll()'s scratch: slot of each pollfd
};

}  // namespace bulkhead::daemon
