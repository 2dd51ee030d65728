// Partitions end to end: the daemon's control loop publishes them from a
// config on a real segment, clients (threads and forked processes) admit
// through libbulkhead, and the test looks at the admission word.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "bulkhead/bulkhead.h"
#include "bulkhead/client.hpp"
#include "bulkhead/fallback.hpp"
#include "daemon/config.hpp"
#include "daemon/control_loop.hpp"
#include "shm/partitions.hpp"
#include "shm/wait_queue.hpp"
#include "tests/support/children.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/log_capture.hpp"
#include "tests/support/loop_fixture.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {


// The admission word with `total` in flight, `c1` and `c2` of partitions 1 and 2.
constexpr std::uint64_t word_of(std::uint32_t total, std::uint32_t c1, std::uint32_t c2) {
  return std::uint64_t{total} | std::uint64_t{c1} << 32 | std::uint64_t{c2} << 48;
}

// A fixed limit of `limit` with the partitions table `partitions`.
std::string dependency(const std::string& name, int limit, const std::string& partitions) {
  const std::string l = std::to_string(limit);
  return "[dependency." + name + "]\npolicy = \"fixed\"\nmin_limit = " + l + "\nmax_limit = " + l +
         "\ninitial_limit = " + l + "\n" +
         (partitions.empty() ? "" : "[dependency." + name + ".partitions]\n" + partitions);
}

class PartitionTest : public testing::LoopFixture {
 protected:
  PartitionTest() : LoopFixture("part", 16) {}

  // The loop publishes the config's dependencies at its first tick.
  void start(const std::string& toml) {
    LoopFixture::start(toml);
    advance_ticks(1);
  }
  void reload(const std::string& toml) { loop_->apply(parse(toml)); }
  std::atomic<std::uint64_t>& word(const std::string& dep) { return segment_->dependency(slot_of(dep)).admission.word; }
  std::uint64_t held_total(const std::string& dep) {
    std::uint64_t sum = 0;
    for (std::uint32_t p = 0; p < segment_->capacities().max_processes; ++p) {
      sum += segment_->held(p, slot_of(dep)).load();
    }
    return sum;
  }
  // Acquires through `d` until refused; returns the permits and the reason.
  static std::vector<Permit> take_all(Dependency d, int* reason = nullptr) {
    std::vector<Permit> out;
    for (;;) {
      Permit p = d.try_acquire();
      if (!p) {
        if (reason != nullptr) *reason = p.reason();
        return out;
      }
      out.push_back(std::move(p));
    }
  }
};

TEST_F(PartitionTest, EachPartitionGetsItsGuaranteeAndBorrowsOnlyWhatNoneReserves) {
  start(dependency("db", 10, "critical = 0.5\nbatch = 0.2\n"));
  Dependency db = client_->dependency("db");
  Dependency critical = db.partition("critical");
  Dependency batch = db.partition("batch");
  // Batch alone: its 2, then the 3 nobody reserves; critical's 5 stay free.
  int reason = 0;
  auto batch_permits = take_all(batch, &reason);
  EXPECT_EQ(batch_permits.size(), 5u);
  EXPECT_EQ(reason, BH_REJECT_PARTITION);
  // Critical still gets its whole guarantee.
  auto critical_permits = take_all(critical, &reason);
  EXPECT_EQ(critical_permits.size(), 5u);
  EXPECT_EQ(reason, BH_REJECT_LIMIT);  // 10 in flight: the limit
  const std::uint64_t w = word("db").load();
  EXPECT_EQ(shm::admission_inflight(w), 10u);
  EXPECT_EQ(shm::partition_inflight(w, 1) + shm::partition_inflight(w, 2), 10u);
  EXPECT_EQ(held_total("db"), w);  // the held words mirror the admission word
  // Calls that name no partition: nothing left.
  EXPECT_EQ(db.try_acquire().reason(), BH_REJECT_LIMIT);
  // Each refusal counted once, and under the partition it was for; those
  // at the limit (critical's and the unnamed call's) as the dependency's too.
  const shm::DependencyCounters c = shm::read_counters(*segment_, slot_of("db"));
  EXPECT_EQ(c.rejected, 2u);
  EXPECT_EQ(c.partition_rejected[0], 1u);  // the call that named none
  EXPECT_EQ(c.partition_rejected[1] + c.partition_rejected[2], 2u);
  batch_permits.clear();
  critical_permits.clear();
  EXPECT_EQ(word("db").load(), 0u);
  EXPECT_EQ(held_total("db"), 0u);
}

