// The process watch: /proc read once per process, then one pidfd per
// watched process tells when it exits. Its answers are /proc's either
// way; what it saves is the reading, so the tests count its descriptors.
#include "daemon/process_watch.hpp"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "tests/support/children.hpp"
#include "tests/support/eventually.hpp"

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

// Closes of read-only descriptors of the file are what a close watch
// tells, once each; read-write ones (the mappings') are not. Without a
// file to watch, every look says yes.
TEST(CloseWatch, TellsOfEachCloseOfAReadOnlyDescriptorOnce) {
  const std::string path = "/dev/shm/bh-closewatch-" + std::to_string(::getpid());
  const int made = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(made, 0);
  CloseWatch watch(path);
  EXPECT_FALSE(watch.closed_since());
  ::close(made);  // read-write
  EXPECT_FALSE(watch.closed_since());
  for (int round = 0; round < 2; ++round) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    EXPECT_FALSE(watch.closed_since());  // opened, not closed
    ::close(fd);
    EXPECT_TRUE(watch.closed_since());
    EXPECT_FALSE(watch.closed_since());
  }
  EXPECT_TRUE(watch.watching());
  ::unlink(path.c_str());
  CloseWatch none(path);  // no file: no watch
  EXPECT_FALSE(none.watching());
  EXPECT_EQ(none.error(), ENOENT);
  EXPECT_TRUE(none.closed_since());
  EXPECT_TRUE(none.closed_since());
}

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

// A slot as a process in a pid namespace of its own (pid 1 there) records
// it: its namespace and start time, read through its pid here.
shm::ProcessSnapshot slot_of(const testing::ChildInPidNamespace& child, std::uint32_t slot, std::uint32_t claims) {
  shm::ProcessSnapshot seen;
  seen.claim = {slot, claims};
  seen.pid = 1;
  seen.start_time = shm::process_start_time(child.pid()).value_or(0);
  struct stat st {};
  const std::string path = "/proc/" + std::to_string(child.pid()) + "/ns/pid";
  if (::stat(path.c_str(), &st) == 0) seen.pid_ns = {st.st_dev, st.st_ino};
  return seen;
}

// Found through its namespace once per claim, not once per tick: a scan
// reads every process's /proc entry. Then watched through a pidfd on the
// process found, which tells when it exits.
TEST(ProcessWatchNamespaces, AProcessOfAnotherPidNamespaceIsLookedUpOncePerClaimThenWatched) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
  testing::ChildInPidNamespace child{[] { return true; }};
  ASSERT_TRUE(child.ok());
  const shm::ProcessSnapshot seen = slot_of(child, 1, 7);
  ASSERT_TRUE(seen.pid_ns.known());
  ASSERT_NE(seen.pid_ns, shm::own_pid_namespace());
  ProcessWatch watch{4};
  for (int tick = 0; tick < 3; ++tick) {
    watch.poll();
    EXPECT_EQ(watch.check(seen), shm::Liveness::kAlive);
  }
  EXPECT_EQ(watch.lookups(), 1u);
  EXPECT_EQ(watch.pid_here(1, 1), child.pid());
  EXPECT_EQ(watch.pid_here(2, 5), 5);  // a slot not of another namespace: as recorded
  // The slot claimed again (by the same process, here): looked up again.
  shm::ProcessSnapshot again = seen;
  again.claim.claims = 8;
  EXPECT_EQ(watch.check(again), shm::Liveness::kAlive);
  EXPECT_EQ(watch.lookups(), 2u);
  child.kill();
  watch.poll();
  EXPECT_EQ(watch.check(again), shm::Liveness::kDead);
  EXPECT_EQ(watch.lookups(), 2u);  // the pidfd told: no scan
}

