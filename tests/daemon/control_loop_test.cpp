// The control loop on a real segment with a fake clock: clients record
// through the library, the test advances time tick by tick.
#include "daemon/control_loop.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "daemon/metrics.hpp"
#include "shm/partitions.hpp"
#include "shm/wait_queue.hpp"

#include "bulkhead/client.hpp"
#include "tests/support/children.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/log_capture.hpp"
#include "tests/support/loop_fixture.hpp"
#include "tests/support/temp_segment.hpp"
#include "tests/support/waiter.hpp"

namespace bulkhead::daemon {
namespace {

using namespace std::chrono_literals;

class ControlLoopTest : public testing::LoopFixture {
 protected:
  ControlLoopTest() : LoopFixture("loop", 8) {}

  // `n` completed calls of `latency` with `outcome`, admitted one at a time.
  void feed_calls(Dependency& dep, int n, std::chrono::nanoseconds latency, Outcome outcome = Outcome::kSuccess) {
    for (int i = 0; i < n; ++i) {
      Permit p = dep.try_acquire();
      ASSERT_TRUE(p);
      p.release(outcome, latency);
    }
  }
  // Waits until `child` has exited but is not reaped (wait_until_exited()).
  static void wait_until_zombie(pid_t child) {
    ASSERT_TRUE(testing::wait_until_exited(child));
    const auto stat = shm::read_process_stat(child);
    ASSERT_TRUE(stat);
    ASSERT_EQ(stat->state, 'Z');
  }
  // `n` calls that overlap: all admitted, then all released.
  void feed_concurrent_calls(Dependency& dep, int n, std::chrono::nanoseconds latency) {
    std::vector<Permit> permits;
    for (int i = 0; i < n; ++i) permits.push_back(dep.try_acquire());
    for (Permit& p : permits) p.release(Outcome::kSuccess, latency);
  }
  // The admission word of a dependency the test looked up.
  std::atomic<std::uint64_t>& admission_word(const std::string& name) {
    return segment_->dependency(slot_of(name)).admission.word;
  }
  // Its limit pin, the word bulkheadctl pin writes.
  std::atomic<std::uint64_t>& limit_pin(const std::string& name) {
    return segment_->dependency(slot_of(name)).control.limit_pin;
  }
  // The fake clock in whole seconds, as a pin counts them.
  std::uint32_t now_s() const { return static_cast<std::uint32_t>(now_ns_ / 1'000'000'000); }
  // Starts with "pay" (aimd, limit 10 in [1, 40]) named and ticked once,
  // then pins its limit at `limit` for `seconds` and ticks: the pin holds.
  Dependency pinned_pay(std::uint32_t limit, std::uint32_t seconds, bool with_metrics = false) {
    start("[dependency.pay]\npolicy = \"aimd\"\nmin_limit = 1\nmax_limit = 40\ninitial_limit = 10\n", {},
          with_metrics);
    Dependency pay = client_->dependency("pay");
    advance_ticks(1);
    limit_pin("pay").store(shm::pin_word(limit, now_s() + seconds));
    advance_ticks(1);
    return pay;
  }
};

TEST_F(ControlLoopTest, ConfiguredDependenciesArePublishedAtStart) {
  start("[dependency.payments]\npolicy = \"fixed\"\ninitial_limit = 12\n");
  Dependency dep = client_->dependency("payments");
  EXPECT_EQ(dep.limit(), 12);
  EXPECT_EQ(segment_->header().config_generation.load(), 1u);
}

TEST_F(ControlLoopTest, ShadowModeIsPublishedPerDependency) {
  start("[defaults]\nenforce = false\n[dependency.strict-one]\nenforce = true\n");
  Dependency shadowed = client_->dependency("anything");
  advance_ticks(1);
  const auto flags = [&](const char* name) {
    return segment_->dependency(slot_of(name)).control.flags.load();
  };
  EXPECT_EQ(flags("anything"), shm::kDependencyShadow);
  EXPECT_EQ(flags("strict-one"), shm::kDependencyConfigured);
  // A reload that enforces clears it.
  loop_->apply(parse("", "next.toml"));
  EXPECT_EQ(flags("anything"), 0u);
  (void)shadowed;
}

TEST_F(ControlLoopTest, NewNamesStartWithTheDefaultsAndAreAdopted) {
  start("[defaults]\npolicy = \"aimd\"\nmin_limit = 1\ninitial_limit = 30\n");
  Dependency dep = client_->dependency("brand-new");
  EXPECT_EQ(dep.limit(), 30);
  advance_ticks(1);
  EXPECT_EQ(view_of("brand-new").policy, "aimd");
}

// A name a client claims that a pattern table matches runs on that table,
// counts as configured, and follows it across reloads; a pattern claims no
// slot of its own.
TEST_F(ControlLoopTest, ANameAPatternMatchesRunsOnThePatternsTable) {
  start("[dependency.\"db-shard-*\"]\npolicy = \"fixed\"\ninitial_limit = 7\n");
  advance_ticks(1);
  EXPECT_EQ(loop_->occupancy().dependencies, 0u);
  Dependency shard = client_->dependency("db-shard-3");
  Dependency other = client_->dependency("payments");
  advance_ticks(1);
  EXPECT_EQ(view_of("db-shard-3").policy, "fixed");
  EXPECT_EQ(shard.limit(), 7);
  EXPECT_EQ(view_of("payments").policy, "balance");
  const auto flags = [&](const char* name) { return segment_->dependency(slot_of(name)).control.flags.load(); };
  EXPECT_EQ(flags("db-shard-3"), shm::kDependencyConfigured);
  EXPECT_EQ(flags("payments"), 0u);

  loop_->apply(parse("[dependency.\"db-shard-*\"]\npolicy = \"fixed\"\ninitial_limit = 9\n", "next.toml"));
  advance_ticks(1);
  EXPECT_EQ(shard.limit(), 9);
  // Without the pattern, the name runs on [defaults].
  loop_->apply(parse("", "next.toml"));
  advance_ticks(1);
  EXPECT_EQ(view_of("db-shard-3").policy, "balance");
  EXPECT_EQ(flags("db-shard-3"), 0u);
  (void)other;
}

// A strict daemon publishes each pattern in a slot of its own: a strict
// client claims a name one matches, which then runs on the pattern's table,
// and is refused one none matches. A reload that drops the pattern refuses
// the names it matched from then on (one claimed keeps its slot), and one
// that brings it back publishes it again in the same slot; the loop takes
// no pattern's slot for a dependency, says nothing of it as junk, and puts
// back its flag when a client clears it.
TEST_F(ControlLoopTest, AStrictDaemonLetsClientsClaimTheNamesItsPatternsMatch) {
  testing::LogCapture log;
  const std::string strict_shards =
      "strict = true\n[dependency.payments]\n[dependency.\"db-shard-*\"]\npolicy = \"fixed\"\ninitial_limit = 7\n";
  start(strict_shards);
  advance_ticks(1);
  ASSERT_TRUE(segment_->header().flags.load() & shm::kHeaderStrict);
  EXPECT_EQ(loop_->occupancy().dependencies, 2u);  // payments, and the pattern's slot
  Dependency shard = client_->dependency("db-shard-3");
  try {
    client_->dependency("orders");
    ADD_FAILURE() << "a strict daemon let a client claim a name no table matches";
  } catch (const Error& e) {
    EXPECT_EQ(e.code().value(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("nor matches a pattern table"), std::string::npos) << e.what();
  }
  EXPECT_EQ(shm::find_dependency(*segment_, "orders"), std::nullopt);
  advance_ticks(1);
  EXPECT_EQ(view_of("db-shard-3").policy, "fixed");
  EXPECT_EQ(shard.limit(), 7);
  EXPECT_EQ(loop_->view().size(), 2u);
  EXPECT_EQ(loop_->occupancy().dependencies, 3u);
  EXPECT_EQ(log.count("not a valid one"), 0u) << log.text();
  const std::uint32_t pattern_slot = shm::find_or_claim_pattern(*segment_, "db-shard-*").index;
  std::atomic<std::uint32_t>& pattern_flags = segment_->dependency(pattern_slot).control.flags;
  pattern_flags.store(0);
  advance_ticks(1);
  EXPECT_EQ(pattern_flags.load(), shm::kDependencyPattern);

  loop_->apply(parse("strict = true\n[dependency.payments]\n", "next.toml"));
  advance_ticks(1);
  EXPECT_EQ(pattern_flags.load(), 0u);
  EXPECT_THROW(client_->dependency("db-shard-4"), Error);
  EXPECT_EQ(shard.limit(), 7);  // the slot stays, on [defaults] now, from the limit in force
  EXPECT_EQ(view_of("db-shard-3").policy, "balance");
  advance_ticks(1);
  EXPECT_EQ(pattern_flags.load(), 0u);

  loop_->apply(parse(strict_shards, "again.toml"));
  EXPECT_EQ(pattern_flags.load(), shm::kDependencyPattern);
  Dependency again = client_->dependency("db-shard-4");
  advance_ticks(1);
  EXPECT_EQ(again.limit(), 7);
  EXPECT_EQ(loop_->occupancy().dependencies, 4u);
  // Not strict: patterns are no longer published, every name is claimed.
  loop_->apply(parse("[dependency.\"db-shard-*\"]\npolicy = \"fixed\"\ninitial_limit = 7\n", "loose.toml"));
  EXPECT_EQ(pattern_flags.load(), 0u);
  EXPECT_NO_THROW(client_->dependency("orders"));
  EXPECT_EQ(log.count("not a valid one"), 0u) << log.text();
}

// A pattern whose slot the daemon cannot claim at once (a client's claim
// of the same slot stuck mid-way, as a client killed while claiming leaves
// it) is claimed at a later tick, once the stuck claim is abandoned; until
// then strict clients are refused the names it matches.
TEST_F(ControlLoopTest, AStrictDaemonClaimsAPatternsSlotAtALaterTickWhenItCannotAtOnce) {
  testing::LogCapture log;
  const std::uint64_t hash = shm::dependency_name_hash("db-*");
  start("strict = true\n[dependency.\"db-*\"]\n", [&](shm::Segment& s) {
    s.dependency(static_cast<std::uint32_t>(hash % 16)).identity.tag.store((hash << 8) | shm::kSlotClaiming);
  });
  EXPECT_EQ(log.count("pattern db-*: no slot yet"), 1u) << log.text();
  EXPECT_THROW(client_->dependency("db-1"), Error);
  advance_ticks(25);  // the claim is abandoned after 2 s
  EXPECT_NE(log.count("claim never finished; abandoned"), 0u) << log.text();
  // Tried at every tick meanwhile, and said once, then once more when it
  // had its slot.
  EXPECT_EQ(log.count("pattern db-*: no slot yet"), 1u) << log.text();
  EXPECT_EQ(log.count("pattern db-*: has slot"), 1u) << log.text();
  EXPECT_TRUE(shm::matches_pattern(*segment_, "db-1"));
  EXPECT_NO_THROW(client_->dependency("db-1"));
}

// Slots that clients left with a junk name, or with a claim they never
// finished, are logged a hundred one by one and then counted in a line,
// as adopted names are: a segment of thousands of them wrote a line each
// at once, past journald's burst (10000 in 30 s), after which the journal
// drops every line of the service, the warnings included.
TEST(ControlLoopLogs, JunkAndStuckSlotsAreLoggedAHundredAndACount) {
  testing::LogCapture log;
  const testing::TempSegmentName name("loopjunk");
  shm::Segment segment = shm::Segment::create(name, testing::small_segment(256, 4, 1));
  for (std::uint32_t i = 0; i < 255; ++i) {
    shm::DependencyIdentity& id = segment.dependency(i).identity;
    if (i < 150) {
      id.name_length = 4;
      std::memcpy(id.name, "a b!", 4);  // no client library writes such a name
      id.tag.store(std::uint64_t{i + 1} << 8 | shm::kSlotReady, std::memory_order_release);
    } else {
      id.tag.store(std::uint64_t{i + 1} << 8 | shm::kSlotClaiming);  // the claimer died
    }
  }
  ControlLoop loop(segment,
                   parse_config("[daemon]\nsegment = \"" + name.str() +
                                    "\"\nmax_dependencies = 256\nmax_processes = 4\nstats_stripes = 1\n",
                                "junk.toml"),
                   nullptr);
  std::uint64_t now_ns = 1'000'000'000;
  for (int t = 0; t < 30; ++t) loop.tick(now_ns += 100'000'000);  // claims are abandoned after 2 s
  EXPECT_EQ(log.count(": ready, but its name is not a valid one; ignored"), 100u) << log.text();
  EXPECT_EQ(log.count("50 more dependency slots ready with a name that is not a valid one"), 1u) << log.text();
  EXPECT_EQ(log.count(": claim never finished; abandoned"), 100u) << log.text();
  EXPECT_EQ(log.count("5 more dependency slots whose claim never finished"), 1u) << log.text();
  EXPECT_TRUE(loop.view().empty());
}

// What a scrape's allocations leave free goes back to the kernel once per
// scrape, a second after it collected (its text written by then), from
// the control loop's thread.
TEST_F(ControlLoopTest, AScrapesFreedMemoryIsTrimmedOnceASecondAfterIt) {
  start("", {}, /*with_metrics=*/true);
  const auto now_ns = [] { return bh_now_ns(); };  // CLOCK_MONOTONIC, as bulkheadd's main reads it
  constexpr std::uint64_t kSecond = 1'000'000'000;
  EXPECT_FALSE(metrics_->trim_after_scrape(now_ns() + 5 * kSecond));  // no scrape yet
  const std::uint64_t before = now_ns();
  EXPECT_NE(testing::http_get(metrics_->port(), "/metrics").find("bulkhead_daemon_tick_seconds"), std::string::npos);
  const std::uint64_t after = now_ns();
  EXPECT_FALSE(metrics_->trim_after_scrape(before));
  EXPECT_TRUE(metrics_->trim_after_scrape(after + kSecond));
  EXPECT_FALSE(metrics_->trim_after_scrape(after + 2 * kSecond));  // once per scrape
  testing::http_get(metrics_->port(), "/metrics");
  EXPECT_TRUE(metrics_->trim_after_scrape(now_ns() + kSecond));
}

// A client claims a new name at [defaults]' initial_limit (the header's
// default_limit: it cannot match patterns). The daemon that adopts it
// starts the policy at the initial_limit of the name's own settings, a
// pattern table's here; a limit a daemon already governed is continued.
TEST_F(ControlLoopTest, ANameAPatternMatchesStartsAtThePatternsInitialLimit) {
  start("[defaults]\ninitial_limit = 20\n"
        "[dependency.\"db-shard-*\"]\npolicy = \"aimd\"\nmin_limit = 1\ninitial_limit = 4\n");
  Dependency shard = client_->dependency("db-shard-3");
  Dependency other = client_->dependency("payments");
  EXPECT_EQ(shard.limit(), 20);  // until the daemon adopts it
  advance_ticks(1);
  EXPECT_EQ(view_of("db-shard-3").policy, "aimd");
  EXPECT_EQ(shard.limit(), 4);
  EXPECT_EQ(other.limit(), 20);

  // Drops take AIMD to 4 x 0.9 = 3; a new daemon on the segment continues
  // from there, not from the pattern's 4.
  feed_calls(shard, 10, 1ms, Outcome::kDropped);
  advance_ticks(1);
  ASSERT_EQ(shard.limit(), 3);
  loop_.emplace(*segment_, config_, nullptr);
  advance_ticks(1);
  EXPECT_EQ(shard.limit(), 3);
}

TEST_F(ControlLoopTest, SmallWindowsCarryOverUntilTheyHaveEnoughSamples) {
  start("[defaults]\npolicy = \"aimd\"\nmin_limit = 1\ninitial_limit = 10\nwindow_min_samples = 10\n"
        "window_max_ms = 5000\n");
  Dependency dep = client_->dependency("slow-trickle");
  advance_ticks(1);
  for (int tick = 0; tick < 3; ++tick) {
    feed_calls(dep, 3, 1ms, Outcome::kDropped);
    advance_ticks(1);
  }
  // 9 samples over three ticks: not yet a window.
  EXPECT_EQ(view_of("slow-trickle").windows, 0u);
  EXPECT_EQ(dep.limit(), 10);
  feed_calls(dep, 1, 1ms, Outcome::kDropped);
  advance_ticks(1);
  // The tenth makes one window of drops: AIMD backs off, 10 * 0.9 = 9.
  EXPECT_EQ(view_of("slow-trickle").windows, 1u);
  EXPECT_EQ(dep.limit(), 9);
}

TEST_F(ControlLoopTest, AnOldWindowGoesToThePolicyWithFewSamples) {
  start("[defaults]\npolicy = \"aimd\"\nmin_limit = 1\ninitial_limit = 10\nwindow_min_samples = 100\n"
        "window_max_ms = 1000\n");
  Dependency dep = client_->dependency("quiet");
  advance_ticks(1);
  feed_calls(dep, 1, 1ms, Outcome::kDropped);
  advance_ticks(9);
  EXPECT_EQ(dep.limit(), 10);
  advance_ticks(1);  // the window is 1 s old
  EXPECT_EQ(dep.limit(), 9);
}

TEST_F(ControlLoopTest, IdleWindowsLeaveTheLimitAlone) {
  start("[defaults]\npolicy = \"aimd\"\nmin_limit = 1\ninitial_limit = 10\nwindow_max_ms = 200\n");
  Dependency dep = client_->dependency("idle");
  advance_ticks(50);
  EXPECT_EQ(dep.limit(), 10);
  EXPECT_EQ(view_of("idle").windows, 0u);
}

TEST_F(ControlLoopTest, PublishedLimitIsClampedToTheBounds) {
  start("[defaults]\npolicy = \"aimd\"\nmin_limit = 8\nmax_limit = 12\ninitial_limit = 10\n"
        "window_min_samples = 1\n");
  Dependency dep = client_->dependency("bounded");
  advance_ticks(1);
  const testing::LogCapture log;
  for (int i = 0; i < 20; ++i) {
    feed_calls(dep, 1, 1ms, Outcome::kDropped);
    advance_ticks(1);
  }
  EXPECT_EQ(dep.limit(), 8);
  for (int i = 0; i < 20; ++i) {
    feed_concurrent_calls(dep, static_cast<int>(dep.limit()), 1ms);  // the limit is used
    advance_ticks(1);
  }
  EXPECT_EQ(dep.limit(), 12);
  // Every change logged at debug, once: 9, 8, then 9 to 12; not the 34
  // windows that left it where it was.
  EXPECT_EQ(log.count("debug dependency bounded: limit "), 6u) << log.text();
  EXPECT_EQ(log.count("debug dependency bounded: limit 8"), 1u) << log.text();
}

// A waiter that may sleep sets kFutexSleepers in the dependency's futex
// word; a wake clears it and counts one. A higher limit wakes the queue at
// once (not at the waiters' next look); a lower one has nothing to offer.
// (The bit is set after the calls: a release wakes the queue too.)
TEST_F(ControlLoopTest, AHigherLimitWakesTheQueueAndALowerOrTheSameOneDoesNot) {
  start("[defaults]\npolicy = \"aimd\"\nmin_limit = 1\nmax_limit = 10\ninitial_limit = 10\n"
        "window_min_samples = 1\n");
  Dependency dep = client_->dependency("orders");
  advance_ticks(1);
  auto& futex = segment_->dependency(slot_of("orders")).admission.futex;
  feed_calls(dep, 1, 1ms, Outcome::kDropped);
  futex.store(shm::kFutexSleepers);
  advance_ticks(1);
  ASSERT_EQ(dep.limit(), 9);
  EXPECT_EQ(futex.load(), shm::kFutexSleepers);
  feed_concurrent_calls(dep, 9, 1ms);  // the limit is used
  futex.store(shm::kFutexSleepers);
  advance_ticks(1);
  ASSERT_EQ(dep.limit(), 10);
  EXPECT_EQ(futex.load(), shm::kFutexSleepers + 1);  // woken: the bit clear, one wake counted
  feed_concurrent_calls(dep, 10, 1ms);
  futex.store(shm::kFutexSleepers);
  advance_ticks(1);
  ASSERT_EQ(dep.limit(), 10);  // at its maximum
  EXPECT_EQ(futex.load(), shm::kFutexSleepers);
}

TEST_F(ControlLoopTest, ReloadContinuesFromThePublishedLimit) {
  start("[defaults]\npolicy = \"aimd\"\nmin_limit = 1\ninitial_limit = 40\nwindow_min_samples = 1\n");
  Dependency dep = client_->dependency("svc");
  advance_ticks(1);
  for (int i = 0; i < 5; ++i) {
    feed_calls(dep, 1, 1ms, Outcome::kDropped);
    advance_ticks(1);
  }
  const long before = dep.limit();
  EXPECT_LT(before, 40);
  Config next = parse("[defaults]\npolicy = \"gradient2\"\nmin_limit = 1\ninitial_limit = 40\n", "next.toml");
  loop_->apply(next);
  EXPECT_EQ(view_of("svc").policy, "gradient2");
  EXPECT_EQ(dep.limit(), before);  // not reset to 40
  EXPECT_EQ(segment_->header().config_generation.load(), 2u);
}

// Given back, and counted on a series that was there at 0 before: an
// alert on increase() sees the first permits given back only so.
TEST_F(ControlLoopTest, PermitsOfADeadProcessAreGivenBack) {
  start("", {}, true);
  Dependency dep = client_->dependency("orders");
  advance_ticks(1);
  const auto reclaimed = [&] {
    const std::string scrape = testing::http_get(metrics_->port(), "/metrics");
    const std::string series = "bulkhead_permits_reclaimed_total{dependency=\"orders\"} ";
    const std::size_t at = scrape.find(series);
    return at == std::string::npos ? std::string("absent") : scrape.substr(at + series.size(), 1);
  };
  EXPECT_EQ(reclaimed(), "0");
  Permit mine = dep.try_acquire();
  const pid_t child = ::fork();
  if (child == 0) {
    Permit a = dep.try_acquire(), b = dep.try_acquire();
    std::_Exit(a && b ? 0 : 1);  // dies holding two permits
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(dep.inflight(), 3);
  advance_ticks(1);
  EXPECT_EQ(dep.inflight(), 1);
  EXPECT_EQ(loop_->permits_reclaimed(), 2u);
  EXPECT_EQ(reclaimed(), "2");
  mine.success();
  EXPECT_EQ(dep.inflight(), 0);
}

// Waits (up to 30 s) until the liveness lock of `pid`'s process slot is
// gone: exec closes the close-on-exec descriptors in their order, so a
// pipe the test reads may close before the lock's descriptor.
bool wait_until_lock_dropped(const shm::Segment& segment, pid_t pid) {
  for (int i = 0; i < 30'000; ++i) {
    for (std::uint32_t p = 0; p < segment.capacities().max_processes; ++p) {
      const std::optional<shm::ProcessSnapshot> seen = shm::read_process_slot(segment, p);
      if (seen && seen->pid == pid && shm::liveness_lock_dropped(segment, *seen)) return true;
    }
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// exec() keeps the pid and the start time, which alone made the program a
// client became its client still, its slot and the permits its threads
// held (exec ended them) kept until that program exited. The claim's
// liveness lock goes with the exec. The child's first call claims a slot
// of its own (and its lock); /bin/sleep then runs on under its pid.
TEST_F(ControlLoopTest, PermitsOfAProcessThatExecdAreGivenBackWhileItRunsOn) {
  start("", {}, true);
  Dependency dep = client_->dependency("orders");
  advance_ticks(1);
  Permit mine = dep.try_acquire();
  Permit a, b;  // taken in the child, held across its exec, which ends them
  testing::ExecdChild execd([&] {
    a = dep.try_acquire();
    b = dep.try_acquire();
    return a && b;
  });
  ASSERT_TRUE(execd.ok()) << "the child did not get to exec";
  const pid_t child = execd.pid();
  ASSERT_TRUE(wait_until_lock_dropped(*segment_, child));
  EXPECT_EQ(dep.inflight(), 3);
  const testing::LogCapture log;
  advance_ticks(1);  // this fixture's 8 slots are all tested each tick
  EXPECT_EQ(dep.inflight(), 3);  // found without its lock once: it might be exiting
  advance_ticks(1);  // and again
  EXPECT_EQ(dep.inflight(), 1);
  EXPECT_EQ(loop_->permits_reclaimed(), 2u);
  EXPECT_EQ(loop_->occupancy().processes, 1u);  // this test's own, the child's freed
  EXPECT_EQ(log.count("process " + std::to_string(child) + " exec'd holding 2 permit(s) of orders: given back"), 1u)
      << log.text();
  EXPECT_TRUE(execd.running());  // sleep runs on
  execd.kill();
  mine.success();
  EXPECT_EQ(dep.inflight(), 0);
}

// Each tick tests the liveness locks of 64 process slots, the next 64 at
// the next: a table of thousands is not walked whole every tick. A lock
// found gone is tested again at the next tick, whatever its slot.
class WideProcessTableTest : public testing::LoopFixture {
 protected:
  WideProcessTableTest() : LoopFixture("wide", 200) {}
};

TEST_F(WideProcessTableTest, LivenessLocksAreTestedSixtyFourSlotsATick) {
  // 100 slots this process claims by hand (no lock: never found gone), so
  // that the test's client takes slot 100 and its child slot 101.
  start("", [](shm::Segment& s) {
    for (int i = 0; i < 100; ++i) shm::claim_process_slot(s);
  });
  Dependency dep = client_->dependency("orders");
  Permit a;  // taken in the child, held across its exec
  testing::ExecdChild execd([&] {
    a = dep.try_acquire();
    return bool(a);
  });
  ASSERT_TRUE(execd.ok());
  EXPECT_EQ(read_process_slot(*segment_, 101)->pid, execd.pid());
  ASSERT_TRUE(wait_until_lock_dropped(*segment_, execd.pid()));
  advance_ticks(1);  // slots 0 to 63
  advance_ticks(1);  // 64 to 127: found gone
  EXPECT_EQ(dep.inflight(), 1);
  advance_ticks(1);  // 128 to 199 and 0 to 55, and slot 101 again
  EXPECT_EQ(dep.inflight(), 0);
  EXPECT_EQ(loop_->permits_reclaimed(), 1u);
}

// The locks are tested only once a descriptor that may hold one was
// closed (inotify): a tick with no such close tests none.
TEST_F(ControlLoopTest, LivenessLocksAreTestedOnlyAfterADescriptorIsClosed) {
  start("");
  Dependency dep = client_->dependency("orders");
  advance_ticks(2);  // the first tick tests every slot: closes while no daemon ran
  const std::uint64_t quiet = loop_->lock_tests();
  EXPECT_GE(quiet, 1u);  // this test's own slot
  advance_ticks(10);
  EXPECT_EQ(loop_->lock_tests(), quiet);
  const pid_t child = ::fork();
  if (child == 0) {
    Permit a = dep.try_acquire();
    std::_Exit(a ? 0 : 1);  // its lock closed with its descriptors
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  advance_ticks(1);
  EXPECT_GT(loop_->lock_tests(), quiet);
  EXPECT_EQ(dep.inflight(), 0);
  const std::uint64_t swept = loop_->lock_tests();
  advance_ticks(10);
  EXPECT_EQ(loop_->lock_tests(), swept);
}

// A forked child shares its parent's open file descriptions, and with them
// their locks: a grandchild that never calls the library must not keep the
// lock of the child, which then execs.
TEST_F(ControlLoopTest, AForkedChildDoesNotKeepItsParentsLivenessLock) {
  start("", {}, true);
  Dependency dep = client_->dependency("orders");
  advance_ticks(1);
  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    Permit a = dep.try_acquire();
    if (!a) std::_Exit(1);
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::close(report[1]);
      for (;;) ::pause();
    }
    if (::write(report[1], &grandchild, sizeof grandchild) != sizeof grandchild) std::_Exit(3);
    ::execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
    std::_Exit(2);
  }
  ::close(report[1]);
  pid_t grandchild = 0;
  ASSERT_EQ(::read(report[0], &grandchild, sizeof grandchild), static_cast<ssize_t>(sizeof grandchild));
  char c = 0;
  EXPECT_EQ(::read(report[0], &c, 1), 0);  // the child has exec'd
  ::close(report[0]);
  ASSERT_TRUE(wait_until_lock_dropped(*segment_, child));
  EXPECT_EQ(dep.inflight(), 1);
  advance_ticks(2);
  EXPECT_EQ(dep.inflight(), 0);
  EXPECT_EQ(loop_->permits_reclaimed(), 1u);
  EXPECT_EQ(::kill(grandchild, 0), 0);  // still there, with its copy of the child's descriptors
  ::kill(grandchild, SIGKILL);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

// Processes that die holding permits of many dependencies are logged a
// hundred lines a tick, then one line counts the rest: hundreds of workers
// killed at once, each holding permits of dozens of dependencies, would
// write past journald's default RateLimitBurst= (10000 in 30 s), which then
// drops every line of the service. The metrics count every permit.
TEST_F(ControlLoopTest, DeadProcessesAreLoggedAHundredLinesATickAndACount) {
  start("", {}, true);
  std::vector<Dependency> deps;
  for (int i = 0; i < 15; ++i) deps.push_back(client_->dependency("dep-" + std::to_string(i)));
  advance_ticks(1);
  for (int c = 0; c < 7; ++c) {  // the 7 process slots this test's client leaves
    const pid_t child = ::fork();
    if (child == 0) {
      std::vector<Permit> held;
      for (Dependency& dep : deps) held.push_back(dep.try_acquire());
      const bool all = std::all_of(held.begin(), held.end(), [](const Permit& p) { return bool(p); });
      std::_Exit(all ? 0 : 1);  // dies holding one permit of each
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const testing::LogCapture log;
  advance_ticks(1);
  EXPECT_EQ(loop_->permits_reclaimed(), 105u);
  for (Dependency& dep : deps) EXPECT_EQ(dep.inflight(), 0);
  EXPECT_EQ(log.count("died holding"), 100u) << log.text();
  EXPECT_EQ(log.count("5 more dependencies of the 7 dead process(es) not logged one by one: 5 permit(s) given back"),
            1u)
      << log.text();
  const std::string scrape = testing::http_get(metrics_->port(), "/metrics");
  EXPECT_NE(scrape.find("bulkhead_permits_reclaimed_total{dependency=\"dep-14\"} 7"), std::string::npos) << scrape;
}

TEST_F(ControlLoopTest, AZombieThatHeldPermitsCountsAsDead) {
  start("");
  Dependency dep = client_->dependency("orders");
  const pid_t child = ::fork();
  if (child == 0) {
    Permit a = dep.try_acquire(), b = dep.try_acquire();
    std::_Exit(a && b ? 0 : 1);  // dies holding two permits
  }
  wait_until_zombie(child);  // not reaped yet
  EXPECT_EQ(dep.inflight(), 2);
  advance_ticks(1);
  EXPECT_EQ(dep.inflight(), 0);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// The pidfds this process holds open (the daemon's process watch).
int open_pidfds() {
  int n = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    if (std::filesystem::read_symlink(fd.path(), error) == "anon_inode:[pidfd]") ++n;
  }
  return n;
}

// A process the daemon watches is watched through one pidfd, opened once
// (not /proc read every tick) and closed when its slot is freed: a
// daemon that outlives many clients does not run out of descriptors.
TEST_F(ControlLoopTest, AWatchedProcessHoldsOnePidfdUntilItsSlotIsFreed) {
  const int before = open_pidfds();
  start("[dependency.pay]\n");
  advance_ticks(2);
  EXPECT_EQ(open_pidfds(), before + 1);  // this test's client
  client_.reset();  // frees its slot, holding nothing
  advance_ticks(1);
  EXPECT_EQ(open_pidfds(), before);
}

// A process seen alive at a tick is watched through a pidfd from then on,
// not through /proc: its death, and its becoming a zombie, must still be
// seen at the next tick.
TEST_F(ControlLoopTest, AProcessThatDiesAfterATickIsFoundDeadAtTheNext) {
  start("");
  Dependency dep = client_->dependency("orders");
  for (const bool reap : {true, false}) {
    int ready[2], go[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(go), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      Permit a = dep.try_acquire();
      char c = a ? 'y' : 'n';
      if (::write(ready[1], &c, 1) != 1) std::_Exit(2);
      if (::read(go[0], &c, 1) != 1) std::_Exit(3);
      std::_Exit(0);  // dies holding its permit
    }
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ASSERT_EQ(c, 'y');
    advance_ticks(2);  // alive: seen, then watched
    EXPECT_EQ(dep.inflight(), 1);
    ASSERT_EQ(::write(go[1], "x", 1), 1);
    if (reap) {
      int status = 0;
      ::waitpid(child, &status, 0);
    } else {
      wait_until_zombie(child);
    }
    advance_ticks(1);
    EXPECT_EQ(dep.inflight(), 0) << (reap ? "reaped" : "zombie");
    if (!reap) ::waitpid(child, nullptr, 0);
    for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
  }
}

TEST_F(ControlLoopTest, GarbageHeldCountsNeverTakeMoreThanIsInFlight) {
  start("");
  Dependency dep = client_->dependency("orders");
  Permit mine = dep.try_acquire();
  // A dead process's slot claims it held a billion permits.
  const std::uint32_t p = shm::claim_process_slot(*segment_).index;
  segment_->process(p).identity.pid.store(0);
  segment_->held(p, slot_of("orders")).store(1'000'000'000);
  advance_ticks(1);
  EXPECT_EQ(dep.inflight(), 0);  // clamped at what was in flight, never below
  EXPECT_EQ(segment_->process(p).identity.state.load(), shm::kSlotFree);
}

TEST_F(ControlLoopTest, APidReusedByAnotherProcessCountsAsDead) {
  start("");
  Dependency dep = client_->dependency("orders");
  advance_ticks(1);
  // A slot recorded for a process with this test's pid but another start
  // time: the pid was reused, the process that held the permit is gone.
  const std::uint32_t p = shm::claim_process_slot(*segment_).index;
  segment_->process(p).identity.start_time.fetch_add(12345);
  const std::uint32_t slot = slot_of("orders");
  segment_->dependency(slot).admission.word.fetch_add(shm::kAdmissionAcquire);
  segment_->held(p, slot).store(1);
  EXPECT_EQ(dep.inflight(), 1);
  advance_ticks(1);
  EXPECT_EQ(dep.inflight(), 0);
  // This process's own slot, with the right start time, is left alone.
  Permit mine = dep.try_acquire();
  advance_ticks(1);
  EXPECT_EQ(dep.inflight(), 1);
}

// A client in a container records its pid in its own pid namespace (1
// here), which names another process, or none, in the daemon's. Found
// through its namespace, it keeps its permits while it runs; killed, it
// gives them back at the next tick like any other.
TEST_F(ControlLoopTest, AProcessInAnotherPidNamespaceKeepsItsPermitsUntilItIsKilled) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
  start("");
  Dependency dep = client_->dependency("orders");
  advance_ticks(1);
  testing::ChildInPidNamespace child([&] {
    // Held until the process dies: never released in its memory.
    auto* held = new std::array<Permit, 2>{dep.try_acquire(), dep.try_acquire()};
    return (*held)[0] && (*held)[1];
  });
  ASSERT_TRUE(child.ok());
  // Its slot says pid 1, in a namespace that is not this process's.
  std::optional<std::uint32_t> slot;
  for (std::uint32_t p = 0; p < processes_; ++p) {
    const auto seen = shm::read_process_slot(*segment_, p);
    if (seen && seen->pid == 1) slot = p;
  }
  ASSERT_TRUE(slot);
  const shm::PidNamespace ns = shm::read_process_slot(*segment_, *slot)->pid_ns;
  EXPECT_TRUE(ns.known());
  EXPECT_NE(ns, shm::own_pid_namespace());
  EXPECT_EQ(dep.inflight(), 2);
  advance_ticks(3);
  EXPECT_EQ(dep.inflight(), 2);
  EXPECT_EQ(loop_->permits_reclaimed(), 0u);
  EXPECT_EQ(segment_->process(*slot).identity.state.load(), shm::kSlotReady);
  child.kill();  // and reaped
  advance_ticks(1);
  EXPECT_EQ(dep.inflight(), 0);
  EXPECT_EQ(loop_->permits_reclaimed(), 2u);
  EXPECT_EQ(segment_->process(*slot).identity.state.load(), shm::kSlotFree);
}

TEST_F(ControlLoopTest, QueueSettingsArePublishedClampedToTheSegment) {
  start("[defaults]\nmax_queue = 3\n[dependency.newest-first]\nqueue_order = \"lifo\"\n"
        "[dependency.big]\nmax_queue = 20\n");
  client_->dependency("plain");
  advance_ticks(1);
  const auto control = [&](const char* name) -> shm::DependencyControl& {
    return segment_->dependency(slot_of(name)).control;
  };
  EXPECT_EQ(control("plain").max_queue.load(), 3u);
  EXPECT_EQ(control("plain").flags.load() & shm::kDependencyLifo, 0u);
  EXPECT_EQ(control("newest-first").max_queue.load(), 3u);
  EXPECT_NE(control("newest-first").flags.load() & shm::kDependencyLifo, 0u);
  // The test's segment has 8 queue slots, fewer than the config's 64.
  EXPECT_EQ(control("big").max_queue.load(), 8u);
}

// Clients may write junk into the published limit, the admission rule and
// the settings (any process that may attach read-write can): the next tick
// puts back what the policy and the config say, with a warning, even when
// no call closes a window (an idle dependency would otherwise admit by the
// junk for good).
TEST_F(ControlLoopTest, JunkInWhatTheDaemonPublishesIsPutBackAtTheNextTick) {
  start("[dependency.plain]\npolicy = \"fixed\"\ninitial_limit = 10\n"
        "[dependency.split]\npolicy = \"fixed\"\ninitial_limit = 10\n[dependency.split.partitions]\nbatch = 0.5\n");
  advance_ticks(1);
  shm::DependencySlot& plain = segment_->dependency(slot_of("plain"));
  shm::DependencySlot& split = segment_->dependency(slot_of("split"));
  const std::uint32_t admit = split.partitions.admit_limit.load();
  const std::uint64_t rule = split.partitions.rule.load();
  ASSERT_EQ(plain.control.limit.load(), 10u);
  ASSERT_EQ(plain.partitions.admit_limit.load(), 10u);
  ASSERT_NE(rule, 0u);

  const testing::LogCapture log;
  plain.control.limit.store(1'995'735'043);
  plain.partitions.admit_limit.store(0xffffffffu);
  split.control.limit.store(0);
  split.partitions.admit_limit.store(7);
  split.partitions.rule.store(~std::uint64_t{0});
  advance_ticks(1);
  EXPECT_EQ(plain.control.limit.load(), 10u);
  EXPECT_EQ(plain.partitions.admit_limit.load(), 10u);
  EXPECT_EQ(split.control.limit.load(), 10u);
  EXPECT_EQ(split.partitions.admit_limit.load(), admit);
  EXPECT_EQ(split.partitions.rule.load(), rule);
  EXPECT_EQ(log.count("in the segment is not the 10 published; restored"), 2u) << log.text();

  // The admission line alone: put back silently, the limit being right.
  plain.partitions.admit_limit.store(3);
  advance_ticks(1);
  EXPECT_EQ(plain.partitions.admit_limit.load(), 10u);
  EXPECT_EQ(log.count("in the segment is not the 10 published; restored"), 2u) << log.text();

  // A writer that keeps at it is logged once, not every tick.
  for (int i = 0; i < 5; ++i) {
    plain.control.limit.store(77);
    advance_ticks(1);
    EXPECT_EQ(plain.control.limit.load(), 10u);
  }
  EXPECT_EQ(log.count("in the segment is not the 10 published; restored"), 3u) << log.text();

  // The settings: shadow mode (admit everything) and a queue it has not.
  const std::uint32_t flags = plain.control.flags.load(), max_queue = plain.control.max_queue.load();
  plain.control.flags.store(flags | shm::kDependencyShadow);
  plain.control.max_queue.store(1000);
  advance_ticks(1);
  EXPECT_EQ(plain.control.flags.load(), flags);
  EXPECT_EQ(plain.control.max_queue.load(), max_queue);
  EXPECT_EQ(log.count("in the segment are not the"), 1u) << log.text();

  // The partitions: a cap on "batch", its field taken from it, its name
  // changed. Put back under a new version, so that handles that looked a
  // name up since look it up again.
  const std::uint64_t shape = split.partitions.shape.load();
  const shm::PackedName batch = shm::load_partition_name(split.partitions, 1);
  ASSERT_EQ(shm::shape_active(shape), 0b10u);
  ASSERT_EQ(batch, shm::pack_partition_name("batch"));
  for (const std::uint64_t junk : {shape | 0b10u, shape & ~(std::uint64_t{0b10} << 8)}) {
    split.partitions.shape.store(junk);
    advance_ticks(1);
    EXPECT_EQ(split.partitions.shape.load() & 0xffffffffu, shape & 0xffffffffu);
    EXPECT_GT(shm::shape_version(split.partitions.shape.load()), shm::shape_version(junk));
  }
  split.partitions.names[0][0].store(0x6b6e756a);  // "junk"
  advance_ticks(1);
  EXPECT_EQ(shm::load_partition_name(split.partitions, 1), batch);
  const std::uint64_t repaired = split.partitions.shape.load();
  advance_ticks(2);
  EXPECT_EQ(split.partitions.shape.load(), repaired);  // nothing to put back: no new version
  // Junk three ticks running: one warning.
  EXPECT_EQ(log.count("partitions' names or caps in the segment are not those published; restored"), 1u)
      << log.text();
}

TEST_F(ControlLoopTest, TheServiceTimeIsPublishedForTheExpectedWait) {
  start("");
  Dependency dep = client_->dependency("orders");
  auto& service_ns = segment_->dependency(slot_of("orders")).control.service_ns;
  advance_ticks(1);
  EXPECT_EQ(service_ns.load(), 0u);  // no call yet: nothing known
  feed_calls(dep, 4, 4ms);
  advance_ticks(1);
  EXPECT_EQ(service_ns.load(), 4'000'000u);
  feed_calls(dep, 4, 8ms);
  advance_ticks(1);
  EXPECT_EQ(service_ns.load(), 5'000'000u);  // smoothed: 4 + (8 - 4) / 4
  advance_ticks(1);
  EXPECT_EQ(service_ns.load(), 5'000'000u);  // kept through an idle tick
}

// An exporter on a wildcard address serves on loopback, and once destroyed
// (which wakes its listener by connecting to it: ~Metrics) nothing listens
// on its port any more.
TEST(MetricsExporter, AWildcardAddressServesOnLoopbackAndStopsListening) {
  std::optional<Metrics> metrics(std::in_place, "0.0.0.0:0");
  const std::uint16_t port = metrics->port();
  ASSERT_NE(port, 0);
  EXPECT_NE(testing::http_get(port, "/metrics").find("bulkhead_daemon_tick_seconds"), std::string::npos);
  metrics.reset();
  EXPECT_EQ(testing::http_get(port, "/metrics"), "");
}

// An IPv6 address either serves, or fails with a message that names IPv6
// as the likely cause (Debian 12's civetweb is built without it).
TEST(MetricsExporter, AnIPv6AddressServesOrSaysWhyNot) {
  try {
    const Metrics metrics("[::1]:0");
    EXPECT_NE(metrics.port(), 0);
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("built without IPv6"), std::string::npos) << e.what();
  }
}

// The exporter's listener is woken at stop (~Metrics) by connecting to it:
// on its own host, and on loopback when it listens on a wildcard.
TEST(MetricsExporter, ItsListenerIsWokenOnItsOwnHostOrOnLoopbackForAWildcard) {
  EXPECT_EQ(Metrics::wake_host("0.0.0.0:9100"), "127.0.0.1");
  EXPECT_EQ(Metrics::wake_host(":9100"), "127.0.0.1");
  EXPECT_EQ(Metrics::wake_host("[::]:9100"), "::1");
  EXPECT_EQ(Metrics::wake_host("[::1]:9100"), "::1");
  EXPECT_EQ(Metrics::wake_host("10.1.2.3:9100"), "10.1.2.3");
  EXPECT_EQ(Metrics::wake_host("localhost:9100"), "localhost");
}

// Each tick adds its own calls to the metrics' latency and wait histograms,
// and a tick without any adds nothing.
// A dependency without a wait queue exports no wait histogram: its 19
// lines, a third of the dependency's series, would be zeros at every
// scrape (1.06 million series, 66 MB, at 16384 dependencies).
TEST_F(ControlLoopTest, OnlyADependencyWithAQueueExportsItsWaitHistogram) {
  start("[dependency.queued]\nmax_queue = 2\n[dependency.plain]\n", {}, true);
  Dependency queued = client_->dependency("queued"), plain = client_->dependency("plain");
  advance_ticks(1);
  feed_calls(queued, 3, 1ms);
  feed_calls(plain, 3, 1ms);
  advance_ticks(1);
  const std::string scrape = testing::http_get(metrics_->port(), "/metrics");
  EXPECT_NE(scrape.find("bulkhead_queue_wait_seconds_count{dependency=\"queued\"} 0"), std::string::npos) << scrape;
  EXPECT_EQ(scrape.find("bulkhead_queue_wait_seconds_count{dependency=\"plain\"}"), std::string::npos) << scrape;
  EXPECT_NE(scrape.find("bulkhead_latency_seconds_count{dependency=\"plain\"} 3"), std::string::npos) << scrape;
  EXPECT_NE(scrape.find("bulkhead_queue_waiters{dependency=\"plain\"} 0"), std::string::npos) << scrape;
}

TEST_F(ControlLoopTest, TheMetricsHistogramsTakeEachTicksCallsOnce) {
  start("", {}, /*with_metrics=*/true);
  Dependency dep = client_->dependency("orders");
  const std::uint32_t index = slot_of("orders");
  advance_ticks(1);
  const auto count = [](const Metrics::Histogram& h) {
    std::uint64_t n = 0;
    for (const std::uint64_t c : h.counts) n += c;
    return n;
  };
  const Metrics::Dependency& m = metrics_->dependency("orders");
  feed_calls(dep, 5, 3ms);
  // Two calls that waited 2 ms for their permit, as the library counts them:
  // the bucket, then the sum that tells the daemon to read the buckets.
  segment_->wait_histogram(index).bucket[shm::histogram_bucket(2'000'000)].fetch_add(2);
  segment_->dependency(index).waits.wait_sum_ns.fetch_add(4'000'000);
  advance_ticks(1);
  EXPECT_EQ(count(m.latency), 5u);
  EXPECT_NEAR(m.latency.sum_s, 0.015, 1e-9);
  EXPECT_EQ(count(m.wait), 2u);
  EXPECT_NEAR(m.wait.sum_s, 0.004, 1e-9);
  advance_ticks(1);
  EXPECT_EQ(count(m.latency), 5u);
  EXPECT_EQ(count(m.wait), 2u);
  feed_calls(dep, 1, 3ms);
  advance_ticks(1);
  EXPECT_EQ(count(m.latency), 6u);
  EXPECT_EQ(count(m.wait), 2u);
}

// Each call counts in the first Prometheus bucket whose bound is at or above
// its segment bucket's upper edge: 3 ms under le="0.005" (the sixth bound),
// 7 ms under le="0.01"; a call slower than the last bound, 10 s, under +Inf.
TEST_F(ControlLoopTest, TheMetricsHistogramPutsACallUnderTheFirstBoundAtOrAboveIt) {
  start("", {}, /*with_metrics=*/true);
  Dependency dep = client_->dependency("orders");
  advance_ticks(1);
  feed_calls(dep, 3, 3ms);
  feed_calls(dep, 2, 7ms);
  feed_calls(dep, 1, 20s);
  advance_ticks(1);
  std::array<std::uint64_t, Metrics::kBuckets> want{};
  want[5] = 3;
  want[6] = 2;
  want[Metrics::kBuckets - 1] = 1;
  EXPECT_EQ(metrics_->dependency("orders").latency.counts, want);
}

// bulkheadctl pin: the pinned limit goes out over the policy and the
// bounds, the policy learns nothing meanwhile, and once the pin's time is
// up the daemon clears it and the policy continues from the pinned limit,
// within the bounds.
TEST_F(ControlLoopTest, APinHoldsTheLimitUntilItEndsThenThePolicyContinuesFromIt) {
  Dependency pay = pinned_pay(60, 3, /*with_metrics=*/true);
  std::atomic<std::uint64_t>& pin = limit_pin("pay");
  const std::uint32_t until_s = shm::pin_until_s(pin.load());
  EXPECT_EQ(pay.limit(), 60);
  EXPECT_EQ(view_of("pay").pinned, 60u);
  EXPECT_TRUE(metrics_->dependency("pay").pinned);
  // Drops, which halve an aimd limit, teach it nothing while pinned.
  const std::uint64_t windows = view_of("pay").windows;
  for (int i = 0; i < 5; ++i) {
    feed_calls(pay, 10, 1ms, Outcome::kDropped);
    advance_ticks(1);
  }
  EXPECT_EQ(pay.limit(), 60);
  EXPECT_EQ(view_of("pay").windows, windows);
  EXPECT_EQ(pin.load(), shm::pin_word(60, until_s));

  while (now_s() < until_s) advance_ticks(1);
  EXPECT_EQ(pin.load(), 0u);
  EXPECT_EQ(view_of("pay").pinned, 0u);
  EXPECT_FALSE(metrics_->dependency("pay").pinned);
  EXPECT_EQ(pay.limit(), 40);  // 60 within [1, 40]
  // The policy acts again, from there.
  feed_calls(pay, 10, 1ms, Outcome::kDropped);
  advance_ticks(1);
  EXPECT_EQ(view_of("pay").windows, windows + 1);
  EXPECT_LT(pay.limit(), 40);
}

// An operator's `pin NAME off` (the word zeroed) hands the limit back at
// the next tick, from the pinned limit; a new pin replaces the one in
// force; a pin outlasts a daemon restart; junk in the word (a limit of 0,
// a time already past, one further away than bulkheadctl writes) pins
// nothing and is cleared, with a warning for what no bulkheadctl writes.
TEST_F(ControlLoopTest, APinIsLiftedReplacedAndKeptAcrossARestart) {
  Dependency pay = pinned_pay(5, 600);
  std::atomic<std::uint64_t>& pin = limit_pin("pay");
  const std::uint32_t later_s = shm::pin_until_s(pin.load());
  EXPECT_EQ(pay.limit(), 5);
  pin.store(shm::pin_word(7, later_s));
  advance_ticks(1);
  EXPECT_EQ(pay.limit(), 7);

  // A new daemon on the same segment finds the pin and keeps it.
  loop_.emplace(*segment_, config_, nullptr);
  advance_ticks(1);
  EXPECT_EQ(pay.limit(), 7);
  EXPECT_EQ(view_of("pay").pinned, 7u);

  pin.store(0);
  advance_ticks(1);
  EXPECT_EQ(view_of("pay").pinned, 0u);
  EXPECT_EQ(pay.limit(), 7);  // the policy continues from the pin, not from 10

  const testing::LogCapture log;
  const std::uint32_t junk_s = now_s();
  for (const std::uint64_t junk : {shm::pin_word(0, later_s), shm::pin_word(30, 1),
                                   shm::pin_word(30, junk_s + shm::kMaxPinSeconds + 100)}) {
    pin.store(junk);
    advance_ticks(1);
    EXPECT_EQ(pin.load(), 0u);
    EXPECT_EQ(view_of("pay").pinned, 0u);
    EXPECT_EQ(pay.limit(), 7);
  }
  EXPECT_EQ(log.count("is not one bulkheadctl writes"), 2u) << log.text();
  pin.store(shm::pin_word(30, junk_s + shm::kMaxPinSeconds));  // the longest bulkheadctl writes
  advance_ticks(1);
  EXPECT_EQ(pay.limit(), 30);
  // A limit past what any config allows is held at kMaxLimit.
  pin.store(shm::pin_word(0xffffffffu, later_s));
  advance_ticks(1);
  EXPECT_EQ(pay.limit(), static_cast<int>(shm::kMaxLimit));
}

// Partitions count in 16 bits: a pin past that, on a dependency with
// partitions or one a reload gives partitions, is held at the most they
// count, so that the published limit is the one they enforce.
// A partition's series are found once, not looked up by their labels at
// every tick (prometheus-cpp's Family::Add(), several times the rest of a
// dependency's tick), and found again after a reload that renames one,
// whose old series go.
TEST_F(ControlLoopTest, APartitionsSeriesAreFoundOnceAndAgainAfterARename) {
  start("[dependency.split]\npolicy = \"fixed\"\ninitial_limit = 10\n[dependency.split.partitions]\n"
        "batch = 0.5\ndefault = 0.2\n",
        {}, true);
  Dependency split = client_->dependency("split");
  Dependency batch = split.partition("batch");
  advance_ticks(1);
  Permit a = batch.try_acquire(), b = batch.try_acquire();
  ASSERT_TRUE(a && b);
  advance_ticks(5);
  EXPECT_EQ(metrics_->partition_lookups(), 2u);  // batch and default, at the first tick
  const auto scrape = [&] { return testing::http_get(metrics_->port(), "/metrics"); };
  EXPECT_NE(scrape().find("bulkhead_partition_inflight{dependency=\"split\",partition=\"batch\"} 2"),
            std::string::npos)
      << scrape();
  EXPECT_NE(scrape().find("bulkhead_partition_guaranteed{dependency=\"split\",partition=\"batch\"} 5"),
            std::string::npos);

  a.success();
  b.success();
  loop_->apply(parse("[dependency.split]\npolicy = \"fixed\"\ninitial_limit = 10\n[dependency.split.partitions]\n"
                     "bulk = 0.4\ndefault = 0.2\n",
                     "next.toml"));
  advance_ticks(3);
  EXPECT_EQ(metrics_->partition_lookups(), 4u);
  const std::string after = scrape();
  EXPECT_EQ(after.find("partition=\"batch\""), std::string::npos) << after;
  EXPECT_NE(after.find("bulkhead_partition_guaranteed{dependency=\"split\",partition=\"bulk\"} 4"),
            std::string::npos)
      << after;
}

TEST_F(ControlLoopTest, APinOfAPartitionedDependencyIsHeldWithinItsPartitions) {
  Dependency pay = pinned_pay(40'000, 600);
  EXPECT_EQ(pay.limit(), 40'000);  // no partitions yet
  const testing::LogCapture log;
  const char* split = "[dependency.pay]\npolicy = \"aimd\"\nmax_limit = 40\n[dependency.pay.partitions]\nbatch = 0.5\n";
  loop_->apply(parse(split, "split.toml"));
  advance_ticks(1);
  shm::DependencySlot& slot = segment_->dependency(slot_of("pay"));
  EXPECT_EQ(pay.limit(), static_cast<int>(shm::kPartitionFieldMax));
  EXPECT_EQ(shm::rule_limit(slot.partitions.rule.load()), shm::kPartitionFieldMax);
  EXPECT_EQ(log.count("limit pin 40000 is more than a dependency with partitions can have; pinned at 32767"), 1u)
      << log.text();
  limit_pin("pay").store(shm::pin_word(50'000, now_s() + 600));
  advance_ticks(1);
  EXPECT_EQ(pay.limit(), static_cast<int>(shm::kPartitionFieldMax));
  EXPECT_EQ(view_of("pay").pinned, shm::kPartitionFieldMax);
  EXPECT_EQ(log.count("limit pin 50000 is more than"), 1u) << log.text();
  limit_pin("pay").store(shm::pin_word(300, now_s() + 600));  // within: as pinned
  advance_ticks(1);
  EXPECT_EQ(pay.limit(), 300);
  EXPECT_EQ(shm::rule_limit(slot.partitions.rule.load()), 300u);
}

// The pin held within partitions is the operator's whole again once a
// reload takes the partitions away (it stayed at 32767 until it ended).
TEST_F(ControlLoopTest, APinHeldWithinPartitionsIsWholeAgainWhenAReloadRemovesThem) {
  Dependency pay = pinned_pay(40'000, 600);
  const char* split = "[dependency.pay]\npolicy = \"aimd\"\nmax_limit = 40\n[dependency.pay.partitions]\nbatch = 0.5\n";
  loop_->apply(parse(split, "split.toml"));
  advance_ticks(1);
  ASSERT_EQ(pay.limit(), static_cast<int>(shm::kPartitionFieldMax));
  const testing::LogCapture log;
  loop_->apply(parse("[dependency.pay]\npolicy = \"aimd\"\nmax_limit = 40\n", "plain.toml"));
  EXPECT_EQ(pay.limit(), 40'000);  // at the reload, not a tick later
  advance_ticks(1);
  EXPECT_EQ(pay.limit(), 40'000);
  EXPECT_EQ(view_of("pay").pinned, 40'000u);
  EXPECT_EQ(log.count("limit pinned at 40000 again, as the operator asked (no partitions now)"), 1u) << log.text();
  loop_->apply(parse(split, "split.toml"));  // and held again when they come back
  EXPECT_EQ(pay.limit(), static_cast<int>(shm::kPartitionFieldMax));
}

// The segment's tables are counted every tick, for the metrics and the
// operator: a full one is logged once as it fills (and the process table
// once as it frees), since what it refuses happens in the clients.
TEST_F(ControlLoopTest, TheSegmentsTablesAreCountedAndAFullOneIsLoggedOnce) {
  start("[dependency.configured]\n", {}, /*with_metrics=*/true);
  advance_ticks(1);
  ControlLoop::Occupancy o = loop_->occupancy();
  EXPECT_EQ(o.dependencies, 1u);  // the configured name
  EXPECT_EQ(o.max_dependencies, 16u);
  EXPECT_EQ(o.processes, 1u);  // this test's client
  EXPECT_EQ(o.max_processes, 8u);

  const testing::LogCapture log;
  std::vector<Dependency> names;
  for (int i = 0; i < 15; ++i) names.push_back(client_->dependency("name-" + std::to_string(i)));
  try {
    client_->dependency("one-too-many");
    ADD_FAILURE() << "a 17th name took a slot of 16";
  } catch (const Error& e) {
    EXPECT_EQ(e.code().value(), ENOSPC);
    // The error names the setting that sizes the table.
    EXPECT_NE(std::string(e.what()).find("dependency table full (16 slots, daemon.max_dependencies)"),
              std::string::npos)
        << e.what();
  }
  advance_ticks(2);
  EXPECT_EQ(loop_->occupancy().dependencies, 16u);
  EXPECT_EQ(log.count("dependency table full: all 16 slots taken"), 1u) << log.text();

  // Seven children take the process slots left (a forked child takes one
  // of its own); the eighth finds none and runs standalone.
  std::vector<std::unique_ptr<testing::PausedChild>> children;
  for (int i = 0; i < 7; ++i) {
    children.push_back(std::make_unique<testing::PausedChild>(
        [&] { return client_->status().find("standalone") == std::string_view::npos; }));
    ASSERT_TRUE(children.back()->ok()) << i;
  }
  const testing::PausedChild standalone(
      [&] { return client_->status().find("standalone after fork") != std::string_view::npos; });
  ASSERT_TRUE(standalone.ok());
  advance_ticks(2);
  o = loop_->occupancy();
  EXPECT_EQ(o.processes, 8u);
  EXPECT_EQ(log.count("process table full: all 8 slots taken"), 1u) << log.text();
  const std::string scrape = testing::http_get(metrics_->port(), "/metrics");
  EXPECT_NE(scrape.find("bulkhead_segment_slots_used{table=\"dependencies\"} 16"), std::string::npos) << scrape;
  EXPECT_NE(scrape.find("bulkhead_segment_slots{table=\"dependencies\"} 16"), std::string::npos);
  EXPECT_NE(scrape.find("bulkhead_segment_slots_used{table=\"processes\"} 8"), std::string::npos);
  EXPECT_NE(scrape.find("bulkhead_segment_slots{table=\"processes\"} 8"), std::string::npos);

  children.front()->kill();
  advance_ticks(1);
  EXPECT_EQ(loop_->occupancy().processes, 7u);
  EXPECT_EQ(log.count("process table no longer full: 7 of 8 slots taken"), 1u) << log.text();
  advance_ticks(1);
  EXPECT_EQ(log.count("table full"), 2u);  // still once each
  EXPECT_EQ(log.count("no longer full"), 1u) << log.text();  // and its emptying once, when it began
}

// A waiter killed in the queue keeps its place only until the next tick,
// and the waiter behind it then gets the permit.
TEST_F(ControlLoopTest, AWaiterKilledInTheQueueGivesItsPlaceBack) {
  start("[defaults]\npolicy = \"fixed\"\ninitial_limit = 1\nmax_queue = 2\n");
  Dependency dep = client_->dependency("orders");
  advance_ticks(1);
  const std::uint32_t slot = slot_of("orders");
  const auto waiting = [&] { return shm::queue_length(segment_->queue(slot), segment_->queue_slots()); };
  Permit mine = dep.try_acquire();
  ASSERT_TRUE(mine);
  const pid_t child = ::fork();
  if (child == 0) {
    Permit p = dep.acquire(60s);  // killed while it waits
    std::_Exit(3);
  }
  while (waiting() != 1) std::this_thread::yield();
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(waiting(), 1u);  // its record outlives it

  testing::BackgroundWaiter behind(dep);
  while (waiting() != 2) std::this_thread::yield();
  EXPECT_EQ(dep.acquire(60s).reason(), BH_REJECT_QUEUE_FULL);  // the dead one still counts
  mine.success();
  advance_ticks(1);  // frees the dead waiter's place and wakes the one behind
  EXPECT_EQ(behind.result(), 0);
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(loop_->waiters_reclaimed(), 1u);
  EXPECT_EQ(dep.inflight(), 0);
}

// A process that dies holding a permit of a dependency and waiting in its
// queue (a thread behind its own permit) is one line, as each process and
// dependency is (docs/operations.md): two made a tick that reclaimed 100
// such log 200 lines, past the 100 it says it logs at most.
TEST_F(ControlLoopTest, AProcessThatDiedHoldingAndWaitingIsOneLine) {
  start("[defaults]\npolicy = \"fixed\"\ninitial_limit = 1\nmax_queue = 2\n");
  Dependency dep = client_->dependency("orders");
  advance_ticks(1);
  const std::uint32_t slot = slot_of("orders");
  const auto waiting = [&] { return shm::queue_length(segment_->queue(slot), segment_->queue_slots()); };
  const pid_t child = ::fork();
  if (child == 0) {
    Permit mine = dep.try_acquire();
    if (!mine) std::_Exit(1);
    std::thread([&] { Permit p = dep.acquire(60s); }).detach();  // behind its own permit
    while (waiting() != 1) std::this_thread::yield();
    ::raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  ASSERT_EQ(waiting(), 1u);
  ASSERT_EQ(dep.inflight(), 1);
  const testing::LogCapture log;
  advance_ticks(1);
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(dep.inflight(), 0);
  EXPECT_EQ(loop_->waiters_reclaimed(), 1u);
  EXPECT_EQ(loop_->permits_reclaimed(), 1u);
  EXPECT_EQ(log.count(" died "), 1u) << log.text();
  EXPECT_EQ(log.count("died holding 1 permit(s) of orders and waiting (1 place(s) in its queue): given back and freed"),
            1u)
      << log.text();
}

// Processes that die before one tick are reclaimed together: one pass over
// every wait queue frees the places of all of them. A pass per dead process
// (each reads max_dependencies x queue_slots records) made the tick after
// 200 clients were killed at once last 3.6 s at 16384 dependencies x 1024
// queue places, and one after 560 would have passed WatchdogSec=10s.
TEST_F(ControlLoopTest, ProcessesThatDieInOneTickAreReclaimedInOnePassOverTheQueues) {
  start("[defaults]\npolicy = \"fixed\"\ninitial_limit = 1\nmax_queue = 2\n");
  Dependency orders = client_->dependency("orders");
  Dependency stock = client_->dependency("stock");
  Dependency pay = client_->dependency("pay");
  advance_ticks(1);
  const std::uint32_t slot = slot_of("orders");
  const auto waiting = [&] { return shm::queue_length(segment_->queue(slot), segment_->queue_slots()); };
  Permit mine = orders.try_acquire();
  ASSERT_TRUE(mine);
  const pid_t waiter = ::fork();
  if (waiter == 0) {
    Permit p = orders.acquire(60s);  // killed while it waits
    std::_Exit(3);
  }
  while (waiting() != 1) std::this_thread::yield();
  ::kill(waiter, SIGKILL);
  for (Dependency* dep : {&stock, &pay}) {
    const pid_t holder = ::fork();
    if (holder == 0) {
      Permit p = dep->try_acquire();
      std::_Exit(p ? 0 : 1);  // dies holding it
    }
    int status = 0;
    ASSERT_EQ(::waitpid(holder, &status, 0), holder);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(waiter, &status, 0), waiter);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(stock.inflight(), 1);
  EXPECT_EQ(pay.inflight(), 1);

  advance_ticks(1);  // all three found dead at once
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(loop_->waiters_reclaimed(), 1u);
  EXPECT_EQ(stock.inflight(), 0);
  EXPECT_EQ(pay.inflight(), 0);
  EXPECT_EQ(loop_->permits_reclaimed(), 2u);
  EXPECT_EQ(loop_->dead_queue_scans(), 1u);
  mine.success();
  EXPECT_EQ(orders.inflight(), 0);
}

// A claim is abandoned once it has been seen unfinished for 2 s (20
// ticks of 100 ms), not before: clients give up on one after 1 s.
TEST_F(ControlLoopTest, StuckClaimsAreAbandonedAfterTwoSeconds) {
  start("");
  const std::uint64_t hash = shm::dependency_name_hash("stuck");
  auto& tag = segment_->dependency(3).identity.tag;
  tag.store((hash << 8) | shm::kSlotClaiming);
  advance_ticks(20);  // first seen at the first tick: 1.9 s since
  EXPECT_EQ(tag.load() & 0xff, shm::kSlotClaiming);
  advance_ticks(1);
  EXPECT_EQ(tag.load() & 0xff, shm::kSlotAbandoned);
}

// The same for a process slot a client died claiming: nothing is held in
// it yet, and it is freed for the next process.
TEST_F(ControlLoopTest, AProcessSlotLeftHalfClaimedIsFreedAfterTwoSeconds) {
  start("");
  auto& state = segment_->process(7).identity.state;
  state.store(shm::kSlotClaiming);
  advance_ticks(20);
  EXPECT_EQ(state.load(), shm::kSlotClaiming);
  advance_ticks(1);
  EXPECT_EQ(state.load(), shm::kSlotFree);
}

// A process stalled (stopped, swapped out) in the middle of taking or
// giving back its slot, its pid written, is alive: its slot is not freed
// under it, however long it takes. Freed, another process could claim it
// before the first resumed and stored "ready", or "free", over that one's.
TEST_F(ControlLoopTest, AProcessSlotWhoseLiveProcessStallsMidClaimIsLeftToIt) {
  start("");
  const shm::ProcessClaim mine = shm::claim_process_slot(*segment_);
  auto& state = segment_->process(mine.index).identity.state;
  state.store(shm::kSlotClaiming);  // as release_process_slot() leaves it before it clears the fields
  advance_ticks(60);
  EXPECT_EQ(state.load(), shm::kSlotClaiming);
  EXPECT_EQ(segment_->process(mine.index).identity.pid.load(), ::getpid());
  // Its process finishes: the slot is free then, and only then.
  shm::free_process_slot(*segment_, mine.index);
  advance_ticks(1);
  EXPECT_EQ(state.load(), shm::kSlotFree);
}

// But a release that an exec in another thread cut short (exec ends the
// releasing thread): the program that runs on under the pid will never
// finish it. Its claim's liveness lock went with the exec: the slot is
// freed, as a dead process's.
TEST_F(ControlLoopTest, AProcessSlotLeftMidReleaseByAProcessThatExecdIsFreed) {
  start("");
  const shm::ProcessClaim mine = shm::claim_process_slot(*segment_);
  std::optional<shm::LivenessLock> lock(std::in_place, *segment_, mine);
  ASSERT_TRUE(lock->held());
  auto& state = segment_->process(mine.index).identity.state;
  state.store(shm::kSlotClaiming);  // as release_process_slot() leaves it before it clears the fields
  advance_ticks(30);
  EXPECT_EQ(state.load(), shm::kSlotClaiming);  // its lock held: a release under way, left to it
  lock.reset();  // as the exec closes it
  advance_ticks(1);
  EXPECT_EQ(state.load(), shm::kSlotFree);
}

TEST_F(ControlLoopTest, AConfiguredNameAClientLeftHalfClaimedGetsItsSlotOnceAbandoned) {
  // A client died (or a hostile one lied) in the middle of claiming
  // "payments": its slot reads "claiming" under the name's hash. The daemon
  // neither fails to start nor waits on it ...
  const std::uint64_t hash = shm::dependency_name_hash("payments");
  const std::uint32_t home = static_cast<std::uint32_t>(hash % 16);
  start("[dependency.payments]\npolicy = \"fixed\"\ninitial_limit = 7\n", [&](shm::Segment& s) {
    s.dependency(home).identity.tag.store((hash << 8) | shm::kSlotClaiming);
  });
  EXPECT_FALSE(shm::find_dependency(*segment_, "payments"));
  // ... it abandons the stuck claim (over 2 s of ticks) and then claims
  // the name at the next slot of its probe sequence, limit and flags set.
  advance_ticks(26);
  const auto index = shm::find_dependency(*segment_, "payments");
  ASSERT_TRUE(index);
  EXPECT_NE(*index, home);
  EXPECT_EQ(segment_->dependency(*index).control.limit.load(), 7u);
  EXPECT_EQ(segment_->dependency(*index).control.flags.load() & shm::kDependencyConfigured,
            shm::kDependencyConfigured);
  EXPECT_EQ(view_of("payments").limit, 7u);
}

TEST_F(ControlLoopTest, AConfiguredNameWaitsWhenClientsFilledTheTable) {
  start("[dependency.payments]\npolicy = \"fixed\"\n", [](shm::Segment& s) {
    for (int i = 0; i < 16; ++i) shm::find_or_claim_dependency(s, "filler-" + std::to_string(i), 1, 0);
  });
  advance_ticks(3);  // no slot, no exception: the daemon keeps running
  EXPECT_FALSE(shm::find_dependency(*segment_, "payments"));
  EXPECT_EQ(loop_->view().size(), 16u);
}

// A claim a full table refused is not tried at every tick (each try probes
// every slot: a thousand configured names on a full table of 16384 made
// every tick 74 ms), only again at a reload; a claim refused for another
// reason (a client's claim of the name unfinished) is tried each tick.
TEST_F(ControlLoopTest, AClaimAFullTableRefusedIsTriedAgainOnlyAtAReload) {
  const char* config = "[dependency.payments]\npolicy = \"fixed\"\n";
  const testing::LogCapture log;
  start(config, [](shm::Segment& s) {
    for (int i = 0; i < 16; ++i) shm::find_or_claim_dependency(s, "filler-" + std::to_string(i), 1, 0);
  });
  advance_ticks(1);  // the first tick counts the table full
  const std::uint64_t tried = loop_->claim_attempts();
  advance_ticks(5);
  EXPECT_EQ(loop_->claim_attempts(), tried);
  EXPECT_FALSE(shm::find_dependency(*segment_, "payments"));
  EXPECT_EQ(log.count("dependency payments: no slot yet"), 1u) << log.text();
  EXPECT_NE(log.text().find("trying again at each reload"), std::string::npos) << log.text();

  loop_->apply(parse(config, "next.toml"));
  EXPECT_EQ(loop_->claim_attempts(), tried + 1);
  advance_ticks(3);
  EXPECT_EQ(loop_->claim_attempts(), tried + 1);
  EXPECT_EQ(loop_->view().size(), 16u);
}

TEST_F(ControlLoopTest, ASlotWhoseNameIsJunkIsIgnored) {
  start("");
  const auto a = shm::find_or_claim_dependency(*segment_, "slash", 5, 0);
  const auto b = shm::find_or_claim_dependency(*segment_, "long", 5, 0);
  const auto c = shm::find_or_claim_dependency(*segment_, "fine", 5, 0);
  // Slots are any client's to write: a name no library would claim.
  segment_->dependency(a.index).identity.name[1] = '/';
  segment_->dependency(b.index).identity.name_length = 200;
  advance_ticks(2);
  std::vector<std::string> names;
  for (const auto& v : loop_->view()) names.push_back(v.name);
  EXPECT_EQ(names, std::vector<std::string>{"fine"});
  (void)c;
}

// A length past the longest name, over a buffer of valid characters: the
// first 47 would make a good name, but not the one the slot claims.
TEST_F(ControlLoopTest, ASlotWhoseLengthOverrunsItsNameIsIgnored) {
  start("");
  const auto a = shm::find_or_claim_dependency(*segment_, "a", 5, 0);
  auto& identity = segment_->dependency(a.index).identity;
  std::fill_n(identity.name, shm::kMaxNameLength, 'a');
  identity.name_length = shm::kMaxNameLength + 1;
  advance_ticks(2);
  EXPECT_TRUE(loop_->view().empty());
}

// bulkheadctl shows which config last set a dependency's settings: a name
// first seen after two reloads was set by the third config.
TEST_F(ControlLoopTest, ANewDependencyCarriesTheConfigGenerationThatSetIt) {
  start("");
  loop_->apply(config_);
  loop_->apply(config_);
  client_->dependency("late");
  advance_ticks(1);
  const std::uint64_t generation = segment_->header().config_generation.load();
  EXPECT_EQ(generation, 3u);
  EXPECT_EQ(segment_->dependency(slot_of("late")).control.generation.load(), generation);
}

// A name a client claims between two ticks: its counters hold that tick's
// calls, which the tick that adopts it counts in full. Its first window, its
// breaker and the metrics see every outcome since the claim, and the window
// is a tick long (since the previous tick), not an instant.
TEST_F(ControlLoopTest, ANameClaimedBetweenTwoTicksHasEveryOutcomeSinceItsClaimCounted) {
  start("[defaults]\npolicy = \"aimd\"\nmin_limit = 1\ninitial_limit = 10\nwindow_min_samples = 10\n"
        "[defaults.breaker]\nenabled = true\n",
        {}, /*with_metrics=*/true);
  advance_ticks(1);
  Dependency dep = client_->dependency("fresh");
  feed_calls(dep, 30, 1ms, Outcome::kFailed);
  feed_calls(dep, 10, 3ms);
  advance_ticks(1);
  const ControlLoop::View v = view_of("fresh");
  EXPECT_EQ(v.breaker, BreakerState::kOpen);  // 30 of 40 failed
  EXPECT_EQ(dep.breaker(), bulkhead::BreakerState::kOpen);
  EXPECT_EQ(v.windows, 1u);  // the 10 successes made a window
  EXPECT_EQ(v.window_ns, kTickNs);
  const Metrics::Dependency& m = metrics_->dependency("fresh");
  EXPECT_EQ(m.requests[0], 10);  // success
  EXPECT_EQ(m.requests[4], 30);  // failed
  std::uint64_t latencies = 0;
  for (const std::uint64_t c : m.latency.counts) latencies += c;
  EXPECT_EQ(latencies, 10u);
  // Counted once: the next tick adds nothing.
  advance_ticks(1);
  EXPECT_EQ(m.requests[4], 30);
  EXPECT_EQ(view_of("fresh").windows, 1u);
}

// A slot the daemon finds at its first tick, whether a previous daemon
// governed it or clients claimed it while none ran: what its counters hold
// is history, perhaps hours of it, and feeds neither a window, nor the
// breaker, nor the metrics. Calls after that tick count.
TEST_F(ControlLoopTest, ASlotFoundAtTheFirstTickDoesNotFeedItsOldCountsIntoAWindow) {
  const auto used = [](shm::Segment& s, const char* name, std::uint64_t generation) {
    const std::uint32_t index = shm::find_or_claim_dependency(s, name, 10, 0).index;
    s.dependency(index).control.generation.store(generation);
    s.stripe(index, 0).failed.fetch_add(30);
    s.stripe(index, 0).max_inflight.store(40);  // its window's peak, long ago
    for (int i = 0; i < 10; ++i) {
      s.latency_histogram(index, 1).bucket[shm::histogram_bucket(3'000'000)].fetch_add(1);
      s.stripe(index, 1).rtt_sum_ns.fetch_add(3'000'000);
    }
  };
  start("[defaults]\npolicy = \"aimd\"\nmin_limit = 1\ninitial_limit = 10\nwindow_min_samples = 10\n"
        "[defaults.breaker]\nenabled = true\n",
        [&](shm::Segment& s) {
          used(s, "unsupervised", 0);  // claimed by a client while no daemon ran
          used(s, "governed", 4);      // a previous daemon's
        },
        /*with_metrics=*/true);
  advance_ticks(2);
  for (const char* name : {"unsupervised", "governed"}) {
    const ControlLoop::View v = view_of(name);
    EXPECT_EQ(v.breaker, BreakerState::kClosed) << name;
    EXPECT_EQ(v.windows, 0u) << name;
    const Metrics::Dependency& m = metrics_->dependency(name);
    EXPECT_EQ(m.requests[0], 0) << name;
    EXPECT_EQ(m.requests[4], 0) << name;
  }
  Dependency dep = client_->dependency("unsupervised");
  feed_calls(dep, 10, 3ms);
  advance_ticks(1);
  EXPECT_EQ(view_of("unsupervised").windows, 1u);
  EXPECT_EQ(metrics_->dependency("unsupervised").requests[0], 10);
  // One call at a time: aimd grows only a limit the window used half of.
  EXPECT_EQ(view_of("unsupervised").limit, 10u);
}

// A daemon that let more callers wait (a larger max_queue) left records
// past today's max_queue: they are counted until they are gone.
TEST_F(ControlLoopTest, WaitersPastTheQueueBoundAPreviousDaemonLetInAreCounted) {
  std::uint32_t slot = 0;
  std::uint32_t waiter = 0;  // the waiters' process slot: a live process's
  start(
      "[defaults]\nmax_queue = 2\n",
      [&](shm::Segment& s) {
        slot = shm::find_or_claim_dependency(s, "orders", 5, 0).index;
        waiter = shm::claim_process_slot(s).index;
        s.queue(slot)[5].store(shm::queue_record(1, waiter));
      },
      /*with_metrics=*/true);
  advance_ticks(1);
  EXPECT_EQ(metrics_->dependency("orders").waiters, 1);
  segment_->queue(slot)[0].store(shm::queue_record(2, waiter));
  advance_ticks(1);
  EXPECT_EQ(metrics_->dependency("orders").waiters, 2);
  segment_->queue(slot)[5].store(0);  // it left by its deadline
  segment_->queue(slot)[0].store(0);
  advance_ticks(1);
  EXPECT_EQ(metrics_->dependency("orders").waiters, 0);
}

TEST_F(ControlLoopTest, APermitLostBetweenTheTwoUpdatesIsGivenBackAfterThreeTicks) {
  start("");
  Dependency dep = client_->dependency("orders");
  Permit a = dep.try_acquire(), b = dep.try_acquire();
  advance_ticks(1);
  // A thread of this process killed between the word's update and its
  // held count's: the word counts a permit that no process holds.
  admission_word("orders").fetch_add(shm::kAdmissionAcquire);
  EXPECT_EQ(dep.inflight(), 3);
  advance_ticks(2);
  EXPECT_EQ(dep.inflight(), 3);  // a gap can be a call in progress
  advance_ticks(1);
  EXPECT_EQ(dep.inflight(), 2);  // three ticks in a row: it is lost, and given back
  EXPECT_EQ(loop_->permits_reclaimed(), 1u);
  a.success();
  b.success();
  EXPECT_EQ(dep.inflight(), 0);
}

// Each tick's gap must be of the same sign as the last ticks' for the
// count to go on: gaps both ways are calls in progress, not a lost permit.
TEST_F(ControlLoopTest, AGapThatChangesSignStartsTheCountAgain) {
  start("");
  Dependency dep = client_->dependency("orders");
  Permit a = dep.try_acquire(), b = dep.try_acquire();
  advance_ticks(1);
  auto& word = admission_word("orders");
  word.fetch_add(shm::kAdmissionAcquire);  // one over what is held
  advance_ticks(1);
  for (int i = 0; i < 2; ++i) word.fetch_add(shm::kAdmissionRelease);  // one under
  advance_ticks(1);
  for (int i = 0; i < 3; ++i) word.fetch_add(shm::kAdmissionAcquire);  // two over
  advance_ticks(1);
  EXPECT_EQ(dep.inflight(), 4);  // three ticks with a gap, but not one way
  EXPECT_EQ(loop_->permits_reclaimed(), 0u);
  advance_ticks(2);
  EXPECT_EQ(dep.inflight(), 2);  // three ticks two over in a row
  EXPECT_EQ(loop_->permits_reclaimed(), 2u);
  a.success();
  b.success();
}

// Only the smallest gap of the three ticks is corrected: a larger one may
// have been calls in progress on top of a lost permit.
TEST_F(ControlLoopTest, TheSmallestGapOfTheTicksIsWhatIsCorrected) {
  start("");
  Dependency dep = client_->dependency("orders");
  Permit a = dep.try_acquire(), b = dep.try_acquire();
  advance_ticks(1);
  auto& word = admission_word("orders");
  for (int i = 0; i < 2; ++i) word.fetch_add(shm::kAdmissionAcquire);  // two over
  advance_ticks(1);
  word.fetch_add(shm::kAdmissionRelease);  // one over
  advance_ticks(1);
  word.fetch_add(shm::kAdmissionAcquire);  // two over
  advance_ticks(1);
  EXPECT_EQ(dep.inflight(), 3);
  EXPECT_EQ(loop_->permits_reclaimed(), 1u);
  advance_ticks(2);
  EXPECT_EQ(dep.inflight(), 3);  // the count starts again after a correction
  advance_ticks(1);  // the other one, three ticks in a row since
  EXPECT_EQ(dep.inflight(), 2);
  EXPECT_EQ(loop_->permits_reclaimed(), 2u);
  a.success();
  b.success();
}

// Past its budget of held counts a tick (2^18: here 64 processes x 4160
// dependencies), the drift scan takes the dependencies in slices, in
// turns, and a gap is corrected at the third scan of its slice, not at the
// third tick: never sooner, and never missed.
TEST_F(ControlLoopTest, PastItsBudgetTheDriftScanTakesTurnsBySlice) {
  constexpr std::uint32_t kDeps = 4160, kProcesses = 64;
  config_ = parse_config("[daemon]\nsegment = \"" + name_.str() + "\"\nmax_dependencies = 4160\nmax_processes = 64\n"
                         "stats_stripes = 1\nqueue_slots = 0\n",
                         "test.toml");
  segment_.emplace(shm::Segment::create(name_, testing::small_segment(kDeps, kProcesses, 1, 0)));
  // Every process slot is this process's: all of them alive, all scanned.
  for (std::uint32_t p = 0; p < kProcesses; ++p) shm::claim_process_slot(*segment_);
  for (std::uint32_t i = 0; i < kDeps; ++i) shm::find_or_claim_dependency(*segment_, "dep-" + std::to_string(i), 20, 0);
  loop_.emplace(*segment_, config_, nullptr);
  advance_ticks(1);  // adopts all of them; the scan takes slots 0 to 4095, next time 4096 to 4159
  ASSERT_EQ(loop_->view().size(), kDeps);
  // A permit in flight that no process holds in the first slot and in the last.
  auto& first = segment_->dependency(0).admission.word;
  auto& last = segment_->dependency(kDeps - 1).admission.word;
  first.fetch_add(shm::kAdmissionAcquire);
  last.fetch_add(shm::kAdmissionAcquire);
  advance_ticks(4);  // each slice scanned twice since
  EXPECT_EQ(shm::admission_inflight(first.load()), 1u);
  EXPECT_EQ(shm::admission_inflight(last.load()), 1u);
  advance_ticks(1);  // the last slot's slice, a third time
  EXPECT_EQ(shm::admission_inflight(last.load()), 0u);
  EXPECT_EQ(shm::admission_inflight(first.load()), 1u);
  advance_ticks(1);  // the first slot's, a third time
  EXPECT_EQ(shm::admission_inflight(first.load()), 0u);
  EXPECT_EQ(loop_->permits_reclaimed(), 2u);
}

TEST_F(ControlLoopTest, AStoppedProcessMidCallKeepsItsPermitUntilItIsGone) {
  start("");
  Dependency dep = client_->dependency("orders");
  const std::uint32_t index = slot_of("orders");
  const pid_t child = ::fork();
  if (child == 0) {
    // Its own process slot, then a call stopped between its two updates.
    Client mine(name_.str());
    Dependency d = mine.dependency("orders");
    (void)d;
    shm::Segment s = shm::Segment::attach(name_.str(), shm::Access::kReadWrite);
    s.dependency(index).admission.word.fetch_add(shm::kAdmissionAcquire);
    ::raise(SIGSTOP);
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(status));
  advance_ticks(5);
  EXPECT_EQ(dep.inflight(), 1);  // it may resume and finish the call
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  advance_ticks(4);  // gone: its slot is freed, and the gap is a lost permit
  EXPECT_EQ(dep.inflight(), 0);
}

TEST_F(ControlLoopTest, AnInFlightCountShortOfWhatIsHeldIsRestored) {
  start("");
  Dependency dep = client_->dependency("orders");
  Permit a = dep.try_acquire(), b = dep.try_acquire();
  advance_ticks(1);
  // A correction that a thread stalled mid-call later proved wrong, or a
  // count that wrapped below zero: the word is short of what is held.
  const testing::LogCapture log;
  for (int i = 0; i < 3; ++i) admission_word("orders").fetch_add(shm::kAdmissionRelease);  // 2 - 3: wrapped
  EXPECT_EQ(dep.inflight(), 0);  // not 2^32 - 1, which would refuse every call
  Permit c = dep.try_acquire();
  EXPECT_TRUE(c);
  EXPECT_EQ(admission_word("orders").load(), 0u);  // -1 + 1, what it borrowed back
  advance_ticks(3);
  EXPECT_EQ(dep.inflight(), 3);
  // Read modulo 2^64, the wrapped word is three short, not 2^32 - 3 over.
  EXPECT_EQ(loop_->permits_reclaimed(), 0u);
  EXPECT_EQ(log.count("warning dependency orders: in-flight count 3 short of what processes hold: restored"), 1u)
      << log.text();
  EXPECT_EQ(log.count("warning"), 1u) << log.text();
  a.success();
  b.success();
  c.success();
  EXPECT_EQ(dep.inflight(), 0);
}

// A wait-queue record whose process is no live one: an index past the
// process table (a client's junk), or a slot no process holds (a daemon
// killed between taking a dead waiter's slot and freeing its records). It
// would count as a waiter ahead of every later one for good: with one
// permit free, no waiter would ever take it.
TEST_F(ControlLoopTest, AQueueRecordOfNoLiveProcessIsFreed) {
  start("[defaults]\npolicy = \"fixed\"\ninitial_limit = 1\nmax_queue = 4\n");
  Dependency dep = client_->dependency("orders");
  advance_ticks(1);
  const std::uint32_t slot = slot_of("orders");
  std::atomic<std::uint64_t>* records = segment_->queue(slot);
  const auto waiting = [&] { return shm::queue_length(records, segment_->queue_slots()); };
  segment_->dependency(slot).admission.tickets.store(100);  // waiters came and went
  records[0].store(shm::queue_record(0, 1000));  // no such process slot
  records[1].store(shm::queue_record(1, 5));     // a free slot
  records[6].store(std::uint64_t{7} << 16);      // process field 0: slot "-1"
  advance_ticks(1);
  const std::uint32_t left = waiting();
  EXPECT_EQ(left, 0u);
  Permit mine = dep.try_acquire();
  ASSERT_TRUE(mine);
  testing::BackgroundWaiter behind(dep, 10s);
  while (waiting() != left + 1) std::this_thread::yield();
  mine.success();
  EXPECT_EQ(behind.result(), 0);  // the free permit, not BH_REJECT_DEADLINE
}

// A daemon killed in its dead-process scan after it took a dead process's
// slot (ready -> claiming) and before it gave back its permits: the next
// daemon finds the slot claiming, with the held counts of a process that
// is gone. The drift scan gives those permits back (the slot is not
// ready); the slot, abandoned, must not hand them to its next process.
TEST_F(ControlLoopTest, HeldCountsOfASlotADaemonDiedReclaimingAreNotInherited) {
  std::uint32_t dep_slot = 0;
  std::uint32_t dead = 0;
  start("[defaults]\npolicy = \"fixed\"\ninitial_limit = 4\n", [&](shm::Segment& s) {
    dep_slot = shm::find_or_claim_dependency(s, "orders", 4, 0).index;
    dead = shm::claim_process_slot(s).index;
    const pid_t child = ::fork();
    if (child == 0) std::_Exit(0);
    ::waitpid(child, nullptr, 0);
    s.process(dead).identity.pid.store(child);  // its process is gone
    s.held(dead, dep_slot).store(2);
    s.dependency(dep_slot).admission.word.store(2);
    s.process(dead).identity.state.store(shm::kSlotClaiming);  // the killed daemon's take
  });
  Dependency dep = client_->dependency("orders");
  advance_ticks(25);  // past the 2 s after which a claim is abandoned
  ASSERT_EQ(segment_->process(dead).identity.state.load(), shm::kSlotFree);
  EXPECT_EQ(dep.inflight(), 0);  // the drift scan gave them back
  EXPECT_EQ(segment_->held(dead, dep_slot).load(), 0u);
  // The next process to take the slot holds nothing, and loses nothing.
  const shm::ProcessClaim next = shm::claim_process_slot(*segment_);
  ASSERT_EQ(next.index, dead);
  advance_ticks(5);
  EXPECT_EQ(dep.inflight(), 0);
  shm::release_process_slot(*segment_, next);
}

TEST_F(ControlLoopTest, HeartbeatAdvancesEveryTick) {
  start("");
  advance_ticks(3);
  EXPECT_EQ(segment_->header().heartbeat.load(), 3u);
  EXPECT_EQ(segment_->header().heartbeat_ns.load(), now_ns_);
}

}  // namespace
}  // namespace bulkhead::daemon
