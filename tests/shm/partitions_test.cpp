// The partition rule by hand-worked cases, then exhaustively: from every
// state the rule can reach, the limit holds and a partition under its
// guarantee is admitted.
#include "shm/partitions.hpp"

#include <gtest/gtest.h>

#include <array>
#include <set>
#include <vector>

namespace bulkhead::shm {
namespace {

using V = PartitionVerdict;

// The admission word with c0 calls naming no partition, c1 and c2 of the
// named ones.
constexpr std::uint64_t word_of(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2) {
  return std::uint64_t{c0 + c1 + c2} | std::uint64_t{c1} << 32 | std::uint64_t{c2} << 48;
}

// Limit 10; critical (1) 0.7, batch (2) 0.3: guarantees 7 and 3.
constexpr std::uint64_t kRule = partition_rule(10, 0, 7, 3);

TEST(PartitionRule, GuaranteesAreFlooredSharesThatNeverSumAboveTheLimit) {
  EXPECT_EQ(guaranteed_count(700'000, 10), 7u);
  EXPECT_EQ(guaranteed_count(300'000, 10), 3u);
  EXPECT_EQ(guaranteed_count(333'333, 10), 3u);  // 3.33: floor
  EXPECT_EQ(guaranteed_count(999'999, 10), 9u);
  for (std::uint32_t limit = 0; limit <= 1000; ++limit) {
    const std::uint32_t sum = guaranteed_count(333'334, limit) + guaranteed_count(333'333, limit) +
                              guaranteed_count(333'333, limit);
    EXPECT_LE(sum, limit);
  }
}

TEST(PartitionRule, APartitionUnderItsGuaranteeIsAdmitted) {
  EXPECT_EQ(partition_verdict(word_of(0, 0, 0), kRule, 0, 2), V::kAdmit);
  // Batch under its 3 while critical borrows nothing: in.
  EXPECT_EQ(partition_verdict(word_of(0, 7, 2), kRule, 0, 2), V::kAdmit);
  // Critical under its 7 while batch holds its 3.
  EXPECT_EQ(partition_verdict(word_of(0, 6, 3), kRule, 0, 1), V::kAdmit);
}

TEST(PartitionRule, ABorrowerTakesOnlyCapacityNoUnusedGuaranteeReserves) {
  // Batch at its 3, critical idle: the other 7 are critical's.
  EXPECT_EQ(partition_verdict(word_of(0, 0, 3), kRule, 0, 2), V::kReserved);
  // Critical at 7, batch idle: batch's 3 are reserved.
  EXPECT_EQ(partition_verdict(word_of(0, 7, 0), kRule, 0, 1), V::kReserved);
  // Calls naming no partition have no guarantee: nothing unreserved is left.
  EXPECT_EQ(partition_verdict(word_of(0, 5, 3), kRule, 0, 0), V::kReserved);
  // Shares 0.5 and 0.2 of 10 leave 3 to borrow: critical at 5 takes them.
  const std::uint64_t rule = partition_rule(10, 0, 5, 2);
  EXPECT_EQ(partition_verdict(word_of(0, 5, 0), rule, 0, 1), V::kAdmit);  // 5 + 2 reserved < 10
  EXPECT_EQ(partition_verdict(word_of(0, 7, 0), rule, 0, 1), V::kAdmit);  // 7 + 2 = 9 < 10
  EXPECT_EQ(partition_verdict(word_of(0, 8, 0), rule, 0, 1), V::kReserved);  // 8 + 2 = 10
  EXPECT_EQ(partition_verdict(word_of(1, 5, 1), rule, 0, 0), V::kAdmit);  // 7 + 1 unused of batch
  EXPECT_EQ(partition_verdict(word_of(2, 5, 2), rule, 0, 0), V::kAdmit);  // 9, nothing unused
}

TEST(PartitionRule, AHardCapNeverLetsAPartitionPastItsShare) {
  const std::uint32_t batch_capped = 1u << 2;
  EXPECT_EQ(partition_verdict(word_of(0, 0, 2), kRule, batch_capped, 2), V::kAdmit);
  EXPECT_EQ(partition_verdict(word_of(0, 0, 3), kRule, batch_capped, 2), V::kCapped);
  // Even with a free pool: shares 0.5 and 0.2, batch capped at 2.
  EXPECT_EQ(partition_verdict(word_of(0, 0, 2), partition_rule(10, 0, 5, 2), batch_capped, 2), V::kCapped);
  // "default" capped at its own share.
  EXPECT_EQ(partition_verdict(word_of(2, 0, 0), partition_rule(10, 2, 5, 0), 1u, 0), V::kCapped);
  // A share of 0.2 of a limit of 4 floors to 0: a capped batch gets nothing
  // at all, with the whole limit idle (docs/config.md says so).
  EXPECT_EQ(guaranteed_count(200'000, 4), 0u);
  EXPECT_EQ(partition_verdict(word_of(0, 0, 0), partition_rule(4, 0, 2, 0), batch_capped, 2), V::kCapped);
}

TEST(PartitionRule, DefaultWithoutAShareGetsNothingWhenTheOtherSharesSumToOne) {
  // README's warning: shares 0.7 and 0.3 of a limit of 20 are guarantees 14
  // and 6, which reserve all of it, so a call naming no partition is refused
  // with the whole limit idle, and still with critical using its own.
  const std::uint64_t rule = partition_rule(20, 0, guaranteed_count(700'000, 20), guaranteed_count(300'000, 20));
  EXPECT_EQ(partition_verdict(word_of(0, 0, 0), rule, 0, 0), V::kReserved);
  EXPECT_EQ(partition_verdict(word_of(0, 14, 0), rule, 0, 0), V::kReserved);
  EXPECT_EQ(unnamed_admit_limit(rule, 0), 0u);
  // At 21 flooring leaves one call over, which it may borrow.
  const std::uint64_t odd = partition_rule(21, 0, guaranteed_count(700'000, 21), guaranteed_count(300'000, 21));
  EXPECT_EQ(partition_verdict(word_of(0, 0, 0), odd, 0, 0), V::kAdmit);
  EXPECT_EQ(partition_verdict(word_of(1, 0, 0), odd, 0, 0), V::kReserved);
}

TEST(PartitionRule, TheLimitHoldsEvenForAGuarantee) {
  // The limit fell to 10 with 10 in flight (batch borrowed before): critical
  // waits for the total to come under it.
  EXPECT_EQ(partition_verdict(word_of(0, 4, 6), kRule, 0, 1), V::kAtLimit);
  EXPECT_EQ(partition_verdict(word_of(0, 4, 7), kRule, 0, 1), V::kAtLimit);
}

TEST(PartitionRule, AFullFieldIsRefused) {
  const std::uint64_t big = partition_rule(kPartitionFieldMax + 1, 0, 0, 0);
  EXPECT_EQ(partition_verdict(word_of(0, kPartitionFieldMax - 1, 0), big, 0, 1), V::kAdmit);
  EXPECT_EQ(partition_verdict(word_of(0, kPartitionFieldMax, 0), big, 0, 1), V::kFieldFull);
}

// The word is the clients' adds and subtractions modulo 2^64: each count
// reads signed, once what the fields below it borrowed is taken off.
TEST(AdmissionWord, CountsReadSignedWithWhatTheFieldsBelowBorrowed) {
  using Counts = std::array<std::int64_t, kMaxPartitions>;
  EXPECT_EQ(admission_counts(word_of(3, 1, 2)), (Counts{6, 1, 2}));
  EXPECT_EQ(admission_counts(word_of(0, kPartitionFieldMax, kPartitionFieldMax)),
            (Counts{2 * kPartitionFieldMax, kPartitionFieldMax, kPartitionFieldMax}));
  // A release with nothing in flight: all 64 bits set, one call short.
  const std::uint64_t short_one = 0 + kAdmissionRelease;
  EXPECT_EQ(admission_counts(short_one), (Counts{-1, 0, 0}));
  EXPECT_EQ(admission_inflight(short_one), 0u);
  EXPECT_FALSE(admission_at_limit(short_one, 1));  // the hot path's compare agrees
  EXPECT_TRUE(admission_at_limit(short_one, 0));   // a limit of 0 refuses all
  EXPECT_TRUE(admission_at_limit(word_of(5, 0, 0), 5));
  EXPECT_FALSE(admission_at_limit(word_of(4, 0, 0), 5));
  EXPECT_EQ(partition_inflight(short_one, 1), 0u);
  EXPECT_EQ(partition_inflight(short_one, 2), 0u);
  // One batch call short: the total and its field, each -1.
  const std::uint64_t batch_short = 0 - admission_unit(2);
  EXPECT_EQ(admission_counts(batch_short), (Counts{-1, 0, -1}));
  // Two critical calls short with a default and a batch call in flight:
  // default still counts its one.
  const std::uint64_t critical_short = word_of(1, 0, 1) - 2 * admission_unit(1);
  EXPECT_EQ(admission_counts(critical_short), (Counts{0, -2, 1}));
  EXPECT_EQ(partition_inflight(critical_short, 0), 1u);
  EXPECT_EQ(partition_inflight(critical_short, 1), 0u);
  EXPECT_EQ(partition_inflight(critical_short, 2), 1u);
  // Every mix of a few calls over or short in each count reads back, and
  // is what admission_delta() adds.
  for (std::int64_t t = -3; t <= 3; ++t) {
    for (std::int64_t c1 = -3; c1 <= 3; ++c1) {
      for (std::int64_t c2 = -3; c2 <= 3; ++c2) {
        const std::uint64_t word = static_cast<std::uint64_t>(t) + (static_cast<std::uint64_t>(c1) << 32) +
                                   (static_cast<std::uint64_t>(c2) << 48);
        EXPECT_EQ(admission_counts(word), (Counts{t, c1, c2})) << t << " " << c1 << " " << c2;
        EXPECT_EQ(admission_delta({t, c1, c2}), word) << t << " " << c1 << " " << c2;
      }
    }
  }
}

// A count below zero is none in flight to the rule: the word holds one
// call fewer than the host has, which the drift scan restores.
TEST(PartitionRule, ACountBelowZeroIsNoneInFlight) {
  EXPECT_EQ(partition_verdict(0 - admission_unit(2), kRule, 0, 2), V::kAdmit);
  EXPECT_EQ(partition_verdict(0 - admission_unit(2), kRule, 0, 1), V::kAdmit);
  EXPECT_EQ(partition_verdict(0 + kAdmissionRelease, partition_rule(0, 0, 0, 0), 0, 0), V::kAtLimit);
}

TEST(PartitionRule, TheUnnamedFastPathLimitNeverAdmitsWhatTheRuleRefuses) {
  EXPECT_EQ(unnamed_admit_limit(kRule, 0), 0u);                        // 10 - 7 - 3
  EXPECT_EQ(unnamed_admit_limit(partition_rule(10, 0, 5, 2), 0), 3u);
  EXPECT_EQ(unnamed_admit_limit(partition_rule(10, 4, 5, 0), 0), 5u);  // its own share is no reserve
  EXPECT_EQ(unnamed_admit_limit(partition_rule(10, 4, 5, 0), 1u), 0u);  // capped: the rule decides
  // Every state of every rule with limit 8: under the fast limit, the rule admits.
  for (std::uint32_t g0 = 0; g0 <= 8; ++g0) {
    for (std::uint32_t g1 = 0; g0 + g1 <= 8; ++g1) {
      for (std::uint32_t g2 = 0; g0 + g1 + g2 <= 8; ++g2) {
        const std::uint64_t rule = partition_rule(8, g0, g1, g2);
        for (std::uint32_t caps : {0u, 1u, 2u, 6u}) {
          const std::uint32_t fast = unnamed_admit_limit(rule, caps);
          for (std::uint32_t c0 = 0; c0 <= 8; ++c0) {
            for (std::uint32_t c1 = 0; c0 + c1 <= 8; ++c1) {
              for (std::uint32_t c2 = 0; c0 + c1 + c2 <= 8; ++c2) {
                if (c0 + c1 + c2 >= fast) continue;
                ASSERT_EQ(partition_verdict(word_of(c0, c1, c2), rule, caps, 0), V::kAdmit)
                    << "g " << g0 << " " << g1 << " " << g2 << " caps " << caps << " c " << c0 << " " << c1
                    << " " << c2;
              }
            }
          }
        }
      }
    }
  }
}

// Every state reachable from idle by admissions under the rule and any
// releases: the total never passes the limit, caps hold, and a partition
// under its guarantee is always admitted.
void explore(std::uint32_t limit, std::array<std::uint32_t, 3> g, std::uint32_t caps) {
  const std::uint64_t rule = partition_rule(limit, g[0], g[1], g[2]);
  std::set<std::array<std::uint32_t, 3>> seen{{0, 0, 0}};
  std::vector<std::array<std::uint32_t, 3>> todo{{0, 0, 0}};
  while (!todo.empty()) {
    const auto c = todo.back();
    todo.pop_back();
    ASSERT_LE(c[0] + c[1] + c[2], limit);
    for (std::uint32_t p = 0; p < 3; ++p) {
      if ((caps >> p) & 1u) {
        ASSERT_LE(c[p], g[p]);
      }
      const V v = partition_verdict(word_of(c[0], c[1], c[2]), rule, caps, p);
      if (c[p] < g[p]) {
        ASSERT_EQ(v, V::kAdmit) << "partition " << p << " under its guarantee refused";
      }
      auto next = c;
      if (v == V::kAdmit) {
        ++next[p];
        if (seen.insert(next).second) todo.push_back(next);
      }
      if (c[p] > 0) {
        next = c;
        --next[p];
        if (seen.insert(next).second) todo.push_back(next);
      }
    }
  }
}

TEST(PartitionRule, FromEveryReachableStateTheLimitCapsAndGuaranteesHold) {
  explore(10, {0, 7, 3}, 0);
  explore(10, {0, 5, 2}, 0);
  explore(10, {0, 5, 2}, 1u << 2);
  explore(9, {3, 3, 3}, 0);
  explore(7, {2, 0, 4}, 1u | 1u << 2);
  explore(12, {0, 6, 0}, 1u << 1);
}

}  // namespace
}  // namespace bulkhead::shm
