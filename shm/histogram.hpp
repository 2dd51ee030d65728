// The latency histogram encoding shared by the clients (which add to it),
// the daemon (which takes window deltas and percentiles) and the tools.
//
// Log-linear, like HdrHistogram with 3 significant bits: values are counted
// in units of 2^10 ns (1.024 us); below 8 units the buckets are one unit
// wide, above that every power of two is split into 8 equal buckets, so a
// bucket is at most 12.5% wide and its midpoint is within 6.25% of any value
// in it. 200 buckets reach 2^37 ns (137 s); longer calls land in the last.
// The bucket count is part of the segment ABI.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>

namespace bulkhead::shm {

inline constexpr unsigned kHistogramUnitShift = 10;  // one unit = 1024 ns
inline constexpr unsigned kHistogramSubBits = 3;     // 8 buckets per octave
inline constexpr std::uint32_t kHistogramBuckets = 200;

// Bucket of a latency in nanoseconds.
constexpr std::uint32_t histogram_bucket(std::uint64_t ns) {
  const std::uint64_t v = ns >> kHistogramUnitShift;
  constexpr std::uint64_t kLinear = 1u << kHistogramSubBits;
  if (v < kLinear) return static_cast<std::uint32_t>(v);
  const unsigned msb = 63u - static_cast<unsigned>(std::countl_zero(v));
  const std::uint64_t sub = (v >> (msb - kHistogramSubBits)) & (kLinear - 1);
  const std::uint64_t index = ((msb - kHistogramSubBits + 1) << kHistogramSubBits) | sub;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(index, kHistogramBuckets - 1));
}

// Calls f(bucket, count) for each bucket of `counts` that is not 0, in
// order. The daemon adds a tick's deltas into a window and into its
// metrics for every dependency every tick, and a tick's calls land in a
// few of the 200 buckets: blocks of 8 counts are tested at once (the OR
// vectorises), so empty stretches cost a few instructions.
// `counts` may be a part of a histogram that starts at bucket `first`:
// `f` gets the bucket's index in the whole histogram.
template <typename F>
inline void for_each_bucket_with_counts(std::span<const std::uint64_t> counts, F&& f, std::uint32_t first = 0) {
  constexpr std::size_t kBlock = 8;
  const std::uint64_t* c = counts.data();
  const std::size_t n = counts.size();
  const std::size_t blocks = n / kBlock;
  for (std::size_t k = 0; k < blocks; ++k) {
    const std::uint64_t* block = c + k * kBlock;
    std::uint64_t any = 0;
    for (std::size_t i = 0; i < kBlock; ++i) any |= block[i];
    if (any == 0) continue;
    for (std::size_t i = 0; i < kBlock; ++i) {
      if (block[i] != 0) f(first + static_cast<std::uint32_t>(k * kBlock + i), block[i]);
    }
  }
  for (std::size_t b = blocks * kBlock; b < n; ++b) {
    if (c[b] != 0) f(first + static_cast<std::uint32_t>(b), c[b]);
  }
}

// Smallest latency, in nanoseconds, that falls in `bucket`.
constexpr std::uint64_t histogram_bucket_lower_ns(std::uint32_t bucket) {
  constexpr std::uint32_t kLinear = 1u << kHistogramSubBits;
  if (bucket < kLinear) return std::uint64_t{bucket} << kHistogramUnitShift;
  const std::uint32_t octave = bucket >> kHistogramSubBits;  // >= 1
  const std::uint64_t sub = bucket & (kLinear - 1);
  const unsigned msb = octave + kHistogramSubBits - 1;
  return ((kLinear | sub) << (msb - kHistogramSubBits)) << kHistogramUnitShift;
}

// One past the largest latency in `bucket` (the last bucket is open-ended;
// this returns where it starts to be open).
constexpr std::uint64_t histogram_bucket_upper_ns(std::uint32_t bucket) {
  return histogram_bucket_lower_ns(bucket + 1);
}

// The value at quantile q (0..1) of the counts, as its bucket's midpoint; 0
// for an empty histogram.
inline std::uint64_t histogram_quantile_ns(std::span<const std::uint64_t> counts, double q) {
  std::uint64_t total = 0;
  for (std::uint64_t c : counts) total += c;
  if (total == 0) return 0;
  // The rank of the wanted sample, 1-based: ceil(q * total), at least 1.
  const double want = std::clamp(q, 0.0, 1.0) * static_cast<double>(total);
  std::uint64_t rank = static_cast<std::uint64_t>(want);
  if (static_cast<double>(rank) < want) ++rank;
  rank = std::max<std::uint64_t>(rank, 1);
  std::uint64_t seen = 0;
  for (std::uint32_t b = 0; b < counts.size(); ++b) {
    seen += counts[b];
    if (seen >= rank) {
      const std::uint64_t lo = histogram_bucket_lower_ns(b);
      return lo + (histogram_bucket_upper_ns(b) - lo) / 2;
    }
  }
  return histogram_bucket_lower_ns(static_cast<std::uint32_t>(counts.size() - 1));
}

// histogram_quantile_ns() of each of `qs` (ascending) into `out`, in one
// pass over the counts instead of two per quantile: the daemon takes three
// quantiles of every window, for every dependency, every tick. counts[i]
// is bucket first_bucket + i (buckets outside hold none), so that a caller
// that knows where its counts are passes only those.
inline void histogram_quantiles_ns(std::span<const std::uint64_t> counts, std::span<const double> qs,
                                   std::span<std::uint64_t> out, std::uint32_t first_bucket = 0) {
  std::uint64_t total = 0;
  for (std::uint64_t c : counts) total += c;
  std::size_t next = 0;
  if (total == 0 || qs.empty()) {
    for (; next < qs.size(); ++next) out[next] = 0;
    return;
  }
  // The 1-based rank of quantile qs[i], as histogram_quantile_ns() takes it.
  auto rank_of = [total](double q) {
    const double want = std::clamp(q, 0.0, 1.0) * static_cast<double>(total);
    std::uint64_t rank = static_cast<std::uint64_t>(want);
    if (static_cast<double>(rank) < want) ++rank;
    return std::max<std::uint64_t>(rank, 1);
  };
  std::uint64_t seen = 0;
  std::uint64_t want = rank_of(qs[0]);
  for (std::uint32_t i = 0; i < counts.size() && next < qs.size(); ++i) {
    seen += counts[i];
    const std::uint32_t b = first_bucket + i;
    while (seen >= want) {
      const std::uint64_t lo = histogram_bucket_lower_ns(b);
      out[next++] = lo + (histogram_bucket_upper_ns(b) - lo) / 2;
      if (next == qs.size()) break;
      want = rank_of(qs[next]);
    }
  }
  for (; next < qs.size(); ++next) {
    out[next] = histogram_bucket_lower_ns(static_cast<std::uint32_t>(first_bucket + counts.size() - 1));
  }
}

}  // namespace bulkhead::shm
