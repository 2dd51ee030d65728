// Finding a process of another pid namespace (a client in a container)
// from this one's /proc, with and without the right to read its namespace.
#include "shm/pid_namespace.hpp"

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

// Sleeps past the clock tick (of /proc's start times) now running.
void pass_clock_tick() {
  std::this_thread::sleep_for(std::chrono::microseconds(2'000'000 / ::sysconf(_SC_CLK_TCK)));
}

// The processes that are pid 1 of a namespace below this one and started
// at `start` (in clock ticks since boot).
int inits_started_at(std::uint64_t start) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(entry.path() / "status");
    std::string line;
    while (std::getline(status, line) && line.rfind("NSpid:", 0) != 0) {
    }
    std::istringstream fields(line.substr(std::min<std::size_t>(line.size(), 6)));
    std::vector<std::string> pids{std::istream_iterator<std::string>(fields), {}};
    if (pids.size() < 2 || pids.back() != "1") continue;
    if (process_start_time(std::stoi(name)) == start) ++count;
  }
  return count;
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
//
// Pid 1 and a start time are then all there is to match: the init of any
// other pid namespace started in the same clock tick (another test's,
// running beside this one) matches as well, and the lookup may find that
// one. So the test waits out the tick, after which no process can start
// with that time, and takes a child no other process matches.
TEST_F(PidNamespaceTest, WithoutTheRightToReadItsNamespaceItIsFoundByPidAndStartTime) {
  PidNamespace ns = ns_;
  std::uint64_t start = start_;
  pid_t expected = child_.pid();
  std::optional<testing::ChildInPidNamespace> another;
  for (int attempt = 1; pass_clock_tick(), inits_started_at(start) > 1; ++attempt) {
    ASSERT_LT(attempt, 50) << "every child shared its start time with another namespace's init";
    another.reset();
    another.emplace([] { return true; });
    ASSERT_TRUE(another->ok());
    expected = another->pid();
    ns = namespace_of(expected);
    start = process_start_time(expected).value_or(0);
  }
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