// A policy reads the refusals at the limit as demand that reached it
// (balance grows a limit that is "used"). A hard cap refusing its
// partition under the limit is no such demand: it does not raise the
// limit, and with it the cap, while the dependency is far from its limit.
// Every refusal still counts in bulkhead_requests_total.
TEST_F(PartitionTest, RefusalsUnderTheLimitDoNotGrowTheLimit) {
  const std::string table = "max_limit = 200\ninitial_limit = 20\n[dependency.db.partitions]\n"
                            "batch = { share = 0.2, hard_cap = true }\n";
  LoopFixture::start("[dependency.db]\n" + table, {}, true);
  advance_ticks(1);
  Dependency batch = client_->dependency("db").partition("batch");
  std::uint64_t refused = 0;
  for (int t = 0; t < 300; ++t) {
    for (int k = 0; k < 10; ++k) {
      std::vector<Permit> held;
      for (int i = 0; i < 6; ++i) {  // 4 (its cap at 20) and 2 refused, with 16 free
        Permit p = batch.try_acquire();
        if (p) held.push_back(std::move(p));
        else ++refused;
      }
      for (Permit& p : held) p.release(Outcome::kSuccess, std::chrono::milliseconds(5));
    }
    advance_ticks(1);
  }
  EXPECT_EQ(refused, 300u * 10 * 2);
  EXPECT_EQ(client_->dependency("db").limit(), 20);
  const std::string scrape = testing::http_get(metrics_->port(), "/metrics");
  EXPECT_NE(scrape.find("bulkhead_requests_total{dependency=\"db\",outcome=\"rejected\"} 6000"), std::string::npos)
      << scrape;
}

// The circuit breaker is the dependency's: partition handles pass its gate,
// their BH_FAILED permits (tagged with their field) count as its failures,
// and a trial permit that the partitions' rule then refuses is given back.
TEST_F(PartitionTest, TheBreakerGuardsPartitionHandlesAndGetsItsTrialBackFromTheRule) {
  using namespace std::chrono_literals;
  start(dependency("db", 4, "critical = 0.5\nbatch = { share = 0.25, hard_cap = true }\n") +
        "[dependency.db.breaker]\nenabled = true\nminimum_calls = 2\nsleep_window_ms = 1000\n"
        "half_open_calls = 3\n");
  Dependency db = client_->dependency("db");
  Dependency critical = db.partition("critical");
  Dependency batch = db.partition("batch");
  shm::DependencyControl& control = segment_->dependency(slot_of("db")).control;
  // Two failures through the batch partition: one from try_acquire, one
  // from acquire (its permit also carries a deadline bit).
  Permit first = batch.try_acquire();
  ASSERT_TRUE(first);
  first.failed();
  Permit second = batch.acquire(1s);
  ASSERT_TRUE(second);
  EXPECT_GT(second.remaining(), 0ns);
  second.failed();
  EXPECT_EQ(word("db").load(), 0u);  // both given back to their field and the total
  EXPECT_EQ(held_total("db"), 0u);
  EXPECT_EQ(shm::read_counters(*segment_, slot_of("db")).failed, 2u);
  advance_ticks(1);
  ASSERT_EQ(bh_breaker_state(batch.handle()), BH_BREAKER_OPEN);
  // Open: every handle is refused before the rule, the word untouched.
  EXPECT_EQ(critical.try_acquire().reason(), BH_REJECT_OPEN_CIRCUIT);
  EXPECT_EQ(batch.acquire(1s).reason(), BH_REJECT_OPEN_CIRCUIT);
  EXPECT_EQ(db.try_acquire().reason(), BH_REJECT_OPEN_CIRCUIT);
  EXPECT_EQ(word("db").load(), 0u);
  // Half open: three trials. Batch (hard-capped at 1) takes one; its next
  // calls are refused by the rule and give their trial back.
  advance_ticks(10);
  ASSERT_EQ(bh_breaker_state(critical.handle()), BH_BREAKER_HALF_OPEN);
  ASSERT_EQ(shm::trials_left(control.trials.load()), 3u);
  Permit trial = batch.try_acquire();
  ASSERT_TRUE(trial);
  EXPECT_EQ(shm::trials_left(control.trials.load()), 2u);
  EXPECT_EQ(batch.try_acquire().reason(), BH_REJECT_PARTITION);
  EXPECT_EQ(shm::trials_left(control.trials.load()), 2u);
  EXPECT_EQ(batch.acquire(1s).reason(), BH_REJECT_PARTITION);
  EXPECT_EQ(shm::trials_left(control.trials.load()), 2u);
  // Critical takes the other two trials; then none is left for anyone.
  Permit c1 = critical.try_acquire();
  Permit c2 = critical.try_acquire();
  ASSERT_TRUE(c1);
  ASSERT_TRUE(c2);
  EXPECT_EQ(critical.try_acquire().reason(), BH_REJECT_OPEN_CIRCUIT);
  EXPECT_EQ(word("db").load(), word_of(3, 2, 1));
  trial.success();
  c1.success();
  c2.success();
  EXPECT_EQ(word("db").load(), 0u);
  advance_ticks(1);
  EXPECT_EQ(bh_breaker_state(db.handle()), BH_BREAKER_CLOSED);
}

