// Removes a bench's segment when a signal stops the bench.
//
// Each bench removes its segment in destructors on every normal way out;
// SIGINT, SIGTERM and SIGHUP skip them, and would leave /dev/shm/NAME (tens
// of MiB for the scale bench) behind. remove_on_signal() installs a
// handler that unlinks it, and the System V set whose id is in sysv_semid
// (bulkhead-bench's semop baseline), and dies of the signal. unlink() is
// async-signal-safe; semctl() is not on POSIX's list, but glibc's is the
// bare system call. A forked process that must not remove the segment
// when signalled resets the handlers with keep_on_signal().
//
// SegmentName does all of it for a bench's segment name.
//
// Thread safety: call both from one thread, before any thread starts.
#pragma once

#include <sys/sem.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <utility>

#include "shm/segment.hpp"

namespace bulkhead::bench::cleanup {

inline constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

inline char segment_path[128];
inline volatile std::sig_atomic_t sysv_semid = -1;  // -1: none

inline void remove_and_die(int sig) {
  if (segment_path[0] != '\0') ::unlink(segment_path);
  if (const int semid = sysv_semid; semid >= 0) ::semctl(semid, 0, IPC_RMID);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// From now on, the signals above remove /dev/shm/`segment` first.
inline void remove_on_signal(const std::string& segment) {
  std::snprintf(segment_path, sizeof segment_path, "/dev/shm/%s", segment.c_str());
  for (int sig : kSignals) std::signal(sig, remove_and_die);
}

// In a forked process: the signals above kill it as they would by default.
inline void keep_on_signal() {
  for (int sig : kSignals) std::signal(sig, SIG_DFL);
}

// A bench's segment name: what a run before left under it is removed, and
// so is the segment when this goes, or when a signal above stops the bench.
class SegmentName {
 public:
  explicit SegmentName(std::string name) : name_(std::move(name)) {
    remove_on_signal(name_);
    shm::Segment::remove(name_);
  }
  ~SegmentName() { shm::Segment::remove(name_); }
  SegmentName(const SegmentName&) = delete;
  SegmentName& operator=(const SegmentName&) = delete;
  const std::string& str() const { return name_; }

 private:
  std::string name_;
};

}  // namespace bulkhead::bench::cleanup
