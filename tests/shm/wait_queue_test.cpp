// The wait queue's records, their order, and the futex across processes.
#include "shm/wait_queue.hpp"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include <thread>

#include "shm/segment.hpp"
#include "tests/support/children.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead::shm {
namespace {

using testing::small_segment;
using testing::TempSegmentName;

std::uint64_t now_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

TEST(WaitQueue, ARecordKeepsItsTicketAndProcessAndIsNeverZero) {
  EXPECT_NE(queue_record(0, 0), 0u);
  EXPECT_EQ(record_ticket(queue_record(123456789, 4095)), 123456789u);
  EXPECT_EQ(record_process(queue_record(123456789, 4095)), 4095u);
  EXPECT_EQ(record_process(queue_record(7, 0)), 0u);
}

TEST(WaitQueue, FifoCountsOlderTicketsAheadAndLifoNewerOnes) {
  std::atomic<std::uint64_t> records[6] = {};
  records[0] = queue_record(12, 1);
  records[2] = queue_record(10, 2);
  records[3] = queue_record(15, 1);
  records[5] = queue_record(11, 3);
  EXPECT_EQ(queue_length(records, 6), 4u);
  EXPECT_EQ(waiters_ahead(records, 6, 12, /*lifo=*/false), 2u);  // 10 and 11
  EXPECT_EQ(waiters_ahead(records, 6, 12, /*lifo=*/true), 1u);   // 15
  EXPECT_EQ(waiters_ahead(records, 6, 10, false), 0u);
  EXPECT_EQ(waiters_ahead(records, 6, 15, true), 0u);
}

TEST(WaitQueue, FreeingADeadProcessesRecordsLeavesTheOthers) {
  std::atomic<std::uint64_t> records[4] = {};
  records[0] = queue_record(1, 5);
  records[1] = queue_record(2, 6);
  records[3] = queue_record(3, 5);
  EXPECT_EQ(free_records_of(records, 4, 5), 2u);
  EXPECT_EQ(queue_length(records, 4), 1u);
  EXPECT_EQ(record_process(records[1].load()), 6u);
  EXPECT_EQ(free_records_of(records, 4, 5), 0u);
}

TEST(WaitQueue, WakingWithNoSleeperLeavesTheWordAlone) {
  std::atomic<std::uint32_t> futex{4};
  wake_waiters(futex);
  EXPECT_EQ(futex.load(), 4u);
  const std::uint32_t seen = announce_waiter(futex);
  EXPECT_EQ(seen, 5u);
  wake_waiters(futex);
  EXPECT_EQ(futex.load(), 6u);  // bit cleared, one more wake-up counted
}

TEST(WaitQueue, ASleepWithAChangedWordReturnsAtOnce) {
  std::atomic<std::uint32_t> futex{0};
  const std::uint32_t seen = announce_waiter(futex);
  wake_waiters(futex);
  // Far in the future: only the changed word lets this return. Waited for
  // on another thread, so that a sleep that does not return fails the test
  // (after a minute, however loaded the machine) rather than hanging it.
  auto slept = std::async(std::launch::async, [&] { futex_sleep(futex, seen, now_ns() + 3600'000'000'000ull); });
  const bool returned = slept.wait_for(std::chrono::minutes(1)) == std::future_status::ready;
  if (!returned) wake_sleepers(futex, futex.load());  // let the thread go, to end the test
  EXPECT_TRUE(returned) << "futex_sleep slept on a word that no longer held what it was told";
}

TEST(WaitQueue, ASleepEndsAtItsTimeout) {
  std::atomic<std::uint32_t> futex{0};
  const std::uint32_t seen = announce_waiter(futex);
  const std::uint64_t until = now_ns() + 1'000'000;
  futex_sleep(futex, seen, until);
  EXPECT_GE(now_ns(), until);
}

// A process sleeping on a word in the segment is woken by another.
TEST(WaitQueue, ASleeperInAnotherProcessIsWoken) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  auto& futex = s.dependency(0).admission.futex;
  auto& go = s.dependency(0).admission.word;
  const pid_t child = ::fork();
  if (child == 0) {
    Segment mine = Segment::attach(name, Access::kReadWrite);
    auto& f = mine.dependency(0).admission.futex;
    auto& w = mine.dependency(0).admission.word;
    // Sleep until the parent sets the word; the timeout only bounds a lost
    // wake-up: without the wake the child fails after a minute.
    const std::uint64_t give_up = now_ns() + 60'000'000'000ull;
    for (;;) {
      const std::uint32_t seen = announce_waiter(f);
      if (w.load() != 0) std::_Exit(0);
      if (now_ns() > give_up) std::_Exit(1);
      futex_sleep(f, seen, give_up);
    }
  }
  // Wait until the child has announced itself, then wake it.
  while ((futex.load() & kFutexSleepers) == 0) std::this_thread::yield();
  go.store(1, std::memory_order_seq_cst);
  wake_waiters(futex);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace bulkhead::shm
