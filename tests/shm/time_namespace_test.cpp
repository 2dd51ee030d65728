// Start times across time namespaces (unshare --time, a container CRIU
// restored): /proc shows a process's start time shifted by the reader's
// boottime offset. read_process_stat() and own_start_time() take the
// reader's offset off, so that a client in such a namespace and a daemon
// outside it agree on the start time that, with the pid, names the client.
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <optional>

#include "shm/segment.hpp"

namespace bulkhead::shm {
namespace {

constexpr long long kOffsetSeconds = 3600;

// What a process in a time namespace of its own, its boottime clock an hour
// ahead, reads of itself and of the test's process.
struct SeenInside {
  pid_t pid = 0;  // its pid, as the test's process sees it
  std::uint64_t own_start = 0;
  std::uint64_t test_process_start = 0;
  std::int64_t offset_ns = 0;
  Liveness test_process_liveness = Liveness::kUnknown;  // of the test's process, with its start read outside
};

// Runs such a process (or one whose boottime clock is `offset_ns` ahead)
// and keeps it running until kill(pid, SIGKILL), reaped by waiting for
// `*middle`; nullopt when no time namespace can be made here (not root, or
// a kernel without them). unshare(CLONE_NEWTIME) puts the
// caller's children in the new namespace, not the caller, and its offsets
// are set before the first of them starts, as unshare(1) does.
std::optional<SeenInside> run_in_time_namespace(pid_t* middle,
                                                std::int64_t offset_ns = kOffsetSeconds * 1'000'000'000LL) {
  int report[2];
  if (::pipe(report) != 0) return std::nullopt;
  const pid_t test_process = ::getpid();
  const std::uint64_t test_process_start = own_start_time().value_or(0);
  // "boottime SECONDS NANOSECONDS", the nanoseconds in [0, 1e9).
  const long long seconds =
      offset_ns >= 0 ? offset_ns / 1'000'000'000LL : -((-offset_ns + 999'999'999LL) / 1'000'000'000LL);
  const long long nanoseconds = offset_ns - seconds * 1'000'000'000LL;
  *middle = ::fork();
  if (*middle == 0) {
    SeenInside seen;
    std::FILE* offsets = nullptr;
    if (::unshare(CLONE_NEWTIME) == 0 && (offsets = std::fopen("/proc/self/timens_offsets", "we")) != nullptr) {
      const bool set = std::fprintf(offsets, "boottime %lld %lld\n", seconds, nanoseconds) > 0;
      if (std::fclose(offsets) == 0 && set) {
        const pid_t inner = ::fork();
        if (inner == 0) {
          seen.own_start = own_start_time().value_or(0);
          seen.test_process_start = process_start_time(test_process).value_or(0);
          seen.offset_ns = boottime_offset_ns();
          seen.test_process_liveness = process_liveness(test_process, test_process_start);
          seen.pid = ::getpid();
          (void)!::write(report[1], &seen, sizeof seen);
          ::pause();
          std::_Exit(0);
        }
        ::waitpid(inner, nullptr, 0);
        std::_Exit(0);
      }
    }
    (void)!::write(report[1], &seen, sizeof seen);  // pid 0: no namespace
    std::_Exit(0);
  }
  ::close(report[1]);
  SeenInside seen;
  const bool read = ::read(report[0], &seen, sizeof seen) == sizeof seen;
  ::close(report[0]);
  if (!read || seen.pid <= 0) {
    ::waitpid(*middle, nullptr, 0);
    return std::nullopt;
  }
  return seen;
}

TEST(TimeNamespace, StartTimesAgreeAcrossIt) {
  pid_t middle = -1;
  const std::optional<SeenInside> inside = run_in_time_namespace(&middle);
  if (!inside) GTEST_SKIP() << "no time namespace here: needs root and a kernel with CONFIG_TIME_NS";
  const std::optional<std::uint64_t> its_start_here = process_start_time(inside->pid);
  const Liveness liveness = process_liveness(inside->pid, inside->own_start);
  ::kill(inside->pid, SIGKILL);
  ::waitpid(middle, nullptr, 0);

  EXPECT_EQ(inside->offset_ns, kOffsetSeconds * 1'000'000'000LL);
  EXPECT_EQ(boottime_offset_ns(), 0);
  // The start time it records for itself (a client's, in its process slot)
  // is the one the daemon reads of it here, so the daemon finds it alive.
  ASSERT_TRUE(its_start_here.has_value());
  EXPECT_EQ(inside->own_start, *its_start_here);
  EXPECT_EQ(liveness, Liveness::kAlive);
  // And the other way: a daemon outside, as a client inside reads it.
  EXPECT_EQ(inside->test_process_start, own_start_time().value_or(1));
}

// A container's init (pid 1 of its pid namespace) that forks a child into
// new pid and time namespaces: the child is pid 1 too, and must read its
// own offset, not the one its parent read.
TEST(TimeNamespace, AChildWithItsParentsPidReadsItsOwnOffset) {
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t middle = ::fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    std::int64_t seen = -1;  // -1: no namespaces here
    if (::unshare(CLONE_NEWPID) == 0) {
      const pid_t init = ::fork();
      if (init == 0) {
        std::FILE* offsets = nullptr;
        if (::getpid() == 1 && boottime_offset_ns() == 0 && ::unshare(CLONE_NEWPID | CLONE_NEWTIME) == 0 &&
            (offsets = std::fopen("/proc/self/timens_offsets", "we")) != nullptr) {
          const bool set = std::fprintf(offsets, "boottime %lld 0\n", kOffsetSeconds) > 0;
          if (std::fclose(offsets) == 0 && set) {
            const pid_t child = ::fork();
            if (child == 0) {
              seen = ::getpid() == 1 ? boottime_offset_ns() : -1;
              (void)!::write(report[1], &seen, sizeof seen);
              std::_Exit(0);
            }
            ::waitpid(child, nullptr, 0);
            std::_Exit(0);
          }
        }
        (void)!::write(report[1], &seen, sizeof seen);
        std::_Exit(0);
      }
      ::waitpid(init, nullptr, 0);
      std::_Exit(0);
    }
    (void)!::write(report[1], &seen, sizeof seen);
    std::_Exit(0);
  }
  ::close(report[1]);
  std::int64_t seen = -1;
  const bool read = ::read(report[0], &seen, sizeof seen) == sizeof seen;
  ::close(report[0]);
  ::waitpid(middle, nullptr, 0);
  ASSERT_TRUE(read);
  if (seen == -1) GTEST_SKIP() << "no pid or time namespace here: needs root and a kernel with CONFIG_TIME_NS";
  EXPECT_EQ(seen, kOffsetSeconds * 1'000'000'000LL);
}

// A negative offset past a process's start (a container CRIU restored on a
// host up longer than the one it was checkpointed on; the daemon started at
// boot): the kernel adds the offset to the start modulo 2^64, so /proc in
// the namespace shows the process as started some 2^64 ns after boot.
TEST(TimeNamespace, AProcessThatStartedBeforeANegativeOffsetAgrees) {
  const std::int64_t tick_ns = 1'000'000'000LL / ::sysconf(_SC_CLK_TCK);
  const std::optional<std::uint64_t> start = own_start_time();
  ASSERT_TRUE(start.has_value());
  // Past the test process's start, and such that 2^64 + offset is a whole
  // number of ticks, as the start it shows wraps around: no tick of error.
  const auto wrap_remainder = static_cast<std::int64_t>((UINT64_MAX % tick_ns + 1) % tick_ns);  // 2^64 % tick
  const std::int64_t offset_ns = -(static_cast<std::int64_t>(*start + 1) * tick_ns + wrap_remainder);
  // The kernel refuses an offset that would put the namespace's clock
  // before its boot: it must be past the test's start by then (some 20 ms).
  for (timespec now{}; ::clock_gettime(CLOCK_BOOTTIME, &now) == 0 && now.tv_sec * 1'000'000'000LL + now.tv_nsec <
                       -offset_ns + tick_ns;) {
    ::usleep(1000);
  }
  pid_t middle = -1;
  const std::optional<SeenInside> inside = run_in_time_namespace(&middle, offset_ns);
  if (!inside) GTEST_SKIP() << "no time namespace here: needs root and a kernel with CONFIG_TIME_NS";
  ::kill(inside->pid, SIGKILL);
  ::waitpid(middle, nullptr, 0);

  // What a daemon or bulkheadctl in it reads of a client outside.
  EXPECT_EQ(inside->test_process_start, *start);
  EXPECT_EQ(inside->test_process_liveness, Liveness::kAlive);
}

}  // namespace
}  // namespace bulkhead::shm
