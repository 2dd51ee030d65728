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
  for (std::size_t p = 0; p < partition_rejected.size(); ++p) {
    d.partition_rejected[p] = partition_rejected[p] - earlier.partition_rejected[p];
  }
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
    for (std::uint32_t p = 0; p < kMaxPartitions; ++p) {
      c.partition_rejected[p] += st.partition_rejected[p].load(std::memory_order_relaxed);
    }
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

namespace bulkhead::shm {

namespace {

// The scalar counters of a stripe, in a fixed order. Acquire on the two
// sums: they pair with the release adds in the client's record() and
// record_wait(), which follow the histogram add of the same call, so that a
// changed sum shows that call's bucket too.
std::array<std::uint64_t, StatsReader::kScalars> load_scalars(const StatsStripe& st) {
  return {st.dropped.load(std::memory_order_relaxed),
          st.ignored.load(std::memory_order_relaxed),
          st.rejected.load(std::memory_order_relaxed),
          st.shadow_admitted.load(std::memory_order_relaxed),
          st.rtt_sum_ns.load(std::memory_order_acquire),
          st.queue_full.load(std::memory_order_relaxed),
          st.deadline_rejected.load(std::memory_order_relaxed),
          st.wait_sum_ns.load(std::memory_order_acquire),
          st.failed.load(std::memory_order_relaxed),
          st.open_rejected.load(std::memory_order_relaxed),
          st.shadow_open.load(std::memory_order_relaxed),
          st.partition_rejected[0].load(std::memory_order_relaxed),
          st.partition_rejected[1].load(std::memory_order_relaxed),
          st.partition_rejected[2].load(std::memory_order_relaxed)};
}

}  // namespace

StatsReader::StatsReader(const Segment& segment, std::uint32_t index)
    : stripes_(segment.capacities().stats_stripes) {
  for (std::uint32_t s = 0; s < stripes_.size(); ++s) {
    const StatsStripe& st = segment.stripe(index, s);
    Stripe& mine = stripes_[s];
    mine.scalars = load_scalars(st);
    std::array<std::uint32_t, 2 * kHistogramBuckets> buckets;
    bool any = false;
    for (std::uint32_t b = 0; b < kHistogramBuckets; ++b) {
      buckets[b] = static_cast<std::uint32_t>(st.histogram[b].load(std::memory_order_relaxed));
      buckets[kHistogramBuckets + b] = static_cast<std::uint32_t>(st.wait_histogram[b].load(std::memory_order_relaxed));
      any |= (buckets[b] | buckets[kHistogramBuckets + b]) != 0;
    }
    if (any) mine.buckets = std::make_unique<std::array<std::uint32_t, 2 * kHistogramBuckets>>(buckets);
  }
}

void StatsReader::take(Segment& segment, std::uint32_t index, DependencyCounters& delta,
                       WindowExtremes& extremes) {
  // Why an unchanged stripe needs no histogram read: every call that adds
  // to a histogram then changes a scalar of the same stripe (the latency
  // or wait sum, with a release add, or on a CPU's own stripe a plain
  // store, release on x86), or, for a success of latency 0, lowers the
  // window minimum, which this take finds not neutral; a success whose
  // thread moved to another CPU between its bucket and its sum writes the
  // bucket's stripe's minimum with release (the client's
  // mark_stripe_moved()). A bucket
  // added to after this take's scalar loads is read at the take that sees
  // its call's scalar change, which comes later. The one case left: a
  // success of latency 0 whose minimum was already 0 this window, on a CPU
  // weaker than x86's, may wait for the stripe's next change to be counted
  // (counters only grow: it is late, never lost).
  stripes_read_ = 0;
  for (std::uint32_t s = 0; s < stripes_.size(); ++s) {
    StatsStripe& st = segment.stripe(index, s);
    Stripe& mine = stripes_[s];
    // The extremes: load first, exchange only what is not neutral, so that
    // an idle stripe costs no locked write. One set after the load waits
    // for the next take. Acquire on the minimum: see above.
    std::uint64_t rtt_min = st.rtt_min_ns.load(std::memory_order_relaxed);
    if (rtt_min != UINT64_MAX) rtt_min = st.rtt_min_ns.exchange(UINT64_MAX, std::memory_order_acquire);
    extremes.rtt_min_ns = std::min(extremes.rtt_min_ns, rtt_min);
    if (st.rtt_max_ns.load(std::memory_order_relaxed) != 0) {
      extremes.rtt_max_ns = std::max(extremes.rtt_max_ns, st.rtt_max_ns.exchange(0, std::memory_order_relaxed));
    }
    if (st.max_inflight.load(std::memory_order_relaxed) != 0) {
      extremes.max_inflight = std::max(extremes.max_inflight, st.max_inflight.exchange(0, std::memory_order_relaxed));
    }
    const std::array<std::uint64_t, kScalars> now = load_scalars(st);
    if (now == mine.scalars && rtt_min == UINT64_MAX) continue;
    ++stripes_read_;
    delta.dropped += now[0] - mine.scalars[0];
    delta.ignored += now[1] - mine.scalars[1];
    delta.rejected += now[2] - mine.scalars[2];
    delta.shadow_admitted += now[3] - mine.scalars[3];
    delta.rtt_sum_ns += now[4] - mine.scalars[4];
    delta.queue_full += now[5] - mine.scalars[5];
    delta.deadline_rejected += now[6] - mine.scalars[6];
    delta.wait_sum_ns += now[7] - mine.scalars[7];
    delta.failed += now[8] - mine.scalars[8];
    delta.open_rejected += now[9] - mine.scalars[9];
    delta.shadow_open += now[10] - mine.scalars[10];
    for (std::uint32_t p = 0; p < kMaxPartitions; ++p) {
      delta.partition_rejected[p] += now[11 + p] - mine.scalars[11 + p];
    }
    const std::uint64_t before_wait_sum = mine.scalars[7];
    mine.scalars = now;
    if (!mine.buckets) mine.buckets = std::make_unique<std::array<std::uint32_t, 2 * kHistogramBuckets>>();
    std::array<std::uint32_t, 2 * kHistogramBuckets>& last = *mine.buckets;
    for (std::uint32_t b = 0; b < kHistogramBuckets; ++b) {
      const auto ok = static_cast<std::uint32_t>(st.histogram[b].load(std::memory_order_relaxed));
      const std::uint32_t added = ok - last[b];
      last[b] = ok;
      delta.histogram[b] += added;
      delta.ok += added;
    }
    // The wait histogram only when a wait was recorded: its sum moved. (A
    // wait of exactly 0 ns adds nothing to the sum: it is counted at the
    // stripe's next wait.)
    if (now[7] == before_wait_sum) continue;
    for (std::uint32_t b = 0; b < kHistogramBuckets; ++b) {
      const auto waited = static_cast<std::uint32_t>(st.wait_histogram[b].load(std::memory_order_relaxed));
      const std::uint32_t waits = waited - last[kHistogramBuckets + b];
      last[kHistogramBuckets + b] = waited;
      delta.wait_histogram[b] += waits;
      delta.waited += waits;
    }
  }
}

}  // namespace bulkhead::shm
