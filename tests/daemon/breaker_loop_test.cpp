// The circuit breaker inside the control loop, on a real segment with a
// fake clock: processes (forked, each with its own client) report outcomes
// through the library, the loop computes the breaker, clients obey it.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "bulkhead/client.hpp"
#include "daemon/control_loop.hpp"
#include "daemon/metrics.hpp"
#include "shm/wait_queue.hpp"
#include "tests/support/children.hpp"
#include "tests/support/log_capture.hpp"
#include "tests/support/loop_fixture.hpp"
#include "tests/support/temp_segment.hpp"
#include "tests/support/waiter.hpp"

namespace bulkhead::daemon {
namespace {

using namespace std::chrono_literals;
using ClientState = bulkhead::BreakerState;  // what a client reads (BH_BREAKER_*)

// A dependency with a breaker: Hystrix's defaults but a 1 s sleep window,
// 3 trial calls, and a fixed limit of 50 that the trials stay under.
constexpr const char* kBreakerConfig =
    "[dependency.pay]\npolicy = \"fixed\"\ninitial_limit = 50\nmax_queue = 4\n"
    "[dependency.pay.breaker]\nenabled = true\nsleep_window_ms = 1000\nhalf_open_calls = 3\n";

class BreakerLoopTest : public testing::LoopFixture {
 protected:
  BreakerLoopTest() : LoopFixture("brk", 16, "queue_slots = 8\n") {}

  void advance(std::chrono::milliseconds t) { advance_ticks(static_cast<int>(t / 100ms)); }
  // `processes` forked processes, each with a client of its own, each
  // reporting `calls` calls of `dep` with `outcome` (and `latency`).
  void report_from_processes(int processes, int calls, Outcome outcome, std::chrono::nanoseconds latency = 1ms,
                             const std::string& dep = "pay") {
    const std::string segment = name_.str();
    testing::run_children(processes, [&](int) {
      Client c(segment);
      Dependency d = c.dependency(dep);
      for (int i = 0; i < calls; ++i) {
        // A test with a limit of 1 has the processes take turns: a call
        // the limit refuses tries again (nothing here is about the limit).
        Permit p = d.try_acquire();
        while (!p && p.reason() == BH_REJECT_LIMIT) {
          std::this_thread::yield();
          p = d.try_acquire();
        }
        if (!p) return 1;
        p.release(outcome, latency);
      }
      return 0;
    });
  }
  shm::DependencyControl& control(const std::string& name) { return segment_->dependency(slot_of(name)).control; }
  std::uint64_t admission(const std::string& name) { return segment_->dependency(slot_of(name)).admission.word.load(); }
  std::uint64_t open_rejected(const std::string& name) {
    return shm::read_counters(*segment_, slot_of(name)).open_rejected;
  }
  // Opens the breaker of "pay": 4 processes report 10 failures each.
  void open_it() {
    report_from_processes(4, 10, Outcome::kFailed);
    advance_ticks(1);
    ASSERT_EQ(view_of("pay").breaker, BreakerState::kOpen);
  }

  // The loop starts on a segment where a previous daemon left the breaker
  // of "pay" in state `left`.
  void expect_open_for_a_sleep_window_after_a_restart(std::uint32_t left) {
    start(kBreakerConfig, [&](shm::Segment& s) {
      const auto claim = shm::find_or_claim_dependency(s, "pay", 50, 0);
      s.dependency(claim.index).control.breaker.store(left);
    });
    Dependency pay = client_->dependency("pay");
    advance_ticks(1);
    EXPECT_EQ(pay.breaker(), ClientState::kOpen);
    EXPECT_EQ(pay.try_acquire().reason(), BH_REJECT_OPEN_CIRCUIT);
    expect_half_open_after_the_sleep_window(pay);
  }
  // Open through the last tick of kBreakerConfig's 1 s sleep window, half
  // open with its 3 trial permits at the next.
  void expect_half_open_after_the_sleep_window(Dependency& pay) {
    advance(900ms);
    EXPECT_EQ(pay.breaker(), ClientState::kOpen);
    advance_ticks(1);
    EXPECT_EQ(pay.breaker(), ClientState::kHalfOpen);
    EXPECT_EQ(shm::trials_left(control("pay").trials.load()), 3u);
  }
};

TEST_F(BreakerLoopTest, OpensFromFailuresOfSeveralProcessesAndRefusesWithoutTouchingInFlight) {
  start(kBreakerConfig);
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  Permit held = pay.try_acquire();  // a call in flight when the breaker opens
  ASSERT_TRUE(held);
  // 4 processes x 3 failures and 2 x 4 successes: 12 of 20 failed.
  report_from_processes(4, 3, Outcome::kFailed);
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kClosed);  // only 12 calls
  report_from_processes(2, 4, Outcome::kSuccess);
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kOpen);
  EXPECT_EQ(control("pay").breaker.load(), shm::kBreakerOpen);

