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
#include <memory>
#include <span>
#include <vector>

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
  // Partitions: refused, by partition (0 "default", 1, 2).
  std::array<std::uint64_t, kMaxPartitions> partition_rejected{};

  // Where the latency histogram may hold counts: every bucket outside
  // [histogram_first, histogram_end) is 0. Every bucket by default, which
  // is always right; StatsReader::take() narrows it to the buckets it
  // added to, in counters that clear() emptied, so that the daemon's tick
  // visits those only (a tick's calls land in a few buckets of 200).
  std::uint32_t histogram_first = 0;
  std::uint32_t histogram_end = kHistogramBuckets;
  std::span<const std::uint64_t> histogram_used() const {
    if (histogram_first >= histogram_end) return {};
    return std::span<const std::uint64_t>(histogram).subspan(histogram_first, histogram_end - histogram_first);
  }
  // Takes in [first, end) as where the latency histogram may hold counts.
  void widen_histogram(std::uint32_t first, std::uint32_t end);
  // Back to all zeros, writing only the buckets that may hold counts (the
  // wait histogram only when `waited`); the latency range is then empty.
  // For a reader that reuses one DependencyCounters tick after tick.
  void clear();

  // What was added between `earlier` and this reading (modulo 2^64, so a
  // counter that wrapped still gives the right delta; the histograms, whose
  // buckets in the segment are 32 bits, modulo 2^32, and ok and waited
  // their sums).
  DependencyCounters since(const DependencyCounters& earlier) const;
};

// Sums every stripe of dependency `index`. Loads only: works on a read-only
// mapping. The histograms (and so ok and waited) are sums of 32-bit
// counters: compare two readings with since(), never one on its own.
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

// The daemon's reading of one dependency, tick after tick: the deltas of
// its counters and its window extremes. A take reads every stripe's two
// lines (the scalar counters and the window extremes), and a stripe's
// latency histogram (13 cache lines) only when a success was recorded
// there since the last take: its latency sum moved or its window minimum
// is not neutral (see take() for the order that makes this sound); the
// dependency's wait histogram only when its wait sum moved. On a host
// where a dependency is written by few processes, most of its stripes are
// idle in any tick: the daemon's tick then reads the histograms of the
// stripes written, not of stats_stripes, and the histograms of stripes
// never written are never touched (their pages never become resident).
//
// It keeps the scalar counters' last totals over all stripes (every take
// reads every stripe's scalars, so the difference of two totals is the
// sum of the stripes' differences), each stripe's last latency sum, and
// the last reading of each histogram's buckets that ever held a count
// (LastReading). A bucket's delta is taken modulo 2^32: exact while a bucket
// takes fewer than 2^32 adds between two takes (HistogramCounts). A bucket
// that is skipped because its stripe's latency sum did not move has not
// moved either, so the skip never stretches the time between two readings
// of a bucket that changed.
//
// Thread safety: one thread (the control loop) owns a reader.
class StatsReader {
 public:
  // Where a reader starts counting.
  enum class Start {
    // From the counters as they are now: what they hold already is not
    // counted (a slot whose history is not a window: one a previous daemon
    // governed, or that clients used while no daemon ran).
    kNow,
    // From zero: the first take counts everything the counters hold, every
    // bucket of both histograms read (the slot's counts since its claim;
    // a slot's counters start at 0 when it is claimed).
    kZero,
  };

  StatsReader(const Segment& segment, std::uint32_t index, Start start = Start::kNow);

  // Adds to `delta` (which the caller zeroed, with clear() to have its
  // latency range narrowed) what was recorded since the
  // previous take or the start, and takes the window extremes into
  // `extremes`, resetting them to neutral. Needs a read-write mapping.
  void take(Segment& segment, std::uint32_t index, DependencyCounters& delta, WindowExtremes& extremes);

  // Stripes whose latency histograms the last take read (tests, benchmarks).
  std::uint32_t stripes_read() const { return stripes_read_; }

  // The scalar counters of a stripe that a take compares: every counter of
  // StatsStripe but the window extremes. A counter left out would be read
  // only when another one moved with it.
  static constexpr std::size_t kScalars = 10 + kMaxPartitions;

  // A stripe's histogram read looks for buckets it never saw counts in
  // when the window's extremes reach past those it did, and at least every
  // this many reads (take()).
  static constexpr std::uint32_t kOutsideEvery = 16;

 private:
  // The last reading of a histogram, kept for the buckets from the first
  // to the last that ever held a count: the others read 0 every time (a
  // tick's calls land in a few buckets of 200, and a dependency's latencies
  // in a few dozen), so that the reader holds and reads tens of bytes per
  // histogram, not 800.
  class LastReading {
   public:
    // Starts from what `h` holds now.
    void reset(const HistogramCounts& h);
    // Adds what each bucket of `h` gained since the last reading (modulo
    // 2^32) to `delta` and their sum to `total`; the reading becomes the
    // last. Without `look_outside`, only the buckets kept are read: a
    // bucket outside them that gained counts is counted at the next take
    // that looks.
    void take(const HistogramCounts& h, std::array<std::uint64_t, kHistogramBuckets>& delta, std::uint64_t& total,
              bool look_outside = true);
    const std::uint32_t* data() const { return last_.data(); }
    std::size_t size() const { return last_.size(); }
    // The buckets kept, [first(), end()): every bucket a take added to.
    std::uint32_t first() const { return first_; }
    std::uint32_t end() const { return first_ + static_cast<std::uint32_t>(last_.size()); }

   private:
    std::uint32_t first_ = 0;          // bucket of last_[0]
    std::vector<std::uint32_t> last_;  // buckets [first_, first_ + size())
  };
  struct Stripe {
    std::uint64_t rtt_sum_ns = 0;  // the last reading
    LastReading buckets;
    std::uint32_t takes = 0;  // histogram reads, for the periodic look outside the buckets kept
  };
  std::array<std::uint64_t, kScalars> totals_{};  // the scalars' last sums over the stripes
  std::vector<Stripe> stripes_;
  std::uint64_t wait_sum_ns_ = 0;
  LastReading wait_buckets_;
  std::uint32_t stripes_read_ = 0;
};

}  // namespace bulkhead::shm
