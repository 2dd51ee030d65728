#include "daemon/breaker.hpp"

#include <cstdio>

namespace bulkhead::daemon {

namespace {

std::uint64_t to_ns(std::chrono::milliseconds ms) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(ms).count());
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", fraction * 100.0);
  return buf;
}

}  // namespace

const char* breaker_force_name(BreakerForce force) {
  switch (force) {
    case BreakerForce::kOpen:
      return "open";
    case BreakerForce::kClosed:
      return "closed";
    case BreakerForce::kAuto:
      break;
  }
  return "auto";
}

const char* breaker_state_name(BreakerState state) {
  switch (state) {
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half_open";
    case BreakerState::kClosed:
      break;
  }
  return "closed";
}

Breaker::Breaker(const BreakerSettings& settings, BreakerState initial, std::uint64_t now_ns, bool forced)
    : settings_(settings),
      state_(initial == BreakerState::kClosed ? BreakerState::kClosed : BreakerState::kOpen),
      forced_(forced),
      since_ns_(now_ns) {}

void Breaker::clear_window() {
  window_.clear();
  sum_ = {};
}

std::optional<Breaker::Transition> Breaker::move_to(BreakerState to, std::uint64_t now_ns, std::string reason) {
  const BreakerState from = state_;
  state_ = to;
  since_ns_ = now_ns;
  clear_window();
  trial_ = {};
  trials_out_ns_ = 0;
  if (from == to) return std::nullopt;
  return Transition{from, to, std::move(reason)};
}

std::optional<Breaker::Transition> Breaker::observe(const BreakerCounts& tick, BreakerForce force,
                                                    std::string_view forced_by, std::uint32_t trials_left,
                                                    std::uint64_t now_ns) {
  // An operator's word first.
  if (force != BreakerForce::kAuto) {
    const BreakerState to = force == BreakerForce::kOpen ? BreakerState::kOpen : BreakerState::kClosed;
    if (forced_ && state_ == to) return std::nullopt;
    forced_ = true;
    return move_to(to, now_ns, std::string("forced ") + breaker_force_name(force) + " by " + std::string(forced_by));
  }
  if (forced_) {
    forced_ = false;
    // Trial calls decide only for a breaker that runs: a disabled one
    // closes, without a tick of half open that admits three calls.
    if (state_ == BreakerState::kOpen && settings_.enabled) {
      return move_to(BreakerState::kHalfOpen, now_ns, "force released: trial calls decide");
    }
    return move_to(BreakerState::kClosed, now_ns,
                   settings_.enabled ? "force released" : "force released; breaker disabled");
  }
  if (!settings_.enabled) {
    return state_ == BreakerState::kClosed ? std::nullopt
                                           : move_to(BreakerState::kClosed, now_ns, "breaker disabled");
  }

  switch (state_) {
    case BreakerState::kClosed: {
      window_.push_back({now_ns, tick});
      sum_.ok += tick.ok;
      sum_.failed += tick.failed;
      sum_.slow += tick.slow;
      const std::uint64_t window_ns = to_ns(settings_.window);
      while (!window_.empty() && now_ns - window_.front().at_ns >= window_ns) {
        sum_.ok -= window_.front().counts.ok;
        sum_.failed -= window_.front().counts.failed;
        sum_.slow -= window_.front().counts.slow;
        window_.pop_front();
      }
      const std::uint64_t calls = sum_.ok + sum_.failed;
      if (calls == 0 || calls < settings_.minimum_calls) return std::nullopt;
      const double failure_rate = static_cast<double>(sum_.failed) / static_cast<double>(calls);
      const double slow_rate = static_cast<double>(sum_.slow) / static_cast<double>(calls);
      if (failure_rate >= settings_.failure_rate_threshold) {
        return move_to(BreakerState::kOpen, now_ns,
                       std::to_string(sum_.failed) + " of " + std::to_string(calls) + " calls failed (" +
                           percent(failure_rate) + " >= " + percent(settings_.failure_rate_threshold) + ")");
      }
      if (settings_.slow_calls_on() && slow_rate >= settings_.slow_call_rate_threshold) {
        return move_to(BreakerState::kOpen, now_ns,
                       std::to_string(sum_.slow) + " of " + std::to_string(calls) + " calls slow (" +
                           percent(slow_rate) + " >= " + percent(settings_.slow_call_rate_threshold) + ")");
      }
      return std::nullopt;
    }
    case BreakerState::kOpen:
      if (now_ns - since_ns_ < to_ns(settings_.sleep_window)) return std::nullopt;
      return move_to(BreakerState::kHalfOpen, now_ns, "sleep window over: trial calls decide");
    case BreakerState::kHalfOpen: {
      const std::uint64_t slow = settings_.slow_calls_on() ? tick.slow : 0;
      trial_.ok += tick.ok;
      trial_.failed += tick.failed;
      trial_.slow += slow;
      if (trial_.failed > 0) return move_to(BreakerState::kOpen, now_ns, "a trial call failed");
      if (trial_.slow > 0) return move_to(BreakerState::kOpen, now_ns, "a trial call was slow");
      if (trial_.ok >= settings_.half_open_calls) {
        return move_to(BreakerState::kClosed, now_ns,
                       std::to_string(trial_.ok) + " trial call(s) succeeded");
      }
      if (trials_left > 0) {
        trials_out_ns_ = 0;
        return std::nullopt;
      }
      if (trials_out_ns_ == 0) trials_out_ns_ = now_ns;
      if (now_ns - trials_out_ns_ >= to_ns(settings_.sleep_window)) {
        return move_to(BreakerState::kOpen, now_ns, "trial calls gave no verdict within the sleep window");
      }
      return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace bulkhead::daemon
