// The wait queue (bh_acquire) on a real segment: the bound, deadlines, the
// expected-wait refusal, wake-ups across processes, FIFO and LIFO order.
// No test measures a duration: deadlines are far in the past or future, or
// order is read from the segment and from what the callers record.
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <memory>
#include <optional>
#include <stop_token>
#include <thread>
#include <vector>

#include "bulkhead/bulkhead.h"
#include "bulkhead/client.hpp"
#include "shm/segment.hpp"
#include "shm/stats.hpp"
#include "shm/wait_queue.hpp"
#include "tests/support/temp_segment.hpp"
#include "tests/support/waiter.hpp"

namespace bulkhead {
namespace {

using namespace std::chrono_literals;
using testing::TempSegmentName;

constexpr auto kLongBudget = 60s;  // a wait that ends only by a wake-up

// Memory shared with forked children: the order in which they were admitted.
struct AdmissionLog {
  std::atomic<int> count{0};
  int order[16];
  void add(int who) { order[count.fetch_add(1)] = who; }
};

class QueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    segment_.emplace(shm::Segment::create(name_, testing::small_segment(16, 16, 4, 8)));
    segment_->header().default_limit.store(20);
    client_.emplace(name_.str());
    dep_.emplace(client_->dependency("payments"));
    slot_ = *shm::find_dependency(*segment_, "payments");
    log_ = static_cast<AdmissionLog*>(
        ::mmap(nullptr, sizeof(AdmissionLog), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(log_, MAP_FAILED);
    new (log_) AdmissionLog();
  }
  void TearDown() override { ::munmap(log_, sizeof(AdmissionLog)); }

  shm::DependencyControl& control() { return segment_->dependency(slot_).control; }
  // What the daemon would publish.
  void publish(std::uint32_t limit, std::uint32_t max_queue, std::uint32_t flags = 0) {
    control().limit.store(limit);
    segment_->dependency(slot_).partitions.admit_limit.store(limit);  // no partitions
    control().max_queue.store(max_queue);
    control().flags.store(flags);
  }
  // What the daemon does when the breaker changes (update_breaker()): the
  // state, then a wake-up of the queue.
  void set_breaker(std::uint32_t state) {
    control().breaker.store(state);
    shm::wake_waiters(segment_->dependency(slot_).admission.futex);
  }
  std::uint32_t waiting() { return shm::queue_length(segment_->queue(slot_), segment_->queue_slots()); }
  // Until `n` calls wait in the queue, as the segment shows.
  void wait_for_waiters(std::uint32_t n) {
    while (waiting() != n) std::this_thread::yield();
  }
  shm::DependencyCounters counters() { return shm::read_counters(*segment_, slot_); }
  // Stops `child`, the one waiter in the queue, while it sleeps there (in
  // futex_sleep, as the kernel shows it, not between looks), and returns
  // once `deadline` has passed: the child runs again only past it.
  void stop_asleep_until_past(pid_t child, std::uint64_t deadline) {
    wait_for_waiters(1);
    auto& futex = segment_->dependency(slot_).admission.futex;
    while ((futex.load() & shm::kFutexSleepers) == 0) std::this_thread::yield();
    for (;;) {
      const std::optional<shm::ProcessStat> stat = shm::read_process_stat(child);
      ASSERT_TRUE(stat);
      if (stat->state == 'S') break;
      std::this_thread::yield();
    }
    ASSERT_EQ(::kill(child, SIGSTOP), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, WUNTRACED), child);
    ASSERT_TRUE(WIFSTOPPED(status));
    while (bh_now_ns() <= deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Lets `child` go on, and returns its exit status (-1: it did not exit).
  static int resume_until_exit(pid_t child) {
    int status = 0;
    if (::kill(child, SIGCONT) != 0 || ::waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
  }

  // Forks `n` children one after the other, each queued behind the one
  // before (the segment shows it waiting before the next is forked), while
  // this process holds the only permit; then releases it. Each child logs
  // itself when admitted and releases at once. Returns the admission order.
  std::vector<int> queue_children_then_release(int n) {
    Permit only = dep_->try_acquire();
    EXPECT_TRUE(only);
    std::vector<pid_t> children;
    for (int i = 0; i < n; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        Permit p = dep_->acquire(kLongBudget);
        if (!p) std::_Exit(10 + p.reason());
        log_->add(i);
        p.success();
        std::_Exit(0);
      }
      children.push_back(pid);
      wait_for_waiters(static_cast<std::uint32_t>(i + 1));
    }
    only.success();
    for (pid_t pid : children) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << pid << " status " << status;
    }
    return std::vector<int>(log_->order, log_->order + log_->count.load());
  }

  TempSegmentName name_{"queue"};
  std::optional<shm::Segment> segment_;
  std::optional<Client> client_;
  std::optional<Dependency> dep_;
  std::uint32_t slot_ = 0;
  AdmissionLog* log_ = nullptr;
};

TEST_F(QueueTest, UnderTheLimitAcquireAdmitsAtOnce) {
  publish(2, 0);
  Permit p = dep_->acquire(kLongBudget);
  ASSERT_TRUE(p);
  EXPECT_EQ(dep_->inflight(), 1);
  EXPECT_GT(p.remaining(), 0ns);
  EXPECT_LE(p.remaining(), kLongBudget);
  EXPECT_EQ(counters().waited, 0u);  // never queued
}

TEST_F(QueueTest, NoQueueMeansQueueFullAtTheLimit) {
  publish(1, 0);  // max_queue 0: no one waits
  Permit held = dep_->try_acquire();
  Permit p = dep_->acquire(kLongBudget);
  EXPECT_FALSE(p);
  EXPECT_EQ(p.reason(), BH_REJECT_QUEUE_FULL);
  EXPECT_EQ(counters().queue_full, 1u);
  EXPECT_EQ(waiting(), 0u);
}

TEST_F(QueueTest, ACallPastMaxQueueIsRefusedAtOnceAndTheWaiterGetsIn) {
  publish(1, 1);
  Permit held = dep_->try_acquire();
  testing::BackgroundWaiter waiter(*dep_);
  wait_for_waiters(1);
  Permit refused = dep_->acquire(kLongBudget);
  EXPECT_EQ(refused.reason(), BH_REJECT_QUEUE_FULL);
  held.success();  // wakes the waiter
  EXPECT_EQ(waiter.result(), 0);
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(dep_->inflight(), 0);
  const shm::DependencyCounters c = counters();
  EXPECT_EQ(c.queue_full, 1u);
  EXPECT_EQ(c.waited, 1u);
}

TEST_F(QueueTest, ADeadlineAlreadyPassedIsRefusedEvenUnderTheLimit) {
  publish(5, 4);
  bh_permit p;
  EXPECT_EQ(bh_acquire(dep_->handle(), bh_now_ns() - 1, &p), BH_REJECT_DEADLINE);
  EXPECT_EQ(p.dep_, nullptr);
  EXPECT_EQ(bh_acquire(dep_->handle(), 0, &p), BH_REJECT_DEADLINE);
  EXPECT_EQ(dep_->inflight(), 0);
  EXPECT_EQ(counters().deadline_rejected, 2u);
}

TEST_F(QueueTest, AWaiterLeavesAtItsDeadlineWithoutAPermit) {
  publish(1, 4);
  Permit held = dep_->try_acquire();
  const std::uint64_t deadline = bh_now_ns() + 20'000'000;  // 20 ms
  bh_permit p;
  EXPECT_EQ(bh_acquire(dep_->handle(), deadline, &p), BH_REJECT_DEADLINE);
  EXPECT_GE(bh_now_ns(), deadline);  // it did not give up early
  EXPECT_EQ(p.dep_, nullptr);
  EXPECT_EQ(dep_->inflight(), 1);
  EXPECT_EQ(waiting(), 0u);  // its place is free again
  const shm::DependencyCounters c = counters();
  EXPECT_EQ(c.deadline_rejected, 1u);
  EXPECT_EQ(c.waited, 1u);  // the time it waited is counted
  EXPECT_GE(c.wait_sum_ns, 1u);
}

// A waiter that runs again only after its deadline (stopped, or not
// scheduled) is refused, even if a permit came free meanwhile: it must not
// be admitted late, with no budget left for the call. The child is stopped
// while it sleeps in the queue, the permit is released after its deadline,
// then it goes on.
TEST_F(QueueTest, AWaiterPastItsDeadlineIsNotAdmittedLateByAPermitFreedSince) {
  publish(1, 4);
  Permit held = dep_->try_acquire();
  const std::uint64_t deadline = bh_now_ns() + 300'000'000;  // 300 ms
  const pid_t child = ::fork();
  if (child == 0) {
    bh_permit p;
    const int rc = bh_acquire(dep_->handle(), deadline, &p);
    std::_Exit(rc == 0 ? 1 : 10 + rc);
  }
  stop_asleep_until_past(child, deadline);
  ASSERT_FALSE(HasFatalFailure());
  held.success();  // a permit free only after the waiter's deadline
  EXPECT_EQ(resume_until_exit(child), 10 + BH_REJECT_DEADLINE);
}

// A cancel requested while a waiter is stopped past its deadline is what
// the waiter answers when it runs again: the caller gave up on the call,
// and a deadline refusal would count against the dependency.
TEST_F(QueueTest, ACancelThatCameBeforeAWaiterWokePastItsDeadlineIsACancel) {
  publish(1, 4);
  Permit held = dep_->try_acquire();
  void* shared = ::mmap(nullptr, sizeof(bh_cancel), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* cancel = static_cast<bh_cancel*>(shared);
  bh_cancel_init(cancel);
  const std::uint64_t deadline = bh_now_ns() + 300'000'000;  // 300 ms
  const pid_t child = ::fork();
  if (child == 0) {
    bh_permit p;
    const int rc = bh_acquire_cancellable(dep_->handle(), deadline, cancel, &p);
    std::_Exit(rc == 0 ? 1 : 10 + rc);
  }
  stop_asleep_until_past(child, deadline);
  ASSERT_FALSE(HasFatalFailure());
  bh_cancel_request(cancel);  // the child's entry names the futex of a segment both map at one address
  EXPECT_EQ(resume_until_exit(child), 10 + BH_REJECT_CANCELLED);
  EXPECT_EQ(counters().deadline_rejected, 0u);
  EXPECT_EQ(waiting(), 0u);
  ::munmap(shared, sizeof(bh_cancel));
}

TEST_F(QueueTest, AnExpectedWaitBeyondTheBudgetIsRefusedWithoutQueueing) {
  publish(1, 4);
  control().service_ns.store(10'000'000'000);  // calls take 10 s
  Permit held = dep_->try_acquire();
  const std::uint64_t tickets = segment_->dependency(slot_).admission.tickets.load();
  Permit p = dep_->acquire(1s);  // one call ahead, 10 s: cannot make it
  EXPECT_EQ(p.reason(), BH_REJECT_DEADLINE);
  EXPECT_EQ(segment_->dependency(slot_).admission.tickets.load(), tickets);  // never queued
  EXPECT_EQ(counters().waited, 0u);
  EXPECT_EQ(counters().deadline_rejected, 1u);
}

TEST_F(QueueTest, AnExpectedWaitWithinTheBudgetQueues) {
  publish(1, 4);
  control().service_ns.store(1'000'000);  // calls take 1 ms
  Permit held = dep_->try_acquire();
  testing::BackgroundWaiter waiter(*dep_);
  wait_for_waiters(1);
  held.success();
  EXPECT_EQ(waiter.result(), 0);
}

TEST_F(QueueTest, UnderLifoTheExpectedWaitCountsNoOneAhead) {
  publish(1, 4, shm::kDependencyLifo);
  control().service_ns.store(10'000'000'000);  // calls take 10 s
  Permit held = dep_->try_acquire();
  testing::BackgroundWaiter first(*dep_);
  wait_for_waiters(1);
  // A budget of 15 s: behind the first waiter (FIFO) its call would expect
  // 20 s and be refused at once; LIFO serves it first, 10 s.
  testing::BackgroundWaiter second(*dep_, 15s);
  while (waiting() != 2 && counters().deadline_rejected == 0) std::this_thread::yield();
  held.success();
  EXPECT_EQ(second.result(), 0);
  EXPECT_EQ(first.result(), 0);
  EXPECT_EQ(counters().deadline_rejected, 0u);
}

TEST_F(QueueTest, AReloadOfTheOrderIsFollowedByTheCallsAlreadyWaiting) {
  // A joins under LIFO; a reload makes the queue FIFO (and wakes it); B
  // joins under FIFO. Counting by the order each joined under, A would
  // count B ahead of it (newer, LIFO) and B would count A (older, FIFO):
  // both would sleep on the permit released below until their deadlines.
  publish(1, 4, shm::kDependencyLifo);
  Permit held = dep_->try_acquire();
  testing::BackgroundWaiter a(*dep_, 30s);
  wait_for_waiters(1);
  publish(1, 4);
  shm::wake_waiters(segment_->dependency(slot_).admission.futex);  // as a reload does
  testing::BackgroundWaiter b(*dep_, 30s);
  wait_for_waiters(2);
  held.success();
  EXPECT_EQ(a.result(), 0);
  EXPECT_EQ(b.result(), 0);
  EXPECT_EQ(counters().deadline_rejected, 0u);
}

TEST_F(QueueTest, FreePermitsThatCoverTheQueueNeedNoExpectedWait) {
  // A stale hint sends the call to the queue (the sleepers bit, left by a
  // waiter gone since) with two permits free and no one ahead: it fits
  // whatever the calls last, and gets one at once.
  publish(3, 4);
  control().service_ns.store(10'000'000'000);  // calls take 10 s
  Permit held = dep_->try_acquire();
  segment_->dependency(slot_).admission.futex.fetch_or(shm::kFutexSleepers);
  Permit p = dep_->acquire(1s);
  EXPECT_TRUE(p);
  EXPECT_EQ(counters().deadline_rejected, 0u);
  EXPECT_EQ(counters().waited, 1u);  // it did go through the queue
  EXPECT_EQ(dep_->inflight(), 2);
}

TEST_F(QueueTest, AWaiterThatLeavesWithAPermitFreeWakesTheOthers) {
  // One permit free, but an older record ahead (a waiter about to take
  // it): this call may not, and leaves at its deadline. A permit is
  // still free then, so it wakes the queue, for whoever is behind it to
  // look: the wake clears the sleepers bit and counts one more wake-up.
  publish(2, 4);
  Permit held = dep_->try_acquire();
  auto& admission = segment_->dependency(slot_).admission;
  admission.tickets.store(10);
  segment_->queue(slot_)[3].store(shm::queue_record(1, 7));  // ticket 1: ahead of 10
  admission.futex.fetch_or(shm::kFutexSleepers);  // the other waiter may sleep
  const std::uint32_t before = admission.futex.load();
  bh_permit p;
  EXPECT_EQ(bh_acquire(dep_->handle(), bh_now_ns() + 20'000'000, &p), BH_REJECT_DEADLINE);
  const std::uint32_t after = admission.futex.load();
  EXPECT_EQ(after & shm::kFutexSleepers, 0u);
  EXPECT_GT(after >> 1, before >> 1);
  EXPECT_EQ(waiting(), 1u);  // the other record stays
  EXPECT_EQ(dep_->inflight(), 1);
}

TEST_F(QueueTest, AReleaseInAnotherProcessWakesTheWaiter) {
  publish(1, 4);
  Permit held = dep_->try_acquire();
  const pid_t child = ::fork();
  if (child == 0) {
    Permit p = dep_->acquire(kLongBudget);
    std::_Exit(p ? 0 : 10 + p.reason());
  }
  wait_for_waiters(1);
  auto& futex = segment_->dependency(slot_).admission.futex;
  while ((futex.load() & shm::kFutexSleepers) == 0) std::this_thread::yield();  // it may sleep
  const std::uint32_t wakes = futex.load() >> 1;
  held.success();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(counters().waited, 1u);
  // The release woke it (not its poll timeout): one wake-up counted.
  EXPECT_EQ(futex.load() >> 1, wakes + 1);
}

TEST_F(QueueTest, WaitersAcrossProcessesAreAdmittedFirstInFirstOut) {
  publish(1, 8);
  EXPECT_EQ(queue_children_then_release(4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(dep_->inflight(), 0);
}

TEST_F(QueueTest, WaitersAcrossProcessesAreAdmittedLastInFirstOutWhenLifo) {
  publish(1, 8, shm::kDependencyLifo);
  EXPECT_EQ(queue_children_then_release(4), (std::vector<int>{3, 2, 1, 0}));
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(dep_->inflight(), 0);
}

TEST_F(QueueTest, ThreadsWaitingNeverExceedTheLimitAndAllGetIn) {
  publish(2, 8);
  std::atomic<int> now{0}, peak{0}, admitted{0};
  constexpr int kThreads = 4, kCalls = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) {
        Permit p = dep_->acquire(kLongBudget);
        if (!p) continue;
        const int n = now.fetch_add(1) + 1;
        int seen = peak.load();
        while (n > seen && !peak.compare_exchange_weak(seen, n)) {
        }
        admitted.fetch_add(1);
        std::this_thread::yield();
        now.fetch_sub(1);
        p.success();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(peak.load(), 2);
  EXPECT_EQ(admitted.load(), kThreads * kCalls);  // no one refused: 2 waiters at most
  EXPECT_EQ(dep_->inflight(), 0);
  EXPECT_EQ(waiting(), 0u);
}

TEST_F(QueueTest, ShadowModeNeverWaits) {
  publish(1, 4, shm::kDependencyShadow);
  Permit held = dep_->try_acquire();
  Permit p = dep_->acquire(kLongBudget);
  EXPECT_TRUE(p);
  EXPECT_EQ(counters().shadow_admitted, 1u);
}

// A reload that turns shadow mode on admits the calls waiting (the daemon
// wakes them), and a call that comes while one still sleeps does not queue
// behind it.
TEST_F(QueueTest, WhenShadowModeComesOnNothingWaits) {
  publish(1, 4);
  Permit held = dep_->try_acquire();
  testing::BackgroundWaiter waiter(*dep_);
  wait_for_waiters(1);
  control().flags.store(shm::kDependencyShadow);
  // A sleeper is flagged on the futex word: without a wake-up, the waiter
  // sleeps on, and the next call sees someone waiting.
  Permit newcomer = dep_->acquire(2s);
  EXPECT_TRUE(newcomer) << newcomer.reason();
  shm::wake_waiters(segment_->dependency(slot_).admission.futex);
  EXPECT_EQ(waiter.result(), 0);  // `held` is still held: admitted past the limit
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(counters().shadow_admitted, 2u);
  EXPECT_EQ(dep_->inflight(), 2);  // `held` and `newcomer`: the waiter released its permit
}

TEST_F(QueueTest, AWaiterLeavesWhenTheBreakerOpens) {
  publish(1, 4);
  Permit held = dep_->try_acquire();
  testing::BackgroundWaiter waiter(*dep_);
  wait_for_waiters(1);
  set_breaker(shm::kBreakerOpen);
  EXPECT_EQ(waiter.result(), BH_REJECT_OPEN_CIRCUIT);
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(counters().open_rejected, 1u);
  EXPECT_EQ(dep_->inflight(), 1);
}

TEST_F(QueueTest, InShadowModeAWaiterStaysThroughAnOpenBreaker) {
  publish(1, 4);
  Permit held = dep_->try_acquire();
  testing::BackgroundWaiter waiter(*dep_);
  wait_for_waiters(1);
  control().flags.store(shm::kDependencyShadow);
  set_breaker(shm::kBreakerOpen);
  held.success();  // the limit still orders the queue: now it gets in
  EXPECT_EQ(waiter.result(), 0);
  EXPECT_EQ(counters().open_rejected, 0u);
}

TEST_F(QueueTest, AWaiterWithATrialPermitStaysWhileTheBreakerIsHalfOpen) {
  publish(1, 4);
  Permit held = dep_->try_acquire();
  control().trials.store(shm::trials_word(1, 1));
  control().breaker.store(shm::kBreakerHalfOpen);
  // It takes the one trial, meets the limit, and queues (its ticket shows
  // it joined; it may not be in the queue for long).
  auto& tickets = segment_->dependency(slot_).admission.tickets;
  const std::uint64_t before = tickets.load();
  testing::BackgroundWaiter waiter(*dep_);
  while (tickets.load() == before) std::this_thread::yield();
  held.success();
  EXPECT_EQ(waiter.result(), 0);
  EXPECT_EQ(shm::trials_left(control().trials.load()), 0u);
  EXPECT_EQ(counters().open_rejected, 0u);
}

TEST_F(QueueTest, ATrialPermitOfAPastEpisodeIsNotGivenToTheNext) {
  publish(1, 4);
  Permit held = dep_->try_acquire();
  control().trials.store(shm::trials_word(1, 1));
  control().breaker.store(shm::kBreakerHalfOpen);
  auto& tickets = segment_->dependency(slot_).admission.tickets;
  const std::uint64_t before = tickets.load();
  // It takes episode 1's one trial, meets the limit and queues; the
  // breaker half-opens again meanwhile, with three trials of episode 2.
  testing::BackgroundWaiter waiter(*dep_, 500ms);
  while (tickets.load() == before) std::this_thread::yield();
  control().trials.store(shm::trials_word(2, 3));
  // Refused at its deadline, it gives back nothing: its trial was
  // episode 1's, and episode 2 counts its own.
  EXPECT_EQ(waiter.result(), BH_REJECT_DEADLINE);
  EXPECT_EQ(control().trials.load(), shm::trials_word(2, 3));
}

// A waiter on a thread of its own, with bh_acquire_cancellable() and no
// deadline: only a permit or the cancel ends its wait.
class CancellableWaiter {
 public:
  CancellableWaiter(Dependency dep, bh_cancel* cancel)
      : thread_([this, dep, cancel] {
          bh_permit p;
          const int rc = bh_acquire_cancellable(dep.handle(), BH_NO_DEADLINE, cancel, &p);
          if (rc == 0) bh_release(&p, BH_SUCCESS);
          result_ = rc;
        }) {}
  ~CancellableWaiter() {
    if (thread_.joinable()) thread_.join();
  }
  int result() {
    thread_.join();
    return result_.load();
  }
  pthread_t native() { return thread_.native_handle(); }

 private:
  std::atomic<int> result_{-1};
  std::thread thread_;
};

bool no_entry_left(const bh_cancel& cancel) {
  for (void* entry : cancel.waiting_) {
    if (entry != nullptr) return false;
  }
  return cancel.busy_ == 0;
}

TEST_F(QueueTest, ACancelledWaiterLeavesTheQueueWithoutAPermitAndCountsNoRejection) {
  publish(1, 4);
  Permit held = dep_->try_acquire();
  bh_cancel cancel{};
  CancellableWaiter waiter(*dep_, &cancel);
  wait_for_waiters(1);
  auto& futex = segment_->dependency(slot_).admission.futex;
  while ((futex.load() & shm::kFutexSleepers) == 0) std::this_thread::yield();  // it may sleep
  const std::uint32_t wakes = futex.load() >> 1;
  EXPECT_EQ(bh_cancel_requested(&cancel), 0);
  bh_cancel_request(&cancel);
  EXPECT_EQ(bh_cancel_requested(&cancel), 1);
  EXPECT_EQ(waiter.result(), BH_REJECT_CANCELLED);
  // The request woke it (not its poll timeout): one wake-up counted, and
  // none by the waiter as it left (no permit free).
  EXPECT_EQ(futex.load() >> 1, wakes + 1);
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(dep_->inflight(), 1);
  const shm::DependencyCounters c = counters();
  EXPECT_EQ(c.waited, 1u);  // its wait counts
  EXPECT_EQ(c.deadline_rejected, 0u);
  EXPECT_EQ(c.queue_full, 0u);
  EXPECT_EQ(c.rejected, 0u);
  EXPECT_TRUE(no_entry_left(cancel));
}

TEST_F(QueueTest, ACancelRequestedBeforeTheCallRefusesItAtOnceEvenUnderTheLimit) {
  publish(5, 4);
  bh_cancel cancel;
  bh_cancel_init(&cancel);
  bh_cancel_request(&cancel);
  bh_permit p;
  EXPECT_EQ(bh_acquire_cancellable(dep_->handle(), BH_NO_DEADLINE, &cancel, &p), BH_REJECT_CANCELLED);
  EXPECT_EQ(p.dep_, nullptr);
  EXPECT_EQ(dep_->inflight(), 0);
  // bh_cancel_init() makes it new: the next call is admitted.
  bh_cancel_init(&cancel);
  EXPECT_EQ(bh_cancel_requested(&cancel), 0);
  ASSERT_EQ(bh_acquire_cancellable(dep_->handle(), BH_NO_DEADLINE, &cancel, &p), 0);
  bh_release(&p, BH_SUCCESS);
  // NULL: bh_acquire(), and ignored by the others.
  ASSERT_EQ(bh_acquire_cancellable(dep_->handle(), BH_NO_DEADLINE, nullptr, &p), 0);
  bh_release(&p, BH_SUCCESS);
  bh_cancel_request(nullptr);
  EXPECT_EQ(bh_cancel_requested(nullptr), 0);
  EXPECT_EQ(bh_acquire_cancellable(nullptr, BH_NO_DEADLINE, &cancel, &p), -EINVAL);
}

TEST_F(QueueTest, AnUncancelledWaiterIsAdmittedAndLeavesTheCancelClear) {
  publish(1, 4);
  Permit held = dep_->try_acquire();
  bh_cancel cancel{};
  CancellableWaiter waiter(*dep_, &cancel);
  wait_for_waiters(1);
  held.success();
  EXPECT_EQ(waiter.result(), 0);
  EXPECT_EQ(bh_cancel_requested(&cancel), 0);
  EXPECT_TRUE(no_entry_left(cancel));
  EXPECT_EQ(dep_->inflight(), 0);
}

TEST_F(QueueTest, OneCancelEndsMoreWaitersThanItHasEntries) {
  // small_segment's 8 queue places, and as many entries in a bh_cancel:
  // the waiters of two dependencies, 12 in all, 4 of which find no entry
  // free and look at the request every 10 ms.
  publish(1, 8);
  Dependency other = client_->dependency("ledger");
  const std::uint32_t other_slot = *shm::find_dependency(*segment_, "ledger");
  segment_->dependency(other_slot).control.limit.store(1);
  segment_->dependency(other_slot).partitions.admit_limit.store(1);
  segment_->dependency(other_slot).control.max_queue.store(8);
  Permit held = dep_->try_acquire();
  Permit held_other = other.try_acquire();
  bh_cancel cancel{};
  std::vector<std::unique_ptr<CancellableWaiter>> waiters;
  for (int i = 0; i < 6; ++i) {
    waiters.push_back(std::make_unique<CancellableWaiter>(*dep_, &cancel));
    waiters.push_back(std::make_unique<CancellableWaiter>(other, &cancel));
  }
  wait_for_waiters(6);
  while (shm::queue_length(segment_->queue(other_slot), segment_->queue_slots()) != 6) std::this_thread::yield();
  bh_cancel_request(&cancel);
  for (auto& w : waiters) EXPECT_EQ(w->result(), BH_REJECT_CANCELLED);
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(dep_->inflight(), 1);
  EXPECT_EQ(other.inflight(), 1);
  EXPECT_TRUE(no_entry_left(cancel));
}

bh_cancel g_signal_cancel;

TEST_F(QueueTest, ASignalHandlerCancelsAWaitOnItsOwnThread) {
  // The handler runs on the waiting thread itself, between its sleeps.
  publish(1, 4);
  Permit held = dep_->try_acquire();
  bh_cancel_init(&g_signal_cancel);
  struct sigaction action = {};
  action.sa_handler = [](int) { bh_cancel_request(&g_signal_cancel); };
  struct sigaction before = {};
  ASSERT_EQ(::sigaction(SIGUSR2, &action, &before), 0);
  CancellableWaiter waiter(*dep_, &g_signal_cancel);
  wait_for_waiters(1);
  ASSERT_EQ(::pthread_kill(waiter.native(), SIGUSR2), 0);
  EXPECT_EQ(waiter.result(), BH_REJECT_CANCELLED);
  ::sigaction(SIGUSR2, &before, nullptr);
  EXPECT_EQ(waiting(), 0u);
  EXPECT_TRUE(no_entry_left(g_signal_cancel));
}

TEST_F(QueueTest, AStopRequestEndsAWaitOfTheCppApi) {
  publish(1, 4);
  Permit held = dep_->try_acquire();
  std::atomic<int> result{-1};
  std::jthread waiter([this, &result](std::stop_token stop) {
    Permit p = dep_->acquire(std::chrono::steady_clock::time_point::max(), stop);
    result = p ? 0 : p.reason();
  });
  wait_for_waiters(1);
  waiter.request_stop();
  waiter.join();
  EXPECT_EQ(result.load(), BH_REJECT_CANCELLED);
  EXPECT_EQ(waiting(), 0u);
  // A token stopped already refuses at once; one that never stops waits as
  // acquire() does (here, admitted at once under the limit).
  std::stop_source stopped;
  stopped.request_stop();
  held.success();
  EXPECT_EQ(dep_->acquire(kLongBudget, stopped.get_token()).reason(), BH_REJECT_CANCELLED);
  Permit p = dep_->acquire(kLongBudget, std::stop_token());
  EXPECT_TRUE(p);
}

TEST_F(QueueTest, CancelsRacingWaitersAlwaysEndThem) {
  // Under TSan, the request against a waiter at every point of its wait.
  publish(1, 8);
  Permit held = dep_->try_acquire();
  for (int round = 0; round < 200; ++round) {
    bh_cancel cancel{};
    CancellableWaiter a(*dep_, &cancel);
    CancellableWaiter b(*dep_, &cancel);
    if (round % 2 == 1) wait_for_waiters(2);  // both in the queue, perhaps asleep
    for (int i = 0; i < round % 7; ++i) std::this_thread::yield();
    bh_cancel_request(&cancel);
    ASSERT_EQ(a.result(), BH_REJECT_CANCELLED) << "round " << round;
    ASSERT_EQ(b.result(), BH_REJECT_CANCELLED) << "round " << round;
    ASSERT_TRUE(no_entry_left(cancel));
  }
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(dep_->inflight(), 1);
}

TEST_F(QueueTest, RemainingBudgetOfEachKindOfPermit) {
  publish(5, 0);
  bh_permit p;
  ASSERT_EQ(bh_acquire(dep_->handle(), BH_NO_DEADLINE, &p), 0);
  EXPECT_EQ(bh_permit_remaining_ns(&p), UINT64_MAX);
  bh_release(&p, BH_SUCCESS);
  EXPECT_EQ(bh_permit_remaining_ns(&p), 0u);  // empty
  Permit tried = dep_->try_acquire();
  EXPECT_EQ(tried.remaining(), std::chrono::nanoseconds::max());
  Permit forever = dep_->acquire(std::chrono::nanoseconds::max());
  EXPECT_EQ(forever.remaining(), std::chrono::nanoseconds::max());
  EXPECT_EQ(dep_->inflight(), 2);
}

}  // namespace
}  // namespace bulkhead