// What no process of the namespace has (another pid, the pid with another
// start time) is gone: the namespace's processes are all in view.
TEST(ProcessWatchNamespaces, AProcessItsNamespaceNoLongerHasIsDead) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
  testing::ChildInPidNamespace child{[] { return true; }};
  ASSERT_TRUE(child.ok());
  ProcessWatch watch{4};
  watch.poll();
  shm::ProcessSnapshot other_pid = slot_of(child, 0, 1);
  other_pid.pid = 2;
  EXPECT_EQ(watch.check(other_pid), shm::Liveness::kDead);
  EXPECT_EQ(watch.pid_here(0, 2), 0);
  shm::ProcessSnapshot reused = slot_of(child, 1, 1);
  reused.start_time += 1;
  EXPECT_EQ(watch.check(reused), shm::Liveness::kDead);
  EXPECT_EQ(watch.check(slot_of(child, 2, 1)), shm::Liveness::kAlive);
}

// A client of ABI 4.2 or older writes no namespace: in a slot whose last
// process was of a container, freed by a daemon of ABI 4.2 or older (which
// leaves the namespace there), it runs here under that gone namespace. It
// is found here by pid and start time, alive, and dead once it exits; it
// used to be dead at once, its permits given back while it held them.
TEST(ProcessWatchNamespaces, AnOlderClientUnderAGoneNamespaceIsFoundHere) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
  shm::PidNamespace gone;
  {
    testing::ChildInPidNamespace contained{[] { return true; }};
    ASSERT_TRUE(contained.ok());
    gone = slot_of(contained, 0, 1).pid_ns;
  }
  ASSERT_TRUE(gone.known());
  testing::PausedChild client{[] { return true; }};
  ASSERT_TRUE(client.ok());
  shm::ProcessSnapshot seen;
  seen.claim = {0, 1};  // such a client counts no claim
  seen.pid = client.pid();
  seen.start_time = shm::process_start_time(client.pid()).value_or(0);
  seen.pid_ns = gone;
  ProcessWatch watch{4};
  for (int tick = 0; tick < 3; ++tick) {
    watch.poll();
    EXPECT_EQ(watch.check(seen), shm::Liveness::kAlive);
  }
  EXPECT_EQ(watch.lookups(), 1u);
  EXPECT_EQ(watch.pid_here(0, seen.pid), client.pid());
  client.kill();
  watch.poll();
  EXPECT_EQ(watch.check(seen), shm::Liveness::kDead);
  // Another process of this namespace with its pid, or none: dead too.
  shm::ProcessSnapshot other = seen;
  other.claim.claims = 2;
  other.start_time += 1;
  EXPECT_EQ(watch.check(other), shm::Liveness::kDead);
}

// A scan costs a read of every process's /proc entry: a tick makes a few at
// most, and a slot waiting for its scan counts as alive meanwhile.
TEST(ProcessWatchNamespaces, ATickScansForAFewSlotsAndTheOthersWaitAlive) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
  testing::ChildInPidNamespace child{[] { return true; }};
  ASSERT_TRUE(child.ok());
  constexpr std::uint32_t kSlots = ProcessWatch::kLookupsPerTick + 2;
  ProcessWatch watch{kSlots};
  shm::ProcessSnapshot gone = slot_of(child, 0, 1);
  gone.pid = 2;  // no such process there: dead once looked up
  watch.poll();
  for (std::uint32_t s = 0; s < kSlots; ++s) {
    gone.claim.index = s;
    EXPECT_EQ(watch.check(gone), s < ProcessWatch::kLookupsPerTick ? shm::Liveness::kDead : shm::Liveness::kUnknown)
        << "slot " << s;
  }
  watch.poll();
  for (std::uint32_t s = ProcessWatch::kLookupsPerTick; s < kSlots; ++s) {
    gone.claim.index = s;
    EXPECT_EQ(watch.check(gone), shm::Liveness::kDead) << "slot " << s;
  }
  EXPECT_EQ(watch.lookups(), kSlots);
}