TEST_F(PartitionTest, CallsThatNameNoPartitionLeaveTheGuaranteesAlone) {
  start(dependency("db", 10, "critical = 0.7\n"));
  Dependency db = client_->dependency("db");
  int reason = 0;
  auto unnamed = take_all(db, &reason);
  EXPECT_EQ(unnamed.size(), 3u);
  EXPECT_EQ(reason, BH_REJECT_LIMIT);  // never BH_REJECT_PARTITION without a partition handle
  auto critical = take_all(db.partition("critical"));
  EXPECT_EQ(critical.size(), 7u);
  // "default" is the dependency's own handle.
  bh_dep* d = nullptr;
  ASSERT_EQ(bh_partition(db.handle(), "default", &d), 0);
  EXPECT_EQ(d, db.handle());
}

TEST_F(PartitionTest, AHardCapHoldsWithCapacityIdle) {
  start(dependency("db", 10, "critical = 0.5\nbatch = { share = 0.2, hard_cap = true }\n"));
  int reason = 0;
  Dependency batch_handle = client_->dependency("db").partition("batch");
  auto batch = take_all(batch_handle, &reason);
  EXPECT_EQ(batch.size(), 2u);
  EXPECT_EQ(reason, BH_REJECT_PARTITION);
  // A fallback is told that its partition refused the call, not the limit:
  // 8 of the 10 are free.
  FallbackGuard guard(1);
  const FallbackReason why = execute(
      batch_handle, guard, [] { return FallbackReason::kFailed; },
      [](const FallbackContext& context) { return context.reason; });
  EXPECT_EQ(why, FallbackReason::kPartition);
  EXPECT_STREQ(to_string(why), "partition");
}

// The loop's view (what the segment fuzzer checks the republished rule
// with) lists "default" and the named partitions only, each with its
// guarantee, its calls in flight and whether it is capped.
TEST_F(PartitionTest, TheViewListsTheConfiguredPartitions) {
  start(dependency("db", 10, "batch = { share = 0.2, hard_cap = true }\n"));
  Permit p = client_->dependency("db").partition("batch").try_acquire();
  ASSERT_TRUE(p);
  advance_ticks(1);
  const auto view = loop_->view();
  ASSERT_EQ(view.size(), 1u);
  const auto& parts = view[0].partitions;
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].name, "default");
  EXPECT_EQ(parts[0].inflight, 0u);
  EXPECT_FALSE(parts[0].hard_cap);
  EXPECT_EQ(parts[1].name, "batch");
  EXPECT_EQ(parts[1].guaranteed, 2u);
  EXPECT_EQ(parts[1].inflight, 1u);
  EXPECT_TRUE(parts[1].hard_cap);
}

TEST_F(PartitionTest, InShadowModeOnlyAFullCountRefuses) {
  start("[defaults]\nenforce = false\n" + dependency("db", 4, "batch = { share = 0.25, hard_cap = true }\n"));
  Dependency batch = client_->dependency("db").partition("batch");
  // Neither batch's hard cap (1) nor the limit (4) refuses: every call
  // past its cap is admitted and counted, until the partition's 16-bit
  // count is full.
  std::vector<Permit> permits;
  int reason = 0;
  for (std::uint32_t i = 0; i <= shm::kPartitionFieldMax; ++i) {
    Permit p = batch.try_acquire();
    if (!p) {
      reason = p.reason();
      break;
    }
    permits.push_back(std::move(p));
  }
  EXPECT_EQ(permits.size(), shm::kPartitionFieldMax);
  EXPECT_EQ(reason, BH_REJECT_PARTITION);
  EXPECT_EQ(shm::read_counters(*segment_, slot_of("db")).shadow_admitted, shm::kPartitionFieldMax - 1);
}

