#include "shm/histogram.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace bulkhead::shm {
namespace {

TEST(Histogram, EveryValueFallsInsideItsBucket) {
  for (std::uint64_t ns = 0; ns < (std::uint64_t{1} << 36); ns = ns * 9 / 8 + 7) {
    const std::uint32_t b = histogram_bucket(ns);
    ASSERT_LT(b, kHistogramBuckets);
    EXPECT_LE(histogram_bucket_lower_ns(b), ns) << ns;
    EXPECT_LT(ns, histogram_bucket_upper_ns(b)) << ns;
  }
}

TEST(Histogram, BucketsAreContiguousAndAtMostAnEighthWide) {
  for (std::uint32_t b = 0; b + 1 < kHistogramBuckets; ++b) {
    EXPECT_EQ(histogram_bucket_upper_ns(b), histogram_bucket_lower_ns(b + 1));
    const auto lo = histogram_bucket_lower_ns(b);
    const auto width = histogram_bucket_upper_ns(b) - lo;
    if (b >= 8) {
      EXPECT_LE(width * 8, lo) << "bucket " << b;
    }
    EXPECT_EQ(histogram_bucket(lo), b);
  }
}

TEST(Histogram, HugeValuesLandInTheLastBucket) {
  EXPECT_EQ(histogram_bucket(UINT64_MAX), kHistogramBuckets - 1);
  EXPECT_EQ(histogram_bucket(std::uint64_t{1} << 40), kHistogramBuckets - 1);
}

TEST(Histogram, QuantileIsWithinOneSixteenthOfTheValue) {
  std::vector<std::uint64_t> counts(kHistogramBuckets, 0);
  // 90 calls of 1 ms, 10 calls of 50 ms.
  counts[histogram_bucket(1'000'000)] += 90;
  counts[histogram_bucket(50'000'000)] += 10;
  const auto p50 = histogram_quantile_ns(counts, 0.5);
  const auto p90 = histogram_quantile_ns(counts, 0.9);
  const auto p99 = histogram_quantile_ns(counts, 0.99);
  EXPECT_NEAR(static_cast<double>(p50), 1e6, 1e6 / 16);
  EXPECT_NEAR(static_cast<double>(p90), 1e6, 1e6 / 16);  // the 90th of 100 is still 1 ms
  EXPECT_NEAR(static_cast<double>(p99), 50e6, 50e6 / 16);
}

TEST(Histogram, EmptyQuantileIsZero) {
  std::vector<std::uint64_t> counts(kHistogramBuckets, 0);
  EXPECT_EQ(histogram_quantile_ns(counts, 0.5), 0u);
}

TEST(Histogram, QuantilesInOnePassAgreeWithOneAtATime) {
  // Histograms of several shapes, the empty one included: every quantile
  // the daemon takes in one pass equals the one-at-a-time answer.
  std::uint64_t seed = 7;
  for (int shape = 0; shape < 50; ++shape) {
    std::vector<std::uint64_t> counts(kHistogramBuckets, 0);
    for (int i = 0; i < shape; ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      counts[(seed >> 33) % kHistogramBuckets] += (seed >> 20) % 1000;
    }
    const double qs[] = {0.0, 0.5, 0.9, 0.99, 1.0};
    std::uint64_t at[5];
    histogram_quantiles_ns(counts, qs, at);
    for (int q = 0; q < 5; ++q) EXPECT_EQ(at[q], histogram_quantile_ns(counts, qs[q])) << shape << " " << qs[q];
    // The same from the buckets that hold counts only, as the controller
    // passes its window.
    std::size_t first = 0, end = counts.size();
    while (first < end && counts[first] == 0) ++first;
    while (end > first && counts[end - 1] == 0) --end;
    std::uint64_t ranged[5];
    histogram_quantiles_ns(std::span<const std::uint64_t>(counts).subspan(first, end - first), qs, ranged,
                           static_cast<std::uint32_t>(first));
    for (int q = 0; q < 5; ++q) EXPECT_EQ(ranged[q], at[q]) << shape << " " << qs[q] << " from bucket " << first;
  }
}

TEST(Histogram, BucketsWithCountsAreVisitedInOrderAndNoOther) {
  std::uint64_t seed = 11;
  for (int shape = 0; shape < 50; ++shape) {
    std::vector<std::uint64_t> counts(kHistogramBuckets, 0);
    for (int i = 0; i < shape; ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      counts[(seed >> 33) % kHistogramBuckets] += 1 + (seed >> 20) % 5;
    }
    std::vector<std::pair<std::uint32_t, std::uint64_t>> expected, seen;
    for (std::uint32_t b = 0; b < counts.size(); ++b) {
      if (counts[b] != 0) expected.emplace_back(b, counts[b]);
    }
    for_each_bucket_with_counts(counts, [&](std::uint32_t b, std::uint64_t n) { seen.emplace_back(b, n); });
    EXPECT_EQ(seen, expected) << shape;
  }
}

}  // namespace
}  // namespace bulkhead::shm
