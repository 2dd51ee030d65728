// A client's liveness lock (shm::LivenessLock) is held through a descriptor
// of its own, whose copy the fork child handler closes in the child: a copy
// the child kept would keep the parent's lock past the parent's exec (or
// its bh_client_close()), for as long as the child runs. The handler knows
// only the clients registered when fork() ran; a fork by another thread
// while bh_client_open() had the descriptor open but the client not yet
// registered, or while bh_client_close() had unregistered the client but
// not yet closed it, left the child a copy no handler closed. fcntl() and
// close() are replaced here to fork from another thread at those moments,
// so this is its own binary (and not built under sanitizers).
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <future>
#include <optional>
#include <thread>

#include "bulkhead/bulkhead.h"
#include "shm/segment.hpp"
#include "tests/support/temp_segment.hpp"

namespace {

using namespace std::chrono_literals;

// What to fork at: nothing, the next liveness lock taken (F_OFD_SETLK), or
// the close of the last one taken.
enum class ForkAt { kNothing, kLockTaken, kLockClosed };
std::atomic<ForkAt> g_fork_at{ForkAt::kNothing};
std::atomic<int> g_lock_fd{-1};  // the descriptor of the last F_OFD_SETLK

// The fork, made by a thread of its own (as another thread of the program
// would), and the child it made: it pauses until killed.
struct Forker {
  std::promise<pid_t> forked;
  std::future<pid_t> done = forked.get_future();
  int running[2] = {-1, -1};  // the child writes a byte once past fork() and its handlers
  std::thread thread;
};
std::optional<Forker> g_forker;

// Forks from another thread, and lets it run up to 300 ms before going on:
// a fork the library holds off meanwhile (its fork handlers wait for a
// lock this thread holds) goes on when this thread lets go of it.
void fork_from_another_thread() {
  g_forker.emplace();
  if (::pipe2(g_forker->running, O_CLOEXEC) != 0) std::abort();
  g_forker->thread = std::thread([] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const char c = 0;
      if (::write(g_forker->running[1], &c, 1) != 1) std::_Exit(1);
      for (;;) ::pause();
    }
    g_forker->forked.set_value(pid);
  });
  g_forker->done.wait_for(300ms);
}

// The child the last fork_from_another_thread() made, once it runs (its
// fork handlers done).
pid_t forked_child() {
  g_forker->thread.join();
  const pid_t pid = g_forker->done.get();
  char c = 0;
  const bool running = pid > 0 && ::read(g_forker->running[0], &c, 1) == 1;
  for (const int fd : g_forker->running) ::close(fd);
  g_forker.reset();
  if (!running && pid > 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  return running ? pid : -1;
}

}  // namespace

extern "C" int fcntl(int fd, int cmd, ...) {
  using Fcntl = int (*)(int, int, ...);
  static const Fcntl real = reinterpret_cast<Fcntl>(::dlsym(RTLD_NEXT, "fcntl"));
  va_list args;
  va_start(args, cmd);
  void* arg = va_arg(args, void*);
  va_end(args);
  const int rc = real(fd, cmd, arg);
  if (cmd == F_OFD_SETLK && rc == 0) {
    g_lock_fd = fd;
    if (g_fork_at.load() == ForkAt::kLockTaken) {
      g_fork_at = ForkAt::kNothing;
      fork_from_another_thread();
    }
  }
  return rc;
}

extern "C" int close(int fd) {
  using Close = int (*)(int);
  static const Close real = reinterpret_cast<Close>(::dlsym(RTLD_NEXT, "close"));
  if (fd >= 0 && fd == g_lock_fd.load() && g_fork_at.load() == ForkAt::kLockClosed) {
    g_fork_at = ForkAt::kNothing;
    fork_from_another_thread();
  }
  return real(fd);
}

namespace bulkhead {
namespace {

using testing::TempSegmentName;

class LivenessLockForkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    segment_.emplace(shm::Segment::create(name_, testing::small_segment()));
    // A client open already: the library's fork handlers are installed.
    ASSERT_EQ(bh_client_open(name_.c_str(), &first_), 0);
  }
  void TearDown() override { bh_client_close(first_); }

  // The slot of this process whose liveness lock was taken last.
  std::optional<shm::ProcessSnapshot> last_locked() {
    for (std::uint32_t p = 0; p < segment_->capacities().max_processes; ++p) {
      const std::optional<shm::ProcessSnapshot> seen = shm::read_process_slot(*segment_, p);
      if (seen && seen->pid == ::getpid() && seen->lock_claim != 0 && p != first_slot()) return seen;
    }
    return std::nullopt;
  }
  std::uint32_t first_slot() {
    for (std::uint32_t p = 0; p < segment_->capacities().max_processes; ++p) {
      const std::optional<shm::ProcessSnapshot> seen = shm::read_process_slot(*segment_, p);
      if (seen && seen->pid == ::getpid()) return p;
    }
    return UINT32_MAX;
  }

  TempSegmentName name_{"liveness-fork"};
  std::optional<shm::Segment> segment_;
  bh_client* first_ = nullptr;
};

// Kills and reaps the child when the test ends, however it ends.
struct Ended {
  pid_t child;
  ~Ended() {
    if (child <= 0) return;
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
};

TEST_F(LivenessLockForkTest, AForkWhileAClientOpensLeavesTheChildNoCopyOfItsLock) {
  g_fork_at = ForkAt::kLockTaken;
  bh_client* c = nullptr;
  ASSERT_EQ(bh_client_open(name_.c_str(), &c), 0);
  const Ended child{forked_child()};
  ASSERT_GT(child.child, 0);
  const std::optional<shm::ProcessSnapshot> seen = last_locked();
  ASSERT_TRUE(seen);
  EXPECT_FALSE(shm::liveness_lock_dropped(*segment_, *seen));
  bh_client_close(c);  // as the parent's exec would, its descriptor closed
  EXPECT_TRUE(shm::liveness_lock_dropped(*segment_, *seen)) << "the forked child keeps the lock";
}

TEST_F(LivenessLockForkTest, AForkWhileAClientClosesLeavesTheChildNoCopyOfItsLock) {
  bh_client* c = nullptr;
  ASSERT_EQ(bh_client_open(name_.c_str(), &c), 0);
  const std::optional<shm::ProcessSnapshot> seen = last_locked();
  ASSERT_TRUE(seen);
  g_fork_at = ForkAt::kLockClosed;
  bh_client_close(c);
  const Ended child{forked_child()};
  ASSERT_GT(child.child, 0);
  EXPECT_TRUE(shm::liveness_lock_dropped(*segment_, *seen)) << "the forked child keeps the lock";
}

}  // namespace
}  // namespace bulkhead