TEST_F(PartitionTest, UnknownPartitionsAreRefusedNamingThoseThatExist) {
  start(dependency("db", 10, "critical = 0.7\nbatch = 0.3\n") + dependency("plain", 10, ""));
  bh_dep* db = client_->dependency("db").handle();
  bh_dep* out = nullptr;
  EXPECT_EQ(bh_partition(db, "bulk", &out), -ENOENT);
  EXPECT_EQ(std::string(bh_last_error()),
            "dependency 'db' has no partition 'bulk' (its partitions: default, critical, batch)");
  EXPECT_EQ(bh_partition(client_->dependency("plain").handle(), "critical", &out), -ENOENT);
  EXPECT_NE(std::string(bh_last_error()).find("it has no partitions"), std::string::npos) << bh_last_error();
  EXPECT_EQ(bh_partition(db, "no good", &out), -EINVAL);
  EXPECT_THROW(client_->dependency("db").partition("bulk"), Error);
  ASSERT_EQ(bh_partition(db, "critical", &out), 0);
  bh_dep* again = nullptr;
  EXPECT_EQ(bh_partition(out, "batch", &again), -EINVAL);  // a partition of a partition
}

TEST_F(PartitionTest, PartitionsDoNotWait) {
  start(dependency("db", 4, "critical = 0.5\n"));
  Dependency critical = client_->dependency("db").partition("critical");
  auto held = take_all(critical);
  ASSERT_EQ(held.size(), 4u);
  Permit p = critical.acquire(std::chrono::seconds(30));  // refused at once, not after 30 s
  EXPECT_FALSE(p);
  EXPECT_EQ(p.reason(), BH_REJECT_LIMIT);
}

TEST_F(PartitionTest, AReloadMovesNoPermitAndAGonePartitionAdmitsAsDefault) {
  start(dependency("db", 10, "critical = 0.5\nbatch = 0.2\n"));
  Dependency db = client_->dependency("db");
  Dependency batch = db.partition("batch");
  Permit b = batch.try_acquire();
  ASSERT_TRUE(b);
  const std::uint64_t before = word("db").load();
  // Batch leaves the config, "bulk" comes: it inherits no meaning from the
  // permit in flight, which still goes back where it came from.
  reload(dependency("db", 10, "critical = 0.5\nbulk = 0.2\n"));
  EXPECT_EQ(word("db").load(), before);
  Permit after = batch.try_acquire();  // batch is gone: a call of "default"
  ASSERT_TRUE(after);
  EXPECT_EQ(word("db").load(), word_of(2, 0, 1));  // not counted as bulk's
  b.success();
  after.success();
  EXPECT_EQ(word("db").load(), 0u);
  // No partitions at all: every handle admits under the plain limit.
  reload(dependency("db", 10, ""));
  auto all = take_all(batch);
  EXPECT_EQ(all.size(), 10u);
  all.clear();
  EXPECT_EQ(word("db").load(), 0u);
  EXPECT_EQ(held_total("db"), 0u);
  // And the waiting acquire: its permit belongs to the dependency, and
  // goes back to it.
  Permit waited = batch.acquire(std::chrono::seconds(1));
  ASSERT_TRUE(waited);
  EXPECT_EQ(db.inflight(), 1);
  waited.success();
  EXPECT_EQ(word("db").load(), 0u);
  EXPECT_EQ(held_total("db"), 0u);
}

// A handle of a partition that a reload removed with every other admits as
// "default": bh_acquire() waits in the dependency's queue, as a call
// through the dependency's own handle does (it was refused at once).
TEST_F(PartitionTest, AHandleOfPartitionsAReloadRemovedWaitsInTheQueueAsDefault) {
  start(dependency("db", 2, "batch = 0.5\n"));
  Dependency db = client_->dependency("db");
  Dependency batch = db.partition("batch");
  reload(dependency("db", 2, "") + "max_queue = 4\n");
  auto held = take_all(db);
  ASSERT_EQ(held.size(), 2u);
  const auto waiting = [&] { return shm::queue_length(segment_->queue(slot_of("db")), segment_->queue_slots()); };
  std::atomic<int> result{-1};
  std::thread waiter([&] {
    Permit p = batch.acquire(std::chrono::seconds(60));
    result = p ? 0 : p.reason();
  });
  while (waiting() == 0 && result.load() == -1) std::this_thread::yield();
  EXPECT_EQ(result.load(), -1) << "refused at once";
  held.pop_back();  // a permit comes back: the waiter takes it
  waiter.join();
  EXPECT_EQ(result.load(), 0);
  held.clear();
  EXPECT_EQ(word("db").load(), 0u);
  EXPECT_EQ(held_total("db"), 0u);
}

