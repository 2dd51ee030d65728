// The event model: a dependency (workers + a FIFO queue) and its clients
// (process groups with open-loop Poisson arrivals), admitted against the
// limit of a control::Controller (the daemon's windowing and policy code)
// that is fed every tick exactly what bulkheadd reads from the segment.
//
// Algorithm: a discrete-event simulation on a virtual clock in integer
// nanoseconds. Events are ordered by (time, sequence number of scheduling),
// so equal times resolve the same way on every run. An attempt is admitted
// iff the in-flight count of its limiter is below the published limit, as
// bh_try_acquire() does; an admitted call takes a worker or waits in the
// queue (or fails at once when the queue is full: a dropped outcome). At
// timeout_ms after admission the caller gives up and releases its permit
// with outcome dropped, but the dependency still does the work: a queued or
// running call is not withdrawn. A served call's answer reaches its caller
// network_ms after its service ends (the worker is free at once). A call
// whose answer arrives first releases with outcome success, its latency
// recorded as a client does (histogram bucket, sum, min, max). Every tick_ms each limiter's controller observes the
// counter deltas, the window extremes and its in-flight count; its answer is
// the limit for admissions after the tick.
//
// Sampling: the arrivals are drawn once per scenario (make_workload) and
// shared by all runs, so every policy meets the same sequence of calls. The
// work of a call is drawn when a worker starts it, from one stream per run
// in the order services start (common random numbers): two policies that
// keep the workers equally busy get the same work done, so a difference in
// goodput is the policy's, not the luck of which calls it admitted (with
// draws per call, that luck alone moved goodput by about half a percent).
//
// Thread-safety: simulate() shares nothing between calls; runs of one
// scenario may go on different threads over one const Workload.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "control/controller.hpp"
#include "tools/sim/random.hpp"
#include "tools/sim/scenario.hpp"
#include "tools/sim/timeline.hpp"

namespace bulkhead::sim {

// The calls a scenario offers, in arrival order.
struct Workload {
  std::vector<std::uint64_t> arrival_ns;
  std::vector<std::uint32_t> process;  // the group that makes the call
};

Workload make_workload(const Scenario& scenario, const Timeline& timeline);

// The work of one service, relative to the mean service time, drawn from
// the scenario's distribution.
double draw_service_size(RandomStream& rng, const Scenario& scenario);

// One run: a policy through the Controller, or no limiter at all.
struct RunSpec {
  std::string label;        // "aimd", "none", "fixed(L=12)"
  bool limited = true;      // false: admit everything
  control::LimitSettings settings;  // when limited
};

constexpr double kNoLimit = std::numeric_limits<double>::infinity();

// What one tick saw; rates per second of the tick.
struct TickRow {
  std::uint64_t t_ns = 0;
  double limit = kNoLimit;  // published after the tick; the sum over limiters
  std::uint32_t inflight = 0;  // permits held, all processes
  std::uint32_t queue = 0;     // calls waiting for a worker (timed-out ones too)
  double p50_ms = 0;  // of calls that succeeded in the tick (exact); 0 if none
  double p99_ms = 0;
  double goodput_per_s = 0;
  double rejected_per_s = 0;
  double timeouts_per_s = 0;
  // The policy's baseline latency (policies::Baseline) after the tick, the
  // mean over limiters that keep one; 0 when none does.
  double baseline_ms = 0;
};

struct RunResult {
  std::string label;
  double initial_limit = kNoLimit;  // in force before the first tick
  std::vector<TickRow> series;
  std::vector<std::uint64_t> latencies_ns;  // of every success, sorted
  std::uint64_t arrivals = 0;   // original calls offered
  std::uint64_t attempts = 0;   // arrivals + retries
  std::uint64_t admitted = 0;
  std::uint64_t ok = 0;         // succeeded before their timeout
  std::uint64_t rejected = 0;   // by the limiter
  std::uint64_t timed_out = 0;
  std::uint64_t errors = 0;     // failed at once: queue full
  std::uint64_t wasted = 0;     // served after their caller gave up
  std::uint64_t retries = 0;
  // Little's law inputs: integrals over time of busy workers and of calls
  // at the dependency (queued + in service), in call-nanoseconds, and
  // service completions.
  double busy_integral = 0;
  double in_system_integral = 0;
  std::uint64_t served = 0;
  std::uint64_t duration_ns = 0;
};

RunResult simulate(const Scenario& scenario, const Timeline& timeline, const Workload& workload,
                   const RunSpec& spec);

}  // namespace bulkhead::sim
