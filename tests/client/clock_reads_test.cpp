// How many times each admission path reads the clock: one read costs about
// what an untimed acquire and release cost together (bulkhead-bench:
// clock_read against acquire_release_latency), so the paths read it only
// where a time is needed. clock_gettime() is interposed here to count the calls, so this is
// its own binary (and not built under sanitizers, which interpose it too).
// The same interposition runs a hook at each read, which moves the clock
// and changes the segment between two steps of a wait.
#include <dlfcn.h>
#include <time.h>

#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include "bulkhead/bulkhead.h"
#include "shm/layout.hpp"
#include "shm/segment.hpp"
#include "shm/wait_queue.hpp"
#include "tests/support/temp_segment.hpp"

namespace {

// Counted only on a thread that turned counting on, between two points of
// a test.
thread_local bool t_counting = false;
thread_local int t_reads = 0;
// Run at each read of this thread's, before it; and seconds added to what
// CLOCK_MONOTONIC reads on it.
thread_local std::function<void()> t_hook;
thread_local time_t t_ahead_s = 0;

}  // namespace

extern "C" int clock_gettime(clockid_t clock, struct timespec* ts) {
  using Read = int (*)(clockid_t, struct timespec*);
  static const Read real = reinterpret_cast<Read>(::dlsym(RTLD_NEXT, "clock_gettime"));
  if (t_counting) ++t_reads;
  if (t_hook) t_hook();
  const int rc = real(clock, ts);
  if (rc == 0 && clock == CLOCK_MONOTONIC) ts->tv_sec += t_ahead_s;
  return rc;
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

// A wait that shadow mode interrupts, and that shadow mode no longer
// admits (a reload turned it off again), does not queue again once its
// deadline has passed: it is refused (BH_REJECT_DEADLINE), even when a
// permit is free by then. The hook steps through it: shadow mode on while
// the call waits in the queue, off again (and the deadline an hour past)
// once it has left the queue for it, and the limit raised at the next read.
TEST_F(ClockReadsTest, AWaitShadowModeInterruptedDoesNotResumePastItsDeadline) {
  const std::uint32_t slot = *shm::find_dependency(*segment_, "payments");
  shm::DependencySlot& line = segment_->dependency(slot);
  const auto set_limit = [&](std::uint32_t limit) {
    line.control.limit.store(limit);
    line.partitions.admit_limit.store(limit);
  };
  set_limit(1);
  bh_permit held;
  ASSERT_EQ(bh_try_acquire_untimed(dep_, &held), 0);
  const auto queued = [&] { return shm::queue_length(segment_->queue(slot), segment_->queue_slots()); };
  int step = 0;
  t_hook = [&] {
    if (step == 0 && queued() == 1) {  // waiting: a reload turns shadow mode on
      line.control.flags.fetch_or(shm::kDependencyShadow);
      step = 1;
    } else if (step == 1 && queued() == 0) {  // left the queue for it: off again, and the budget spent
      line.control.flags.fetch_and(~shm::kDependencyShadow);
      t_ahead_s = 3600;
      step = 2;
    } else if (step == 2) {  // a permit free from now on
      set_limit(2);
      step = 3;
    }
  };
  bh_permit p;
  const int rc = bh_acquire(dep_, bh_now_ns() + 60'000'000'000u, &p);
  t_hook = nullptr;
  t_ahead_s = 0;
  EXPECT_EQ(step, 3);
  EXPECT_EQ(rc, BH_REJECT_DEADLINE);
  if (rc == 0) bh_release(&p, BH_IGNORE);
  bh_release(&held, BH_IGNORE);
  EXPECT_EQ(shm::admission_inflight(line.admission.word.load()), 0u);
}

}  // namespace
}  // namespace bulkhead
