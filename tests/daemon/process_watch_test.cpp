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

TEST(ProcessWatch, ALiveProcessIsWatchedByOnePidfdThatTellsWhenItExits) {
  testing::PausedChild child([] { return true; });
  ASSERT_TRUE(child.ok());
  const auto start = shm::process_start_time(child.pid());
  ASSERT_TRUE(start);
  ProcessWatch watch(4);
  const std::size_t base = open_fds();
  EXPECT_EQ(watch.check(1, child.pid(), *start), shm::Liveness::kAlive);
  EXPECT_EQ(open_fds(), base + 1);  // its pidfd
  watch.poll();
  EXPECT_EQ(watch.check(1, child.pid(), *start), shm::Liveness::kAlive);
  EXPECT_EQ(open_fds(), base + 1);
  ::kill(child.pid(), SIGKILL);
  ASSERT_TRUE(testing::wait_until_exited(child.pid()));  // a zombie, not reaped
  watch.poll();
  EXPECT_EQ(watch.check(1, child.pid(), *start), shm::Liveness::kDead);
  EXPECT_EQ(open_fds(), base + 1);  // the pidfd told, kept until the slot is forgotten
  watch.forget(1);
  EXPECT_EQ(open_fds(), base);
}

TEST(ProcessWatch, ASlotThatNamesAnotherProcessIsReadFromProcAgain) {
  testing::PausedChild child([] { return true; });
  ASSERT_TRUE(child.ok());
  const auto start = shm::process_start_time(child.pid());
  ASSERT_TRUE(start);
  ProcessWatch watch(4);
  const std::size_t base = open_fds();
  EXPECT_EQ(watch.check(2, child.pid(), *start), shm::Liveness::kAlive);
  // The same pid with another start time: the pid was reused, and the
  // process the slot names is gone. Its pidfd is closed, none opened.
  EXPECT_EQ(watch.check(2, child.pid(), *start + 1), shm::Liveness::kDead);
  EXPECT_EQ(open_fds(), base);
  // A slot without a start time is read from /proc every time.
  EXPECT_EQ(watch.check(3, child.pid(), 0), shm::Liveness::kAlive);
  EXPECT_EQ(open_fds(), base);
}

}  // namespace
}  // namespace bulkhead::daemon
