// bulkhead::Executor on a real segment: tasks run under host-wide permits,
// a full queue and a passed deadline are refused at once, a task whose
// deadline passes while queued is not run, shutdown refuses what waits.
#include "bulkhead/executor.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <limits>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "shm/segment.hpp"
#include "shm/stats.hpp"
#include "shm/wait_queue.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {

using namespace std::chrono_literals;
using testing::TempSegmentName;
using Clock = Executor::Clock;

// A task that holds its worker until the test opens the gate. A test that
// stops early (a failed ASSERT) leaves the gate to its destructor, which
// opens it and waits for the blocker to be done with it: otherwise the
// pool's destructor joins a worker that waits forever, and the failure
// shows as a ctest timeout instead of the assertion that failed.
class Gate {
 public:
  Gate() = default;
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  ~Gate() {
    if (!opened_) open();
    if (started_.load()) {
      while (!finished_.load()) std::this_thread::yield();
    }
  }
  auto blocker() {
    return [this] {
      started_.store(true);
      open_.wait();
      finished_.store(true);  // the last touch of the gate
      return 1;
    };
  }
  void wait_started() const {
    while (!started_.load()) std::this_thread::yield();
  }
  void open() {
    opened_ = true;
    promise_.set_value();
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> open_ = promise_.get_future().share();
  std::atomic<bool> started_{false};
  std::atomic<bool> finished_{false};
  bool opened_ = false;  // the test's thread only
};

// The reason in a refused task's future, or 0 if it ran.
template <typename T>
int reason_of(std::future<T>& future) {
  try {
    future.get();
  } catch (const Rejected& r) {
    return r.reason();
  }
  return 0;
}

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    segment_.emplace(shm::Segment::create(name_, testing::small_segment()));
    segment_->header().default_limit.store(10);
    client_.emplace(name_.str());
    dep_.emplace(client_->dependency("legacy"));
    slot_ = *shm::find_dependency(*segment_, "legacy");
  }
  shm::DependencyControl& control() { return segment_->dependency(slot_).control; }
  shm::DependencyCounters counters() { return shm::read_counters(*segment_, slot_); }
  // Keeps the pool's worker busy until the gate opens; the blocker's future.
  static std::future<int> occupy_worker(Executor& pool, Gate& gate) {
    auto running = pool.submit(gate.blocker());
    gate.wait_started();
    return std::move(running.future());
  }
  // Queues a task that would set `ran`, with a deadline that passes while
  // it waits in the queue (the worker busy), and returns its submission
  // once that deadline has passed. The budget must pass after submit()
  // checks it: on a slow machine (sanitizers, other load) 1 ms can be gone
  // before that check, and a refusal at submit tests nothing here
  // (ADeadlinePassedAtSubmitIsRefusedAtOnce does), so it doubles until
  // submit() queues the task.
  static auto queue_one_that_expires(Executor& pool, std::atomic<bool>& ran) {
    auto budget = std::chrono::milliseconds(1);
    auto deadline = Clock::now() + budget;
    auto late = pool.submit([&ran] { ran = true; }, deadline);
    while (!late && late.reason() == BH_REJECT_DEADLINE && budget < std::chrono::seconds(10)) {
      budget *= 2;
      deadline = Clock::now() + budget;
      late = pool.submit([&ran] { ran = true; }, deadline);
    }
    while (late && Clock::now() <= deadline) std::this_thread::yield();
    return late;
  }

  TempSegmentName name_{"exec"};
  std::optional<shm::Segment> segment_;
  std::optional<Client> client_;
  std::optional<Dependency> dep_;
  std::uint32_t slot_ = 0;
};

TEST_F(ExecutorTest, RunsATaskUnderAPermitAndReturnsItsValue) {
  Executor pool(*dep_, {.threads = 2, .queue_capacity = 4});
  auto s = pool.submit([] { return 42; });
  ASSERT_TRUE(s);
  EXPECT_EQ(s.future().get(), 42);
  auto v = pool.submit([] {});
  ASSERT_TRUE(v);
  v.future().get();
  EXPECT_EQ(counters().ok, 2u);  // each a latency sample, through the permit
  EXPECT_EQ(dep_->inflight(), 0);
}

// A task may return a reference, as with std::async: the future gives back
// the very object.
TEST_F(ExecutorTest, ATaskMayReturnAReference) {
  Executor pool(*dep_, {.threads = 1, .queue_capacity = 4});
  int value = 7;
  auto s = pool.submit([&]() -> int& { return value; });
  ASSERT_TRUE(s);
  EXPECT_EQ(&s.future().get(), &value);
}

