// bulkhead::execute and FallbackGuard (bulkhead/fallback.hpp) on a real
// segment with no daemon: the test sets the limit, the queue and the
// breaker state itself, as bulkheadd would publish them.
#include "bulkhead/fallback.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "shm/stats.hpp"
#include "shm/wait_queue.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {

using namespace std::chrono_literals;
using testing::TempSegmentName;

class FallbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    segment_.emplace(shm::Segment::create(name_, testing::small_segment()));
    segment_->header().default_limit.store(4);
    client_.emplace(name_.str());
    dep_.emplace(client_->dependency("pay"));
  }
  shm::DependencyControl& control() { return segment_->dependency(*shm::find_dependency(*segment_, "pay")).control; }
  // What the daemon publishes for a dependency without partitions: the
  // limit, and the fast path's limit equal to it.
  void set_limit(std::uint32_t limit, const std::string& dep = "pay") {
    shm::DependencySlot& slot = segment_->dependency(*shm::find_dependency(*segment_, dep));
    slot.control.limit.store(limit);
    slot.partitions.admit_limit.store(limit);
  }
  shm::DependencyCounters counters() {
    return shm::read_counters(*segment_, *shm::find_dependency(*segment_, "pay"));
  }
  // What reason a fallback saw, for a call that would return 1.
  FallbackReason reason_of(const ExecuteOptions& options = {}) {
    FallbackReason seen = FallbackReason::kFailed;
    bool ran = false;
    const int r = execute(
        *dep_, guard_, [] { return 1; },
        [&](const FallbackContext& why) {
          seen = why.reason;
          ran = true;
          return 2;
        },
        options);
    EXPECT_EQ(r, 2);
    EXPECT_TRUE(ran);
    return seen;
  }

  TempSegmentName name_{"fb"};
  std::optional<shm::Segment> segment_;
  std::optional<Client> client_;
  std::optional<Dependency> dep_;
  FallbackGuard guard_{2};
};

TEST_F(FallbackTest, RunsTheCallUnderAPermitAndReportsSuccess) {
  long inflight_inside = -1;
  const int r = execute(
      *dep_, guard_, [&] {
        inflight_inside = dep_->inflight();
        return 7;
      },
      [](const FallbackContext&) { return -1; });
  EXPECT_EQ(r, 7);
  EXPECT_EQ(inflight_inside, 1);
  EXPECT_EQ(dep_->inflight(), 0);
  EXPECT_EQ(counters().ok, 1u);
  // A call may take its permit, for its budget.
  const bool unbounded = execute(
      *dep_, guard_, [](const Permit& p) { return p.remaining() == std::chrono::nanoseconds::max(); },
      [](const FallbackContext&) { return false; });
  EXPECT_TRUE(unbounded);
  // A void call.
  int side = 0;
  execute(*dep_, guard_, [&] { side = 1; }, [&](const FallbackContext&) { side = 2; });
  EXPECT_EQ(side, 1);
}

TEST_F(FallbackTest, AThrowingCallIsAFailureAndTheFallbackSeesWhatItThrew) {
  std::string what;
  const int r = execute(
      *dep_, guard_, []() -> int { throw CallFailed("HTTP 503"); },
      [&](const FallbackContext& why) {
        EXPECT_EQ(why.reason, FallbackReason::kFailed);
        EXPECT_EQ(dep_->inflight(), 0);  // the permit went back first
        try {
          std::rethrow_exception(why.error);
        } catch (const std::exception& e) {
          what = e.what();
        }
        return -1;
      });
  EXPECT_EQ(r, -1);
  EXPECT_EQ(what, "HTTP 503");
  EXPECT_EQ(counters().failed, 1u);
  // Any exception is a failure; CallDropped is a timeout.
  execute(*dep_, guard_, []() -> int { throw std::runtime_error("x"); }, [](const FallbackContext&) { return 0; });
  execute(*dep_, guard_, []() -> int { throw CallDropped("timeout"); }, [](const FallbackContext&) { return 0; });
  EXPECT_EQ(counters().failed, 2u);
  EXPECT_EQ(counters().dropped, 1u);
}

