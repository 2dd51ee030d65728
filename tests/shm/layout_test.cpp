#include "shm/layout.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace bulkhead::shm {
namespace {

TEST(Layout, MagicSpellsBulkhead) {
  char bytes[8];
  std::memcpy(bytes, &kMagic, sizeof bytes);
  EXPECT_EQ(std::string(bytes, 8), "BULKHEAD");
}

TEST(Layout, WritersNeverShareACacheLine) {
  // Daemon-written, identity, admission and statistics lines start on their
  // own cache lines in every slot.
  EXPECT_EQ(offsetof(DependencySlot, identity) % kCacheLine, 0u);
  EXPECT_EQ(offsetof(DependencySlot, control) % kCacheLine, 0u);
  EXPECT_EQ(offsetof(DependencySlot, admission) % kCacheLine, 0u);
  EXPECT_EQ(sizeof(DependencySlot) % kCacheLine, 0u);
  EXPECT_EQ(sizeof(StatsStripe) % kCacheLine, 0u);
  EXPECT_EQ(offsetof(DependencySlot, waits) % kCacheLine, 0u);
  EXPECT_EQ(sizeof(HistogramCounts) % kCacheLine, 0u);
  EXPECT_EQ(offsetof(Header, daemon_pid), kCacheLine);
}

TEST(Layout, TablesFollowTheHeaderAndEachOther) {
  const Layout l = segment_layout({100, 10, 3, 20});
  EXPECT_EQ(l.dependency_table_offset, sizeof(Header));
  // 20 queue records of 8 bytes round up to 192 bytes (3 lines).
  EXPECT_EQ(l.dependency_slot_size, sizeof(DependencySlot) + 192 + 3 * sizeof(StatsStripe));
  // 100 held words of 8 bytes round up to 832 bytes (13 lines).
  EXPECT_EQ(l.process_slot_size, sizeof(ProcessSlot) + 832);
  // The histograms: 3 stripes' latency histograms, then one wait
  // histogram, per dependency, 800 bytes each rounded up to 832 (13 lines).
  EXPECT_EQ(sizeof(HistogramCounts), 832u);
  EXPECT_EQ(l.latency_table_offset, l.dependency_table_offset + 100ull * l.dependency_slot_size);
  EXPECT_EQ(l.wait_table_offset, l.latency_table_offset + 3ull * 100 * 832);
  EXPECT_EQ(l.process_table_offset, l.wait_table_offset + 100ull * 832);
  EXPECT_EQ(l.total_size, l.process_table_offset + 10ull * l.process_slot_size);
  EXPECT_EQ(l.dependency_slot_size % kCacheLine, 0u);
  EXPECT_EQ(l.process_slot_size % kCacheLine, 0u);
}

TEST(Layout, AnUnnamedCallMovesTheTotalOnly) {
  std::uint64_t word = 0;
  word += kAdmissionAcquire;
  word += kAdmissionAcquire;
  EXPECT_EQ(admission_inflight(word), 2u);
  word += kAdmissionRelease;
  EXPECT_EQ(admission_inflight(word), 1u);
  EXPECT_EQ(word >> 32, 0u);  // the partitions' fields untouched
  EXPECT_EQ(partition_inflight(word, 0), 1u);
}

TEST(Layout, APartitionsCallMovesItsFieldWithTheTotal) {
  std::uint64_t word = 0;
  word += admission_unit(1);
  word += admission_unit(2);
  word += admission_unit(2);
  word += kAdmissionAcquire;
  EXPECT_EQ(admission_inflight(word), 4u);
  EXPECT_EQ(partition_inflight(word, 1), 1u);
  EXPECT_EQ(partition_inflight(word, 2), 2u);
  EXPECT_EQ(partition_inflight(word, 0), 1u);
  word -= admission_unit(2);
  EXPECT_EQ(admission_inflight(word), 3u);
  EXPECT_EQ(partition_inflight(word, 2), 1u);
  EXPECT_EQ(partition_inflight(word, 0), 1u);
}

TEST(Layout, JunkFieldsNeverMakeTheDefaultCountNegative) {
  const std::uint64_t word = (std::uint64_t{5} << 32) | 2;  // field 1 says 5, the total 2
  EXPECT_EQ(partition_inflight(word, 0), 0u);
}

}  // namespace
}  // namespace bulkhead::shm
