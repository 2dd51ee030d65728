// StatsReader: the daemon's stripe-by-stripe reading gives the same deltas
// as summing every stripe, while reading only the stripes written since.
#include "shm/stats.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/support/temp_segment.hpp"

namespace bulkhead::shm {
namespace {

using testing::TempSegmentName;

// What the client's record() does for a success, on stripe `stripe` of
// dependency `index`.
void record_success(Segment& segment, std::uint32_t index, std::uint32_t stripe, std::uint64_t latency_ns) {
  StatsStripe& s = segment.stripe(index, stripe);
  segment.latency_histogram(index, stripe).bucket[histogram_bucket(latency_ns)].fetch_add(1, std::memory_order_relaxed);
  s.rtt_sum_ns.fetch_add(latency_ns, std::memory_order_release);
  std::uint64_t seen = s.rtt_min_ns.load(std::memory_order_relaxed);
  while (latency_ns < seen && !s.rtt_min_ns.compare_exchange_weak(seen, latency_ns, std::memory_order_release)) {
  }
}

class StatsReaderTest : public ::testing::Test {
 protected:
  StatsReaderTest() : segment_(Segment::create(name_, testing::small_segment(4, 4, 4))) {
    index_ = find_or_claim_dependency(segment_, "db", 10, 0).index;
  }
  DependencyCounters take(StatsReader& reader, WindowExtremes* extremes = nullptr) {
    DependencyCounters delta;
    WindowExtremes e;
    reader.take(segment_, index_, delta, e);
    if (extremes != nullptr) *extremes = e;
    return delta;
  }
  TempSegmentName name_;
  Segment segment_;
  std::uint32_t index_ = 0;
};

// A call records its bucket, then its sum, then its window extremes. One
// preempted before its extremes, whose latency falls in a bucket the stripe
// never had, is missed by reads whose extremes (other calls') stay within
// the buckets kept, and counted by the periodic look past them: late and
// once, never lost.
TEST_F(StatsReaderTest, ANewBucketWithoutItsExtremesIsCountedByThePeriodicLook) {
  const auto call = [&](std::uint64_t latency_ns) {
    record_success(segment_, index_, 1, latency_ns);
    std::uint64_t seen = segment_.stripe(index_, 1).rtt_max_ns.load();
    while (latency_ns > seen && !segment_.stripe(index_, 1).rtt_max_ns.compare_exchange_weak(seen, latency_ns)) {
    }
  };
  StatsReader reader(segment_, index_);
  call(1'000'000);
  EXPECT_EQ(take(reader).ok, 1u);  // the buckets kept: 1 ms's
  const std::uint32_t slow = histogram_bucket(50'000'000);
  segment_.latency_histogram(index_, 1).bucket[slow].fetch_add(1);
  segment_.stripe(index_, 1).rtt_sum_ns.fetch_add(50'000'000, std::memory_order_release);
  std::uint64_t ok = 0, slow_seen = 0;
  std::uint32_t reads = 1;
  for (; reads < StatsReader::kOutsideEvery; ++reads) {
    call(1'000'000);
    const DependencyCounters d = take(reader);
    ok += d.ok;
    slow_seen += d.histogram[slow];
    if (reads == 1) {
      EXPECT_EQ(d.histogram[slow], 0u) << "the extremes stayed within the buckets kept";
    }
  }
  EXPECT_EQ(slow_seen, 1u) << "counted by the look at the reader's read " << StatsReader::kOutsideEvery;
  EXPECT_EQ(ok, reads);  // every 1 ms call and the slow one, each once
  call(1'000'000);
  EXPECT_EQ(take(reader).ok, 1u);
}

TEST_F(StatsReaderTest, CountsWhatWasRecordedSinceTheLastTakeOnly) {
  record_success(segment_, index_, 1, 2'000'000);  // before the reader: not counted
  StatsReader reader(segment_, index_);
  for (int i = 0; i < 3; ++i) record_success(segment_, index_, 1, 1'000'000);
  segment_.stripe(index_, 2).dropped.fetch_add(2);
  segment_.stripe(index_, 3).rejected.fetch_add(5);
  WindowExtremes e;
  const DependencyCounters d = take(reader, &e);
  EXPECT_EQ(d.ok, 3u);
  EXPECT_EQ(d.histogram[histogram_bucket(1'000'000)], 3u);
  EXPECT_EQ(d.histogram[histogram_bucket(2'000'000)], 0u);
  EXPECT_EQ(d.rtt_sum_ns, 3'000'000u);
  EXPECT_EQ(d.dropped, 2u);
  EXPECT_EQ(d.rejected, 5u);
  EXPECT_EQ(e.rtt_min_ns, 1'000'000u);
  EXPECT_EQ(reader.stripes_read(), 1u);  // the histogram of stripe 1 only: the others had no success

  const DependencyCounters again = take(reader);
  EXPECT_EQ(again.ok, 0u);
  EXPECT_EQ(again.dropped, 0u);
  EXPECT_EQ(reader.stripes_read(), 0u);
}

// A reader started from zero (the daemon's, for a slot claimed since its
// last tick) counts at its first take all that the counters hold: every
// counter, both histograms whole, on every stripe; a reader started now
// none of it. After that the two count alike.
TEST_F(StatsReaderTest, AReaderStartedFromZeroCountsWhatTheCountersHeldAlready) {
  record_success(segment_, index_, 1, 2'000'000);
  record_success(segment_, index_, 1, 2'000'000);
  record_success(segment_, index_, 3, 40'000);
  record_success(segment_, index_, 3, 700'000'000);
  segment_.stripe(index_, 0).failed.fetch_add(40);
  segment_.stripe(index_, 2).dropped.fetch_add(3);
  segment_.stripe(index_, 2).partition_rejected[1].fetch_add(4);
  segment_.wait_histogram(index_).bucket[histogram_bucket(5'000'000)].fetch_add(2);
  segment_.dependency(index_).waits.wait_sum_ns.fetch_add(10'000'000, std::memory_order_release);
  StatsReader from_zero(segment_, index_, StatsReader::Start::kZero);
  StatsReader from_now(segment_, index_);
  const DependencyCounters all = read_counters(segment_, index_).since(DependencyCounters{});
  ASSERT_EQ(all.ok, 4u);

  WindowExtremes e;
  const DependencyCounters d = take(from_zero, &e);
  EXPECT_EQ(d.ok, 4u);
  EXPECT_EQ(d.histogram, all.histogram);
  EXPECT_EQ(d.histogram[histogram_bucket(2'000'000)], 2u);
  EXPECT_EQ(d.rtt_sum_ns, 704'040'000u);
  EXPECT_EQ(d.failed, 40u);
  EXPECT_EQ(d.dropped, 3u);
  EXPECT_EQ(d.partition_rejected[1], 4u);
  EXPECT_EQ(d.waited, 2u);
  EXPECT_EQ(d.wait_histogram, all.wait_histogram);
  EXPECT_EQ(d.wait_sum_ns, 10'000'000u);
  EXPECT_EQ(from_zero.stripes_read(), 2u);  // the stripes that had successes
  // Every bucket that holds a count is within the range the daemon visits.
  EXPECT_LE(d.histogram_first, histogram_bucket(40'000));
  EXPECT_GT(d.histogram_end, histogram_bucket(700'000'000));
  EXPECT_EQ(e.rtt_min_ns, 40'000u);  // the window minimum since the claim

  const DependencyCounters none = take(from_now);
  EXPECT_EQ(none.ok, 0u);
  EXPECT_EQ(none.failed, 0u);
  EXPECT_EQ(none.waited, 0u);
  EXPECT_EQ(none.partition_rejected[1], 0u);

  record_success(segment_, index_, 1, 2'000'000);
  segment_.stripe(index_, 0).failed.fetch_add(1);
  const DependencyCounters zero_next = take(from_zero), now_next = take(from_now);
  for (const DependencyCounters* next : {&zero_next, &now_next}) {
    EXPECT_EQ(next->ok, 1u);
    EXPECT_EQ(next->histogram[histogram_bucket(2'000'000)], 1u);
    EXPECT_EQ(next->failed, 1u);
    EXPECT_EQ(next->waited, 0u);
  }
}

TEST_F(StatsReaderTest, ASuccessOfZeroLatencyIsCountedThroughTheWindowMinimum) {
  StatsReader reader(segment_, index_);
  take(reader);
  record_success(segment_, index_, 0, 0);  // the latency sum does not move
  const DependencyCounters d = take(reader);
  EXPECT_EQ(d.ok, 1u);
  EXPECT_EQ(d.histogram[0], 1u);
}

// A counter the reader does not compare would be counted only when another
// one of the same stripe moved with it: each one alone must be seen.
TEST_F(StatsReaderTest, EveryCounterIsSeenOnItsOwn) {
  struct Counter {
    const char* name;
    std::atomic<std::uint64_t> StatsStripe::*stripe;
    std::uint64_t DependencyCounters::*delta;
  };
  const Counter counters[] = {
      {"dropped", &StatsStripe::dropped, &DependencyCounters::dropped},
      {"ignored", &StatsStripe::ignored, &DependencyCounters::ignored},
      {"rejected", &StatsStripe::rejected, &DependencyCounters::rejected},
      {"shadow_admitted", &StatsStripe::shadow_admitted, &DependencyCounters::shadow_admitted},
      {"queue_full", &StatsStripe::queue_full, &DependencyCounters::queue_full},
      {"deadline_rejected", &StatsStripe::deadline_rejected, &DependencyCounters::deadline_rejected},
      {"failed", &StatsStripe::failed, &DependencyCounters::failed},
      {"open_rejected", &StatsStripe::open_rejected, &DependencyCounters::open_rejected},
      {"shadow_open", &StatsStripe::shadow_open, &DependencyCounters::shadow_open},
  };
  StatsReader reader(segment_, index_);
  for (const Counter& c : counters) {
    (segment_.stripe(index_, 2).*c.stripe).fetch_add(1);
    EXPECT_EQ(take(reader).*c.delta, 1u) << c.name;
  }
  // The rejections by partition, on the stripe's partitions line.
  for (std::uint32_t p = 0; p < kMaxPartitions; ++p) {
    segment_.stripe(index_, 2).partition_rejected[p].fetch_add(1);
    const DependencyCounters d = take(reader);
    for (std::uint32_t q = 0; q < kMaxPartitions; ++q) {
      EXPECT_EQ(d.partition_rejected[q], p == q ? 1u : 0u) << "partition_rejected[" << p << "], [" << q << "]";
    }
  }
  static_assert(StatsReader::kScalars == sizeof(counters) / sizeof(counters[0]) + 1 + kMaxPartitions,
                "a scalar counter of StatsStripe is missing here (the latency sum is checked elsewhere)");
  // The wait sum, on the dependency's waits line, moves alone too.
  segment_.dependency(index_).waits.wait_sum_ns.fetch_add(7);
  EXPECT_EQ(take(reader).wait_sum_ns, 7u);
}

TEST_F(StatsReaderTest, AgreesWithSummingEveryStripe) {
  StatsReader reader(segment_, index_);
  DependencyCounters last = read_counters(segment_, index_);
  std::uint64_t seed = 3;
  for (int tick = 0; tick < 20; ++tick) {
    for (int i = 0; i < tick * 3; ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      const auto stripe = static_cast<std::uint32_t>((seed >> 40) % 4);
      if ((seed >> 20) % 5 == 0) {
        segment_.wait_histogram(index_).bucket[histogram_bucket((seed >> 30) % 10'000'000)].fetch_add(1);
        segment_.dependency(index_).waits.wait_sum_ns.fetch_add((seed >> 30) % 10'000'000 + 1,
                                                               std::memory_order_release);
      } else if ((seed >> 20) % 5 == 1) {
        segment_.stripe(index_, stripe).dropped.fetch_add(1);  // no histogram read needed
      } else {
        record_success(segment_, index_, stripe, (seed >> 33) % 100'000'000);
      }
    }
    const DependencyCounters d = take(reader);
    const DependencyCounters now = read_counters(segment_, index_);
    const DependencyCounters expected = now.since(last);
    last = now;
    EXPECT_EQ(d.ok, expected.ok) << tick;
    EXPECT_EQ(d.rtt_sum_ns, expected.rtt_sum_ns) << tick;
    EXPECT_EQ(d.histogram, expected.histogram) << tick;
    EXPECT_EQ(d.waited, expected.waited) << tick;
    EXPECT_EQ(d.wait_sum_ns, expected.wait_sum_ns) << tick;
    EXPECT_EQ(d.wait_histogram, expected.wait_histogram) << tick;
  }
}

// The daemon reuses one DependencyCounters tick after tick: clear() leaves
// nothing of a window in the next, the waits included, though it writes
// only where the window had counts.
TEST_F(StatsReaderTest, ClearedCountersTakeTheNextWindowAlone) {
  StatsReader reader(segment_, index_);
  DependencyCounters d;
  d.clear();
  const std::uint32_t fast = histogram_bucket(5'000'000), slow = histogram_bucket(300'000'000);
  // A call, as the client records it: its maximum too (one call a window).
  auto record = [&](std::uint64_t ns) {
    record_success(segment_, index_, 1, ns);
    std::uint64_t zero = 0;
    ASSERT_TRUE(segment_.stripe(index_, 1).rtt_max_ns.compare_exchange_strong(zero, ns));
  };
  record(300'000'000);
  segment_.wait_histogram(index_).bucket[slow].fetch_add(1);
  segment_.dependency(index_).waits.wait_sum_ns.fetch_add(300'000'000, std::memory_order_release);
  WindowExtremes first;
  reader.take(segment_, index_, d, first);
  ASSERT_EQ(d.histogram[slow], 1u);
  ASSERT_EQ(d.wait_histogram[slow], 1u);
  ASSERT_EQ(d.waited, 1u);
  ASSERT_EQ(first.rtt_max_ns, 300'000'000u);
  d.clear();
  EXPECT_EQ(d.histogram, decltype(d.histogram){});
  EXPECT_EQ(d.wait_histogram, decltype(d.wait_histogram){});
  EXPECT_TRUE(d.histogram_used().empty());
  record(5'000'000);
  WindowExtremes second;
  reader.take(segment_, index_, d, second);
  EXPECT_EQ(d.ok, 1u);
  EXPECT_EQ(d.histogram[slow], 0u);
  EXPECT_EQ(d.histogram[fast], 1u);
  EXPECT_EQ(d.waited, 0u);
  EXPECT_EQ(d.wait_histogram, decltype(d.wait_histogram){});
  // The first window's extremes were reset when it was taken.
  EXPECT_EQ(second.rtt_max_ns, 5'000'000u);
  EXPECT_EQ(second.rtt_min_ns, 5'000'000u);
}

// The reader keeps the buckets that ever held a count: new ones below and
// above them are counted in full, the kept ones by difference.
TEST_F(StatsReaderTest, BucketsOutsideTheKeptRangeAreCountedWhenTheyFirstHoldCounts) {
  StatsReader reader(segment_, index_);
  record_success(segment_, index_, 2, 5'000'000);
  EXPECT_EQ(take(reader).histogram[histogram_bucket(5'000'000)], 1u);
  for (const std::uint64_t ns : {20'000u, 5'000'000u, 900'000'000u, 900'000'000u, 20'000u}) {
    record_success(segment_, index_, 2, ns);
  }
  const DependencyCounters d = take(reader);
  EXPECT_EQ(d.ok, 5u);
  EXPECT_EQ(d.histogram[histogram_bucket(20'000)], 2u);
  EXPECT_EQ(d.histogram[histogram_bucket(5'000'000)], 1u);
  EXPECT_EQ(d.histogram[histogram_bucket(900'000'000)], 2u);
  record_success(segment_, index_, 2, 20'000);
  const DependencyCounters again = take(reader);
  EXPECT_EQ(again.ok, 1u);
  EXPECT_EQ(again.histogram[histogram_bucket(20'000)], 1u);
}

// Buckets are 32 bits: a delta across 2^32 is taken modulo 2^32, by the
// reader and by since() alike.
TEST_F(StatsReaderTest, ABucketThatWrapsPast2To32GivesTheRightDelta) {
  const std::uint32_t b = histogram_bucket(1'000'000);
  segment_.latency_histogram(index_, 1).bucket[b].store(UINT32_MAX - 1);
  segment_.stripe(index_, 1).rtt_sum_ns.store(1);  // written before: the reader reads its histogram
  segment_.wait_histogram(index_).bucket[b].store(UINT32_MAX);
  segment_.dependency(index_).waits.wait_sum_ns.store(1);
  StatsReader reader(segment_, index_);
  const DependencyCounters before = read_counters(segment_, index_);
  for (int i = 0; i < 5; ++i) record_success(segment_, index_, 1, 1'000'000);
  for (int i = 0; i < 3; ++i) {
    segment_.wait_histogram(index_).bucket[b].fetch_add(1);
    segment_.dependency(index_).waits.wait_sum_ns.fetch_add(1'000'000, std::memory_order_release);
  }
  EXPECT_EQ(segment_.latency_histogram(index_, 1).bucket[b].load(), 3u);  // wrapped
  const DependencyCounters d = take(reader);
  EXPECT_EQ(d.histogram[b], 5u);
  EXPECT_EQ(d.ok, 5u);
  EXPECT_EQ(d.wait_histogram[b], 3u);
  EXPECT_EQ(d.waited, 3u);
  const DependencyCounters summed = read_counters(segment_, index_).since(before);
  EXPECT_EQ(summed.histogram[b], 5u);
  EXPECT_EQ(summed.ok, 5u);
  EXPECT_EQ(summed.wait_histogram[b], 3u);
  EXPECT_EQ(summed.waited, 3u);
}

// What makes a segment cheap at thousands of dependencies: the histogram
// pages of stripes no process writes are touched by no one, neither the
// segment's creation nor the daemon's reading nor bulkheadctl's
// (read_counters()), so they are in no process's resident memory, and a
// segment not reserved (daemon.segment_reserve = false) never gets memory
// for them: reading a page there gives it memory, and in a full /dev/shm
// kills the reader with SIGBUS.
TEST(StatsPages, HistogramsOfStripesNeverWrittenNeverBecomeResident) {
  TempSegmentName name;
  CreateOptions options = testing::small_segment(256, 4, 8);
  options.reserve = false;
  Segment segment = Segment::create(name, options);
  std::vector<std::unique_ptr<StatsReader>> readers;
  for (std::uint32_t d = 0; d < 256; ++d) {
    const std::uint32_t index = find_or_claim_dependency(segment, "dep-" + std::to_string(d), 10, 0).index;
    readers.push_back(std::make_unique<StatsReader>(segment, index));
    record_success(segment, index, 0, 1'000'000);  // stripe 0 only
    segment.stripe(index, 3).dropped.fetch_add(1);   // stripe 3: no success, no histogram
  }
  for (int tick = 0; tick < 2; ++tick) {
    for (std::uint32_t d = 0; d < 256; ++d) {
      DependencyCounters delta;
      WindowExtremes extremes;
      const std::uint32_t index = *find_dependency(segment, "dep-" + std::to_string(d));
      readers[d]->take(segment, index, delta, extremes);
      const DependencyCounters totals = read_counters(segment, index);
      EXPECT_EQ(totals.ok, 1u);
      EXPECT_EQ(totals.histogram[histogram_bucket(1'000'000)], 1u);
      EXPECT_EQ(totals.dropped, 1u);
    }
  }
  // Pages of the segment's file that tmpfs holds, over [from, to).
  const long page = ::sysconf(_SC_PAGESIZE);
  auto resident = [&](const void* from, const void* to) {
    const auto begin = reinterpret_cast<std::uintptr_t>(from) / page * page;
    const auto end = reinterpret_cast<std::uintptr_t>(to);
    std::vector<unsigned char> v((end - begin + page - 1) / page);
    EXPECT_EQ(::mincore(reinterpret_cast<void*>(begin), end - begin, v.data()), 0);
    std::size_t n = 0;
    for (unsigned char c : v) n += c & 1;
    return std::pair<std::size_t, std::size_t>{n, v.size()};
  };
  const auto stripe0 = resident(&segment.latency_histogram(0, 0), &segment.latency_histogram(0, 1));
  EXPECT_EQ(stripe0.first, stripe0.second);  // written: resident
  for (std::uint32_t s = 1; s < 8; ++s) {
    const void* end = s + 1 < 8 ? static_cast<const void*>(&segment.latency_histogram(0, s + 1))
                                : static_cast<const void*>(&segment.wait_histogram(0));
    // The first page of the table may share a page with the previous one.
    const auto stripe = resident(&segment.latency_histogram(0, s), end);
    EXPECT_LE(stripe.first, 1u) << "stripe " << s << ": " << stripe.first << " of " << stripe.second << " pages";
  }
  const auto waits = resident(&segment.wait_histogram(0), &segment.process(0));
  EXPECT_LE(waits.first, 1u) << waits.first << " of " << waits.second << " pages";
}

}  // namespace
}  // namespace bulkhead::shm
