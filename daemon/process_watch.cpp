#include "daemon/process_watch.hpp"

#include <poll.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace bulkhead::daemon {

namespace {

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

ProcessWatch::ProcessWatch(std::uint32_t slots)
    : own_(shm::own_pid_namespace()), slots_(slots), found_(slots) {
  rlimit files{};
  // Room for a pidfd per slot past what the daemon otherwise holds (the
  // metrics server's sockets, the log, the segment).
  const rlim_t wanted = static_cast<rlim_t>(slots) + 256;
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < wanted) {
    files.rlim_cur = std::min(wanted, files.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &files);  // when refused: fewer pidfds, more /proc reads
  }
}

ProcessWatch::~ProcessWatch() {
  for (Watched& w : slots_) {
    if (w.fd >= 0) ::close(w.fd);
  }
}

void ProcessWatch::poll() {
  lookups_left_ = kLookupsPerTick;
  std::vector<pollfd> fds;
  polled_.clear();
  for (std::uint32_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].fd >= 0 && !slots_[s].exited) {
      fds.push_back({slots_[s].fd, POLLIN, 0});
      polled_.push_back(s);
    }
  }
  if (fds.empty()) return;
  int n;
  do {
    n = ::poll(fds.data(), fds.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    // POLLIN: the process exited (a zombie too). POLLERR/POLLHUP/POLLNVAL
    // should not happen on a pidfd; take them as "ask /proc" below.
    if ((fds[i].revents & POLLIN) != 0) {
      slots_[polled_[i]].exited = true;
    } else if (fds[i].revents != 0) {
      unwatch(polled_[i]);
    }
  }
}

shm::Liveness ProcessWatch::check(const shm::ProcessSnapshot& seen) {
  const std::uint32_t slot = seen.claim.index;
  Lookup& lookup = found_.at(slot);
  if (!shm::foreign_pid_namespace(seen.pid_ns, own_)) {
    lookup = Lookup{};
    return check(slot, seen.pid, seen.start_time);
  }
  lookup.foreign = true;
  // Once per claim: the process keeps its pid, here and in its namespace,
  // for as long as it runs.
  if (!lookup.for_claim(seen)) {
    lookup.valid = false;
    if (!look_up(seen, lookup)) return shm::Liveness::kUnknown;
  }
  for (;;) {
    switch (lookup.found.result) {
      case shm::PidLookup::Result::kGone: return here_instead(seen, lookup);
      case shm::PidLookup::Result::kUnknown: return shm::Liveness::kUnknown;
      case shm::PidLookup::Result::kFound: break;
    }
    const shm::Liveness now = check(slot, lookup.found.pid, seen.start_time);
    if (now != shm::Liveness::kDead || lookup.found.confirmed) return now;
    // Found by pid and start time alone: the one that exited may have been
    // another namespace's process with both. Look again; the same process
    // found again (a zombie), or none, is the answer.
    const pid_t before = lookup.found.pid;
    if (!look_up(seen, lookup)) return shm::Liveness::kUnknown;
    if (lookup.found.result == shm::PidLookup::Result::kFound && lookup.found.pid == before) return now;
  }
}

shm::Liveness ProcessWatch::here_instead(const shm::ProcessSnapshot& seen, Lookup& lookup) {
  // As shm::liveness_here_too(): a client of ABI 4.2 or older writes no
  // namespace, and one in a slot that names another (left by the slot's
  // process before it) runs here, with the pid and start time it wrote.
  // Found, it is watched here for the rest of this claim.
  if (seen.start_time == 0 || check(seen.claim.index, seen.pid, seen.start_time) != shm::Liveness::kAlive) {
    return shm::Liveness::kDead;
  }
  lookup.found = shm::PidLookup{shm::PidLookup::Result::kFound, seen.pid, true};
  return shm::Liveness::kAlive;
}

bool ProcessWatch::look_up(const shm::ProcessSnapshot& seen, Lookup& lookup) {
  if (lookups_left_ == 0) return false;
  --lookups_left_;
  ++lookups_made_;
  lookup.valid = true;
  lookup.claims = seen.claim.claims;
  lookup.pid = seen.pid;
  lookup.start_time = seen.start_time;
  lookup.ns = seen.pid_ns;
  lookup.found = shm::find_in_pid_namespace(seen.pid_ns, seen.pid, seen.start_time);
  return true;
}

pid_t ProcessWatch::pid_here(std::uint32_t slot, pid_t recorded) const {
  const Lookup& lookup = found_.at(slot);
  if (!lookup.foreign) return recorded;
  return lookup.valid && lookup.found.result == shm::PidLookup::Result::kFound ? lookup.found.pid : 0;
}

shm::Liveness ProcessWatch::check(std::uint32_t slot, pid_t pid, std::uint64_t start_time) {
  Watched& w = slots_.at(slot);
  if (w.fd >= 0 && w.pid == pid && w.start_time == start_time) {
    return w.exited ? shm::Liveness::kDead : shm::Liveness::kAlive;
  }
  unwatch(slot);
  const shm::Liveness now = shm::process_liveness(pid, start_time);
  // Watch it only when /proc confirmed the very process the slot names:
  // the pidfd, opened after the slot was claimed, refers to the process
  // that had the pid then, and a start time read after the open that
  // matches says it is still that one.
  if (now != shm::Liveness::kAlive || start_time == 0) return now;
  const int fd = open_pidfd(pid);
  if (fd < 0) return now;
  const auto confirmed = shm::process_start_time(pid);
  if (!confirmed || *confirmed != start_time) {
    ::close(fd);
    return confirmed ? shm::Liveness::kDead : now;
  }
  w = Watched{pid, start_time, fd, false};
  return now;
}

void ProcessWatch::forget(std::uint32_t slot) {
  unwatch(slot);
  found_.at(slot) = Lookup{};
}

void ProcessWatch::unwatch(std::uint32_t slot) {
  Watched& w = slots_.at(slot);
  if (w.fd >= 0) ::close(w.fd);
  w = Watched{};
}

CloseWatch::CloseWatch(const std::string& path) {
  fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd_ < 0) {
    error_ = errno;
  } else if (::inotify_add_watch(fd_, path.c_str(), IN_CLOSE_NOWRITE) < 0) {
    error_ = errno;
    ::close(fd_);
    fd_ = -1;
  }
}

CloseWatch::~CloseWatch() {
  if (fd_ >= 0) ::close(fd_);
}

bool CloseWatch::closed_since() {
  if (fd_ < 0) return true;
  // Any event counts: a close, or an overflow of the queue (IN_Q_OVERFLOW,
  // closes lost). IN_IGNORED: the watch is gone (the file removed), and
  // every look says yes from now on.
  alignas(inotify_event) char events[4096];
  bool any = false;
  for (;;) {
    const ssize_t n = ::read(fd_, events, sizeof events);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return any;
    any = true;
    for (ssize_t at = 0; at + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
      inotify_event event;
      std::memcpy(&event, events + at, sizeof event);
      if ((event.mask & IN_IGNORED) != 0) {
        ::close(fd_);
        fd_ = -1;
        return true;
      }
      at += static_cast<ssize_t>(sizeof event + event.len);
    }
  }
}

}  // namespace bulkhead::daemon