// The partition series follow the config: a reload that removes or renames
// a partition takes its series away rather than leave them frozen.
TEST_F(PartitionTest, AReloadTakesAwayTheSeriesOfAGonePartition) {
  LoopFixture::start(dependency("db", 10, "critical = 0.5\nbatch = 0.2\n"), {}, true);
  advance_ticks(1);
  const auto series = [&] {
    const std::string scrape = testing::http_get(metrics_->port(), "/metrics");
    std::vector<std::string> names;
    for (const char* p : {"default", "critical", "batch", "bulk"}) {
      if (scrape.find("bulkhead_partition_guaranteed{dependency=\"db\",partition=\"" + std::string(p) + "\"}") !=
          std::string::npos) {
        names.push_back(p);
      }
    }
    return names;
  };
  EXPECT_EQ(series(), (std::vector<std::string>{"default", "critical", "batch"}));
  reload(dependency("db", 10, "critical = 0.5\nbulk = 0.2\n"));
  advance_ticks(1);
  EXPECT_EQ(series(), (std::vector<std::string>{"default", "critical", "bulk"}));
  reload(dependency("db", 10, ""));
  advance_ticks(1);
  EXPECT_EQ(series(), std::vector<std::string>{});
}

// A reload that lists the partitions in another order moves none of them:
// each name keeps its field, and so the permits in flight on it and the
// handles that resolved it.
TEST_F(PartitionTest, AReloadInAnotherOrderKeepsEachPartitionOnItsField) {
  start(dependency("db", 10, "critical = 0.5\nbatch = 0.2\n"));
  Dependency batch = client_->dependency("db").partition("batch");
  Permit before = batch.try_acquire();
  ASSERT_TRUE(before);
  EXPECT_EQ(word("db").load(), word_of(1, 0, 1));  // batch has field 2
  const std::uint64_t shape = segment_->dependency(slot_of("db")).partitions.shape.load();
  reload(dependency("db", 10, "batch = 0.2\ncritical = 0.5\n"));
  EXPECT_EQ(segment_->dependency(slot_of("db")).partitions.shape.load(), shape);
  Permit after = batch.try_acquire();
  ASSERT_TRUE(after);
  EXPECT_EQ(word("db").load(), word_of(2, 0, 2));
  before.success();
  after.success();
  EXPECT_EQ(word("db").load(), 0u);
}

// A daemon killed mid-reload, after it wrote a new name into a field and
// before it published the shape's new version, leaves handles of the old
// name with that field cached under a version that still holds. The daemon
// that adopts the segment publishes a version of its own, so that they look
// their names up again rather than count in a field another name has now.
TEST_F(PartitionTest, ADaemonThatAdoptsTheSegmentMakesHandlesLookTheirNamesUpAgain) {
  std::optional<Client> before_restart;
  std::optional<Dependency> batch;
  LoopFixture::start(dependency("db", 10, "critical = 0.5\n"), [&](shm::Segment& segment) {
    // What the killed daemon had published: "batch" in field 1, version 5.
    const std::uint32_t index =
        shm::find_or_claim_dependency(segment, "db", 10, shm::kDependencyPartitioned, std::chrono::seconds(1)).index;
    shm::DependencySlot& slot = segment.dependency(index);
    slot.control.generation.store(1);
    shm::store_partition_name(slot.partitions, 1, shm::pack_partition_name("batch"));
    slot.partitions.rule.store(shm::partition_rule(10, 0, 5, 0));
    slot.partitions.admit_limit.store(5);
    slot.partitions.shape.store(std::uint64_t{5} << 32 | (1u << 1) << 8);
    before_restart.emplace(name_.str());
    batch.emplace(before_restart->dependency("db").partition("batch"));
    ASSERT_TRUE(batch->try_acquire());  // resolved: field 1 under version 5
    // Its reload to "critical" got as far as the name.
    shm::store_partition_name(slot.partitions, 1, shm::pack_partition_name("critical"));
  });
  advance_ticks(1);
  Permit p = batch->try_acquire();  // batch is gone: a call of "default"
  ASSERT_TRUE(p);
  EXPECT_EQ(word("db").load(), word_of(1, 0, 0));  // not counted as critical's
}