// Whether `pid` is a zombie: exited, not reaped.
bool zombie(pid_t pid) {
  const std::optional<shm::ProcessStat> stat = shm::read_process_stat(pid);
  return stat && stat->state == 'Z';
}

// What a watch without ptrace access to the client (a daemon that is not
// root, a client of another user) makes of a client of another pid
// namespace: it cannot read the client's /proc/N/ns/pid, so it finds the
// client by pid and start time alone, "unconfirmed". Such a match is
// looked up once per claim, as a confirmed one; and once the process
// exits, looked up again, where the same process found again (a zombie,
// its reaper stopped) is the answer: dead. The watch runs in a child that
// drops to user nobody; the client stays root's.
TEST(ProcessWatchNamespaces, AProcessFoundByPidAndStartTimeAloneIsWatchedAndFoundDeadAsAZombie) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace and to become nobody";
  testing::ChildInPidNamespace child{[] { return true; }};
  ASSERT_TRUE(child.ok());
  const shm::ProcessSnapshot seen = slot_of(child, 1, 7);
  ASSERT_TRUE(seen.pid_ns.known());
  // What the watcher reports, as one byte each: its lookup unconfirmed, its
  // answers at three ticks, its lookups then; and, once told, its answer.
  int report[2], go_on[2];
  ASSERT_EQ(::pipe(report), 0);
  ASSERT_EQ(::pipe(go_on), 0);
  const pid_t watcher = ::fork();
  if (watcher == 0) {
    constexpr uid_t kNobody = 65534;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(kNobody, kNobody, kNobody) != 0 ||
        ::setresuid(kNobody, kNobody, kNobody) != 0) {
      std::_Exit(2);
    }
    const auto tell = [&](int v) {
      const char c = static_cast<char>(v);
      if (::write(report[1], &c, 1) != 1) std::_Exit(3);
    };
    tell(shm::find_in_pid_namespace(seen.pid_ns, seen.pid, seen.start_time).confirmed ? 1 : 0);
    ProcessWatch watch{4};
    for (int tick = 0; tick < 3; ++tick) {
      watch.poll();
      tell(static_cast<int>(watch.check(seen)));
    }
    tell(static_cast<int>(watch.lookups()));
    char c = 0;
    if (::read(go_on[0], &c, 1) != 1) std::_Exit(4);
    watch.poll();
    tell(static_cast<int>(watch.check(seen)));
    std::_Exit(0);
  }
  ::close(report[1]);
  ::close(go_on[0]);
  const auto heard = [&] {
    char c = -1;
    return ::read(report[0], &c, 1) == 1 ? static_cast<int>(c) : -1;
  };
  EXPECT_EQ(heard(), 0) << "the watcher read the client's namespace: the match is not unconfirmed";
  for (int tick = 0; tick < 3; ++tick) EXPECT_EQ(heard(), static_cast<int>(shm::Liveness::kAlive)) << tick;
  EXPECT_EQ(heard(), 1);  // one lookup, for the claim
  // Killed, and left a zombie: its reaper stopped first, and known stopped
  // (a stop still on its way lets it reap the child it wakes for).
  ASSERT_EQ(::kill(child.reaper(), SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child.reaper(), &status, WUNTRACED), child.reaper());
  ASSERT_TRUE(WIFSTOPPED(status)) << status;
  ASSERT_EQ(::kill(child.pid(), SIGKILL), 0);
  EXPECT_TRUE(testing::eventually([&] { return zombie(child.pid()); }, std::chrono::seconds(30)));
  ASSERT_EQ(::write(go_on[1], "g", 1), 1);
  EXPECT_EQ(heard(), static_cast<int>(shm::Liveness::kDead));
  ::kill(child.reaper(), SIGCONT);
  ASSERT_EQ(::waitpid(watcher, &status, 0), watcher);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ::close(report[0]);
  ::close(go_on[1]);
}

}  // namespace
}  // namespace bulkhead::daemon
