// The window of statistics the control loop hands a policy.
//
// A window is what the daemon saw of one dependency between two policy
// updates: the deltas of the counters that every process adds to, plus a few
// gauges. It is plain data: a policy sees only these numbers, never a clock,
// so a policy is a deterministic function of the windows it is fed.
//
// Against Netflix's WindowedLimit, which drives the Netflix policies there
// (aimd, vegas, gradient2): a window here closes every tick (100 ms by
// default) once it holds window_min_samples (10) ok or dropped calls, where
// WindowedLimit's lasts at least 1 s (minWindowTime = maxWindowTime = 1 s)
// and needs more than 10 ok calls; WindowedLimit also ignores every call
// under 100 us (minRttThreshold), drops included. Under load a window here
// is a tenth of Netflix's, and so is the time a count of updates spans.
// Every policy runs on the same windows, so that they are compared alike.
#pragma once

#include <cstdint>

namespace bulkhead::policies {

struct Window {
  // Completions, by the outcome the caller reported.
  std::uint64_t ok = 0;       // succeeded; the only calls whose latency is kept
  std::uint64_t dropped = 0;  // timed out or met back-pressure; latency not kept
  std::uint64_t ignored = 0;  // neither: not a sample
  // Admissions refused because in-flight had reached the limit.
  std::uint64_t rejected = 0;

  // Latency of ok calls only, in nanoseconds. Zero when ok == 0.
  std::uint64_t rtt_sum_ns = 0;
  std::uint64_t rtt_min_ns = 0;
  std::uint64_t rtt_max_ns = 0;
  // Percentiles of the window's log-linear latency histogram (bucket
  // midpoints, so within about 6% of the true value). Zero when ok == 0.
  std::uint64_t rtt_p10_ns = 0;
  std::uint64_t rtt_p50_ns = 0;
  std::uint64_t rtt_p90_ns = 0;
  std::uint64_t rtt_p99_ns = 0;

  // Highest in-flight count seen at an admission in the window, that call
  // included, and the host-wide in-flight count when the window closed.
  std::uint32_t max_inflight = 0;
  std::uint32_t inflight = 0;

  // The limit that was published while the window ran.
  std::uint32_t limit = 0;

  // How long the window ran, in nanoseconds.
  std::uint64_t duration_ns = 0;

  // Completions that are samples: ok and dropped. Ignored ones are not.
  std::uint64_t samples() const { return ok + dropped; }
  // Mean latency of ok calls, in nanoseconds; 0 when there were none.
  double rtt_mean_ns() const {
    return ok == 0 ? 0.0 : static_cast<double>(rtt_sum_ns) / static_cast<double>(ok);
  }
};

}  // namespace bulkhead::policies
