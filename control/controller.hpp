// One dependency's limit controller: window carry-over, the policy, the
// clamp. bulkheadd and the simulator both drive this class, so a limit
// computed in simulation is the limit the daemon would publish from the
// same observations.
//
// Algorithm: every tick the owner hands in what it observed (counter
// deltas since the previous tick, the window extremes, in-flight now). The
// deltas add up in an open window. When the window holds
// window_min_samples samples (ok + dropped), or is window_max_age old and
// holds any, it becomes a policies::Window (percentiles from the log-linear
// histogram, peak in-flight clamped to the limit) and goes to the policy;
// the answer is clamped to [min_limit, max_limit] and its integer part is
// the new limit. An old window without a sample is discarded and the limit
// kept: an idle dependency teaches nothing. Small windows are carried
// over, not discarded, so a dependency called once a second still adapts.
//
// Sampling: the observations are deltas of counters that only grow; the
// controller never sees the counters themselves.
//
// Locking: none; one thread owns a controller. Time is passed in.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "policies/policy.hpp"
#include "shm/stats.hpp"

namespace bulkhead::control {

// How a dependency's limit is learned: [defaults] and [dependency.NAME].
struct LimitSettings {
  std::string policy = "balance";        // a name in the policy registry
  policies::Bounds bounds{1, 1000, 20};  // min_limit, max_limit, initial_limit (calls)
  policies::ParamMap params;             // the policy's own keys
  // A window goes to the policy once it holds this many samples (ok +
  // dropped completions) ...
  std::uint32_t window_min_samples = 10;
  // ... or once it is this old and holds at least one sample.
  std::chrono::milliseconds window_max_age{1000};
};

// What one tick observed of a dependency.
struct TickObservation {
  shm::DependencyCounters delta;  // counters added since the previous tick
  shm::WindowExtremes extremes;   // rtt min/max and peak in-flight since then
  std::uint32_t inflight = 0;     // host-wide in-flight count now
};

class Controller {
 public:
  // Builds the policy. It starts from `current_limit` (a limit already
  // published, kept across restarts and reloads), or from initial_limit
  // when that is 0, clamped to the bounds; a policy that learns no limit
  // (fixed) from initial_limit always. Throws policies::ParamError.
  Controller(const LimitSettings& settings, std::uint32_t current_limit, std::uint64_t now_ns);

  // Switches settings. The policy is rebuilt, from the current limit, only
  // when its name, parameters or bounds change (initial_limit counts only
  // for a policy that learns no limit); true when it was.
  bool reconfigure(const LimitSettings& settings);

  // Adds one tick's observation; true when a window went to the policy.
  bool observe(const TickObservation& observation, std::uint64_t now_ns);

  // Pins the limit at `limit` (an operator's: bulkheadctl pin), over the
  // bounds too, until unpin(). Meanwhile the policy learns nothing: ticks
  // are discarded, as an idle dependency's are, since what calls do under
  // a limit the policy did not choose says little of the one it would.
  void pin(std::uint32_t limit);
  // Ends a pin. The policy is rebuilt and continues from the pinned limit,
  // within the bounds, as after a restart (its state from before the pin
  // would undo what the operator set; fixed goes back to initial_limit);
  // a fresh window opens at now_ns.
  void unpin(std::uint64_t now_ns);
  // The pinned limit; 0 when not pinned.
  std::uint32_t pinned() const { return pinned_; }

  // The limit to publish: the pin, else the policy's answer, clamped,
  // integer, >= 1.
  std::uint32_t limit() const { return pinned_ != 0 ? pinned_ : limit_; }
  const LimitSettings& settings() const { return settings_; }
  const policies::Policy& policy() const { return *policy_; }
  // Windows handed to the policy so far, and the last of them.
  std::uint64_t windows() const { return windows_; }
  const policies::Window& last_window() const { return last_window_; }

 private:
  void rebuild_policy();
  void set_limit(double limit);
  void close_window(std::uint32_t inflight, std::uint64_t now_ns);
  void discard_window(std::uint64_t now_ns);

  // The open window: what the policy is given of the deltas, and the
  // latency histogram's buckets in [first, end) only (the others hold
  // none), so that adding a tick, the quantiles and the reset touch the
  // buckets calls landed in, not all 200 (this was a fifth of the
  // daemon's tick at 4096 dependencies, and the queue-wait histogram the
  // policy never reads was half of its memory).
  struct OpenWindow {
    std::uint64_t ok = 0;
    std::uint64_t dropped = 0;
    std::uint64_t ignored = 0;
    std::uint64_t rejected = 0;
    std::uint64_t shadow_admitted = 0;
    std::uint64_t rtt_sum_ns = 0;
    std::uint32_t first = shm::kHistogramBuckets;
    std::uint32_t end = 0;
    std::array<std::uint64_t, shm::kHistogramBuckets> histogram{};
    void add(const shm::DependencyCounters& delta);
    void clear();
  };

  LimitSettings settings_;
  std::unique_ptr<policies::Policy> policy_;
  std::uint32_t limit_ = 0;   // the policy's, clamped
  std::uint32_t pinned_ = 0;  // pin(); 0: none
  OpenWindow open_;  // deltas of the open window
  shm::WindowExtremes extremes_;  // of the open window
  std::uint64_t window_start_ns_ = 0;
  std::uint64_t windows_ = 0;
  policies::Window last_window_;
};

}  // namespace bulkhead::control