  const std::uint64_t word = admission("pay");
  for (int i = 0; i < 5; ++i) {
    Permit p = pay.try_acquire();
    EXPECT_FALSE(p);
    EXPECT_EQ(p.reason(), BH_REJECT_OPEN_CIRCUIT);
  }
  Permit waited = pay.acquire(1s);
  EXPECT_EQ(waited.reason(), BH_REJECT_OPEN_CIRCUIT);  // at once, no queue
  EXPECT_EQ(admission("pay"), word);                   // not even the operation counter moved
  EXPECT_EQ(pay.inflight(), 1);
  EXPECT_EQ(open_rejected("pay"), 6u);
  held.success();
}

TEST_F(BreakerLoopTest, TimeoutsCountAsFailuresAndIgnoredCallsDoNotCount) {
  start(kBreakerConfig);
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  report_from_processes(1, 100, Outcome::kIgnore);
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kClosed);
  report_from_processes(2, 10, Outcome::kDropped);
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kOpen);
}

TEST_F(BreakerLoopTest, HalfOpensAfterTheSleepWindowAndClosesOnTrialSuccess) {
  start(kBreakerConfig);
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  open_it();
  expect_half_open_after_the_sleep_window(pay);

  std::vector<Permit> trials;
  for (int i = 0; i < 3; ++i) trials.push_back(pay.try_acquire());
  for (const Permit& p : trials) EXPECT_TRUE(p);
  Permit fourth = pay.try_acquire();
  EXPECT_EQ(fourth.reason(), BH_REJECT_OPEN_CIRCUIT);
  advance_ticks(3);  // trials out, no verdict yet: still half open
  EXPECT_EQ(pay.breaker(), ClientState::kHalfOpen);
  for (Permit& p : trials) p.success();
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kClosed);
  EXPECT_TRUE(pay.try_acquire());
}

TEST_F(BreakerLoopTest, ATrialFailureReopensForAnotherSleepWindow) {
  start(kBreakerConfig);
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  open_it();
  advance(1000ms);
  ASSERT_EQ(pay.breaker(), ClientState::kHalfOpen);
  Permit a = pay.try_acquire(), b = pay.try_acquire();
  ASSERT_TRUE(a && b);
  a.success();
  b.failed();
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kOpen);
  EXPECT_EQ(shm::trials_left(control("pay").trials.load()), 0u);  // the episode's last permit is void
  EXPECT_EQ(pay.try_acquire().reason(), BH_REJECT_OPEN_CIRCUIT);
  expect_half_open_after_the_sleep_window(pay);
}

