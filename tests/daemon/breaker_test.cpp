// The circuit breaker's state machine alone, with a fake clock: ticks of
// outcomes go in, transitions come out.
#include "daemon/breaker.hpp"

#include <gtest/gtest.h>

namespace bulkhead::daemon {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kTickNs = 100'000'000;  // 100 ms

class BreakerTest : public ::testing::Test {
 protected:
  void make(BreakerSettings s) {
    s.enabled = true;
    breaker_.emplace(s, BreakerState::kClosed, now_ns_);
  }
  // One tick of `ok` successes, `failed` failures and `slow` slow successes
  // (of ok). Returns the state after it.
  BreakerState feed(std::uint64_t ok, std::uint64_t failed, std::uint64_t slow = 0,
                    BreakerForce force = BreakerForce::kAuto) {
    last_ = breaker_->observe({ok, failed, slow}, force, "a test", trials_left_, now_ns_ += kTickNs);
    return breaker_->state();
  }
  BreakerState advance(std::chrono::milliseconds t, BreakerForce force = BreakerForce::kAuto) {
    BreakerState s = breaker_->state();
    for (auto left = t; left > 0ms; left -= 100ms) s = feed(0, 0, 0, force);
    return s;
  }
  // Opens a fresh breaker (default settings) with 10 failures in 20 calls.
  void open_it() {
    ASSERT_EQ(feed(10, 10), BreakerState::kOpen);
  }

