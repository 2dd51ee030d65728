// child_guard.cpp: a forked child that goes back into GoogleTest ends
// there, with kChildLeftItsBody, rather than run on as the test.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>

#include "shm/segment.hpp"
#include "tests/support/children.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead::testing {
namespace {

// The child's exit status, or -1 when it did not exit.
int exit_status(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(ChildGuard, AForkedChildWhoseBodyThrowsEndsThere) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) throw std::runtime_error("thrown on purpose in a forked child: the guard ends it");
  // Without the guard the child goes on from here, as a second copy of
  // this test, and exits 1 for the failure GoogleTest recorded.
  EXPECT_EQ(exit_status(pid), kChildLeftItsBody);
}

// Its unwinding runs the destructors of the test's locals in the child:
// they leave what the test made (MadeHere) to the test.
TEST(ChildGuard, AThrowingChildLeavesTheTestsDirectorySegmentAndChildrenAlone) {
  TempDir dir;
  TempSegmentName name("guard");
  shm::Segment::create(name, small_segment());
  ChildProcess sleeper({"/bin/sleep", "60"}, dir.path() + "/sleep.log");
  {
    PausedChild paused([] { return true; });
    ASSERT_TRUE(paused.ok());
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) throw std::runtime_error("thrown on purpose in a forked child: the guard ends it");
    EXPECT_EQ(exit_status(pid), kChildLeftItsBody);
    EXPECT_EQ(::waitpid(paused.pid(), nullptr, WNOHANG), 0) << "the child's unwinding killed a PausedChild of the test";
  }
  EXPECT_TRUE(std::filesystem::is_directory(dir.path())) << "the child's unwinding removed the test's directory";
  EXPECT_FALSE(sleeper.exited()) << "the child's unwinding stopped the test's ChildProcess";
  EXPECT_NO_THROW(shm::Segment::attach(name, shm::Access::kReadOnly)) << "the child's unwinding removed the segment";
}

TEST(ChildGuard, AForkedChildWhoseAssertionFailsEndsThere) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ASSERT_TRUE(false) << "failed on purpose in a forked child: the guard ends it";
    std::_Exit(0);
  }
  EXPECT_EQ(exit_status(pid), kChildLeftItsBody);
}

TEST(ChildGuard, AForkedChildThatReturnsFromTheTestEndsAtItsEnd) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) return;  // a forgotten _Exit: the test ends, and so does the child
  ASSERT_EQ(::getpid(), parent);
  EXPECT_EQ(exit_status(pid), kChildLeftItsBody);
}

}  // namespace
}  // namespace bulkhead::testing