// A reload that changes half_open_calls mid-episode applies at once, to
// the permits as well as to the successes that close it: raised, the
// episode hands out the extra permits (trials that all succeed close it,
// never reopen it for want of a verdict); lowered, fewer are left.
TEST_F(BreakerLoopTest, AReloadThatChangesTheTrialCallsMidEpisodeKeepsPermitsAndVerdictInStep) {
  start(kBreakerConfig);
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  open_it();
  expect_half_open_after_the_sleep_window(pay);
  const auto with_trials = [](int n) {
    std::string toml = kBreakerConfig;
    return toml.replace(toml.find("half_open_calls = 3"), 19, "half_open_calls = " + std::to_string(n));
  };
  loop_->apply(parse(with_trials(5), "five.toml"));
  EXPECT_EQ(shm::trials_left(control("pay").trials.load()), 5u);
  std::vector<Permit> trials;
  for (int i = 0; i < 5; ++i) trials.push_back(pay.try_acquire());
  for (const Permit& p : trials) EXPECT_TRUE(p);
  for (Permit& p : trials) p.success();
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kClosed);
  advance(2000ms);  // past a sleep window: closed it stays
  EXPECT_EQ(pay.breaker(), ClientState::kClosed);

  loop_->apply(parse(kBreakerConfig, "three.toml"));
  open_it();
  expect_half_open_after_the_sleep_window(pay);
  Permit taken = pay.try_acquire();
  ASSERT_TRUE(taken);
  loop_->apply(parse(with_trials(2), "two.toml"));
  EXPECT_EQ(shm::trials_left(control("pay").trials.load()), 1u);
  Permit second = pay.try_acquire();
  ASSERT_TRUE(second);
  EXPECT_EQ(pay.try_acquire().reason(), BH_REJECT_OPEN_CIRCUIT);
  taken.success();
  second.success();
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kClosed);
}

// Many processes race for the trial permits, each keeping what it gets:
// exactly half_open_calls are admitted host-wide.
TEST_F(BreakerLoopTest, NeverMoreThanTheTrialCallsAtOnceAcrossProcesses) {
  start(kBreakerConfig);
  client_->dependency("pay");
  advance_ticks(1);
  open_it();
  advance(1000ms);
  ASSERT_EQ(view_of("pay").breaker, BreakerState::kHalfOpen);

  // A pipe per child: how many it was admitted, out of 200 tries by 4
  // threads, all held until the child is killed.
  constexpr int kChildren = 6;
  std::vector<std::unique_ptr<testing::PausedChild>> children;
  std::vector<int> reads;
  const std::string segment = name_.str();
  for (int i = 0; i < kChildren; ++i) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    children.push_back(std::make_unique<testing::PausedChild>([&, fds] {
      auto* c = new Client(segment);  // leaked: the child is killed holding permits
      Dependency d = c->dependency("pay");
      std::atomic<int> admitted{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
          for (int k = 0; k < 50; ++k) {
            Permit p = d.try_acquire();
            if (p) {
              ++admitted;
              new Permit(std::move(p));  // held
            }
          }
        });
      }
      for (auto& t : threads) t.join();
      const char n = static_cast<char>(admitted.load());
      return ::write(fds[1], &n, 1) == 1;
    }));
    ::close(fds[1]);
    reads.push_back(fds[0]);
  }
  int total = 0;
  for (int i = 0; i < kChildren; ++i) {
    ASSERT_TRUE(children[i]->ok());
    char n = 0;
    ASSERT_EQ(::read(reads[i], &n, 1), 1);
    ::close(reads[i]);
    total += n;
  }
  EXPECT_EQ(total, 3);
  EXPECT_EQ(shm::admission_inflight(admission("pay")), 3u);
  EXPECT_EQ(open_rejected("pay"), 6u * 200 - 3);
}

TEST_F(BreakerLoopTest, ATrialThatTheLimitRefusesIsGivenBack) {
  start("[dependency.pay]\npolicy = \"fixed\"\ninitial_limit = 1\nmin_limit = 1\n"
        "[dependency.pay.breaker]\nenabled = true\nsleep_window_ms = 1000\nminimum_calls = 2\n");
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  report_from_processes(2, 2, Outcome::kFailed);
  advance_ticks(1);
  ASSERT_EQ(pay.breaker(), ClientState::kOpen);
  advance(1000ms);
  ASSERT_EQ(pay.breaker(), ClientState::kHalfOpen);
  Permit first = pay.try_acquire();
  ASSERT_TRUE(first);
  EXPECT_EQ(pay.try_acquire().reason(), BH_REJECT_LIMIT);  // a trial taken, then the limit refused
  EXPECT_EQ(shm::trials_left(control("pay").trials.load()), 2u);
  first.success();
}