TEST_F(FallbackTest, EachRefusalGivesItsReason) {
  set_limit(0);
  EXPECT_EQ(reason_of(), FallbackReason::kLimit);
  // Waiting: no queue configured (max_queue 0), then one place and a budget
  // that runs out.
  EXPECT_EQ(reason_of({.wait = 10ms}), FallbackReason::kQueueFull);
  control().max_queue.store(1);
  EXPECT_EQ(reason_of({.wait = 20ms}), FallbackReason::kDeadline);
  set_limit(4);
  control().breaker.store(shm::kBreakerOpen);
  EXPECT_EQ(reason_of(), FallbackReason::kOpenCircuit);
  EXPECT_EQ(reason_of({.wait = 10ms}), FallbackReason::kOpenCircuit);
  EXPECT_EQ(counters().open_rejected, 2u);
  EXPECT_EQ(dep_->inflight(), 0);
  EXPECT_STREQ(to_string(FallbackReason::kOpenCircuit), "open_circuit");
  EXPECT_STREQ(to_string(FallbackReason::kQueueFull), "queue_full");
}

// A cancelled wait runs neither the call nor the fallback: execute()
// throws WaitCancelled, whether the request came before the call or while
// it waited in the queue.
TEST_F(FallbackTest, ACancelledWaitThrowsAndRunsNeitherTheCallNorTheFallback) {
  set_limit(0);
  control().max_queue.store(1);
  std::atomic<int> ran{0};
  bh_cancel cancel;
  bh_cancel_init(&cancel);
  const auto run = [&] {
    return execute(
        *dep_, guard_, [&] { return ++ran, 1; }, [&](const FallbackContext&) { return ++ran, 2; },
        {.wait = 60s, .cancel = &cancel});
  };
  bh_cancel_request(&cancel);
  EXPECT_THROW(run(), WaitCancelled);
  bh_cancel_init(&cancel);
  auto waiting = std::async(std::launch::async, run);
  const std::uint32_t slot = *shm::find_dependency(*segment_, "pay");
  while (shm::queue_length(segment_->queue(slot), segment_->queue_slots()) != 1) std::this_thread::yield();
  bh_cancel_request(&cancel);
  EXPECT_THROW(waiting.get(), WaitCancelled);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(guard_.active(), 0u);
  EXPECT_EQ(shm::queue_length(segment_->queue(slot), segment_->queue_slots()), 0u);
  // Without a request, the same options wait and are admitted as before.
  bh_cancel_init(&cancel);
  set_limit(4);
  EXPECT_EQ(run(), 1);
  EXPECT_EQ(ran.load(), 1);
}

// Fallbacks that stall fill their guard; one more is refused at once with
// FallbackRefused, and calls that are admitted run as before.
TEST_F(FallbackTest, AStallingFallbackHitsItsOwnLimitAndTheCallPathIsUnaffected) {
  control().breaker.store(shm::kBreakerOpen);
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  std::atomic<int> stalled{0};
  auto stalling_fallback = [&](const FallbackContext&) {
    ++stalled;
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return go; });
    return 0;
  };
  std::vector<std::future<int>> stuck;
  for (int i = 0; i < 2; ++i) {
    stuck.push_back(std::async(std::launch::async, [&] {
      return execute(*dep_, guard_, [] { return 1; }, stalling_fallback);
    }));
  }
  while (stalled.load() < 2) std::this_thread::yield();
  EXPECT_EQ(guard_.active(), 2u);
  try {
    execute(*dep_, guard_, [] { return 1; }, stalling_fallback);
    ADD_FAILURE() << "a third fallback ran";
  } catch (const FallbackRefused& e) {
    EXPECT_EQ(e.reason(), FallbackReason::kOpenCircuit);
    EXPECT_NE(std::string(e.what()).find("open_circuit"), std::string::npos);
  }
  EXPECT_EQ(guard_.refused(), 1u);
  // The breaker closes: calls are admitted and run, fallbacks still stuck.
  control().breaker.store(shm::kBreakerClosed);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(execute(*dep_, guard_, [] { return 5; }, stalling_fallback), 5);
  EXPECT_EQ(guard_.active(), 2u);
  {
    std::lock_guard lock(m);
    go = true;
  }
  cv.notify_all();
  for (auto& f : stuck) EXPECT_EQ(f.get(), 0);
  EXPECT_EQ(guard_.active(), 0u);
}

