// A dependency's circuit breaker, as the daemon computes it from the
// outcomes every process on the host reports.
//
// Algorithm (Hystrix's breaker, with resilience4j's slow-call rate and
// half-open trial calls):
//   closed     every tick adds its calls to a rolling window of `window`;
//              when the window holds at least minimum_calls calls and
//                failed / calls >= failure_rate_threshold, or
//                slow / calls   >= slow_call_rate_threshold (slow calls on),
//              the breaker opens. A call is a success, BH_FAILED or
//              BH_DROPPED (a timeout counts as a failure, as in Hystrix);
//              BH_IGNORE is not a call.
//   open       for sleep_window; then half open.
//   half open  half_open_calls trial permits are handed out host-wide (the
//              control loop publishes them; see shm::trials_word()). The
//              first failure (or slow success, with slow calls on) opens
//              the breaker again; half_open_calls successes close it. When
//              every permit is out and no decision came for sleep_window
//              (trial calls that hang, or end as BH_IGNORE), it opens again.
// An operator's force (config `force`, or bulkheadctl's override, which
// wins) holds the breaker open or closed whatever the outcomes; when the
// force goes, a forced-open breaker half opens at once (trial calls find
// out whether the dependency is back) and a forced-closed one starts a fresh
// window.
//
// Where ours differs: outcomes come a tick at a time, summed over every
// process, so a decision waits for the tick (default 100 ms) that carries
// the outcome; and the outcomes counted while half open are those of every
// call that ends then, which are the trial calls plus any call admitted
// before the breaker opened that is still running.
//
// Sampling: observe() takes what one tick added (deltas, never readings).
// Time is passed in; tests drive it with a fake clock.
//
// Locking: none; the control loop's thread owns each Breaker.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

namespace bulkhead::daemon {

// An operator's decision: from the config (`force`) or bulkheadctl.
enum class BreakerForce { kAuto, kOpen, kClosed };
const char* breaker_force_name(BreakerForce force);  // "auto", "open", "closed"

struct BreakerSettings {
  // Off unless a config turns it on: a breaker refuses calls with a reason
  // (BH_REJECT_OPEN_CIRCUIT) that callers written before it do not expect.
  bool enabled = false;
  // Fraction of calls that failed, (0, 1]. Hystrix errorThresholdPercentage: 50.
  double failure_rate_threshold = 0.5;
  // Calls the window must hold before a rate counts. Hystrix
  // circuitBreaker.requestVolumeThreshold: 20.
  std::uint32_t minimum_calls = 20;
  // The rolling window. Hystrix metrics.rollingStats.timeInMilliseconds: 10 s.
  std::chrono::milliseconds window{10'000};
  // How long an opened breaker refuses before it half opens. Hystrix
  // circuitBreaker.sleepWindowInMilliseconds: 5 s.
  std::chrono::milliseconds sleep_window{5'000};
  // Trial calls admitted host-wide while half open, and the successes that
  // close it. resilience4j permittedNumberOfCallsInHalfOpenState is 10;
  // Hystrix lets 1 through. 3: a decision that one lucky call cannot make.
  std::uint32_t half_open_calls = 3;
  // A successful call at least this long is slow; 0 turns slow calls off
  // (the default). resilience4j slowCallDurationThreshold: 60 s.
  std::chrono::milliseconds slow_call_duration{0};
  // Fraction of calls that were slow, (0, 1]. resilience4j
  // slowCallRateThreshold: 100 %.
  double slow_call_rate_threshold = 1.0;
  BreakerForce force = BreakerForce::kAuto;

  bool slow_calls_on() const { return slow_call_duration.count() > 0; }
  friend bool operator==(const BreakerSettings&, const BreakerSettings&) = default;
};

enum class BreakerState { kClosed, kOpen, kHalfOpen };
const char* breaker_state_name(BreakerState state);  // "closed", "open", "half_open"

// What one tick added, over every process.
struct BreakerCounts {
  std::uint64_t ok = 0;      // successful calls
  std::uint64_t failed = 0;  // BH_FAILED + BH_DROPPED
  std::uint64_t slow = 0;    // successful calls at least slow_call_duration long (of ok)
};

class Breaker {
 public:
  struct Transition {
    BreakerState from;
    BreakerState to;
    std::string reason;  // for the log line
  };

  // `initial`: the state found in the segment (a restarted daemon); an open
  // or half-open breaker starts a fresh sleep window at `now_ns`. `forced`:
  // an operator forced that state, so that a force that ended while no
  // daemon ran is released as any force is (open: half open at once).
  Breaker(const BreakerSettings& settings, BreakerState initial, std::uint64_t now_ns, bool forced = false);

  // A reload. The state and the window carry over.
  void reconfigure(const BreakerSettings& settings) { settings_ = settings; }

  // Once per tick, at `now_ns`. `force` is the operator's (bulkheadctl's
  // override when it has one, else the config's), `forced_by` whose it is
  // for the transition's reason ("bulkheadctl", "the config");
  // `trials_left` the trial permits not yet taken (read from the segment;
  // matters half open). Returns the transition it made, if any.
  std::optional<Transition> observe(const BreakerCounts& tick, BreakerForce force, std::string_view forced_by,
                                    std::uint32_t trials_left, std::uint64_t now_ns);

  BreakerState state() const { return state_; }
  bool forced() const { return forced_; }
  const BreakerSettings& settings() const { return settings_; }
  // The rolling window's sums (closed), for views and tests.
  std::uint64_t window_calls() const { return sum_.ok + sum_.failed; }
  std::uint64_t window_failed() const { return sum_.failed; }

 private:
  struct Bucket {
    std::uint64_t at_ns;
    BreakerCounts counts;
  };
  std::optional<Transition> move_to(BreakerState to, std::uint64_t now_ns, std::string reason);
  void clear_window();

  BreakerSettings settings_;
  BreakerState state_;
  bool forced_ = false;
  std::uint64_t since_ns_;       // when the state began
  std::deque<Bucket> window_;    // closed: ticks inside the window, oldest first
  BreakerCounts sum_;            // of window_
  BreakerCounts trial_;          // half open: outcomes since it half opened
  std::uint64_t trials_out_ns_ = 0;  // half open: when every trial permit was first seen taken; 0: not yet
};

}  // namespace bulkhead::daemon