TEST_F(ExecutorTest, ATaskCanReadItsRemainingBudget) {
  Executor pool(*dep_, {.threads = 1, .queue_capacity = 4});
  auto s = pool.submit([](const Permit& p) { return p.remaining(); }, 60s);
  ASSERT_TRUE(s);
  const std::chrono::nanoseconds left = s.future().get();
  EXPECT_GT(left, 0ns);
  EXPECT_LE(left, 60s);
  auto unbounded = pool.submit([](const Permit& p) { return p.remaining(); });
  EXPECT_EQ(unbounded.future().get(), std::chrono::nanoseconds::max());
}

TEST_F(ExecutorTest, AFullQueueIsRefusedAtOnce) {
  Executor pool(*dep_, {.threads = 1, .queue_capacity = 1});
  Gate gate;
  std::future<int> running = occupy_worker(pool, gate);
  auto queued = pool.submit([] { return 2; });
  ASSERT_TRUE(queued);
  EXPECT_EQ(pool.queued(), 1u);
  auto refused = pool.submit([] { return 3; });
  EXPECT_FALSE(refused);
  EXPECT_EQ(refused.reason(), BH_REJECT_QUEUE_FULL);
  gate.open();
  EXPECT_EQ(running.get(), 1);
  EXPECT_EQ(queued.future().get(), 2);
}

// A task an idle worker takes waits for no place: with no queue, the
// executor runs as many tasks at once as it has workers, and refuses the
// next.
TEST_F(ExecutorTest, WithNoQueueEachIdleWorkerTakesATask) {
  Executor pool(*dep_, {.threads = 2, .queue_capacity = 0});
  Gate first, second;
  auto a = pool.submit(first.blocker());
  auto b = pool.submit(second.blocker());
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  first.wait_started();
  second.wait_started();
  EXPECT_EQ(pool.queued(), 0u);
  auto refused = pool.submit([] { return 3; });
  EXPECT_FALSE(refused);
  EXPECT_EQ(refused.reason(), BH_REJECT_QUEUE_FULL);
  // Counted as the dependency's, as its wait queue's refusals are.
  EXPECT_EQ(counters().queue_full, 1u);
  EXPECT_EQ(counters().rejected, 0u);  // not one at the limit
  first.open();
  second.open();
  EXPECT_EQ(a.future().get(), 1);
  EXPECT_EQ(b.future().get(), 1);
}

// A queue with no bound of its own (SIZE_MAX) refuses nothing: the idle
// workers' places are not added to the capacity, where they would wrap.
TEST_F(ExecutorTest, AnUnboundedQueueRefusesNothing) {
  Executor pool(*dep_, {.threads = 1, .queue_capacity = std::numeric_limits<std::size_t>::max()});
  auto idle = pool.submit([] { return 1; });  // the idle worker's
  ASSERT_TRUE(idle) << idle.reason();
  EXPECT_EQ(idle.future().get(), 1);
  Gate gate;
  std::future<int> running = occupy_worker(pool, gate);
  auto queued = pool.submit([] { return 2; });
  ASSERT_TRUE(queued) << queued.reason();
  EXPECT_EQ(pool.queued(), 1u);
  gate.open();
  EXPECT_EQ(running.get(), 1);
  EXPECT_EQ(queued.future().get(), 2);
}

TEST_F(ExecutorTest, ADeadlinePassedAtSubmitIsRefusedAtOnce) {
  Executor pool(*dep_, {.threads = 1, .queue_capacity = 4});
  std::atomic<bool> ran{false};
  auto s = pool.submit([&] { ran = true; }, Clock::now() - 1ms);
  EXPECT_FALSE(s);
  EXPECT_EQ(s.reason(), BH_REJECT_DEADLINE);
  EXPECT_EQ(pool.queued(), 0u);
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(counters().deadline_rejected, 1u);
}

TEST_F(ExecutorTest, ATaskWhoseDeadlinePassedWhileQueuedIsNotRun) {
  Executor pool(*dep_, {.threads = 1, .queue_capacity = 4});
  Gate gate;
  std::future<int> running = occupy_worker(pool, gate);
  std::atomic<bool> ran{false};
  auto late = queue_one_that_expires(pool, ran);
  ASSERT_TRUE(late) << late.reason();
  gate.open();
  EXPECT_EQ(reason_of(late.future()), BH_REJECT_DEADLINE);
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(running.get(), 1);
  EXPECT_EQ(counters().ok, 1u);  // only the blocker called the dependency
  EXPECT_EQ(counters().deadline_rejected, 1u);
}