TEST_F(FallbackTest, WithoutAGuardEachDependencyHasItsOwnDefaultBound) {
  set_limit(0);
  std::atomic<int> inside{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> threads;
  std::atomic<int> refused{0};
  for (std::size_t i = 0; i < kDefaultMaxConcurrentFallbacks + 3; ++i) {
    threads.emplace_back([&] {
      try {
        execute(*dep_, [] { return 1; }, [&](const FallbackContext&) {
          ++inside;
          while (!release.load()) std::this_thread::sleep_for(1ms);
          return 0;
        });
      } catch (const FallbackRefused&) {
        ++refused;
      }
    });
  }
  while (inside.load() + refused.load() < static_cast<int>(kDefaultMaxConcurrentFallbacks) + 3) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(inside.load(), static_cast<int>(kDefaultMaxConcurrentFallbacks));
  EXPECT_EQ(refused.load(), 3);
  // Another dependency's fallbacks have a bound of their own.
  Dependency other = client_->dependency("other");
  set_limit(0, "other");
  EXPECT_EQ(execute(other, [] { return 1; }, [](const FallbackContext&) { return 3; }), 3);
  release = true;
  for (auto& t : threads) t.join();
}

// Each thread keeps the last few default guards it found: a thread that
// goes round more dependencies than that still finds each one's own, the
// one other threads find.
TEST_F(FallbackTest, EveryThreadFindsEachDependencysOwnDefaultGuard) {
  std::vector<Dependency> deps;
  for (int i = 0; i < 6; ++i) deps.push_back(client_->dependency("dep" + std::to_string(i)));
  std::vector<FallbackGuard*> first;
  for (Dependency& d : deps) first.push_back(&detail::default_guard(d.handle()));
  for (std::size_t i = 0; i < first.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(first[i], first[j]) << i << " " << j;
  }
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < deps.size(); ++i) {
      EXPECT_EQ(&detail::default_guard(deps[i].handle()), first[i]) << "round " << round << ", dep" << i;
      EXPECT_EQ(&detail::default_guard(deps[0].handle()), first[0]) << "round " << round << ", dep" << i;
    }
  }
  std::vector<FallbackGuard*> elsewhere;
  std::thread([&] {
    for (auto it = deps.rbegin(); it != deps.rend(); ++it) elsewhere.push_back(&detail::default_guard(it->handle()));
  }).join();
  EXPECT_EQ(std::vector<FallbackGuard*>(elsewhere.rbegin(), elsewhere.rend()), first);
}

// A fallback that runs while the process exits (in a static's destructor,
// or on a thread still serving) finds its dependency's default guard as it
// was: the guards are never destroyed. Run in a process of its own
// (threadsafe death test: this test alone, from the start), so that the
// guards are first needed after the static below is made, and would be
// destroyed before it. Before the fix the late fallback used a destroyed
// map and guard: AddressSanitizer reports it (scripts/test.sh --sanitizers);
// a plain build sees a fresh guard and exits 1, or by chance passes.
TEST_F(FallbackTest, TheDefaultGuardsOutliveTheStaticsOfTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  set_limit(0);
  struct ExecuteAtExit {
    Dependency dep;
    ~ExecuteAtExit() {
      try {
        execute(dep, [] { return 1; }, [](const FallbackContext&) { return 2; });
        std::_Exit(1);  // the guard forgot the fallbacks that still run
      } catch (const FallbackRefused&) {
        std::_Exit(0);
      }
    }
  };
  EXPECT_EXIT(
      {
        static ExecuteAtExit at_exit{*dep_};
        // Fallbacks that never end fill the guard, and still run at exit.
        auto* inside = new std::atomic<std::size_t>{0};  // never destroyed
        for (std::size_t i = 0; i < kDefaultMaxConcurrentFallbacks; ++i) {
          std::thread([this, inside] {
            execute(*dep_, [] { return 1; }, [inside](const FallbackContext&) -> int {
              ++*inside;
              for (;;) std::this_thread::sleep_for(1h);
            });
          }).detach();
        }
        while (inside->load() < kDefaultMaxConcurrentFallbacks) std::this_thread::sleep_for(1ms);
        shm::Segment::remove(name_);  // this process's, which std::exit() does not tidy
        std::exit(3);  // the statics' destructors run; at_exit's ends the process
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace bulkhead
