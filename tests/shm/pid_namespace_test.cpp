// Finding a process of another pid namespace (a client in a container)
// from this one's /proc, with and without the right to read its namespace.
#include "shm/pid_namespace.hpp"

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "tests/support/children.hpp"

namespace bulkhead::shm {
namespace {

PidNamespace namespace_of(pid_t pid) {
  struct stat st {};
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/pid";
  if (::stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino};
}

TEST(PidNamespace, ASlotOfAnUnknownOrTheSameNamespaceIsNotLookedUp) {
  const PidNamespace own = own_pid_namespace();
  ASSERT_TRUE(own.known());
  EXPECT_EQ(own, namespace_of(::getpid()));
  EXPECT_FALSE(foreign_pid_namespace(own, own));
  EXPECT_FALSE(foreign_pid_namespace({}, own));  // a client of ABI 4.2: the daemon's namespace
  EXPECT_FALSE(foreign_pid_namespace({own.device, own.inode + 1}, {}));
  EXPECT_TRUE(foreign_pid_namespace({own.device, own.inode + 1}, own));
}

class PidNamespaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
    ASSERT_TRUE(child_.ok());
    ns_ = namespace_of(child_.pid());
    ASSERT_TRUE(ns_.known());
    ASSERT_NE(ns_, own_pid_namespace());
    start_ = process_start_time(child_.pid()).value_or(0);
    ASSERT_NE(start_, 0u);
  }
  testing::ChildInPidNamespace child_{[] { return true; }};
  PidNamespace ns_;
  std::uint64_t start_ = 0;
};

TEST_F(PidNamespaceTest, AProcessIsFoundByItsPidInItsNamespace) {
  const PidLookup found = find_in_pid_namespace(ns_, 1, start_);
  EXPECT_EQ(found.result, PidLookup::Result::kFound);
  EXPECT_EQ(found.pid, child_.pid());
  EXPECT_TRUE(found.confirmed);
  EXPECT_EQ(find_in_pid_namespace(ns_, 1, 0).pid, child_.pid());  // no start time recorded
  // What bulkheadctl shows: alive, with its pid here.
  ProcessSnapshot seen;
  seen.pid = 1;
  seen.start_time = start_;
  seen.pid_ns = ns_;
  pid_t here = 0;
  EXPECT_EQ(process_liveness(seen, own_pid_namespace(), &here), Liveness::kAlive);
  EXPECT_EQ(here, child_.pid());
  child_.kill();
  // Its namespace is gone with it: from the host's namespace, whose /proc
  // lists every process, that is certain; from a container's, the
  // namespace may be one it cannot see into.
  const bool host = own_pid_namespace().inode == kInitialPidNamespaceInode;
  EXPECT_EQ(process_liveness(seen, own_pid_namespace(), &here), host ? Liveness::kDead : Liveness::kUnknown);
  EXPECT_EQ(here, 0);
}

// A daemon that may not read other users' namespaces (not root, as the
// unit runs it) matches by pid and start time alone.
TEST_F(PidNamespaceTest, WithoutTheRightToReadItsNamespaceItIsFoundByPidAndStartTime) {
  const PidNamespace ns = ns_;
  const std::uint64_t start = start_;
  const pid_t expected = child_.pid();
  const pid_t reader = ::fork();
  if (reader == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) std::_Exit(2);
    if (namespace_of(expected).known()) std::_Exit(3);  // it can read it after all
    const PidLookup found = find_in_pid_namespace(ns, 1, start);
    if (found.result != PidLookup::Result::kFound || found.pid != expected || found.confirmed) std::_Exit(4);
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(reader, &status, 0), reader);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace bulkhead::shm
