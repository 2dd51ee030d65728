// Reading a dependency's statistics: the sum of its stripes.
//
// Counters only grow, so a reader takes two readings and subtracts; nobody
// resets a counter that another process adds to. Stripes are read one
// counter at a time, not as a snapshot: a reading may include a call's
// histogram increment but not yet its latency sum. That skew is at most the
// calls in progress during the read, and it cancels out in the next delta.
#pragma once

#include <array>
#include <cstdint>

#include "shm/segment.hpp"

namespace bulkhead::shm {

struct DependencyCounters {
  std::uint64_t ok = 0;  // the histogram's total
  std::uint64_t dropped = 0;
  std::uint64_t ignored = 0;
  std::uint64_t rejected = 0;
  std::uint64_t shadow_admitted = 0;  // over the limit, admitted in shadow mode
  std::uint64_t rtt_sum_ns = 0;
  std::array<std::uint64_t, kHistogramBuckets> histogram{};
  // The wait queue (bh_acquire).
  std::uint64_t queue_full = 0;         // refused: the queue was full
  std::uint64_t deadline_rejected = 0;  // refused: the deadline passed or could not be met
  std::uint64_t waited = 0;             // calls that waited: the wait histogram's total
  std::uint64_t wait_sum_ns = 0;
  std::array<std::uint64_t, kHistogramBuckets> wait_histogram{};
  // The circuit breaker.
  std::uint64_t failed = 0;         // released BH_FAILED
  std::uint64_t open_rejected = 0;  // refused by the breaker
  std::uint64_t shadow_open = 0;    // would have been refused by it: shadow mode admitted them

  // What was added between `earlier` and this reading (modulo 2^64, so a
  // counter that wrapped still gives the right delta).
  DependencyCounters since(const DependencyCounters& earlier) const;
};

// Sums every stripe of dependency `index`. Loads only: works on a read-only
// mapping.
DependencyCounters read_counters(const Segment& segment, std::uint32_t index);

// Latency extremes and peak in-flight since the last take, over all stripes.
struct WindowExtremes {
  std::uint64_t rtt_min_ns = UINT64_MAX;  // UINT64_MAX: no ok call
  std::uint64_t rtt_max_ns = 0;
  std::uint32_t max_inflight = 0;
};

// Takes the window extremes of dependency `index` and resets them to their
// neutral values (the daemon, once per tick). Needs a read-write mapping.
WindowExtremes take_window_extremes(Segment& segment, std::uint32_t index);

}  // namespace bulkhead::shm
