// Forked child processes for tests that need more than one process.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "tests/support/made_here.hpp"

namespace bulkhead::testing {

// The exit code of a forked child that went back into GoogleTest (its body
// threw, or an assertion in it failed): child_guard.cpp, linked into every
// test binary, ends it there rather than let it run on as a copy of the test.
inline constexpr int kChildLeftItsBody = 120;

// Waits (up to 10 s) until the forked child `pid` has exited, and leaves
// it unreaped: a zombie with no thread left. /proc shows the zombie state
// as soon as the main thread is gone, while other threads (a sanitizer's
// background thread) may still be exiting, and a zombie main thread with
// threads left counts as alive (shm::process_liveness()); the child's
// pidfd turns readable only once the last thread is gone. False on a
// timeout or an error.
inline bool wait_until_exited(pid_t pid) {
  const int watch = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (watch < 0) return false;
  pollfd exited{watch, POLLIN, 0};
  const bool done = ::poll(&exited, 1, 10'000) == 1;
  ::close(watch);
  return done;
}

// Forks `n` children, each running body(i) and exiting with its result (0
// for success), and waits for all of them; a child that fails or crashes
// fails the test.
inline void run_children(int n, const std::function<int(int)>& body) {
  std::vector<pid_t> children;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) std::_Exit(body(i));
    ASSERT_GT(pid, 0);
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << pid << " status " << status;
  }
}

// A forked child of this process, killed (SIGKILL) and reaped by kill() or
// when the object goes; what it runs is the derived class's.
class ForkedChild {
 public:
  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;

  pid_t pid() const { return pid_; }
  // Whether it got as far as the derived class says.
  bool ok() const { return ok_; }
  void kill() {
    if (pid_ <= 0 || !made_.here()) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 protected:
  ForkedChild() = default;
  ~ForkedChild() { kill(); }

  MadeHere made_;
  pid_t pid_ = -1;
  bool ok_ = false;
};

// A forked child that runs setup() (true: it went as planned), reports the
// answer, then sleeps until it is killed: a process that holds something
// (permits, a slot) for as long as a test needs. ok(): setup() returned
// true.
class PausedChild : public ForkedChild {
 public:
  explicit PausedChild(const std::function<bool()>& setup) {
    int ready[2];
    if (::pipe(ready) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      const char c = setup() ? 'y' : 'n';
      (void)!::write(ready[1], &c, 1);
      ::pause();
      std::_Exit(0);
    }
    char c = 0;
    ok_ = pid_ > 0 && ::read(ready[0], &c, 1) == 1 && c == 'y';
    ::close(ready[0]);
    ::close(ready[1]);
  }
};

// A forked child that runs setup() (the library's calls, say) and then
// execs /bin/sleep 60: a program that runs on under the child's pid, which
// exec() keeps, with its start time. The constructor returns once it has
// exec'd, which a close-on-exec pipe tells by its end; ok() is false when
// setup() returned false or the exec failed.
class ExecdChild : public ForkedChild {
 public:
  explicit ExecdChild(const std::function<bool()>& setup = [] { return true; }) {
    int exec_seen[2];
    if (::pipe2(exec_seen, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      if (setup()) ::execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
      const char failed = 'n';
      (void)!::write(exec_seen[1], &failed, 1);
      std::_Exit(127);
    }
    ::close(exec_seen[1]);
    char c = 0;
    ok_ = pid_ > 0 && ::read(exec_seen[0], &c, 1) == 0;  // end of file: exec'd
    ::close(exec_seen[0]);
  }
  // Whether it still runs (not exited, nor a zombie: reaped then).
  bool running() {
    if (pid_ <= 0) return false;
    if (::waitpid(pid_, nullptr, WNOHANG) == 0) return true;
    pid_ = -1;
    return false;
  }
};

// A forked process in a pid namespace of its own, pid 1 there, as a
// client in a container is; otherwise a PausedChild: it runs setup(), then
// sleeps until killed. unshare(CLONE_NEWPID) puts the caller's children in
// the new namespace, not the caller: so a middle process unshares and
// forks it (and reaps it), leaving this one's namespace alone. Needs
// CAP_SYS_ADMIN (root): ok() is false without.
class ChildInPidNamespace {
 public:
  explicit ChildInPidNamespace(const std::function<bool()>& setup) {
    int ready[2], told[2];
    if (::pipe(ready) != 0) return;
    if (::pipe(told) != 0) {
      ::close(ready[0]);
      ::close(ready[1]);
      return;
    }
    middle_ = ::fork();
    if (middle_ == 0) {
      if (::unshare(CLONE_NEWPID) != 0) std::_Exit(1);
      const pid_t inner = ::fork();
      if (inner == 0) {
        const char c = ::getpid() == 1 && setup() ? 'y' : 'n';
        (void)!::write(ready[1], &c, 1);
        ::pause();
        std::_Exit(0);
      }
      // Its pid as fork() gives it here: in this namespace, the caller's.
      (void)!::write(told[1], &inner, sizeof inner);
      ::waitpid(inner, nullptr, 0);
      std::_Exit(0);
    }
    ::close(ready[1]);
    ::close(told[1]);
    pid_t inner = -1;
    char c = 0;
    ok_ = middle_ > 0 && ::read(told[0], &inner, sizeof inner) == sizeof inner && inner > 0 &&
          ::read(ready[0], &c, 1) == 1 && c == 'y';
    if (inner > 0) pid_ = inner;
    ::close(ready[0]);
    ::close(told[0]);
  }
  ~ChildInPidNamespace() { kill(); }
  ChildInPidNamespace(const ChildInPidNamespace&) = delete;
  ChildInPidNamespace& operator=(const ChildInPidNamespace&) = delete;

  // Its pid in this process's namespace (its own namespace's is 1).
  pid_t pid() const { return pid_; }
  // The process that reaps it, outside its namespace: while that one is
  // stopped (SIGSTOP), the child killed stays a zombie. Continue it before
  // kill() or the destructor, which wait for it.
  pid_t reaper() const { return middle_; }
  bool ok() const { return ok_; }
  // Kills it (SIGKILL) and returns once it is reaped: gone from /proc.
  void kill() {
    if (!made_.here()) return;
    if (pid_ > 0) ::kill(pid_, SIGKILL);
    if (middle_ > 0) ::waitpid(middle_, nullptr, 0);
    pid_ = middle_ = -1;
  }

 private:
  MadeHere made_;
  pid_t middle_ = -1;
  pid_t pid_ = -1;
  bool ok_ = false;
};

}  // namespace bulkhead::testing