// A task whose deadline passed in the queue holds no place there: a
// submit() that finds the queue full refuses it (BH_REJECT_DEADLINE, in
// its future at once) and takes its place, rather than refusing a live
// task while every worker is busy.
TEST_F(ExecutorTest, ATaskPastItsDeadlineGivesUpItsPlaceInAFullQueue) {
  Executor pool(*dep_, {.threads = 1, .queue_capacity = 1});
  Gate gate;
  std::future<int> running = occupy_worker(pool, gate);
  std::atomic<bool> ran{false};
  auto late = queue_one_that_expires(pool, ran);
  ASSERT_TRUE(late) << late.reason();
  auto fresh = pool.submit([] { return 2; });
  ASSERT_TRUE(fresh) << fresh.reason();
  EXPECT_EQ(pool.queued(), 1u);
  // Refused already, while the worker is still busy.
  EXPECT_EQ(late.future().wait_for(0s), std::future_status::ready);
  EXPECT_EQ(reason_of(late.future()), BH_REJECT_DEADLINE);
  EXPECT_EQ(counters().deadline_rejected, 1u);
  EXPECT_EQ(counters().queue_full, 0u);
  gate.open();
  EXPECT_EQ(running.get(), 1);
  EXPECT_EQ(fresh.future().get(), 2);
  EXPECT_FALSE(ran.load());
}

TEST_F(ExecutorTest, HostWidePermitsAdmitTheTasks) {
  control().limit.store(1);
  segment_->dependency(slot_).partitions.admit_limit.store(1);  // no partitions
  control().max_queue.store(0);  // no host-wide queue
  Permit elsewhere = dep_->try_acquire();  // another caller holds the only permit
  ASSERT_TRUE(elsewhere);
  Executor pool(*dep_, {.threads = 1, .queue_capacity = 4});
  std::atomic<bool> ran{false};
  auto refused = pool.submit([&] { ran = true; });
  ASSERT_TRUE(refused);  // queued here; refused by the dependency's limit
  EXPECT_EQ(reason_of(refused.future()), BH_REJECT_QUEUE_FULL);
  EXPECT_FALSE(ran.load());

  // With a host-wide queue the worker waits there for the permit.
  control().max_queue.store(4);
  auto waits = pool.submit([&] { ran = true; }, 60s);
  ASSERT_TRUE(waits);
  while (shm::queue_length(segment_->queue(slot_), segment_->queue_slots()) != 1) std::this_thread::yield();
  elsewhere.success();
  EXPECT_EQ(reason_of(waits.future()), 0);
  EXPECT_TRUE(ran.load());
}

TEST_F(ExecutorTest, AnExceptionReachesTheFutureAndCountsAsFailedOrDropped) {
  Executor pool(*dep_, {.threads = 1, .queue_capacity = 4});
  auto failed = pool.submit([]() -> int { throw std::runtime_error("connection reset"); });
  ASSERT_TRUE(failed);
  EXPECT_THROW(failed.future().get(), std::runtime_error);
  auto timed_out = pool.submit([]() -> int { throw CallDropped("no answer in 200 ms"); });
  ASSERT_TRUE(timed_out);
  EXPECT_THROW(timed_out.future().get(), CallDropped);
  EXPECT_EQ(counters().failed, 1u);
  EXPECT_EQ(counters().dropped, 1u);
  EXPECT_EQ(dep_->inflight(), 0);
}

TEST_F(ExecutorTest, ShutdownRefusesQueuedAndNewTasksAndLetsRunningOnesFinish) {
  Executor pool(*dep_, {.threads = 1, .queue_capacity = 4});
  Gate gate;
  std::future<int> running = occupy_worker(pool, gate);
  std::atomic<bool> ran{false};
  auto queued = pool.submit([&] { ran = true; });
  ASSERT_TRUE(queued);
  pool.shutdown();
  EXPECT_EQ(reason_of(queued.future()), kExecutorStopped);
  EXPECT_EQ(pool.submit([] {}).reason(), kExecutorStopped);
  gate.open();
  EXPECT_EQ(running.get(), 1);
  EXPECT_FALSE(ran.load());
}

