#include "policies/prng.hpp"

#include <cstdint>

#include <gtest/gtest.h>

namespace bulkhead::policies {
namespace {

TEST(SplitMix64, MatchesTheReferenceSequence) {
  // The first outputs of Vigna's splitmix64.c seeded with 0, a sequence fixed
  // by the algorithm: a change here changes every jittered policy's limits.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(rng.next(), 0x06c45d188009454fULL);
}

TEST(SplitMix64, SameSeedSameSequence) {
  SplitMix64 a(42);
  SplitMix64 b(42);
  SplitMix64 c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    differs = differs || x != c.next();
  }
  EXPECT_TRUE(differs);
}

TEST(SplitMix64, UnitValuesAreInHalfOpenInterval) {
  SplitMix64 rng(7);
  double lowest = 1;
  double highest = 0;
  for (int i = 0; i < 10'000; ++i) {
    const double u = rng.next_unit();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    lowest = u < lowest ? u : lowest;
    highest = u > highest ? u : highest;
  }
  // 10 000 draws spread over the interval.
  EXPECT_LT(lowest, 0.01);
  EXPECT_GT(highest, 0.99);
}

}  // namespace
}  // namespace bulkhead::policies
