#include "shm/stats.hpp"

#include <algorithm>

namespace bulkhead::shm {

DependencyCounters DependencyCounters::since(const DependencyCounters& earlier) const {
  DependencyCounters d;
  d.ok = ok - earlier.ok;
  d.dropped = dropped - earlier.dropped;
  d.ignored = ignored - earlier.ignored;
  d.rejected = rejected - earlier.rejected;
  d.shadow_admitted = shadow_admitted - earlier.shadow_admitted;
  d.rtt_sum_ns = rtt_sum_ns - earlier.rtt_sum_ns;
  d.queue_full = queue_full - earlier.queue_full;
  d.deadline_rejected = deadline_rejected - earlier.deadline_rejected;
  d.waited = waited - earlier.waited;
  d.wait_sum_ns = wait_sum_ns - earlier.wait_sum_ns;
  d.failed = failed - earlier.failed;
  d.open_rejected = open_rejected - earlier.open_rejected;
  d.shadow_open = shadow_open - earlier.shadow_open;
  for (std::size_t b = 0; b < histogram.size(); ++b) {
    d.histogram[b] = histogram[b] - earlier.histogram[b];
    d.wait_histogram[b] = wait_histogram[b] - earlier.wait_histogram[b];
  }
  return d;
}

DependencyCounters read_counters(const Segment& segment, std::uint32_t index) {
  DependencyCounters c;
  const std::uint32_t stripes = segment.capacities().stats_stripes;
  // Relaxed throughout: each counter is read on its own and only its value
  // matters; no other memory is published through them.
  for (std::uint32_t s = 0; s < stripes; ++s) {
    const StatsStripe& st = segment.stripe(index, s);
    c.dropped += st.dropped.load(std::memory_order_relaxed);
    c.ignored += st.ignored.load(std::memory_order_relaxed);
    c.rejected += st.rejected.load(std::memory_order_relaxed);
    c.shadow_admitted += st.shadow_admitted.load(std::memory_order_relaxed);
    c.rtt_sum_ns += st.rtt_sum_ns.load(std::memory_order_relaxed);
    c.queue_full += st.queue_full.load(std::memory_order_relaxed);
    c.deadline_rejected += st.deadline_rejected.load(std::memory_order_relaxed);
    c.wait_sum_ns += st.wait_sum_ns.load(std::memory_order_relaxed);
    c.failed += st.failed.load(std::memory_order_relaxed);
    c.open_rejected += st.open_rejected.load(std::memory_order_relaxed);
    c.shadow_open += st.shadow_open.load(std::memory_order_relaxed);
    for (std::uint32_t b = 0; b < kHistogramBuckets; ++b) {
      c.histogram[b] += st.histogram[b].load(std::memory_order_relaxed);
      c.wait_histogram[b] += st.wait_histogram[b].load(std::memory_order_relaxed);
    }
  }
  for (std::uint64_t n : c.histogram) c.ok += n;
  for (std::uint64_t n : c.wait_histogram) c.waited += n;
  return c;
}

WindowExtremes take_window_extremes(Segment& segment, std::uint32_t index) {
  WindowExtremes w;
  const std::uint32_t stripes = segment.capacities().stats_stripes;
  for (std::uint32_t s = 0; s < stripes; ++s) {
    StatsStripe& st = segment.stripe(index, s);
    w.rtt_min_ns = std::min(w.rtt_min_ns, st.rtt_min_ns.exchange(UINT64_MAX, std::memory_order_relaxed));
    w.rtt_max_ns = std::max(w.rtt_max_ns, st.rtt_max_ns.exchange(0, std::memory_order_relaxed));
    w.max_inflight = std::max(w.max_inflight, st.max_inflight.exchange(0, std::memory_order_relaxed));
  }
  return w;
}

}  // namespace bulkhead::shm