TEST_F(PartitionTest, APartitionThatLeftTheConfigAdmitsAsDefaultThoughItsNameStays) {
  start(dependency("db", 10, "critical = 0.5\nbatch = 0.2\n"));
  Dependency batch = client_->dependency("db").partition("batch");
  ASSERT_TRUE(batch.try_acquire());  // resolved to its field, then released
  // Batch leaves and nothing takes its field: the segment keeps its name
  // there (the field drains), but not active.
  reload(dependency("db", 10, "critical = 0.5\n"));
  const auto& line = segment_->dependency(slot_of("db")).partitions;
  std::uint32_t field = 0;
  for (std::uint32_t p = 1; p < shm::kMaxPartitions; ++p) {
    if (shm::load_partition_name(line, p) == shm::pack_partition_name("batch")) field = p;
  }
  ASSERT_NE(field, 0u);
  ASSERT_EQ(shm::shape_active(line.shape.load()) >> field & 1u, 0u);
  Permit p = batch.try_acquire();
  ASSERT_TRUE(p);
  EXPECT_EQ(word("db").load(), word_of(1, 0, 0));  // a call of "default", in no field
}

TEST_F(PartitionTest, PermitsOfAKilledProcessAreGivenBackPerPartition) {
  start(dependency("db", 10, "critical = 0.5\nbatch = 0.2\n"));
  Dependency db = client_->dependency("db");
  Dependency critical = db.partition("critical");
  Dependency batch = db.partition("batch");
  Permit mine = critical.try_acquire();
  ASSERT_TRUE(mine);
  testing::PausedChild child([&] {
    static std::vector<Permit> held;  // kept until the child is killed
    for (int i = 0; i < 3; ++i) held.push_back(critical.try_acquire());
    for (int i = 0; i < 4; ++i) held.push_back(batch.try_acquire());
    held.push_back(db.try_acquire());
    for (const Permit& p : held) {
      if (!p) return false;
    }
    return true;
  });
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(word("db").load(), word_of(9, 4, 4));
  child.kill();
  advance_ticks(1);
  EXPECT_EQ(word("db").load(), word_of(1, 1, 0));
  mine.success();
  EXPECT_EQ(word("db").load(), 0u);
}

TEST_F(PartitionTest, TheDriftScanCorrectsAPartitionsFieldOnItsOwn) {
  start(dependency("db", 10, "critical = 0.5\nbatch = 0.2\n"));
  Dependency db = client_->dependency("db");
  Permit held = db.partition("batch").try_acquire();
  ASSERT_TRUE(held);
  // A thread killed between its compare-and-swap and its held count: one
  // critical call in the word that no process holds.
  word("db").fetch_add(shm::admission_unit(1));
  advance_ticks(5);
  EXPECT_EQ(word("db").load(), word_of(1, 0, 1));  // the live batch permit stays
  held.success();
  EXPECT_EQ(word("db").load(), 0u);
}

// A field off while the total is right is the field's correction alone,
// and says so. A total short of what is held just after, found right by
// every scan until then, is restored three ticks later like any gap.
TEST_F(PartitionTest, TheDriftScanCorrectsAndReportsEachCountOnItsOwn) {
  start(dependency("db", 10, "critical = 0.5\nbatch = 0.2\n"));
  Dependency db = client_->dependency("db");
  Permit held = db.partition("batch").try_acquire();
  ASSERT_TRUE(held);
  const testing::LogCapture log;
  word("db").fetch_add(std::uint64_t{1} << 32);  // the critical field one high, the total right
  advance_ticks(2);
  EXPECT_EQ(word("db").load(), word_of(1, 1, 1));
  advance_ticks(1);  // the third tick with that gap
  EXPECT_EQ(word("db").load(), word_of(1, 0, 1));
  EXPECT_EQ(log.count("warning dependency db: partition field 1 off what processes hold by 1: corrected"), 1u)
      << log.text();
  EXPECT_EQ(log.count("warning dependency db:"), 1u) << log.text();
  EXPECT_EQ(loop_->permits_reclaimed(), 0u);
  word("db").fetch_add(shm::kAdmissionRelease);  // the total one short
  advance_ticks(2);
  EXPECT_EQ(word("db").load(), word_of(0, 0, 1));
  advance_ticks(1);
  EXPECT_EQ(word("db").load(), word_of(1, 0, 1));
  EXPECT_EQ(log.count("warning dependency db: in-flight count 1 short of what processes hold: restored"), 1u)
      << log.text();
  held.success();
  EXPECT_EQ(word("db").load(), 0u);
}

