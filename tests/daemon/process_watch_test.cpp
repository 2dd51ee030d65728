// The process watch: /proc read once per process, then one pidfd per
// watched process tells when it exits. Its answers are /proc's either
// way; what it saves is the reading, so the tests count its descriptors.
#include "daemon/process_watch.hpp"

#include <signal.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/children.hpp"

namespace bulkhead::daemon {
namespace {

// This process's open descriptors (the tests start no thread that opens
// any meanwhile).
std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// A live child to watch, a watch of four slots, and the descriptors open
// before the watch opened any.
class ProcessWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(child_.ok());
    const auto start = shm::process_start_time(child_.pid());
    ASSERT_TRUE(start);
    start_ = *start;
    base_ = open_fds();
  }
  testing::PausedChild child_{[] { return true; }};
  std::uint64_t start_ = 0;
  ProcessWatch watch_{4};
  std::size_t base_ = 0;
};

TEST_F(ProcessWatchTest, ALiveProcessIsWatchedByOnePidfdThatTellsWhenItExits) {
  EXPECT_EQ(watch_.check(1, child_.pid(), start_), shm::Liveness::kAlive);
  EXPECT_EQ(open_fds(), base_ + 1);  // its pidfd
  watch_.poll();
  EXPECT_EQ(watch_.check(1, child_.pid(), start_), shm::Liveness::kAlive);
  EXPECT_EQ(open_fds(), base_ + 1);
  ::kill(child_.pid(), SIGKILL);
  ASSERT_TRUE(testing::wait_until_exited(child_.pid()));  // a zombie, not reaped
  watch_.poll();
  EXPECT_EQ(watch_.check(1, child_.pid(), start_), shm::Liveness::kDead);
  EXPECT_EQ(open_fds(), base_ + 1);  // the pidfd told, kept until the slot is forgotten
  watch_.forget(1);
  EXPECT_EQ(open_fds(), base_);
}

// A poll that finds one process gone keeps watching the others: their
// pidfds stay open, and /proc is not read for them again.
TEST_F(ProcessWatchTest, AnExitLeavesTheOtherWatchedProcessesWatched) {
  testing::PausedChild other{[] { return true; }};
  ASSERT_TRUE(other.ok());
  const auto other_start = shm::process_start_time(other.pid());
  ASSERT_TRUE(other_start);
  const std::size_t base = open_fds();
  EXPECT_EQ(watch_.check(1, child_.pid(), start_), shm::Liveness::kAlive);
  EXPECT_EQ(watch_.check(2, other.pid(), *other_start), shm::Liveness::kAlive);
  EXPECT_EQ(open_fds(), base + 2);
  ::kill(other.pid(), SIGKILL);
  ASSERT_TRUE(testing::wait_until_exited(other.pid()));
  watch_.poll();
  EXPECT_EQ(open_fds(), base + 2);
  EXPECT_EQ(watch_.check(1, child_.pid(), start_), shm::Liveness::kAlive);
  EXPECT_EQ(watch_.check(2, other.pid(), *other_start), shm::Liveness::kDead);
  EXPECT_EQ(open_fds(), base + 2);
}

TEST_F(ProcessWatchTest, ASlotThatNamesAnotherProcessIsReadFromProcAgain) {
  EXPECT_EQ(watch_.check(2, child_.pid(), start_), shm::Liveness::kAlive);
  // The same pid with another start time: the pid was reused, and the
  // process the slot names is gone. Its pidfd is closed, none opened.
  EXPECT_EQ(watch_.check(2, child_.pid(), start_ + 1), shm::Liveness::kDead);
  EXPECT_EQ(open_fds(), base_);
  // A slot without a start time is read from /proc every time.
  EXPECT_EQ(watch_.check(3, child_.pid(), 0), shm::Liveness::kAlive);
  EXPECT_EQ(open_fds(), base_);
}

}  // namespace
}  // namespace bulkhead::daemon