// A task whose worker waits for a host-wide permit has not started: shutdown()
// refuses it like a queued one, and a permit that comes after does not run it.
TEST_F(ExecutorTest, ShutdownRefusesATaskStillWaitingForItsPermit) {
  control().limit.store(1);
  segment_->dependency(slot_).partitions.admit_limit.store(1);  // no partitions
  control().max_queue.store(4);
  Permit elsewhere = dep_->try_acquire();  // another caller holds the only permit
  ASSERT_TRUE(elsewhere);
  Executor pool(*dep_, {.threads = 1, .queue_capacity = 4});
  std::atomic<bool> ran{false};
  auto waits = pool.submit([&] { ran = true; }, 60s);
  ASSERT_TRUE(waits);
  while (shm::queue_length(segment_->queue(slot_), segment_->queue_slots()) != 1) std::this_thread::yield();
  pool.shutdown();
  elsewhere.success();
  EXPECT_EQ(reason_of(waits.future()), kExecutorStopped);
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(counters().ok, 1u);  // `elsewhere` only
}

// Destroying the executor ends a worker's wait for a permit that nothing
// else would end: no deadline, and the permit held by the destroying
// thread itself.
TEST_F(ExecutorTest, TheDestructorEndsAWorkersWaitThatHasNoDeadline) {
  control().limit.store(1);
  segment_->dependency(slot_).partitions.admit_limit.store(1);  // no partitions
  control().max_queue.store(4);
  Permit mine = dep_->try_acquire();
  ASSERT_TRUE(mine);
  auto pool = std::make_unique<Executor>(*dep_, ExecutorOptions{.threads = 1, .queue_capacity = 4});
  std::atomic<bool> ran{false};
  auto waits = pool->submit([&] { ran = true; });
  ASSERT_TRUE(waits);
  while (shm::queue_length(segment_->queue(slot_), segment_->queue_slots()) != 1) std::this_thread::yield();
  std::future<void> destroyed = std::async(std::launch::async, [&] { pool.reset(); });
  // A give-up, not a measure: without the cancel, only this release ends it.
  const bool ended = destroyed.wait_for(60s) == std::future_status::ready;
  mine.success();
  destroyed.get();
  EXPECT_TRUE(ended) << "the destructor waited for the permit";
  EXPECT_EQ(reason_of(waits.future()), kExecutorStopped);
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(shm::queue_length(segment_->queue(slot_), segment_->queue_slots()), 0u);
}

// A task that submits while its executor is destroyed (it retries, or
// chains another) is refused as after shutdown(), and what it queued
// before is refused too; the destructor waits for the task to end.
TEST_F(ExecutorTest, ATaskMaySubmitWhileItsExecutorIsDestroyed) {
  auto pool = std::make_unique<Executor>(*dep_, ExecutorOptions{.threads = 1, .queue_capacity = 4});
  Executor* const raw = pool.get();
  std::atomic<bool> started{false};
  std::vector<std::future<void>> chained;  // the task's only
  auto s = pool->submit([&] {
    for (;;) {  // the queue's places: its one worker runs this task
      auto next = raw->submit([] {});
      if (!next) break;
      chained.push_back(std::move(next.future()));
    }
    started = true;
    while (raw->submit([] {}).reason() != kExecutorStopped) std::this_thread::yield();
  });
  ASSERT_TRUE(s);
  while (!started.load()) std::this_thread::yield();
  pool.reset();
  EXPECT_EQ(reason_of(s.future()), 0);
  EXPECT_EQ(chained.size(), 4u);
  for (auto& f : chained) EXPECT_EQ(reason_of(f), kExecutorStopped);
}

TEST(ExecutorRejected, NamesEveryReason) {
  EXPECT_STREQ(Rejected(BH_REJECT_LIMIT).what(), "bulkhead: task not run (dependency at its limit)");
  EXPECT_STREQ(Rejected(BH_REJECT_QUEUE_FULL).what(), "bulkhead: task not run (queue full)");
  EXPECT_STREQ(Rejected(BH_REJECT_DEADLINE).what(), "bulkhead: task not run (deadline)");
  EXPECT_STREQ(Rejected(BH_REJECT_OPEN_CIRCUIT).what(), "bulkhead: task not run (circuit breaker open)");
  EXPECT_STREQ(Rejected(BH_REJECT_PARTITION).what(), "bulkhead: task not run (partition at its share)");
  EXPECT_STREQ(Rejected(kExecutorStopped).what(), "bulkhead: task not run (executor stopped)");
}

}  // namespace
}  // namespace bulkhead
