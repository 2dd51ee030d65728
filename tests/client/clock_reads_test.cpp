// How many times each admission path reads the clock: one read costs about
// what an untimed acquire and release cost together (bulkhead-bench:
// clock_read against acquire_release_latency), so the paths read it only
// where a time is needed. clock_gettime() is interposed here to count the calls, so this is
// its own binary (and not built under sanitizers, which interpose it too).
#include <dlfcn.h>
#include <time.h>

#include <gtest/gtest.h>

#include <optional>

#include "bulkhead/bulkhead.h"
#include "shm/segment.hpp"
#include "tests/support/temp_segment.hpp"

namespace {

// Counted only on a thread that turned counting on, between two points of
// a test.
thread_local bool t_counting = false;
thread_local int t_reads = 0;

}  // namespace

extern "C" int clock_gettime(clockid_t clock, struct timespec* ts) {
  using Read = int (*)(clockid_t, struct timespec*);
  static const Read real = reinterpret_cast<Read>(::dlsym(RTLD_NEXT, "clock_gettime"));
  if (t_counting) ++t_reads;
  return real(clock, ts);
}

namespace bulkhead {
namespace {

class ClockReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    segment_.emplace(shm::Segment::create(name_, testing::small_segment(16, 16, 4, 8)));
    const std::uint32_t slot = shm::find_or_claim_dependency(*segment_, "payments", 4, 0).index;
    segment_->dependency(slot).control.max_queue.store(8);
    bh_options options{};
    options.segment = name_.c_str();
    options.flags = BH_OPEN_REQUIRE_SEGMENT;
    ASSERT_EQ(bh_client_open_opts(&options, &client_), 0) << bh_last_error();
    ASSERT_EQ(bh_dependency(client_, "payments", &dep_), 0) << bh_last_error();
  }
  void TearDown() override { bh_client_close(client_); }

  // The clock reads `call` makes.
  template <typename Call>
  static int reads(Call call) {
    t_reads = 0;
    t_counting = true;
    call();
    t_counting = false;
    return t_reads;
  }

  testing::TempSegmentName name_{"clock"};
  std::optional<shm::Segment> segment_;
  bh_client* client_ = nullptr;
  bh_dep* dep_ = nullptr;
};

TEST_F(ClockReadsTest, TryAcquireAndReleaseReadTheClockOnceEach) {
  bh_permit p;
  EXPECT_EQ(reads([&] { ASSERT_EQ(bh_try_acquire(dep_, &p), 0); }), 1);
  EXPECT_EQ(reads([&] { bh_release(&p, BH_SUCCESS); }), 1);
}

TEST_F(ClockReadsTest, TheCallersLatencyReadsNoClock) {
  bh_permit p;
  EXPECT_EQ(reads([&] { ASSERT_EQ(bh_try_acquire_untimed(dep_, &p), 0); }), 0);
  EXPECT_EQ(reads([&] { bh_release_latency(&p, BH_SUCCESS, 1000); }), 0);
}

// The read that checks the deadline is the permit's start: admitted at
// once, bh_acquire() costs no more clock than bh_try_acquire().
TEST_F(ClockReadsTest, AcquireUnderTheLimitReadsTheClockOnce) {
  bh_permit p;
  EXPECT_EQ(reads([&] { ASSERT_EQ(bh_acquire(dep_, BH_NO_DEADLINE, &p), 0); }), 1);
  EXPECT_EQ(reads([&] { bh_release(&p, BH_SUCCESS); }), 1);
}

}  // namespace
}  // namespace bulkhead