TEST_F(BreakerLoopTest, SlowCallRateOpensIt) {
  start("[dependency.pay]\npolicy = \"fixed\"\ninitial_limit = 50\n"
        "[dependency.pay.breaker]\nenabled = true\nslow_call_duration_ms = 200\n"
        "slow_call_rate_threshold = 0.5\n");
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  report_from_processes(2, 10, Outcome::kSuccess, 10ms);
  report_from_processes(2, 5, Outcome::kSuccess, 300ms);
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kClosed);  // 10 slow of 30
  report_from_processes(2, 6, Outcome::kSuccess, 300ms);
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kOpen);  // 22 of 42
}

// Calls made while slow calls were off (slow_call_duration_ms = 0) stay in
// the breaker's window across a reload that turns them on: they must have
// been counted as not slow, not as slow past a threshold of 0.
TEST_F(BreakerLoopTest, CallsFromBeforeSlowCallsWereOnDoNotCountAsSlow) {
  start(kBreakerConfig);
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  report_from_processes(2, 10, Outcome::kSuccess, 1ms);  // the breaker's 20-call minimum
  advance_ticks(1);
  loop_->apply(parse(std::string(kBreakerConfig) + "slow_call_duration_ms = 200\nslow_call_rate_threshold = 0.5\n",
                     "slow.toml"));
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kClosed);
  report_from_processes(2, 11, Outcome::kSuccess, 300ms);  // 22 slow of 42: now it opens
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kOpen);
}

TEST_F(BreakerLoopTest, ForcedByConfigAndByTheOverrideWhichWins) {
  start(kBreakerConfig);
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  // The override bulkheadctl writes: held across ticks, whatever the outcomes.
  control("pay").breaker_override.store(shm::kOverrideOpen);
  advance_ticks(1);
  EXPECT_EQ(control("pay").breaker.load(), shm::kBreakerOpen | shm::kBreakerForced);
  advance(10'000ms);
  EXPECT_EQ(pay.breaker(), ClientState::kOpen);
  EXPECT_TRUE(view_of("pay").breaker_forced);
  EXPECT_EQ(pay.try_acquire().reason(), BH_REJECT_OPEN_CIRCUIT);

  // The config forces closed; the override still wins.
  const std::string forced_closed = std::string(kBreakerConfig) + "force = \"closed\"\n";
  loop_->apply(parse(forced_closed, "next.toml"));
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kOpen);
  control("pay").breaker_override.store(shm::kOverrideAuto);
  advance_ticks(1);
  EXPECT_EQ(control("pay").breaker.load(), shm::kBreakerClosed | shm::kBreakerForced);
  report_from_processes(2, 20, Outcome::kFailed);
  advance_ticks(3);
  EXPECT_EQ(pay.breaker(), ClientState::kClosed);

  // Back to auto by config: failures open it again.
  loop_->apply(parse(kBreakerConfig, "auto.toml"));
  advance_ticks(1);
  EXPECT_EQ(control("pay").breaker.load(), shm::kBreakerClosed);
  report_from_processes(2, 20, Outcome::kFailed);
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kOpen);

  // Junk in the override counts as none; junk in the state word is repaired.
  control("pay").breaker_override.store(77);
  control("pay").breaker.store(0xdead);
  advance_ticks(1);
  EXPECT_EQ(control("pay").breaker.load(), shm::kBreakerOpen);
}

TEST_F(BreakerLoopTest, ShadowModeCountsWouldBeRejectionsAndAdmits) {
  start("[dependency.pay]\npolicy = \"fixed\"\ninitial_limit = 50\nenforce = false\n"
        "[dependency.pay.breaker]\nenabled = true\nsleep_window_ms = 1000\n");
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  report_from_processes(2, 10, Outcome::kFailed);
  advance_ticks(1);
  ASSERT_EQ(pay.breaker(), ClientState::kOpen);
  for (int i = 0; i < 4; ++i) {
    Permit p = pay.try_acquire();
    EXPECT_TRUE(p);
    p.ignore();
  }
  Permit waited = pay.acquire(1s);
  EXPECT_TRUE(waited);
  waited.ignore();
  const auto c = shm::read_counters(*segment_, slot_of("pay"));
  EXPECT_EQ(c.shadow_open, 5u);
  EXPECT_EQ(c.open_rejected, 0u);
}