// A release after a correction that a stalled thread proved wrong takes
// the total below zero, and the word borrows across its fields: read field
// by field it is 2^32 - 1 calls over what is held, which would refuse every
// call until "given back", 4294967295 permits counted as reclaimed. Read
// modulo, as the clients' arithmetic is, it is one call short in the total
// and in the batch field: calls of either partition are admitted
// meanwhile, and the scan restores both counts three ticks later.
TEST_F(PartitionTest, ACountTakenBelowZeroIsRestoredWithWhatItBorrowed) {
  start(dependency("db", 10, "critical = 0.5\nbatch = 0.2\n"));
  Dependency db = client_->dependency("db");
  Permit held = db.partition("batch").try_acquire();
  ASSERT_TRUE(held);
  const testing::LogCapture log;
  word("db").fetch_sub(shm::admission_unit(2));  // the wrong correction
  held.success();                               // and the release that proves it wrong
  ASSERT_EQ(word("db").load(), word_of(0, 0, 0) - shm::admission_unit(2));
  EXPECT_EQ(db.inflight(), 0);  // not 2^32 - 1
  Permit batch = db.partition("batch").try_acquire();        // its field reads -1, not full
  Permit critical = db.partition("critical").try_acquire();  // the total reads -1, not over 10
  EXPECT_TRUE(batch);
  EXPECT_TRUE(critical);
  advance_ticks(3);
  EXPECT_EQ(word("db").load(), word_of(2, 1, 1));
  EXPECT_EQ(loop_->permits_reclaimed(), 0u);
  EXPECT_EQ(log.count("warning dependency db: in-flight count 1 short of what processes hold: restored"), 1u)
      << log.text();
  EXPECT_EQ(log.count("warning dependency db: partition field 2 off what processes hold by -1: corrected"), 1u)
      << log.text();
  EXPECT_EQ(log.count("warning dependency db:"), 2u) << log.text();
  batch.success();
  critical.success();
  EXPECT_EQ(word("db").load(), 0u);
}

// A correction wakes the queue only when it gave a permit back: a field
// restored (the word short of what is held) frees nothing.
TEST_F(PartitionTest, TheDriftScanWakesTheQueueOnlyForPermitsGivenBack) {
  start(dependency("db", 10, "critical = 0.5\nbatch = 0.2\n"));
  Dependency db = client_->dependency("db");
  Permit critical = db.partition("critical").try_acquire();
  Permit batch = db.partition("batch").try_acquire();
  ASSERT_TRUE(critical && batch);
  auto& futex = segment_->dependency(slot_of("db")).admission.futex;
  futex.store(shm::kFutexSleepers);  // a waiter may be asleep
  for (const std::uint32_t shift : {32, 48}) {
    word("db").fetch_sub(std::uint64_t{1} << shift);  // one field one short, the total right
    advance_ticks(3);
    ASSERT_EQ(word("db").load(), word_of(2, 1, 1));
    EXPECT_EQ(futex.load(), shm::kFutexSleepers) << "field at bit " << shift;
  }
  word("db").fetch_add(shm::kAdmissionAcquire);  // one permit no process holds
  advance_ticks(3);
  ASSERT_EQ(word("db").load(), word_of(2, 1, 1));
  EXPECT_EQ(futex.load(), shm::kFutexSleepers + 1);
  critical.success();
  batch.success();
}

// A child forked with the process table full goes standalone
// (AdmissionTest.AForkedChildWithNoProcessSlotGoesStandalone), and so do
// the partition handles it inherited: they admit in the child's own memory,
// counting nothing in the segment, and a permit of its parent's that it
// releases stays the parent's.
TEST_F(PartitionTest, AForkedChildWithNoProcessSlotAdmitsThroughItsPartitionHandlesStandalone) {
  start(dependency("db", 4, "critical = 0.5\nbatch = 0.25\n"));
  Dependency db = client_->dependency("db");
  Dependency critical = db.partition("critical");
  Permit inherited = critical.try_acquire();
  ASSERT_TRUE(inherited);
  const testing::FullProcessTable full(*segment_);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Step by step; the exit code names the first step that went wrong.
    if (client_->mode() != Client::Mode::kStandalone) std::_Exit(1);
    inherited.success();  // the parent's: gives back nothing
    std::vector<Permit> held;
    for (int i = 0; i < 10; ++i) {  // over the segment's limit of 4: standalone, no static limit
      held.push_back(critical.try_acquire());
      if (!held.back()) std::_Exit(2);
    }
    if (word("db").load() != word_of(1, 1, 0)) std::_Exit(3);  // the parent's permit only
    for (Permit& p : held) p.success();
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(word("db").load(), word_of(1, 1, 0));
  EXPECT_EQ(held_total("db"), word_of(1, 1, 0));  // held counts share the word's encoding
  inherited.success();
  EXPECT_EQ(word("db").load(), word_of(0, 0, 0));
  EXPECT_EQ(held_total("db"), 0u);
}

