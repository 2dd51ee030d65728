// What one limiter's callers record between two ticks, exactly as
// libbulkhead records it in the segment (client/client.cpp: record(),
// bh_try_acquire()), and the observation the daemon's tick reads from it
// (daemon/control_loop.cpp: update()). tests/tools/equivalence_test.cpp
// holds the two to the same limits.
//
// Thread safety: one simulation thread owns a recorder.
#pragma once

#include <algorithm>
#include <cstdint>

#include "control/controller.hpp"
#include "shm/histogram.hpp"

namespace bulkhead::sim {

class Recorder {
 public:
  // An attempt refused at the limit.
  void rejected() { ++counters_.rejected; }
  // An admission; `inflight` counts this call.
  void admitted(std::uint32_t inflight) {
    extremes_.max_inflight = std::max(extremes_.max_inflight, inflight);
  }
  // A release with outcome success and its latency.
  void succeeded(std::uint64_t latency_ns) {
    counters_.histogram[shm::histogram_bucket(latency_ns)] += 1;
    counters_.ok += 1;
    counters_.rtt_sum_ns += latency_ns;
    extremes_.rtt_min_ns = std::min(extremes_.rtt_min_ns, latency_ns);
    extremes_.rtt_max_ns = std::max(extremes_.rtt_max_ns, latency_ns);
  }
  // A release with outcome dropped: counted, no latency.
  void dropped() { ++counters_.dropped; }

  // What the daemon reads at a tick, with `inflight` held now; starts afresh.
  control::TickObservation take(std::uint32_t inflight) {
    control::TickObservation o;
    o.delta = counters_;
    o.extremes = extremes_;
    o.inflight = inflight;
    counters_ = {};
    extremes_ = {};
    return o;
  }

 private:
  shm::DependencyCounters counters_;  // added since the last tick
  shm::WindowExtremes extremes_;      // since the last tick
};

}  // namespace bulkhead::sim