TEST_F(BreakerLoopTest, AWaiterLeavesWhenTheBreakerOpens) {
  start("[dependency.pay]\npolicy = \"fixed\"\ninitial_limit = 1\nmin_limit = 1\nmax_queue = 4\n"
        "[dependency.pay.breaker]\nenabled = true\nminimum_calls = 4\n");
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  // Failures reported, not yet seen by the daemon; then a call waits.
  report_from_processes(2, 2, Outcome::kFailed);
  Permit held = pay.try_acquire();
  ASSERT_TRUE(held);
  testing::BackgroundWaiter waiter(pay, 60s);
  const std::uint32_t slot = slot_of("pay");
  while (shm::queue_length(segment_->queue(slot), segment_->queue_slots()) != 1) std::this_thread::yield();
  advance_ticks(1);  // opens, and wakes the queue
  EXPECT_EQ(pay.breaker(), ClientState::kOpen);
  EXPECT_EQ(waiter.result(), BH_REJECT_OPEN_CIRCUIT);
  held.success();
}

// A daemon that restarts while its breaker is open, or half open, does not
// let the traffic back in at once: the breaker stays open for a sleep
// window, then tries.
TEST_F(BreakerLoopTest, ABreakerAPreviousDaemonLeftOpenStaysOpenForASleepWindow) {
  expect_open_for_a_sleep_window_after_a_restart(shm::kBreakerOpen);
}

TEST_F(BreakerLoopTest, ABreakerAPreviousDaemonLeftHalfOpenIsOpenForASleepWindow) {
  expect_open_for_a_sleep_window_after_a_restart(shm::kBreakerHalfOpen);
}

// An operator's force open that ended while no daemon ran (bulkheadctl
// breaker auto between a stop and a start, or a config without the force)
// is a force released: trial calls decide at once, as when it is released
// under a running daemon, not after another sleep window of refusals.
TEST_F(BreakerLoopTest, AForceOpenReleasedWhileNoDaemonRanHalfOpensAtOnce) {
  start(kBreakerConfig, [&](shm::Segment& s) {
    const auto claim = shm::find_or_claim_dependency(s, "pay", 50, 0);
    s.dependency(claim.index).control.breaker.store(shm::kBreakerOpen | shm::kBreakerForced);
  });
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kHalfOpen);
  EXPECT_EQ(shm::trials_left(control("pay").trials.load()), 3u);
  EXPECT_FALSE(view_of("pay").breaker_forced);
}

// Still forced at the start: held, and released as any force is.
TEST_F(BreakerLoopTest, AForceOpenStillInForceAtAStartHoldsThenReleasesToHalfOpen) {
  start(kBreakerConfig, [&](shm::Segment& s) {
    const auto claim = shm::find_or_claim_dependency(s, "pay", 50, 0);
    s.dependency(claim.index).control.breaker.store(shm::kBreakerOpen | shm::kBreakerForced);
    s.dependency(claim.index).control.breaker_override.store(shm::kOverrideOpen);
  });
  Dependency pay = client_->dependency("pay");
  advance(3000ms);
  EXPECT_EQ(control("pay").breaker.load(), shm::kBreakerOpen | shm::kBreakerForced);
  control("pay").breaker_override.store(shm::kOverrideAuto);
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kHalfOpen);
}

// More trial permits than half_open_calls can only be a client's junk:
// the daemon puts the bound back, and says so; all of them, none taken yet,
// is no junk.
TEST_F(BreakerLoopTest, TrialPermitsOverTheBoundAreReset) {
  start(kBreakerConfig);
  client_->dependency("pay");
  advance_ticks(1);
  open_it();
  advance(1000ms);
  ASSERT_EQ(view_of("pay").breaker, BreakerState::kHalfOpen);
  const testing::LogCapture log;
  advance_ticks(1);
  EXPECT_EQ(log.count("trial permits left"), 0u) << log.text();
  const std::uint64_t trials = control("pay").trials.load();
  control("pay").trials.store(shm::trials_word(shm::trials_episode(trials), 100));
  advance_ticks(1);
  EXPECT_EQ(control("pay").trials.load(), trials);
  EXPECT_EQ(log.count("warning dependency pay: 100 trial permits left, more than half_open_calls (3): reset"), 1u)
      << log.text();
}