// Occupancy the sampler saw, in memory shared across fork.
struct Seen {
  std::atomic<std::uint32_t> max_total{0};
  std::atomic<std::uint32_t> max_batch_over_reserve{0};  // c_batch + max(c_critical, g_critical)
  std::atomic<std::uint32_t> max_capped{0};
  std::atomic<long> critical_refused{0};
  std::atomic<long> critical_admitted{0};
  std::atomic<long> batch_refused{0};
};

TEST_F(PartitionTest, ForkedProcessesHammeringTwoPartitionsKeepTheLimitCapsAndGuarantees) {
  // shared: limit 10, critical 0.5 (5), batch 0.2 (2), 3 to borrow.
  // capped: limit 10, critical 0.5, batch 0.3 hard-capped at 3.
  start(dependency("shared", 10, "critical = 0.5\nbatch = 0.2\n") +
        dependency("capped", 10, "critical = 0.5\nbatch = { share = 0.3, hard_cap = true }\n"));
  auto* seen = static_cast<Seen*>(
      ::mmap(nullptr, sizeof(Seen), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(seen, MAP_FAILED);
  new (seen) Seen();
  constexpr int kCritical = 4;  // each holds at most one: within critical's 5
  constexpr int kBatch = 3;     // each grabs all it can
  constexpr int kRounds = 3000;
  std::vector<pid_t> children;
  for (int i = 0; i < kCritical + kBatch; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      Client c(name_.str());
      for (const char* dep : {"shared", "capped"}) {
        Dependency d = c.dependency(dep);
        if (i < kCritical) {
          Dependency critical = d.partition("critical");
          for (int r = 0; r < kRounds; ++r) {
            Permit p = critical.try_acquire();
            if (!p) {
              seen->critical_refused.fetch_add(1);
              continue;
            }
            seen->critical_admitted.fetch_add(1);
            p.success();
          }
        } else {
          Dependency batch = d.partition("batch");
          for (int r = 0; r < kRounds / 10; ++r) {
            int reason = 0;
            auto held = take_all(batch, &reason);
            seen->batch_refused.fetch_add(1);
            if (reason != BH_REJECT_PARTITION && reason != BH_REJECT_LIMIT) std::_Exit(3);
          }
        }
      }
      std::_Exit(0);
    }
    ASSERT_GT(pid, 0);
    children.push_back(pid);
  }
  // Sample both words until every child has exited.
  auto& shared = word("shared");
  auto& capped = word("capped");
  long samples = 0;
  for (std::size_t exited = 0; exited < children.size();) {
    for (auto* w : {&shared, &capped}) {
      const std::uint64_t v = w->load();
      const std::uint32_t total = shm::admission_inflight(v);
      const std::uint32_t critical = shm::partition_inflight(v, 1);
      const std::uint32_t batch = shm::partition_inflight(v, 2);
      seen->max_total.store(std::max(seen->max_total.load(), total));
      seen->max_batch_over_reserve.store(std::max(seen->max_batch_over_reserve.load(), batch + std::max(critical, 5u)));
      if (w == &capped) seen->max_capped.store(std::max(seen->max_capped.load(), batch));
    }
    ++samples;
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      ++exited;
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    }
  }
  EXPECT_GT(samples, 0);
  EXPECT_LE(seen->max_total.load(), 10u);               // the limit, always
  EXPECT_LE(seen->max_batch_over_reserve.load(), 10u);  // batch never ate critical's reserve
  EXPECT_LE(seen->max_capped.load(), 3u);               // the hard cap, always
  EXPECT_EQ(seen->critical_refused.load(), 0);          // within its guarantee: always admitted
  EXPECT_EQ(seen->critical_admitted.load(), 2L * kCritical * kRounds);
  EXPECT_GT(seen->batch_refused.load(), 0);
  EXPECT_EQ(shared.load(), 0u);
  EXPECT_EQ(capped.load(), 0u);
  ::munmap(seen, sizeof(Seen));
}

}  // namespace
}  // namespace bulkhead
