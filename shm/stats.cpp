#include "shm/stats.hpp"

#include <algorithm>

namespace bulkhead::shm {

DependencyCounters DependencyCounters::since(const DependencyCounters& earlier) const {
  DependencyCounters d;
  d.dropped = dropped - earlier.dropped;
  d.ignored = ignored - earlier.ignored;
  d.rejected = rejected - earlier.rejected;
  d.shadow_admitted = shadow_admitted - earlier.shadow_admitted;
  d.rtt_sum_ns = rtt_sum_ns - earlier.rtt_sum_ns;
  d.queue_full = queue_full - earlier.queue_full;
  d.deadline_rejected = deadline_rejected - earlier.deadline_rejected;
  d.wait_sum_ns = wait_sum_ns - earlier.wait_sum_ns;
  d.failed = failed - earlier.failed;
  d.open_rejected = open_rejected - earlier.open_rejected;
  d.shadow_open = shadow_open - earlier.shadow_open;
  for (std::size_t p = 0; p < partition_rejected.size(); ++p) {
    d.partition_rejected[p] = partition_rejected[p] - earlier.partition_rejected[p];
  }
  // Sums of 32-bit counters: their difference modulo 2^32 is the sum of
  // the counters' differences modulo 2^32, exact under the same condition
  // as one counter's.
  for (std::size_t b = 0; b < histogram.size(); ++b) {
    d.histogram[b] = static_cast<std::uint32_t>(histogram[b] - earlier.histogram[b]);
    d.wait_histogram[b] = static_cast<std::uint32_t>(wait_histogram[b] - earlier.wait_histogram[b]);
    d.ok += d.histogram[b];
    d.waited += d.wait_histogram[b];
  }
  return d;
}

void DependencyCounters::widen_histogram(std::uint32_t first, std::uint32_t end) {
  if (first >= end) return;
  if (histogram_first >= histogram_end) {
    histogram_first = first;
    histogram_end = end;
    return;
  }
  histogram_first = std::min(histogram_first, first);
  histogram_end = std::max(histogram_end, end);
}

void DependencyCounters::clear() {
  const std::span<const std::uint64_t> used = histogram_used();
  if (!used.empty()) std::fill(histogram.begin() + histogram_first, histogram.begin() + histogram_end, 0);
  if (waited != 0) wait_histogram.fill(0);
  ok = dropped = ignored = rejected = shadow_admitted = rtt_sum_ns = 0;
  queue_full = deadline_rejected = waited = wait_sum_ns = 0;
  failed = open_rejected = shadow_open = 0;
  partition_rejected.fill(0);
  histogram_first = kHistogramBuckets;
  histogram_end = 0;
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
    c.failed += st.failed.load(std::memory_order_relaxed);
    c.open_rejected += st.open_rejected.load(std::memory_order_relaxed);
    c.shadow_open += st.shadow_open.load(std::memory_order_relaxed);
    for (std::uint32_t p = 0; p < kMaxPartitions; ++p) {
      c.partition_rejected[p] += st.partition_rejected[p].load(std::memory_order_relaxed);
    }
    // A stripe that no success ever reached (none added to its latency sum,
    // none of 0 ns lowered its minimum) has an empty histogram: not read, so
    // that its pages stay untouched, as StatsReader leaves them. Reading a
    // page of the segment gives it memory in /dev/shm, and a read that finds
    // none left there dies of SIGBUS.
    if (st.rtt_sum_ns.load(std::memory_order_acquire) == 0 &&
        st.rtt_min_ns.load(std::memory_order_acquire) == UINT64_MAX) {
      continue;
    }
    const HistogramCounts& h = segment.latency_histogram(index, s);
    for (std::uint32_t b = 0; b < kHistogramBuckets; ++b) {
      c.histogram[b] += h.bucket[b].load(std::memory_order_relaxed);
    }
  }
  // Acquire, as the latency sum: no wait recorded, no histogram to read.
  c.wait_sum_ns = segment.dependency(index).waits.wait_sum_ns.load(std::memory_order_acquire);
  if (c.wait_sum_ns != 0) {
    const HistogramCounts& w = segment.wait_histogram(index);
    for (std::uint32_t b = 0; b < kHistogramBuckets; ++b) {
      c.wait_histogram[b] = w.bucket[b].load(std::memory_order_relaxed);
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

// The scalar counters of a stripe, in a fixed order. Acquire on the
// latency sum: it pairs with the release add in the client's record(),
// which follows the histogram add of the same call, so that a changed sum
// shows that call's bucket too.
std::array<std::uint64_t, StatsReader::kScalars> load_scalars(const StatsStripe& st) {
  return {st.dropped.load(std::memory_order_relaxed),
          st.ignored.load(std::memory_order_relaxed),
          st.rejected.load(std::memory_order_relaxed),
          st.shadow_admitted.load(std::memory_order_relaxed),
          st.rtt_sum_ns.load(std::memory_order_acquire),
          st.queue_full.load(std::memory_order_relaxed),
          st.deadline_rejected.load(std::memory_order_relaxed),
          st.failed.load(std::memory_order_relaxed),
          st.open_rejected.load(std::memory_order_relaxed),
          st.shadow_open.load(std::memory_order_relaxed),
          st.partition_rejected[0].load(std::memory_order_relaxed),
          st.partition_rejected[1].load(std::memory_order_relaxed),
          st.partition_rejected[2].load(std::memory_order_relaxed)};
}

}  // namespace

void StatsReader::LastReading::reset(const HistogramCounts& h) {
  std::array<std::uint32_t, kHistogramBuckets> now;
  std::uint32_t first = kHistogramBuckets, end = 0;
  for (std::uint32_t b = 0; b < kHistogramBuckets; ++b) {
    now[b] = h.bucket[b].load(std::memory_order_relaxed);
    if (now[b] == 0) continue;
    first = std::min(first, b);
    end = b + 1;
  }
  first_ = first < end ? first : 0;
  last_.assign(now.begin() + first_, now.begin() + std::max(first_, end));
}

void StatsReader::LastReading::take(const HistogramCounts& h, std::array<std::uint64_t, kHistogramBuckets>& delta,
                                    std::uint64_t& total, bool look_outside) {
  // The sum in a local: `total` may alias `delta` for all the compiler
  // knows, and adding to it in memory chained every bucket's add.
  std::uint64_t sum = 0;
  const auto end = static_cast<std::uint32_t>(first_ + last_.size());
  // Buckets outside the kept range that hold counts now: the range grows
  // to take them (their last reading was 0).
  std::uint32_t new_first = kHistogramBuckets, new_end = 0;
  for (std::uint32_t b = 0; look_outside && b < first_; ++b) {
    if (h.bucket[b].load(std::memory_order_relaxed) != 0) {
      new_first = std::min(new_first, b);
      new_end = b + 1;
    }
  }
  for (std::uint32_t b = first_; b < end; ++b) {
    const std::uint32_t now = h.bucket[b].load(std::memory_order_relaxed);
    std::uint32_t& last = last_[b - first_];
    const std::uint32_t added = now - last;
    last = now;
    delta[b] += added;
    sum += added;
  }
  for (std::uint32_t b = end; look_outside && b < kHistogramBuckets; ++b) {
    if (h.bucket[b].load(std::memory_order_relaxed) != 0) {
      new_first = std::min(new_first, b);
      new_end = b + 1;
    }
  }
  if (new_first < new_end) {
    const std::uint32_t from = last_.empty() ? new_first : std::min(first_, new_first);
    const std::uint32_t to = last_.empty() ? new_end : std::max(end, new_end);
    std::vector<std::uint32_t> grown(to - from, 0);
    std::copy(last_.begin(), last_.end(), grown.begin() + (first_ - from) * !last_.empty());
    // The new buckets, loaded again: whatever they hold now is counted and
    // becomes their last reading (a bucket outside the range that gained
    // a count since the scan above is counted at the next take).
    for (std::uint32_t b = from; b < to; ++b) {
      if (!last_.empty() && b >= first_ && b < end) continue;
      const std::uint32_t now = h.bucket[b].load(std::memory_order_relaxed);
      grown[b - from] = now;
      delta[b] += now;
      sum += now;
    }
    first_ = from;
    last_ = std::move(grown);
  }
  total += sum;
}

StatsReader::StatsReader(const Segment& segment, std::uint32_t index, Start start)
    : stripes_(segment.capacities().stats_stripes) {
  // From zero: every total, latency sum and last reading 0, as for a stripe
  // that never had a success below. A take then finds a stripe written if
  // its sum or window minimum moved, looks at every bucket of its histogram
  // (no bucket kept: the extremes are never "inside"), and counts what each
  // holds; the wait histogram the same once its sum is not 0.
  if (start == Start::kZero) return;
  for (std::uint32_t s = 0; s < stripes_.size(); ++s) {
    Stripe& mine = stripes_[s];
    const std::array<std::uint64_t, kScalars> scalars = load_scalars(segment.stripe(index, s));
    for (std::size_t k = 0; k < kScalars; ++k) totals_[k] += scalars[k];
    mine.rtt_sum_ns = scalars[4];
    // A stripe whose latency sum is 0 has had no success (but of 0 ns): its
    // histogram is not read, so that its pages stay untouched. Successes of
    // 0 ns recorded before this reader started would then be counted with
    // the stripe's first success after it.
    if (mine.rtt_sum_ns == 0) continue;
    mine.buckets.reset(segment.latency_histogram(index, s));
  }
  // Acquire: as the latency sum in load_scalars().
  wait_sum_ns_ = segment.dependency(index).waits.wait_sum_ns.load(std::memory_order_acquire);
  if (wait_sum_ns_ != 0) wait_buckets_.reset(segment.wait_histogram(index));
}

void StatsReader::take(Segment& segment, std::uint32_t index, DependencyCounters& delta,
                       WindowExtremes& extremes) {
  // Why a stripe whose latency sum did not move needs no histogram read:
  // every call that adds to a stripe's histogram then adds its latency to
  // the stripe's sum (a release add, or on a CPU's own stripe a plain
  // store, release on x86), or, for a success of latency 0, lowers the
  // window minimum, which this take finds not neutral; a success whose
  // thread moved to another CPU between its bucket and its sum writes the
  // bucket's stripe's minimum with release (the client's
  // mark_stripe_moved()). A bucket added to after this take's loads is read
  // at the take that sees its call's sum (or minimum) change, which comes
  // later. The one case left: a
  // success of latency 0 whose minimum was already 0 this window, on a CPU
  // weaker than x86's, may wait for the stripe's next success to be
  // counted (counters only grow: it is late, never lost).
  stripes_read_ = 0;
  std::array<std::uint64_t, kScalars> totals{};
  for (std::uint32_t s = 0; s < stripes_.size(); ++s) {
    StatsStripe& st = segment.stripe(index, s);
    Stripe& mine = stripes_[s];
    // The extremes: load first, exchange only what is not neutral, so that
    // an idle stripe costs no locked write. One set after the load waits
    // for the next take. Acquire on the minimum: see above.
    std::uint64_t rtt_min = st.rtt_min_ns.load(std::memory_order_relaxed);
    if (rtt_min != UINT64_MAX) rtt_min = st.rtt_min_ns.exchange(UINT64_MAX, std::memory_order_acquire);
    extremes.rtt_min_ns = std::min(extremes.rtt_min_ns, rtt_min);
    std::uint64_t rtt_max = st.rtt_max_ns.load(std::memory_order_relaxed);
    if (rtt_max != 0) rtt_max = st.rtt_max_ns.exchange(0, std::memory_order_relaxed);
    extremes.rtt_max_ns = std::max(extremes.rtt_max_ns, rtt_max);
    if (st.max_inflight.load(std::memory_order_relaxed) != 0) {
      extremes.max_inflight = std::max(extremes.max_inflight, st.max_inflight.exchange(0, std::memory_order_relaxed));
    }
    const std::array<std::uint64_t, kScalars> now = load_scalars(st);
    for (std::size_t k = 0; k < kScalars; ++k) totals[k] += now[k];
    if (now[4] == mine.rtt_sum_ns && rtt_min == UINT64_MAX) continue;
    mine.rtt_sum_ns = now[4];
    ++stripes_read_;
    // Buckets never seen on this stripe are looked for when this window's
    // extremes reach past the buckets kept, and at every kOutsideEvery-th
    // read: a call records its bucket before its extremes, so one that is
    // preempted in between, and whose latency falls in a new bucket, may
    // be counted that many reads late (never lost). Otherwise the read
    // stays within the few lines the stripe's latencies use (13 lines a
    // stripe for all 200 buckets).
    const bool inside = rtt_min != UINT64_MAX && rtt_max != 0 && mine.buckets.first() < mine.buckets.end() &&
                        histogram_bucket(rtt_min) >= mine.buckets.first() &&
                        histogram_bucket(rtt_max) < mine.buckets.end();
    const bool look_outside = ++mine.takes % kOutsideEvery == 0 || !inside;
    mine.buckets.take(segment.latency_histogram(index, s), delta.histogram, delta.ok, look_outside);
    delta.widen_histogram(mine.buckets.first(), mine.buckets.end());
  }
  // Modulo 2^64, like every counter: a total's difference is the sum of
  // its stripes' differences.
  delta.dropped += totals[0] - totals_[0];
  delta.ignored += totals[1] - totals_[1];
  delta.rejected += totals[2] - totals_[2];
  delta.shadow_admitted += totals[3] - totals_[3];
  delta.rtt_sum_ns += totals[4] - totals_[4];
  delta.queue_full += totals[5] - totals_[5];
  delta.deadline_rejected += totals[6] - totals_[6];
  delta.failed += totals[7] - totals_[7];
  delta.open_rejected += totals[8] - totals_[8];
  delta.shadow_open += totals[9] - totals_[9];
  for (std::uint32_t p = 0; p < kMaxPartitions; ++p) {
    delta.partition_rejected[p] += totals[10 + p] - totals_[10 + p];
  }
  totals_ = totals;
  // The waits, one histogram for the dependency, read only when a wait was
  // recorded: its sum moved. Acquire pairs with the release add in the
  // client's record_wait(), after the bucket's. (A wait of exactly 0 ns
  // adds nothing to the sum: it is counted at the dependency's next wait.)
  const std::uint64_t wait_sum = segment.dependency(index).waits.wait_sum_ns.load(std::memory_order_acquire);
  if (wait_sum != wait_sum_ns_) {
    delta.wait_sum_ns += wait_sum - wait_sum_ns_;
    wait_sum_ns_ = wait_sum;
    wait_buckets_.take(segment.wait_histogram(index), delta.wait_histogram, delta.waited);
  }
}

}  // namespace bulkhead::shm