  std::uint64_t now_ns_ = 1'000'000'000;
  std::uint32_t trials_left_ = 3;
  std::optional<Breaker> breaker_;
  std::optional<Breaker::Transition> last_;
};

TEST_F(BreakerTest, OpensAtTheFailureRateWithTheMinimumVolume) {
  make({});
  EXPECT_EQ(feed(10, 9), BreakerState::kClosed);  // 19 calls: under the volume
  EXPECT_EQ(feed(1, 0), BreakerState::kClosed);   // 20 calls, 45 %
  EXPECT_EQ(feed(0, 1), BreakerState::kClosed);   // 21 calls, 47.6 %
  EXPECT_EQ(feed(0, 1), BreakerState::kOpen);     // 22 calls, 50 %
  EXPECT_EQ(last_->reason, "11 of 22 calls failed (50% >= 50%)");
}

TEST_F(BreakerTest, StaysClosedUnderTheThresholdOrTheVolume) {
  make({});
  for (int i = 0; i < 200; ++i) ASSERT_EQ(feed(6, 4), BreakerState::kClosed);  // 40 %
  make({});
  for (int i = 0; i < 9; ++i) ASSERT_EQ(feed(0, 1), BreakerState::kClosed);  // 100 %, but 9 calls
}

TEST_F(BreakerTest, FailuresOutsideTheWindowDoNotCount) {
  BreakerSettings s;
  s.window = 1000ms;
  make(s);
  EXPECT_EQ(feed(0, 15), BreakerState::kClosed);
  advance(1000ms);                                  // the 15 failures age out
  EXPECT_EQ(feed(5, 5), BreakerState::kClosed);     // 10 calls in the window
  make(s);
  EXPECT_EQ(feed(0, 15), BreakerState::kClosed);
  advance(500ms);
  EXPECT_EQ(feed(5, 5), BreakerState::kOpen);       // 25 calls, 20 failed
  make(s);
  EXPECT_EQ(feed(0, 15), BreakerState::kClosed);
  advance(900ms);
  EXPECT_EQ(feed(5, 5), BreakerState::kClosed);     // a tick one window old is out
}

TEST_F(BreakerTest, OpenForTheSleepWindowThenHalfOpenClosesOnTrialSuccesses) {
  make({});
  open_it();
  ASSERT_TRUE(last_);
  EXPECT_EQ(last_->from, BreakerState::kClosed);
  EXPECT_EQ(last_->to, BreakerState::kOpen);
  EXPECT_EQ(advance(4900ms), BreakerState::kOpen);
  EXPECT_EQ(feed(0, 0), BreakerState::kHalfOpen);  // 5 s after it opened
  EXPECT_EQ(feed(2, 0), BreakerState::kHalfOpen);
  EXPECT_EQ(feed(1, 0), BreakerState::kClosed);    // the third trial
  EXPECT_EQ(breaker_->window_calls(), 0u);         // a fresh window
}

TEST_F(BreakerTest, HalfOpenReopensOnATrialFailure) {
  make({});
  open_it();
  advance(5000ms);
  ASSERT_EQ(breaker_->state(), BreakerState::kHalfOpen);
  EXPECT_EQ(feed(2, 1), BreakerState::kOpen);
  EXPECT_EQ(last_->reason, "a trial call failed");
  EXPECT_EQ(advance(4900ms), BreakerState::kOpen);  // a whole new sleep window
  EXPECT_EQ(feed(0, 0), BreakerState::kHalfOpen);
}

TEST_F(BreakerTest, EachHalfOpenCountsItsOwnTrials) {
  make({});
  open_it();
  advance(5000ms);
  EXPECT_EQ(feed(2, 0), BreakerState::kHalfOpen);  // two of three successes
  EXPECT_EQ(feed(0, 1), BreakerState::kOpen);
  advance(5000ms);
  ASSERT_EQ(breaker_->state(), BreakerState::kHalfOpen);
  // Neither the failure nor the two successes of the last half open count
  // in this one.
  EXPECT_EQ(feed(2, 0), BreakerState::kHalfOpen);
  EXPECT_EQ(feed(1, 0), BreakerState::kClosed);
}

TEST_F(BreakerTest, EachHalfOpenWaitsAFullSleepWindowForAVerdict) {
  make({});
  open_it();
  advance(5000ms);
  trials_left_ = 0;
  advance(3000ms);  // every trial out for 3 s, then one fails
  EXPECT_EQ(feed(0, 1), BreakerState::kOpen);
  advance(5000ms);
  ASSERT_EQ(breaker_->state(), BreakerState::kHalfOpen);
  // Every trial out again: the wait starts over, not from 3 s in.
  EXPECT_EQ(advance(5000ms), BreakerState::kHalfOpen);
  EXPECT_EQ(feed(0, 0), BreakerState::kOpen);
}

TEST_F(BreakerTest, HalfOpenWithEveryTrialOutAndNoVerdictReopensAfterTheSleepWindow) {
  make({});
  open_it();
  advance(5000ms);
  ASSERT_EQ(breaker_->state(), BreakerState::kHalfOpen);
  EXPECT_EQ(advance(10'000ms), BreakerState::kHalfOpen);  // permits left: waits for traffic
  trials_left_ = 0;                                       // all taken, none reports
  EXPECT_EQ(advance(5000ms), BreakerState::kHalfOpen);
  EXPECT_EQ(feed(0, 0), BreakerState::kOpen);
}

TEST_F(BreakerTest, ATrialGivenBackRestartsTheWaitForAVerdict) {
  make({});
  open_it();
  advance(5000ms);
  ASSERT_EQ(breaker_->state(), BreakerState::kHalfOpen);
  trials_left_ = 0;  // every trial out for 3 s
  advance(3000ms);
  // One comes back (the limit refused its call, and the client gave the
  // permit back), and is taken again a tick later: the wait for a verdict
  // counts from then, a full sleep window, not from the first 3 s.
  trials_left_ = 1;
  feed(0, 0);
  trials_left_ = 0;
  EXPECT_EQ(advance(5000ms), BreakerState::kHalfOpen);
  EXPECT_EQ(feed(0, 0), BreakerState::kOpen);
  ASSERT_TRUE(last_);
  EXPECT_EQ(last_->reason, "trial calls gave no verdict within the sleep window");
}

TEST_F(BreakerTest, ForcingOpenWhatIsOpenTakesItOverTheOperatorsWay) {
  // Open on its own 1 s ago, then forced open: the force holds it, and
  // its release hands it to trial calls at once, as any force open's
  // does, rather than to what is left of the sleep window it opened with.
  make({});
  open_it();
  advance(1000ms);
  EXPECT_EQ(feed(0, 0, 0, BreakerForce::kOpen), BreakerState::kOpen);
  EXPECT_TRUE(breaker_->forced());
  EXPECT_EQ(feed(0, 0), BreakerState::kHalfOpen);
  ASSERT_TRUE(last_);
  EXPECT_EQ(last_->reason, "force released: trial calls decide");
}

TEST_F(BreakerTest, SlowCallRateOpensItWhenOn) {
  BreakerSettings s;
  s.slow_call_duration = 200ms;
  s.slow_call_rate_threshold = 0.5;
  make(s);
  EXPECT_EQ(feed(20, 0, 9), BreakerState::kClosed);  // 45 % slow
  EXPECT_EQ(feed(20, 0, 12), BreakerState::kOpen);   // 21 of 40
  EXPECT_NE(last_->reason.find("slow"), std::string::npos);
  make(s);
  EXPECT_EQ(feed(20, 0, 10), BreakerState::kOpen);  // 50 %: the threshold opens it
  // Slow calls leave the window with their tick.
  s.window = 1000ms;
  make(s);
  EXPECT_EQ(feed(20, 0, 9), BreakerState::kClosed);
  advance(1000ms);
  EXPECT_EQ(feed(20, 0, 2), BreakerState::kClosed);  // 2 of 20, not 11
  // Off (the default), slow calls never open it.
  make({});
  EXPECT_EQ(feed(20, 0, 20), BreakerState::kClosed);
}

TEST_F(BreakerTest, ASlowTrialReopensWhenSlowCallsAreOn) {
  BreakerSettings s;
  s.slow_call_duration = 200ms;
  make(s);
  open_it();
  advance(5000ms);
  EXPECT_EQ(feed(1, 0, 1), BreakerState::kOpen);
}

TEST_F(BreakerTest, SlowTrialsAreSuccessesWhenSlowCallsAreOff) {
  make({});
  open_it();
  advance(5000ms);
  EXPECT_EQ(feed(3, 0, 3), BreakerState::kClosed);
}

TEST_F(BreakerTest, ForceHoldsTheStateWhateverTheOutcomes) {
  make({});
  EXPECT_EQ(feed(100, 0, 0, BreakerForce::kOpen), BreakerState::kOpen);
  EXPECT_TRUE(breaker_->forced());
  EXPECT_EQ(advance(60'000ms, BreakerForce::kOpen), BreakerState::kOpen);  // no half open
  EXPECT_EQ(feed(0, 0), BreakerState::kHalfOpen);  // released: trials decide
  EXPECT_FALSE(breaker_->forced());

  EXPECT_EQ(feed(0, 100, 0, BreakerForce::kClosed), BreakerState::kClosed);
  EXPECT_EQ(feed(0, 100, 0, BreakerForce::kClosed), BreakerState::kClosed);
  EXPECT_TRUE(breaker_->forced());
  EXPECT_EQ(feed(0, 0), BreakerState::kClosed);  // released: a fresh window
  EXPECT_EQ(breaker_->window_calls(), 0u);
  EXPECT_EQ(feed(0, 20), BreakerState::kOpen);
}

TEST_F(BreakerTest, ForceWorksOnADisabledBreakerAndDisablingClosesIt) {
  breaker_.emplace(BreakerSettings{}, BreakerState::kClosed, now_ns_);  // enabled = false
  EXPECT_EQ(feed(0, 100), BreakerState::kClosed);
  EXPECT_EQ(feed(0, 0, 0, BreakerForce::kOpen), BreakerState::kOpen);
  // Released: closed at once, with no tick of half open (whose trial
  // calls would decide nothing, and admit only three calls meanwhile).
  EXPECT_EQ(feed(0, 0), BreakerState::kClosed);
  EXPECT_EQ(last_->from, BreakerState::kOpen);
  EXPECT_EQ(last_->reason, "force released; breaker disabled");
  // An open breaker that a reload disables closes at its next tick.
  make({});
  open_it();
  breaker_->reconfigure(BreakerSettings{});
  EXPECT_EQ(feed(0, 0), BreakerState::kClosed);
  EXPECT_EQ(last_->reason, "breaker disabled");
}

TEST_F(BreakerTest, AnOpenStateFoundAtStartSleepsAFreshWindow) {
  BreakerSettings s;
  s.enabled = true;
  breaker_.emplace(s, BreakerState::kHalfOpen, now_ns_);
  EXPECT_EQ(breaker_->state(), BreakerState::kOpen);
  EXPECT_EQ(advance(4900ms), BreakerState::kOpen);
  EXPECT_EQ(feed(0, 0), BreakerState::kHalfOpen);
}

TEST_F(BreakerTest, ReconfigureKeepsStateAndAppliesNewSettings) {
  make({});
  open_it();
  BreakerSettings s;
  s.enabled = true;
  s.sleep_window = 1000ms;
  breaker_->reconfigure(s);
  EXPECT_EQ(advance(900ms), BreakerState::kOpen);
  EXPECT_EQ(feed(0, 0), BreakerState::kHalfOpen);
}

TEST(BreakerNames, AreTheMetricLabels) {
  EXPECT_STREQ(breaker_state_name(BreakerState::kClosed), "closed");
  EXPECT_STREQ(breaker_state_name(BreakerState::kOpen), "open");
  EXPECT_STREQ(breaker_state_name(BreakerState::kHalfOpen), "half_open");
  EXPECT_STREQ(breaker_force_name(BreakerForce::kAuto), "auto");
}

}  // namespace
}  // namespace bulkhead::daemon