// An override bulkheadctl does not write counts as none, and is worth one
// warning per value, not one a tick.
TEST_F(BreakerLoopTest, AJunkOverrideIsWarnedAboutOnce) {
  start(kBreakerConfig);
  client_->dependency("pay");
  advance_ticks(1);
  const testing::LogCapture log;
  control("pay").breaker_override.store(shm::kOverrideAuto);
  advance_ticks(1);
  EXPECT_EQ(log.count("breaker override"), 0u) << log.text();
  control("pay").breaker_override.store(77);
  advance_ticks(3);
  EXPECT_EQ(log.count("warning dependency pay: breaker override 77 is not one bulkheadctl writes; ignored"), 1u)
      << log.text();
  EXPECT_EQ(control("pay").breaker.load(), shm::kBreakerClosed);
  control("pay").breaker_override.store(78);
  advance_ticks(1);
  EXPECT_EQ(log.count("breaker override"), 2u) << log.text();
}

// The breaker_state gauge and the transitions counter, through a whole
// episode: closed, open, half open, closed.
TEST_F(BreakerLoopTest, TheMetricsFollowTheBreakerThroughAnEpisode) {
  start(kBreakerConfig, {}, /*with_metrics=*/true);
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  const Metrics::Dependency& m = metrics_->dependency("pay");
  EXPECT_EQ(m.breaker_state, 0);
  open_it();
  EXPECT_EQ(m.breaker_state, 1);
  advance(1000ms);
  EXPECT_EQ(m.breaker_state, 2);
  for (int i = 0; i < 3; ++i) {
    Permit trial = pay.try_acquire();
    ASSERT_TRUE(trial);
    trial.success();
  }
  advance_ticks(1);
  EXPECT_EQ(m.breaker_state, 0);
  EXPECT_EQ(m.transitions, (std::array<double, 3>{1, 1, 1}));  // closed, open, half open
}

// bulkhead_breaker_forced: whether the state is an operator's, which the
// state gauge alone does not say.
TEST_F(BreakerLoopTest, TheMetricsSayWhenAnOperatorHoldsTheBreaker) {
  start(kBreakerConfig, {}, /*with_metrics=*/true);
  client_->dependency("pay");
  advance_ticks(1);
  const Metrics::Dependency& m = metrics_->dependency("pay");
  EXPECT_FALSE(m.breaker_forced);
  open_it();
  EXPECT_EQ(m.breaker_state, 1);
  EXPECT_FALSE(m.breaker_forced);  // tripped, not forced
  control("pay").breaker_override.store(shm::kOverrideOpen);
  advance_ticks(1);
  EXPECT_EQ(m.breaker_state, 1);
  EXPECT_TRUE(m.breaker_forced);
  control("pay").breaker_override.store(shm::kOverrideAuto);
  advance_ticks(1);
  EXPECT_FALSE(m.breaker_forced);
  loop_->apply(parse(std::string(kBreakerConfig) + "force = \"closed\"\n", "forced.toml"));
  advance_ticks(1);
  EXPECT_EQ(m.breaker_state, 0);
  EXPECT_TRUE(m.breaker_forced);
}

TEST_F(BreakerLoopTest, DisabledByDefault) {
  start("[dependency.pay]\npolicy = \"fixed\"\ninitial_limit = 50\n");
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  report_from_processes(2, 20, Outcome::kFailed);
  advance_ticks(1);
  EXPECT_EQ(pay.breaker(), ClientState::kClosed);
  EXPECT_TRUE(pay.try_acquire());
}

}  // namespace
}  // namespace bulkhead::daemon
