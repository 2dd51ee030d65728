// bulkheadctl's library against segments the tests build with known
// counters: the readings, the derived rates and percentiles, the text and
// the JSON; that it opens read-only and never writes; and its errors. The
// last tests run the built binary for exit codes and messages.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pty.h>
#include <sched.h>
#include <termios.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <ctime>
#include <functional>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "shm/histogram.hpp"
#include "shm/partitions.hpp"
#include "shm/pid_namespace.hpp"
#include "shm/stats.hpp"
#include "shm/wait_queue.hpp"
#include "tests/support/children.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/json.hpp"
#include "tests/support/temp_segment.hpp"
#include "tools/ctl/json.hpp"
#include "tools/ctl/render.hpp"
#include "tools/ctl/snapshot.hpp"

namespace bulkhead::ctl {
namespace {

using testing::Json;
using testing::JsonParser;
using testing::TempSegmentName;

constexpr std::uint64_t kT0 = 1'000'000'000'000;  // ns, an arbitrary monotonic time
constexpr std::uint64_t kSecond = 1'000'000'000;

// The midpoint of the histogram bucket that holds `ns`, in ms: what a
// percentile of samples all equal to `ns` reads.
double bucket_mid_ms(std::uint64_t ns) {
  const std::uint32_t b = shm::histogram_bucket(ns);
  const std::uint64_t lo = shm::histogram_bucket_lower_ns(b);
  return static_cast<double>(lo + (shm::histogram_bucket_upper_ns(b) - lo) / 2) / 1e6;
}

// The whitespace-separated cells of the first line of `text` that starts
// with `prefix`.
std::vector<std::string> cells_of_line(const std::string& text, const std::string& prefix) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream in(line);
    std::vector<std::string> out;
    for (std::string c; in >> c;) out.push_back(c);
    return out;
  }
  return {};
}

// A segment with a "daemon" (this process), one attached process (also this
// one) and two dependencies whose counters the test sets.
class CtlSegment : public ::testing::Test {
 protected:
  void SetUp() override {
    shm::Header& h = segment_.header();
    h.daemon_pid.store(::getpid());
    h.daemon_start_time.store(shm::process_start_time(::getpid()).value());
    h.config_generation.store(3);
    h.metrics_port.store(9477);
    payments_ = shm::find_or_claim_dependency(segment_, "payments", 12, shm::kDependencyConfigured).index;
    recs_ = shm::find_or_claim_dependency(segment_, "recs", 25, shm::kDependencyShadow).index;
    process_ = shm::claim_process_slot(segment_).index;
  }

  // `n` successful calls of `latency_ns` each, on stripe `stripe`.
  void record_ok(std::uint32_t dep, std::uint32_t stripe, std::uint64_t n, std::uint64_t latency_ns) {
    shm::StatsStripe& s = segment_.stripe(dep, stripe);
    segment_.latency_histogram(dep, stripe).bucket[shm::histogram_bucket(latency_ns)] +=
        static_cast<std::uint32_t>(n);
    s.rtt_sum_ns += n * latency_ns;
  }
  void set_inflight(std::uint32_t dep, std::uint32_t n) {
    segment_.dependency(dep).admission.word.store((std::uint64_t{7} << 32) | n);
  }
  void heartbeat_at(std::uint64_t ns, std::uint64_t count = 42) {
    segment_.header().heartbeat.store(count);
    segment_.header().heartbeat_ns.store(ns);
  }
  Snapshot snapshot_at(std::uint64_t ns) const { return read_snapshot(segment_, ns); }

  // The standard scene: before at kT0, then over 2 s payments completes 200
  // ok calls of 4 ms, 10 dropped, 6 ignored and has 60 rejected; recs 30
  // shadow admissions and no completed call.
  Status standard_status(std::uint64_t heartbeat_age_ns = kSecond / 2) {
    record_ok(payments_, 0, 100, 2'000'000);  // before the interval
    segment_.stripe(payments_, 1).rejected += 5;
    Snapshot before = snapshot_at(kT0);
    record_ok(payments_, 0, 120, 4'000'000);
    record_ok(payments_, 2, 80, 4'000'000);
    segment_.stripe(payments_, 0).dropped += 10;
    segment_.stripe(payments_, 3).ignored += 6;
    segment_.stripe(payments_, 1).rejected += 60;
    segment_.stripe(recs_, 0).shadow_admitted += 30;
    // Payments: 14 calls failed, 6 refused by its breaker, now half open
    // with 2 trial calls left; recs' breaker is forced open by bulkheadctl.
    segment_.stripe(payments_, 1).failed += 14;
    segment_.stripe(payments_, 0).open_rejected += 6;
    segment_.dependency(payments_).control.breaker.store(shm::kBreakerHalfOpen);
    segment_.dependency(payments_).control.trials.store(shm::trials_word(4, 2));
    segment_.dependency(recs_).control.breaker.store(shm::kBreakerOpen | shm::kBreakerForced);
    segment_.dependency(recs_).control.breaker_override.store(shm::kOverrideOpen);
    // Payments lets 4 wait: 2 do, 8 were refused a place, 4 their deadline.
    segment_.dependency(payments_).control.max_queue.store(4);
    segment_.queue(payments_)[0].store(shm::queue_record(11, process_));
    segment_.queue(payments_)[3].store(shm::queue_record(12, process_));
    segment_.stripe(payments_, 2).queue_full += 8;
    segment_.stripe(payments_, 3).deadline_rejected += 4;
    set_inflight(payments_, 9);
    segment_.held(process_, payments_).store(3);
    heartbeat_at(kT0 + 2 * kSecond - heartbeat_age_ns);
    return derive_status(std::move(before), snapshot_at(kT0 + 2 * kSecond));
  }

  TempSegmentName name_{"ctl"};
  shm::Segment segment_ = shm::Segment::create(name_, testing::small_segment(16, 8, 4));
  std::uint32_t payments_ = 0, recs_ = 0, process_ = 0;
};

TEST_F(CtlSegment, SnapshotReadsDependenciesProcessesAndDaemon) {
  set_inflight(payments_, 4);
  segment_.held(process_, payments_).store(4);
  const Snapshot s = snapshot_at(kT0);
  ASSERT_EQ(s.dependencies.size(), 2u);
  const DependencyReading* p = s.find("payments");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->index, payments_);
  EXPECT_EQ(p->limit, 12u);
  EXPECT_EQ(p->inflight, 4u);  // the in-flight half of the admission word only
  EXPECT_TRUE(p->configured());
  EXPECT_FALSE(p->shadow());
  EXPECT_TRUE(s.find("recs")->shadow());
  EXPECT_EQ(s.find("nope"), nullptr);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].pid, ::getpid());
  EXPECT_EQ(s.processes[0].liveness, shm::Liveness::kAlive);
  ASSERT_EQ(s.processes[0].held.size(), 1u);
  EXPECT_EQ(s.processes[0].held[0].dependency, payments_);
  EXPECT_EQ(s.processes[0].held[0].permits, 4u);
  EXPECT_EQ(s.daemon.pid, ::getpid());
  EXPECT_EQ(s.daemon.config_generation, 3u);
  EXPECT_EQ(s.capacities, (shm::Capacities{16, 8, 4, 8}));
  EXPECT_EQ(s.dependency_slots_taken, 2u);
  EXPECT_EQ(s.process_slots_taken, 1u);
}

// A slot counts as taken from its claim on: one being claimed, or
// abandoned, is as unavailable to a new name as a ready one. The segment
// line says how many of each table are taken, and when one is full.
TEST_F(CtlSegment, SlotsTakenCountEveryClaimAndTheSegmentLineSaysWhenATableIsFull) {
  std::vector<std::uint32_t> free_slots;
  for (std::uint32_t i = 0; i < 16; ++i) {
    if (segment_.dependency(i).identity.tag.load() == shm::kSlotFree) free_slots.push_back(i);
  }
  ASSERT_EQ(free_slots.size(), 14u);
  segment_.dependency(free_slots[0]).identity.tag.store(shm::kSlotClaiming);
  segment_.dependency(free_slots[1]).identity.tag.store(shm::kSlotAbandoned);
  Snapshot s = snapshot_at(kT0);
  EXPECT_EQ(s.dependencies.size(), 2u);
  EXPECT_EQ(s.dependency_slots_taken, 4u);
  EXPECT_NE(status_text(derive_status(s, s)).find(", 4 of 16 dependency slots taken, 1 of 8 process slots, 4 "
                                                  "stripes\n"),
            std::string::npos)
      << status_text(derive_status(s, s));
  for (std::uint32_t p = 0; p < 7; ++p) shm::claim_process_slot(segment_);
  for (std::uint32_t i = 0; i < 12; ++i) shm::find_or_claim_dependency(segment_, "d" + std::to_string(i), 1, 0);
  EXPECT_THROW(shm::find_or_claim_dependency(segment_, "one-too-many", 1, 0), shm::SegmentError);
  s = snapshot_at(kT0);
  const std::string text = status_text(derive_status(s, s));
  EXPECT_NE(text.find("16 of 16 dependency slots taken (full), 8 of 8 process slots (full)"), std::string::npos)
      << text;
  const Json j = JsonParser::parse(status_json(derive_status(s, s)));
  EXPECT_EQ(j["segment"]["dependency_slots_taken"].number, 16);
  EXPECT_EQ(j["segment"]["process_slots_taken"].number, 8);
}

// A strict daemon's pattern takes a slot, and is no dependency to list.
// The daemon line shows the patterns it publishes (their slots flagged),
// so an operator sees why a strict client's name was claimed or refused:
// not one withdrawn by a reload, nor a dependency's slot with the flag.
TEST_F(CtlSegment, APatternsSlotIsTakenAndShownWhilePublishedButNotListed) {
  segment_.header().flags.store(shm::kHeaderStrict);
  heartbeat_at(kT0);
  shm::find_or_claim_pattern(segment_, "db-*");
  const std::uint32_t withdrawn = shm::find_or_claim_pattern(segment_, "cache-?").index;
  segment_.dependency(withdrawn).control.flags.store(0);
  shm::find_or_claim_pattern(segment_, "q[!x]");
  segment_.dependency(recs_).control.flags.fetch_or(shm::kDependencyPattern);
  const Snapshot s = snapshot_at(kT0);
  EXPECT_EQ(s.dependency_slots_taken, 5u);
  EXPECT_EQ(s.dependencies.size(), 2u);
  EXPECT_NE(s.find("payments"), nullptr);
  EXPECT_NE(s.find("recs"), nullptr);
  EXPECT_EQ(s.daemon.patterns, (std::vector<std::string>{"db-*", "q[!x]"}));
  const Status st = derive_status(s, s);
  const std::string text = status_text(st);
  EXPECT_NE(text.find(", metrics port 9477, strict (patterns db-* q[!x])\n"), std::string::npos) << text;
  const Json j = JsonParser::parse(status_json(st));
  ASSERT_EQ(j["daemon"]["patterns"].array.size(), 2u);
  EXPECT_EQ(j["daemon"]["patterns"][0].string, "db-*");
  EXPECT_EQ(j["daemon"]["patterns"][1].string, "q[!x]");

  // A daemon that publishes none: the line as before, an empty array.
  for (std::uint32_t i = 0; i < 16; ++i) segment_.dependency(i).control.flags.fetch_and(~shm::kDependencyPattern);
  const Status none = derive_status(snapshot_at(kT0), snapshot_at(kT0));
  EXPECT_NE(status_text(none).find(", metrics port 9477, strict\n"), std::string::npos) << status_text(none);
  EXPECT_TRUE(JsonParser::parse(status_json(none))["daemon"]["patterns"].array.empty());
}

// The segment line says whether the segment has all its memory in
// /dev/shm: a process whose first write to a page of one that has not
// finds /dev/shm full dies of SIGBUS (daemon.segment_reserve).
TEST_F(CtlSegment, TheSegmentLineSaysWhetherTheSegmentIsReserved) {
  Snapshot s = snapshot_at(kT0);
  EXPECT_EQ(s.reserved, s.size);
  std::string text = status_text(derive_status(s, s));
  char expected[64];
  std::snprintf(expected, sizeof expected, ", %.1f MiB reserved, 2 of 16 dependency slots",
                static_cast<double>(s.size) / (1 << 20));
  EXPECT_NE(text.find(expected), std::string::npos) << text;
  Json j = JsonParser::parse(status_json(derive_status(s, s)));
  EXPECT_EQ(j["segment"]["reserved_bytes"].number, j["segment"]["size_bytes"].number);

  TempSegmentName name("ctl");
  shm::CreateOptions sparse = testing::small_segment(256, 8, 4);
  sparse.reserve = false;
  const shm::Segment unreserved = shm::Segment::create(name, sparse);
  s = read_snapshot(unreserved, kT0);
  ASSERT_LT(s.reserved, s.size / 2);
  text = status_text(derive_status(s, s));
  std::snprintf(expected, sizeof expected, ", %.1f MiB, not reserved (%.1f MiB in memory), ",
                static_cast<double>(s.size) / (1 << 20), static_cast<double>(s.reserved) / (1 << 20));
  EXPECT_NE(text.find(expected), std::string::npos) << text;
  j = JsonParser::parse(status_json(derive_status(s, s)));
  EXPECT_EQ(j["segment"]["reserved_bytes"].number, static_cast<double>(s.reserved));
}

// The column orders rank the largest first, ties by name; p99 puts a
// dependency with no call in the interval last.
TEST_F(CtlSegment, StatusOrdersByAColumnLargestFirst) {
  Status st = standard_status();  // payments: 9 in flight, limit 12, calls; recs: none, limit 25
  const auto order = [&](StatusOrder o) {
    StatusOptions options;
    options.order = o;
    const Status sorted = derive_status(st.before, st.after, options);
    std::vector<std::string> names;
    for (const auto& d : sorted.dependencies) names.push_back(d.now.name);
    return names;
  };
  using Names = std::vector<std::string>;
  EXPECT_EQ(order(StatusOrder::kName), (Names{"payments", "recs"}));
  EXPECT_EQ(order(StatusOrder::kLimit), (Names{"recs", "payments"}));
  EXPECT_EQ(order(StatusOrder::kInflight), (Names{"payments", "recs"}));
  EXPECT_EQ(order(StatusOrder::kAdmitted), (Names{"payments", "recs"}));
  EXPECT_EQ(order(StatusOrder::kRejected), (Names{"payments", "recs"}));
  EXPECT_EQ(order(StatusOrder::kP99), (Names{"payments", "recs"}));
  // Slot order is the order read.
  const Names slots = order(StatusOrder::kSlot);
  EXPECT_EQ(slots, (payments_ < recs_ ? Names{"payments", "recs"} : Names{"recs", "payments"}));
  // Every order has a name that parses back to it.
  for (StatusOrder o : {StatusOrder::kSlot, StatusOrder::kName, StatusOrder::kLimit, StatusOrder::kInflight,
                        StatusOrder::kAdmitted, StatusOrder::kRejected, StatusOrder::kP99}) {
    EXPECT_EQ(parse_status_order(status_order_name(o)), o);
  }
  EXPECT_EQ(parse_status_order("bogus"), std::nullopt);
}

TEST_F(CtlSegment, AJunkNameCannotDriveTheTerminal) {
  // A client in the segment's group may write anything into a slot.
  shm::DependencyIdentity& id = segment_.dependency(recs_).identity;
  const char junk[] = "\x1b[2Jrecs";
  std::memcpy(id.name, junk, sizeof junk);
  id.name_length = sizeof junk - 1;
  const Snapshot s = snapshot_at(kT0);
  const DependencyReading* r = s.at_index(recs_);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->name, "??2Jrecs");
  EXPECT_FALSE(r->name_valid);
  EXPECT_TRUE(s.find("payments")->name_valid);
  const Status st = derive_status(s, s);
  EXPECT_EQ(status_text(st).find('\x1b'), std::string::npos);
  const Json j = JsonParser::parse(status_json(st));
  const Json& deps = j["dependencies"];
  const Json& junk_dep = deps[0]["slot"].number == recs_ ? deps[0] : deps[1];
  EXPECT_FALSE(junk_dep["name_valid"].boolean);
  EXPECT_EQ(junk_dep["name"].string, "??2Jrecs");
}

// A segment made anew under its name between the two readings (bulkheadd
// --recreate-segment): what they would show is one no longer in use, its
// daemon gone; they are taken again of the one under the name.
TEST_F(CtlSegment, ASampleSpanningASegmentMadeAnewIsOfTheNewOne) {
  shm::Segment seen = open_read_only(name_.str());
  std::optional<shm::Segment> remade;
  int waits = 0;
  const Status st = sample(
      seen,
      [&] {
        if (waits++ > 0) return;
        shm::Segment::remove(name_.str());
        remade.emplace(shm::Segment::create(name_, testing::small_segment(16, 8, 4)));
        shm::find_or_claim_dependency(*remade, "orders", 7, 0);
      },
      {});
  EXPECT_EQ(waits, 2);
  ASSERT_EQ(st.dependencies.size(), 1u);
  EXPECT_EQ(st.dependencies[0].now.name, "orders");
  EXPECT_EQ(st.before.find("payments"), nullptr);
  EXPECT_FALSE(segment_replaced(seen));
  EXPECT_NE(read_snapshot(seen, kT0).find("orders"), nullptr);

  // Removed, and none under the name: an error, as if it had been missing.
  try {
    sample(seen, [&] { shm::Segment::remove(name_.str()); }, {});
    ADD_FAILURE() << "sampled a segment removed meanwhile";
  } catch (const shm::SegmentError& e) {
    EXPECT_EQ(e.code(), ENOENT) << e.what();
  }
}

TEST_F(CtlSegment, RatesAndPercentilesComeFromTheIntervalOnly) {
  const Status st = standard_status();
  EXPECT_DOUBLE_EQ(st.interval_s, 2.0);
  ASSERT_EQ(st.dependencies.size(), 2u);
  const DependencyStatus& p = st.dependencies[0].now.name == "payments" ? st.dependencies[0] : st.dependencies[1];
  EXPECT_DOUBLE_EQ(p.admitted_per_s(), (200 + 10 + 6 + 14) / 2.0);  // failed calls were admitted too
  EXPECT_DOUBLE_EQ(p.rejected_limit_per_s(), 30.0);
  // Only the interval's 4 ms calls, not the earlier 2 ms ones.
  EXPECT_DOUBLE_EQ(p.interval_latency_ms(0.5).value(), bucket_mid_ms(4'000'000));
  EXPECT_DOUBLE_EQ(p.interval_latency_ms(0.99).value(), bucket_mid_ms(4'000'000));
  // Since creation: 100 at 2 ms and 200 at 4 ms, so the median is 4 ms and
  // the 30th percentile 2 ms.
  EXPECT_DOUBLE_EQ(p.total_latency_ms(0.3).value(), bucket_mid_ms(2'000'000));
  const DependencyStatus& r = st.dependencies[0].now.name == "recs" ? st.dependencies[0] : st.dependencies[1];
  EXPECT_DOUBLE_EQ(r.shadow_admitted_per_s(), 15.0);
  EXPECT_FALSE(r.interval_latency_ms(0.5).has_value());  // no call: no number
}

TEST_F(CtlSegment, DaemonIsRunningStaleOrNone) {
  EXPECT_EQ(standard_status(kSecond / 2).daemon_state, DaemonState::kRunning);
  heartbeat_at(kT0 - 10 * kSecond);
  EXPECT_EQ(derive_status(snapshot_at(kT0), snapshot_at(kT0)).daemon_state, DaemonState::kStale);
  EXPECT_NEAR(derive_status(snapshot_at(kT0), snapshot_at(kT0)).heartbeat_age_s.value(), 10.0, 1e-9);
  // A pid that is gone.
  const pid_t child = ::fork();
  if (child == 0) std::_Exit(0);
  ::waitpid(child, nullptr, 0);
  segment_.header().daemon_pid.store(child);
  EXPECT_EQ(derive_status(snapshot_at(kT0), snapshot_at(kT0)).daemon_state, DaemonState::kNone);
  // Stopped cleanly: pid 0.
  segment_.header().daemon_pid.store(0);
  const Status st = derive_status(snapshot_at(kT0), snapshot_at(kT0));
  EXPECT_EQ(st.daemon_state, DaemonState::kNone);
  EXPECT_NE(status_text(st).find("daemon: none (stopped)"), std::string::npos) << status_text(st);
}

TEST_F(CtlSegment, ADaemonWithoutAMetricsEndpointShowsNoPort) {
  segment_.header().metrics_port.store(0);
  const Status st = standard_status();
  const std::string text = status_text(st);
  EXPECT_NE(text.find("tick 42, config generation 3\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("metrics port"), std::string::npos) << text;
  EXPECT_TRUE(JsonParser::parse(status_json(st))["daemon"]["metrics_port"].is_null());
}

TEST_F(CtlSegment, StatusTextIsATableWithOneRowPerDependency) {
  const std::string text = status_text(standard_status());
  SCOPED_TRACE(text);
  EXPECT_NE(text.find("segment /dev/shm/" + name_.str() + ": ABI "), std::string::npos);
  EXPECT_NE(text.find("daemon: pid " + std::to_string(::getpid()) +
                      ", running, heartbeat 0.50 s ago, tick 42, config generation 3, metrics port 9477\n"),
            std::string::npos);
  EXPECT_NE(text.find("processes: 1 attached, 1 alive"), std::string::npos);
  EXPECT_NE(text.find("over the last 2.00 s"), std::string::npos);
  // The header row, then the rows: cells in the columns' order.
  std::istringstream lines(text);
  std::string line;
  std::vector<std::string> table;
  bool in_table = false;
  while (std::getline(lines, line)) {
    if (line.rfind("dependency  ", 0) == 0) in_table = true;
    if (in_table) table.push_back(line);
  }
  ASSERT_EQ(table.size(), 3u);
  auto cells = [](const std::string& l) {
    std::istringstream in(l);
    std::vector<std::string> out;
    for (std::string c; in >> c;) out.push_back(c);
    return out;
  };
  std::vector<std::string> headers;
  for (const StatusColumn& c : status_columns()) headers.emplace_back(c.header);
  EXPECT_EQ(cells(table[0]), headers);
  char p50[16];
  std::snprintf(p50, sizeof p50, "%.2f", bucket_mid_ms(4'000'000));
  EXPECT_EQ(cells(table[1]), (std::vector<std::string>{"payments", "12", "9", "2/4", p50, p50, "115", "30",
                                                       "4", "2", "3", "7", "0", "own", "enforce", "half_open"}));
  EXPECT_EQ(cells(table[2]), (std::vector<std::string>{"recs", "25", "0", "0/0", "-", "-", "0", "0", "0", "0",
                                                       "0", "0", "15", "defaults", "shadow", "open*"}));
  // Columns line up: every row is as wide as the header up to the last
  // right-aligned column.
  EXPECT_EQ(table[1].find("enforce"), table[0].find("mode"));
  EXPECT_EQ(table[1].find("half_open"), table[0].find("breaker"));
}

TEST_F(CtlSegment, StatusJsonHasTheDocumentedSchemaAndNumbers) {
  const Status st = standard_status();
  const Json j = JsonParser::parse(status_json(st));
  EXPECT_EQ(j["schema_version"].number, kJsonSchemaVersion);
  EXPECT_EQ(j["kind"].string, "status");
  EXPECT_EQ(j["segment"]["name"].string, name_.str());
  EXPECT_EQ(j["segment"]["abi_major"].number, shm::kAbiMajor);
  EXPECT_EQ(j["segment"]["max_dependencies"].number, 16);
  EXPECT_EQ(j["daemon"]["state"].string, "running");
  EXPECT_EQ(j["daemon"]["pid"].number, ::getpid());
  EXPECT_EQ(j["daemon"]["heartbeat"].number, 42);
  EXPECT_DOUBLE_EQ(j["daemon"]["heartbeat_age_s"].number, 0.5);
  EXPECT_EQ(j["daemon"]["config_generation"].number, 3);
  EXPECT_EQ(j["daemon"]["metrics_port"].number, 9477);
  EXPECT_EQ(j["processes"]["attached"].number, 1);
  EXPECT_EQ(j["processes"]["alive"].number, 1);
  EXPECT_DOUBLE_EQ(j["interval_s"].number, 2.0);
  const Json& deps = j["dependencies"];
  ASSERT_EQ(deps.array.size(), 2u);
  const Json& p = deps[0]["name"].string == "payments" ? deps[0] : deps[1];
  const Json& r = deps[0]["name"].string == "recs" ? deps[0] : deps[1];
  EXPECT_EQ(p["slot"].number, payments_);
  EXPECT_EQ(p["limit"].number, 12);
  EXPECT_EQ(p["inflight"].number, 9);
  EXPECT_TRUE(p["configured"].boolean);
  EXPECT_FALSE(p["shadow"].boolean);
  EXPECT_DOUBLE_EQ(p["per_s"]["admitted"].number, 115);
  EXPECT_DOUBLE_EQ(p["per_s"]["rejected"]["limit"].number, 30);
  EXPECT_DOUBLE_EQ(p["per_s"]["rejected"]["open_circuit"].number, 3);
  EXPECT_DOUBLE_EQ(p["per_s"]["failed"].number, 7);
  EXPECT_EQ(p["breaker"]["state"].string, "half_open");
  EXPECT_FALSE(p["breaker"]["forced"].boolean);
  EXPECT_EQ(p["breaker"]["override"].string, "auto");
  EXPECT_EQ(p["breaker"]["trials_left"].number, 2);
  EXPECT_EQ(r["breaker"]["state"].string, "open");
  EXPECT_TRUE(r["breaker"]["forced"].boolean);
  EXPECT_EQ(r["breaker"]["override"].string, "open");
  EXPECT_DOUBLE_EQ(p["per_s"]["shadow_admitted"].number, 0);
  EXPECT_EQ(p["latency_ms"]["samples"].number, 200);
  EXPECT_NEAR(p["latency_ms"]["p50"].number, bucket_mid_ms(4'000'000), 0.0005);
  EXPECT_NEAR(p["latency_ms"]["p99"].number, bucket_mid_ms(4'000'000), 0.0005);
  EXPECT_TRUE(r["shadow"].boolean);
  EXPECT_DOUBLE_EQ(r["per_s"]["shadow_admitted"].number, 15);
  EXPECT_TRUE(r["latency_ms"]["p50"].is_null());
  EXPECT_EQ(r["latency_ms"]["samples"].number, 0);
}

TEST_F(CtlSegment, StatusJsonSaysWhenThereIsNoDaemon) {
  segment_.header().daemon_pid.store(0);
  const Json j = JsonParser::parse(status_json(derive_status(snapshot_at(kT0), snapshot_at(kT0 + kSecond))));
  EXPECT_EQ(j["daemon"]["state"].string, "none");
  EXPECT_TRUE(j["daemon"]["pid"].is_null());
  EXPECT_TRUE(j["daemon"]["heartbeat_age_s"].is_null());  // it never ticked
}

TEST_F(CtlSegment, GetShowsPartitions) {
  // What the daemon publishes for critical = 0.5, batch = { share = 0.2,
  // hard_cap = true } at limit 12, with 1 unnamed, 4 critical and 2 batch
  // calls in flight.
  shm::DependencySlot& slot = segment_.dependency(payments_);
  slot.partitions.rule.store(shm::partition_rule(12, 0, 6, 2));
  const auto critical = shm::pack_partition_name("critical");
  const auto batch = shm::pack_partition_name("batch");
  slot.partitions.names[0][0].store(critical.words[0]);
  slot.partitions.names[0][1].store(critical.words[1]);
  slot.partitions.names[1][0].store(batch.words[0]);
  slot.partitions.names[1][1].store(batch.words[1]);
  slot.partitions.shape.store(std::uint64_t{1} << 32 | 0b110 << 8 | 0b100);
  slot.control.flags.fetch_or(shm::kDependencyPartitioned);
  slot.admission.word.store(7 | std::uint64_t{4} << 32 | std::uint64_t{2} << 48);
  segment_.stripe(payments_, 1).partition_rejected[2] += 9;
  const Status st = derive_status(snapshot_at(kT0), snapshot_at(kT0 + kSecond));
  const DependencyStatus& p = st.dependencies[0].now.name == "payments" ? st.dependencies[0] : st.dependencies[1];
  const Json j = JsonParser::parse(dependency_json(st, p));
  const Json& parts = j["dependency"]["partitions"];
  ASSERT_EQ(parts.array.size(), 3u);
  EXPECT_EQ(parts[0]["name"].string, "default");
  EXPECT_EQ(parts[0]["inflight"].number, 1);
  EXPECT_EQ(parts[1]["name"].string, "critical");
  EXPECT_EQ(parts[1]["guaranteed"].number, 6);
  EXPECT_EQ(parts[1]["inflight"].number, 4);
  EXPECT_EQ(parts[2]["name"].string, "batch");
  EXPECT_TRUE(parts[2]["hard_cap"].boolean);
  EXPECT_EQ(parts[2]["rejected"].number, 9);
  const std::string text = dependency_text(st, p);
  SCOPED_TRACE(text);
  EXPECT_EQ(cells_of_line(text, "  batch"), (std::vector<std::string>{"batch", "2", "(hard", "cap)", "2", "9"}));
  // Without partitions: an empty array, no table.
  const DependencyStatus& r = st.dependencies[0].now.name == "recs" ? st.dependencies[0] : st.dependencies[1];
  EXPECT_TRUE(JsonParser::parse(dependency_json(st, r))["dependency"]["partitions"].array.empty());
  EXPECT_EQ(dependency_text(st, r).find("partitions"), std::string::npos);
}

TEST_F(CtlSegment, GetShowsEveryCounterPercentilesAndHolders) {
  const Status st = standard_status();
  const DependencyStatus& p = st.dependencies[0].now.name == "payments" ? st.dependencies[0] : st.dependencies[1];
  const Json j = JsonParser::parse(dependency_json(st, p));
  EXPECT_EQ(j["kind"].string, "dependency");
  const Json& d = j["dependency"];
  EXPECT_EQ(d["name"].string, "payments");
  EXPECT_EQ(d["counters"]["success"].number, 300);
  EXPECT_EQ(d["counters"]["dropped"].number, 10);
  EXPECT_EQ(d["counters"]["ignored"].number, 6);
  EXPECT_EQ(d["counters"]["rejected"]["limit"].number, 65);
  EXPECT_EQ(d["counters"]["failed"].number, 14);
  EXPECT_EQ(d["counters"]["rejected"]["open_circuit"].number, 6);
  EXPECT_EQ(d["breaker"]["state"].string, "half_open");
  EXPECT_EQ(d["counters"]["shadow_admitted"].number, 0);
  EXPECT_EQ(d["counters"]["latency_sum_ns"].number, 100 * 2e6 + 200 * 4e6);
  EXPECT_DOUBLE_EQ(d["per_s"]["success"].number, 100);
  EXPECT_DOUBLE_EQ(d["per_s"]["dropped"].number, 5);
  EXPECT_DOUBLE_EQ(d["per_s"]["ignored"].number, 3);
  EXPECT_DOUBLE_EQ(d["per_s"]["rejected"]["limit"].number, 30);
  const Json& interval = d["latency_ms"]["interval"];
  EXPECT_EQ(interval["samples"].number, 200);
  for (const char* q : {"p50", "p90", "p99", "p999"}) {
    EXPECT_NEAR(interval[q].number, bucket_mid_ms(4'000'000), 0.0005) << q;
  }
  EXPECT_NEAR(interval["mean"].number, 4.0, 0.0005);
  const Json& total = d["latency_ms"]["since_created"];
  EXPECT_EQ(total["samples"].number, 300);
  EXPECT_NEAR(total["p50"].number, bucket_mid_ms(4'000'000), 0.0005);
  EXPECT_NEAR(total["mean"].number, (100 * 2.0 + 200 * 4.0) / 300, 0.0005);
  ASSERT_EQ(d["held_by"].array.size(), 1u);
  EXPECT_EQ(d["held_by"][0]["pid"].number, ::getpid());
  EXPECT_EQ(d["held_by"][0]["permits"].number, 3);

  const std::string text = dependency_text(st, p);
  SCOPED_TRACE(text);
  EXPECT_NE(text.find("dependency payments (slot " + std::to_string(payments_) + ")"), std::string::npos);
  EXPECT_NE(text.find("limit       12"), std::string::npos);
  EXPECT_EQ(cells_of_line(text, "  rejected: limit"),
            (std::vector<std::string>{"rejected:", "limit", "65", "30"}));
  EXPECT_EQ(cells_of_line(text, "  success"), (std::vector<std::string>{"success", "300", "100"}));
  EXPECT_EQ(cells_of_line(text, "  failed"), (std::vector<std::string>{"failed", "14", "7"}));
  EXPECT_NE(text.find("breaker     half_open; bulkheadctl override: auto; 2 trial call(s) left"),
            std::string::npos);
  EXPECT_NE(text.find("pid " + std::to_string(::getpid()) + " (slot " + std::to_string(process_) + ", alive): 3"),
            std::string::npos);
}

// An operator's pin shows while it holds at the second reading: a "*" on
// the limit, what and how long in `get`, `pin` in the JSON; one whose time
// is up shows nowhere, though the daemon has not cleared it yet.
TEST_F(CtlSegment, APinShowsWhileItHolds) {
  const std::uint64_t second_reading_s = (kT0 + 2 * kSecond) / kSecond;
  segment_.dependency(recs_).control.limit_pin.store(shm::pin_word(25, second_reading_s + 150));
  segment_.dependency(payments_).control.limit_pin.store(shm::pin_word(3, second_reading_s));
  const Status st = standard_status();
  const std::string text = status_text(st);
  EXPECT_EQ(cells_of_line(text, "recs ").at(1), "25*") << text;
  EXPECT_EQ(cells_of_line(text, "payments ").at(1), "12") << text;

  const Json j = JsonParser::parse(status_json(st));
  for (const Json& d : j["dependencies"].array) {
    if (d["name"].string == "recs") {
      EXPECT_EQ(d["pin"]["limit"].number, 25);
      EXPECT_EQ(d["pin"]["seconds_left"].number, 150);
    } else {
      EXPECT_TRUE(d["pin"].is_null());
    }
  }
  const DependencyStatus& r = st.dependencies[0].now.name == "recs" ? st.dependencies[0] : st.dependencies[1];
  const std::string get = dependency_text(st, r);
  EXPECT_NE(get.find("  limit       25* (pinned by an operator at 25, 2 min 30 s left; `bulkheadctl --segment " +
                     name_.str() + " pin recs off` ends it)\n"),
            std::string::npos)
      << get;
  Status on_default = st;  // the segment bulkheadctl reads without --segment
  on_default.after.default_segment = true;
  const std::string plain = dependency_text(on_default, r);
  EXPECT_NE(plain.find("; `bulkheadctl pin recs off` ends it)\n"), std::string::npos) << plain;
  EXPECT_EQ(JsonParser::parse(dependency_json(st, r))["dependency"]["pin"]["limit"].number, 25);

  // A word ending further away than bulkheadctl writes is junk: it pins
  // nothing (the daemon clears it), whatever it says.
  segment_.dependency(payments_).control.limit_pin.store(
      shm::pin_word(9, second_reading_s + shm::kMaxPinSeconds + 100));
  const Status junk = standard_status();
  EXPECT_EQ(cells_of_line(status_text(junk), "payments ").at(1), "12");
  const Json junk_json = JsonParser::parse(status_json(junk));
  for (const Json& d : junk_json["dependencies"].array) {
    if (d["name"].string == "payments") {
      EXPECT_TRUE(d["pin"].is_null());
    }
  }
}

TEST(DescribeDuration, SaysSecondsMinutesHoursAndDays) {
  EXPECT_EQ(describe_duration(0), "0 s");
  EXPECT_EQ(describe_duration(90), "90 s");
  EXPECT_EQ(describe_duration(119), "119 s");
  EXPECT_EQ(describe_duration(120), "2 min");
  EXPECT_EQ(describe_duration(600), "10 min");
  EXPECT_EQ(describe_duration(150), "2 min 30 s");
  EXPECT_EQ(describe_duration(5400), "1 h 30 min");
  EXPECT_EQ(describe_duration(7 * 86400 + 3600), "7 d 1 h");
}

// A process of another pid namespace (a container) recorded pid 1, its
// number there: shown alive, with its pid here and its namespace, as the
// daemon finds it; dead once it is gone.
TEST_F(CtlSegment, AProcessOfAnotherPidNamespaceIsShownWithItsPidHere) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
  testing::ChildInPidNamespace child([&] {
    segment_.held(shm::claim_process_slot(segment_).index, recs_).store(3);
    return true;
  });
  ASSERT_TRUE(child.ok());
  struct stat ns {};
  ASSERT_EQ(::stat(("/proc/" + std::to_string(child.pid()) + "/ns/pid").c_str(), &ns), 0);

  Snapshot s = snapshot_at(kT0);
  Json j = JsonParser::parse(processes_json(s));
  ASSERT_EQ(j["processes"].array.size(), 2u);
  EXPECT_TRUE(j["processes"][0]["pid_namespace"].is_null());  // this test's process
  EXPECT_EQ(j["processes"][0]["host_pid"].number, ::getpid());
  const Json& contained = j["processes"][1];
  EXPECT_EQ(contained["pid"].number, 1);
  EXPECT_EQ(contained["pid_namespace"].number, static_cast<double>(ns.st_ino));
  EXPECT_EQ(contained["host_pid"].number, child.pid());
  EXPECT_EQ(contained["state"].string, "alive");
  std::string text = processes_text(s);
  EXPECT_NE(text.find(std::to_string(child.pid()) + " (1 in pid:[" + std::to_string(ns.st_ino) + "])"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("alive  recs=3"), std::string::npos) << text;

  child.kill();
  s = snapshot_at(kT0);
  j = JsonParser::parse(processes_json(s));
  ASSERT_EQ(j["processes"].array.size(), 2u);
  EXPECT_TRUE(j["processes"][1]["host_pid"].is_null());
  // Gone with its namespace: certain from the host's namespace, which
  // sees every other (a container's may not).
  if (shm::own_pid_namespace().inode == shm::kInitialPidNamespaceInode) {
    EXPECT_EQ(j["processes"][1]["state"].string, "dead");
  }
  text = processes_text(s);
  EXPECT_NE(text.find("? (1 in pid:[" + std::to_string(ns.st_ino) + "])"), std::string::npos) << text;
}

// The daemon in a container records pid 1, its number there: shown
// running, with its pid here and its namespace; gone once it is.
TEST_F(CtlSegment, ADaemonOfAnotherPidNamespaceIsShownRunningWithItsPidHere) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
  testing::ChildInPidNamespace daemon([&] {
    shm::publish_daemon(segment_.header());
    return true;
  });
  ASSERT_TRUE(daemon.ok());
  const std::string ns = std::to_string(segment_.header().daemon_pid_ns_inode.load());
  Status st = standard_status(kSecond / 2);
  EXPECT_EQ(st.daemon_state, DaemonState::kRunning);
  EXPECT_NE(status_text(st).find("daemon: pid " + std::to_string(daemon.pid()) + " (1 in pid:[" + ns +
                                 "]), running"),
            std::string::npos)
      << status_text(st);
  Json j = JsonParser::parse(status_json(st));
  EXPECT_EQ(j["daemon"]["pid"].number, 1);
  EXPECT_EQ(j["daemon"]["host_pid"].number, daemon.pid());
  EXPECT_EQ(std::to_string(static_cast<std::uint64_t>(j["daemon"]["pid_namespace"].number)), ns);

  daemon.kill();
  st = standard_status(kSecond / 2);
  if (shm::own_pid_namespace().inode == shm::kInitialPidNamespaceInode) {
    EXPECT_EQ(st.daemon_state, DaemonState::kNone);
    EXPECT_NE(status_text(st).find("daemon: none (pid ? (1 in pid:[" + ns + "]) is gone)"), std::string::npos)
        << status_text(st);
  }
}

// A daemon of ABI 4.3 or older that adopted the segment after a daemon in
// a container was killed leaves that one's namespace in the header: it is
// shown running, a process of this namespace, not gone from that one.
TEST_F(CtlSegment, AnOlderDaemonUnderAnotherDaemonsNamespaceIsShownRunning) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
  {
    testing::ChildInPidNamespace daemon([&] {
      shm::publish_daemon(segment_.header());
      return true;
    });
    ASSERT_TRUE(daemon.ok());
    daemon.kill();
  }
  ASSERT_NE(segment_.header().daemon_pid_ns_inode.load(), 0u);
  segment_.header().daemon_start_time.store(shm::own_start_time().value_or(0));
  segment_.header().daemon_pid.store(::getpid());
  const Status st = standard_status(kSecond / 2);
  EXPECT_EQ(st.daemon_state, DaemonState::kRunning);
  EXPECT_NE(status_text(st).find("daemon: pid " + std::to_string(::getpid()) + ", running"), std::string::npos)
      << status_text(st);
  const Json j = JsonParser::parse(status_json(st));
  EXPECT_TRUE(j["daemon"]["pid_namespace"].is_null());
  EXPECT_EQ(j["daemon"]["host_pid"].number, ::getpid());
}

// A client of ABI 4.2 or older in a slot that names a gone namespace (its
// last process's, left by a daemon of ABI 4.2 or older): alive, here.
TEST_F(CtlSegment, AnOlderClientUnderAGoneNamespaceIsShownAliveHere) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
  shm::PidNamespace gone;
  {
    testing::ChildInPidNamespace contained([] { return true; });
    ASSERT_TRUE(contained.ok());
    struct stat ns {};
    ASSERT_EQ(::stat(("/proc/" + std::to_string(contained.pid()) + "/ns/pid").c_str(), &ns), 0);
    gone = {ns.st_dev, ns.st_ino};
  }
  shm::ProcessIdentity& id = segment_.process(process_).identity;
  id.pid_ns_device.store(gone.device);
  id.pid_ns_inode.store(gone.inode);
  const Snapshot s = snapshot_at(kT0);
  const Json j = JsonParser::parse(processes_json(s));
  ASSERT_GE(j["processes"].array.size(), 1u);
  EXPECT_EQ(j["processes"][0]["state"].string, "alive");
  EXPECT_TRUE(j["processes"][0]["pid_namespace"].is_null());
  EXPECT_EQ(j["processes"][0]["host_pid"].number, ::getpid());
}

TEST_F(CtlSegment, ProcessesListPidStartStateAndPermits) {
  segment_.held(process_, payments_).store(2);
  segment_.held(process_, recs_).store(5);
  // A second slot whose process is gone.
  const pid_t child = ::fork();
  if (child == 0) std::_Exit(0);
  ::waitpid(child, nullptr, 0);
  const std::uint32_t dead = shm::claim_process_slot(segment_).index;
  segment_.process(dead).identity.pid.store(child);
  segment_.held(dead, recs_).store(1);

  const Snapshot s = snapshot_at(kT0);
  const Json j = JsonParser::parse(processes_json(s));
  EXPECT_EQ(j["kind"].string, "processes");
  ASSERT_EQ(j["processes"].array.size(), 2u);
  const Json& me = j["processes"][0];
  EXPECT_EQ(me["pid"].number, ::getpid());
  EXPECT_EQ(me["state"].string, "alive");
  EXPECT_EQ(me["start_time_ticks"].number, shm::process_start_time(::getpid()).value());
  EXPECT_EQ(me["started_utc"].string, start_time_utc(s, shm::process_start_time(::getpid()).value()));
  EXPECT_EQ(me["started_utc"].string.size(), std::string("2026-11-30T06:40:12Z").size());
  // This test's process started moments ago: dated from the boot time, its
  // start is within a day of now (from a wrong boot time, years off).
  std::tm started{};
  ASSERT_NE(::strptime(me["started_utc"].string.c_str(), "%Y-%m-%dT%H:%M:%SZ", &started), nullptr);
  EXPECT_LT(std::abs(::timegm(&started) - std::time(nullptr)), 86'400) << me["started_utc"].string;
  // A slot is a client's to write: a start after now is junk, shown as unknown.
  EXPECT_EQ(start_time_utc(s, UINT64_MAX), "?");
  EXPECT_NE(start_time_utc(s, static_cast<std::uint64_t>(::sysconf(_SC_CLK_TCK))), "?");  // 1 s after boot
  ASSERT_EQ(me["held"].array.size(), 2u);
  EXPECT_EQ(me["held"][0]["dependency"].string, payments_ < recs_ ? "payments" : "recs");
  const Json& gone = j["processes"][1];
  EXPECT_EQ(gone["pid"].number, child);
  EXPECT_EQ(gone["state"].string, "dead");
  EXPECT_EQ(gone["held"][0]["dependency"].string, "recs");
  EXPECT_EQ(gone["held"][0]["permits"].number, 1);

  const std::string text = processes_text(s);
  SCOPED_TRACE(text);
  EXPECT_NE(text.find("2 attached processes"), std::string::npos);
  EXPECT_NE(text.find(std::to_string(child) + "  " + start_time_utc(s, segment_.process(dead).identity.start_time) +
                      "  -     dead   recs=1"),
            std::string::npos);
}

// A slot's liveness lock: none recorded (a client of ABI 4.4, or one
// claimed by hand as here), held, or gone while its pid lives (it exec'd:
// the daemon frees the slot).
TEST_F(CtlSegment, ProcessesShowTheirLivenessLock) {
  const shm::ProcessClaim claim = shm::claim_process_slot(segment_);
  std::optional<shm::LivenessLock> lock(std::in_place, segment_, claim);
  ASSERT_TRUE(lock->held());
  const auto lock_of = [&](std::uint32_t slot) {
    const Json j = JsonParser::parse(processes_json(snapshot_at(kT0)));
    for (const Json& p : j["processes"].array) {
      if (p["slot"].number != slot) continue;
      return p["liveness_lock"].is_null() ? std::string("null") : p["liveness_lock"].string;
    }
    return std::string("absent");
  };
  EXPECT_EQ(lock_of(process_), "null");
  EXPECT_EQ(lock_of(claim.index), "held");
  std::string text = processes_text(snapshot_at(kT0));
  EXPECT_NE(text.find("lock  state"), std::string::npos) << text;
  EXPECT_NE(text.find("held  alive"), std::string::npos) << text;
  lock.reset();
  EXPECT_EQ(lock_of(claim.index), "gone");
  text = processes_text(snapshot_at(kT0));
  EXPECT_NE(text.find("gone  alive"), std::string::npos) << text;
}

TEST(JsonWriter, EscapesStringsAndWritesNullForMissingNumbers) {
  JsonWriter j;
  j.begin_object().key("s").value("a\"b\\c\n\x01\x1f ~").key("n").value(std::optional<double>{});
  j.key("d").value(1.5).key("i").value(std::int64_t{-3}).key("a").begin_array().value(true).null().end_array();
  j.end_object();
  // Controls escaped, printable characters (the space first) as they are.
  EXPECT_EQ(j.str(),
            "{\"s\":\"a\\\"b\\\\c\\n\\u0001\\u001f ~\",\"n\":null,\"d\":1.5,\"i\":-3,\"a\":[true,null]}\n");
  const Json parsed = JsonParser::parse(j.str());
  EXPECT_EQ(parsed["s"].string, "a\"b\\c\n\x01\x1f ~");
}

// --- Read-only -------------------------------------------------------------

std::vector<char> bytes_of(const shm::Segment& s) {
  const char* base = reinterpret_cast<const char*>(&s.header());
  return {base, base + s.size()};
}

// The permissions ("r--s", "rw-s") of the mapping that holds `address`.
std::string mapping_permissions(const void* address) {
  std::ifstream maps("/proc/self/maps");
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  for (std::string line; std::getline(maps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo <= a && a < hi) return perms;
  }
  return "";
}

TEST_F(CtlSegment, EverythingReadsWithoutWritingAByte) {
  standard_status();
  const std::vector<char> before = bytes_of(segment_);
  const shm::Segment ro = open_read_only(name_);
  EXPECT_EQ(mapping_permissions(&ro.header()), "r--s");  // PROT_READ only: a store faults
  const Status st = derive_status(read_snapshot(ro, kT0), read_snapshot(ro, kT0 + kSecond));
  status_text(st);
  status_json(st);
  for (const DependencyStatus& d : st.dependencies) {
    dependency_text(st, d);
    dependency_json(st, d);
  }
  processes_text(st.after);
  processes_json(st.after);
  EXPECT_TRUE(bytes_of(segment_) == before);
}

// bulkheadctl in a time namespace of its own (unshare --time): /proc/stat
// shows it the boot time shifted by its boottime offset, while every start
// time in the segment is the host's: it dates them as it does outside.
TEST_F(CtlSegment, StartTimesAreDatedAsOutsideFromATimeNamespace) {
  const std::uint64_t start = shm::own_start_time().value_or(0);
  const std::string outside = start_time_utc(snapshot_at(kT0), start);
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t middle = ::fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    char seen[64] = "";  // empty: no time namespace here
    std::FILE* offsets = nullptr;
    if (::unshare(CLONE_NEWTIME) == 0 && (offsets = std::fopen("/proc/self/timens_offsets", "we")) != nullptr) {
      const bool set = std::fprintf(offsets, "boottime 86400 0\n") > 0;  // a day ahead
      if (std::fclose(offsets) == 0 && set) {
        const pid_t inner = ::fork();  // the first child of the caller's is in the namespace
        if (inner == 0) {
          std::snprintf(seen, sizeof seen, "%s", start_time_utc(snapshot_at(kT0), start).c_str());
          (void)!::write(report[1], seen, sizeof seen);
          std::_Exit(0);
        }
        ::waitpid(inner, nullptr, 0);
        std::_Exit(0);
      }
    }
    (void)!::write(report[1], seen, sizeof seen);
    std::_Exit(0);
  }
  ::close(report[1]);
  char seen[64] = "";
  const bool read = ::read(report[0], seen, sizeof seen) == sizeof seen;
  ::close(report[0]);
  ::waitpid(middle, nullptr, 0);
  ASSERT_TRUE(read);
  if (seen[0] == '\0') GTEST_SKIP() << "no time namespace here: needs root and a kernel with CONFIG_TIME_NS";
  EXPECT_NE(outside, "?");
  EXPECT_EQ(std::string(seen), outside);
}

TEST_F(CtlSegment, AWriteThroughTheReadOnlyMappingFaults) {
  const std::uint64_t heartbeat = segment_.header().heartbeat.load();
  const pid_t child = ::fork();
  if (child == 0) {
    const shm::Segment ro = open_read_only(name_);
    // What a bug in bulkheadctl would do: it must not reach the segment.
    const_cast<shm::Header&>(ro.header()).heartbeat.store(heartbeat + 1000);
    std::_Exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the store went through";
  // A fault kills it (a sanitizer's handler exits with its own code
  // instead); an exception, from the open, ends it with the guard's.
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == testing::kChildLeftItsBody) << "it never stored";
  EXPECT_EQ(segment_.header().heartbeat.load(), heartbeat);
}

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

// Runs body() in a child process that is not root: as root the child drops
// to nobody:nogroup (root would bypass the file permissions under test).
// The child's exit code: body()'s result.
int as_unprivileged_child(const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child == 0) {
    if (::geteuid() == 0 &&
        (::setgroups(0, nullptr) != 0 || ::setgid(kNogroup) != 0 || ::setuid(kNobody) != 0)) {
      std::_Exit(99);
    }
    std::_Exit(body());
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(CtlSegment, AReadOnlySegmentFileIsEnough) {
  const std::string path = "/dev/shm/" + name_.str();
  // Readable by the group the unprivileged child runs in, writable by no one.
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path.c_str(), 0, kNogroup), 0);
  }
  ASSERT_EQ(::chmod(path.c_str(), 0440), 0);
  const int result = as_unprivileged_child([&] {
    try {
      const shm::Segment ro = open_read_only(name_);
      if (read_snapshot(ro, kT0).dependencies.size() != 2) return 1;
    } catch (const shm::SegmentError&) {
      return 2;  // read-only access was not enough
    }
    try {
      shm::Segment::attach(name_, shm::Access::kReadWrite);
      return 3;  // the permissions are not what this test relies on
    } catch (const shm::SegmentError& e) {
      return e.code() == EACCES ? 0 : 4;
    }
  });
  EXPECT_EQ(result, 0) << "1: wrong reading, 2: read-only open failed, 3: read-write open worked, "
                          "4: another error, 99: could not drop privileges";
}

// --- Errors -----------------------------------------------------------------

std::string open_error(const std::string& name, int* code = nullptr) {
  try {
    open_read_only(name);
  } catch (const shm::SegmentError& e) {
    if (code != nullptr) *code = e.code();
    return e.what();
  }
  return "";
}

// open_read_only(name) fails with `code` and a message that holds the
// segment's path and `reason`.
void expect_refused(const std::string& name, int code, const std::string& reason) {
  int got = 0;
  const std::string what = open_error(name, &got);
  EXPECT_EQ(got, code) << what;
  EXPECT_NE(what.find("/dev/shm/" + name), std::string::npos) << what;
  EXPECT_NE(what.find(reason), std::string::npos) << what;
}

TEST(CtlErrors, MissingSegmentSaysSoAndHowToFindIt) {
  TempSegmentName name{"ctl-missing"};
  expect_refused(name, ENOENT, "cannot open: No such file or directory (is bulkheadd running?");
}

TEST(CtlErrors, TruncatedSegmentIsRefusedWithItsSize) {
  TempSegmentName name{"ctl-trunc"};
  { shm::Segment s = shm::Segment::create(name, testing::small_segment()); }
  const int fd = ::shm_open(("/" + name.str()).c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ::close(fd);
  expect_refused(name, EBADMSG, "refused: size 4096 bytes");
}

TEST(CtlErrors, ASegmentTheDaemonIsStillCreatingSaysToTryAgain) {
  TempSegmentName name{"ctl-new"};
  const int fd = ::shm_open(("/" + name.str()).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);  // created, not yet sized: what a reader sees for an instant
  ::close(fd);
  expect_refused(name, EAGAIN,
                 "refused: empty (a bulkheadd older than this build is making it in place, or died doing so) "
                 "(try again in a moment; if it stays so, bulkheadd --recreate-segment replaces it)");
}

TEST(CtlErrors, WrongMagicIsRefused) {
  TempSegmentName name{"ctl-magic"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  s.header().magic.store(0x1234);
  expect_refused(name, EBADMSG, "wrong magic: not a bulkhead segment");
}

// The hint says what would help: joining the group when it may read the
// segment, else a mode that lets it.
TEST(CtlErrors, UnreadableSegmentNamesItsModeAndGroup) {
  TempSegmentName name{"ctl-perm"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  const auto refusal = [&](mode_t mode) {
    EXPECT_EQ(::chmod(("/dev/shm/" + name.str()).c_str(), mode), 0);
    // The message goes through a pipe from the unprivileged child.
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    const int result = as_unprivileged_child([&] {
      int code = 0;
      const std::string what = open_error(name, &code);
      (void)!::write(fds[1], what.data(), what.size());
      return code == EACCES ? 0 : 1;
    });
    ::close(fds[1]);
    char buf[1024];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    ::close(fds[0]);
    const std::string what(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    EXPECT_EQ(result, 0) << what;
    return what;
  };
  const std::string group_reads = refusal(0640);
  EXPECT_NE(group_reads.find("Permission denied (mode 0640, owner "), std::string::npos) << group_reads;
  EXPECT_NE(group_reads.find(": run as a member of group "), std::string::npos) << group_reads;
  const std::string owner_only = refusal(0600);
  EXPECT_NE(owner_only.find("Permission denied (mode 0600, owner "), std::string::npos) << owner_only;
  EXPECT_NE(owner_only.find(" may not read it; daemon.segment_mode = 0o660 lets it)"), std::string::npos)
      << owner_only;
}

// --- The binary ---------------------------------------------------------------

class CtlBinary : public ::testing::Test {
 protected:
  testing::RunResult run(std::vector<std::string> args) {
    args.insert(args.begin(), BULKHEADCTL_PATH);
    return testing::run_command(args, dir_);
  }
  testing::TempDir temp_dir_;
  std::string dir_ = temp_dir_.path();
};

TEST_F(CtlBinary, MissingSegmentExitsOneWithTheReason) {
  TempSegmentName name{"ctl-bin"};
  const auto r = run({"--segment", name.str(), "status"});
  EXPECT_EQ(r.exit_code, 1) << r.output();
  EXPECT_NE(r.output().find("bulkheadctl: segment /dev/shm/" + name.str() + ": cannot open: No such file"),
            std::string::npos)
      << r.output();
}

TEST_F(CtlBinary, CorruptSegmentExitsOneWithTheReason) {
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  s.header().magic.store(0x1234);
  const auto r = run({"processes", "--segment", name.str()});
  EXPECT_EQ(r.exit_code, 1) << r.output();
  EXPECT_NE(r.output().find("wrong magic"), std::string::npos) << r.output();
}

TEST_F(CtlBinary, UsageErrorsExitTwoAndUnknownDependencyThree) {
  EXPECT_EQ(run({}).exit_code, 2);
  EXPECT_EQ(run({"status", "--interval", "0"}).exit_code, 2);
  // NaN is in no range, though every comparison with it is false; in every
  // spelling the option's conversion (strtold) takes.
  for (const char* option : {"--interval", "--stale-after"}) {
    for (const std::string spelling : {"nan", "+nan", " nan", "-nan", "+NaN(1)"}) {
      const auto nan = run({"status", option, spelling});
      EXPECT_EQ(nan.exit_code, 2) << option << " '" << spelling << "': " << nan.output();
      EXPECT_NE(nan.output().find(std::string(option) + ": must be a finite number, got " + spelling),
                std::string::npos)
          << nan.output();
    }
  }
  const TempSegmentName unmade{"ctl-bin"};  // never pinned in, whatever the parse
  for (const std::string spelling : {"nan s", " nan s", "+nan m", "-nan d"}) {  // NaN seconds, minutes, days
    const auto nan = run({"--segment", unmade.str(), "pin", "payments", "8", "--for", spelling});
    EXPECT_EQ(nan.exit_code, 2) << "--for '" << spelling << "': " << nan.output();
    EXPECT_NE(nan.output().find("--for: must be a finite number"), std::string::npos) << nan.output();
  }
  EXPECT_EQ(run({"top", "--interval", "nan"}).exit_code, 2);
  EXPECT_EQ(run({"get", "x", "--interval", "nan"}).exit_code, 2);
  // A name no client could claim is a usage error saying why, not "no
  // dependency"; so is a segment name, from the environment too.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"get", "pay ments"}, {"pin", "pay*", "8"}, {"breaker", "", "open"}}) {
    const auto bad = run(args);
    EXPECT_EQ(bad.exit_code, 2) << bad.output();
    EXPECT_NE(bad.output().find("name: '" + args[1] + "' "), std::string::npos) << bad.output();
  }
  const auto bad_segment =
      testing::run_command({"/usr/bin/env", "BULKHEAD_SEGMENT=a/b", BULKHEADCTL_PATH, "status"}, dir_);
  EXPECT_EQ(bad_segment.exit_code, 2) << bad_segment.output();
  EXPECT_NE(bad_segment.output().find("segment name 'a/b' has a character other than A-Z a-z 0-9 . _ -: '/' at "
                                      "byte 1 (from $BULKHEAD_SEGMENT)"),
            std::string::npos)
      << bad_segment.output();
  EXPECT_EQ(run({"frobnicate"}).exit_code, 2);
  const auto help = run({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output().find("processes"), std::string::npos) << help.output();
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  const auto r = run({"--segment", name.str(), "get", "nope"});
  EXPECT_EQ(r.exit_code, 3) << r.output();
  EXPECT_NE(r.output().find("no dependency 'nope'"), std::string::npos) << r.output();
}

// `get` reads every dependency, and prints the one it was asked for.
// status PATTERN... shows only the dependencies the patterns match, in
// the --sort order; patterns that match none exit 3, as get's unknown name.
TEST_F(CtlBinary, StatusShowsWhatThePatternsMatchInTheOrderAsked) {
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  for (const char* dep : {"payments", "orders", "pay-eu"}) shm::find_or_claim_dependency(s, dep, 12, 0);
  s.dependency(*shm::find_dependency(s, "pay-eu")).control.limit.store(30);
  const auto rows = [](const std::string& text) {
    std::vector<std::string> names;
    std::istringstream lines(text.substr(text.find("\ndependency ") + 1));
    std::string line;
    std::getline(lines, line);  // the header
    while (std::getline(lines, line) && !line.empty()) names.push_back(line.substr(0, line.find(' ')));
    return names;
  };
  auto r = run({"--segment", name.str(), "status", "pay*", "--sort", "name", "--interval", "0.05"});
  EXPECT_EQ(r.exit_code, 0) << r.output();
  EXPECT_EQ(rows(r.output()), (std::vector<std::string>{"pay-eu", "payments"})) << r.output();
  r = run({"--segment", name.str(), "status", "--sort", "limit", "--interval", "0.05"});
  EXPECT_EQ(rows(r.output()), (std::vector<std::string>{"pay-eu", "orders", "payments"})) << r.output();
  r = run({"--segment", name.str(), "status", "ord?rs", "pay-*", "--interval", "0.05", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output();
  EXPECT_EQ(r.output().find("\"payments\""), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("\"orders\""), std::string::npos) << r.output();
  r = run({"--segment", name.str(), "status", "nothing*", "--interval", "0.05"});
  EXPECT_EQ(r.exit_code, 3) << r.output();
  EXPECT_NE(r.output().find("no dependency matches 'nothing*'\n"), std::string::npos) << r.output();
  EXPECT_EQ(run({"--segment", name.str(), "status", "--sort", "bogus"}).exit_code, 2);
  // top's own default is in-flight first; --sort overrides it there too.
  s.dependency(*shm::find_dependency(s, "orders")).admission.word.store(5);
  r = run({"--segment", name.str(), "top", "-n", "1", "--interval", "0.05"});
  EXPECT_EQ(rows(r.output()), (std::vector<std::string>{"orders", "pay-eu", "payments"})) << r.output();
  r = run({"--segment", name.str(), "top", "-n", "1", "--interval", "0.05", "--sort", "limit"});
  EXPECT_EQ(rows(r.output()), (std::vector<std::string>{"pay-eu", "orders", "payments"})) << r.output();
}

TEST_F(CtlBinary, GetPrintsTheNamedDependencyOfSeveral) {
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  shm::find_or_claim_dependency(s, "orders", 12, 0);
  shm::find_or_claim_dependency(s, "payments", 20, 0);
  const auto r = run({"--segment", name.str(), "get", "payments", "--interval", "0.05"});
  EXPECT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.output().find("dependency payments (slot "), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("  limit       20\n"), std::string::npos) << r.output();
  EXPECT_EQ(r.output().find("orders"), std::string::npos) << r.output();
}

// `pin` writes the limit and the second the pin ends (now + --for, on
// CLOCK_MONOTONIC, rounded up), `pin NAME off` clears it; bad limits and
// durations are usage errors that write nothing, and a segment whose
// daemon would not read a pin (ABI 4.0) is refused.
TEST_F(CtlBinary, PinWritesTheLimitAndWhenItEnds) {
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  const std::uint32_t index = shm::find_or_claim_dependency(s, "payments", 12, 0).index;
  std::atomic<std::uint64_t>& pin = s.dependency(index).control.limit_pin;
  // No daemon on the segment: the next one to start applies the pin.
  auto r = run({"--segment", name.str(), "pin", "payments", "9"});
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.output().find("limit of payments: pinned at 9 for 10 min; no bulkheadd runs on /dev/shm/" + name.str() +
                            " now: the next one to start applies it"),
            std::string::npos)
      << r.output();
  shm::publish_daemon(s.header());  // this process plays the daemon
  const std::uint64_t before_s = monotonic_now_ns() / kSecond;
  r = run({"--segment", name.str(), "pin", "payments", "8", "--for", "15m"});
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.output().find("limit of payments: pinned at 8 for 15 min; bulkheadd applies it at its next tick"),
            std::string::npos)
      << r.output();
  // A daemon that lives but stopped ticking a minute ago (SIGSTOP, hung):
  // said so, rather than that its next tick applies the pin.
  s.header().heartbeat.store(5);
  s.header().heartbeat_ns.store(monotonic_now_ns() - 60 * kSecond);
  r = run({"--segment", name.str(), "pin", "payments", "8", "--for", "15m"});
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.output().find("pinned at 8 for 15 min; bulkheadd (pid " + std::to_string(::getpid()) +
                            ") has not ticked for 60 s (stopped or hung?): it applies it at its next tick and hands"),
            std::string::npos)
      << r.output();
  // The pin read below is this second one's, which may end a second later.
  const std::uint64_t after_s = monotonic_now_ns() / kSecond + 1;
  s.header().heartbeat.store(0);
  s.header().heartbeat_ns.store(0);
  EXPECT_EQ(shm::pin_limit(pin.load()), 8u);
  EXPECT_GE(shm::pin_until_s(pin.load()), before_s + 900);
  EXPECT_LE(shm::pin_until_s(pin.load()), after_s + 900);

  r = run({"--segment", name.str(), "pin", "payments", "off"});
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_EQ(pin.load(), 0u);
  r = run({"--segment", name.str(), "pin", "payments", "40"});  // 10 minutes unless told
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_GE(shm::pin_until_s(pin.load()), before_s + 600);
  EXPECT_LE(shm::pin_until_s(pin.load()), monotonic_now_ns() / kSecond + 1 + 600);
  for (const std::string edge : {"1", "1000000"}) {  // the ends of the range are limits too
    r = run({"--segment", name.str(), "pin", "payments", edge});
    ASSERT_EQ(r.exit_code, 0) << edge << ": " << r.output();
    EXPECT_EQ(std::to_string(shm::pin_limit(pin.load())), edge);
  }

  // Partitions count to 32767: more is refused where the daemon publishes some.
  s.dependency(index).control.flags.store(shm::kDependencyPartitioned);
  pin.store(0);
  r = run({"--segment", name.str(), "pin", "payments", "32768"});
  EXPECT_EQ(r.exit_code, 2) << r.output();
  EXPECT_NE(r.output().find("bulkheadctl pin: limit 32768: payments has partitions, whose limit is at most 32767"),
            std::string::npos)
      << r.output();
  EXPECT_EQ(pin.load(), 0u);
  r = run({"--segment", name.str(), "pin", "payments", "32767"});
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_EQ(shm::pin_limit(pin.load()), 32767u);
  s.dependency(index).control.flags.store(0);

  pin.store(0);
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"0"}, {"1000001"}, {"8x"}, {"-3"},
                                             {"8", "--for", "8d"}, {"8", "--for", "3w"}, {"8", "--for", "0"}}) {
    std::vector<std::string> args{"--segment", name.str(), "pin", "payments"};
    args.insert(args.end(), bad.begin(), bad.end());
    r = run(args);
    EXPECT_EQ(r.exit_code, 2) << bad[0] << ": " << r.output();
    EXPECT_EQ(pin.load(), 0u) << bad[0];
  }
  EXPECT_NE(run({"--segment", name.str(), "pin", "payments", "0"}).output().find(
                "bulkheadctl pin: limit '0': must be a number of calls in [1, 1000000], or off"),
            std::string::npos);
  r = run({"--segment", name.str(), "pin", "nope", "8"});
  EXPECT_EQ(r.exit_code, 3) << r.output();
  EXPECT_NE(r.output().find("no dependency 'nope'"), std::string::npos) << r.output();

  s.header().abi_minor = 0;
  r = run({"--segment", name.str(), "pin", "payments", "8"});
  EXPECT_EQ(r.exit_code, 1) << r.output();
  EXPECT_NE(r.output().find("has segment ABI 4.0, whose daemon does not read pins"), std::string::npos)
      << r.output();
  EXPECT_EQ(pin.load(), 0u);
}

// Output that cannot be written (a full disk: /dev/full) is an error, exit
// 1 with the reason, never a silent 0 over a missing or cut-off document.
TEST_F(CtlBinary, OutputThatCannotBeWrittenExitsOne) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full here";
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  std::atomic<std::uint64_t>& pin =
      s.dependency(shm::find_or_claim_dependency(s, "payments", 12, 0).index).control.limit_pin;
  const std::string err = dir_ + "/full.err";
  const auto run_to_full = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {BULKHEADCTL_PATH, "--segment", name.str()});
    std::vector<char*> argv = testing::exec_args(args);
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int out = ::open("/dev/full", O_WRONLY), error = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(out, STDOUT_FILENO);
      ::dup2(error, STDERR_FILENO);
      testing::exec_child(argv, {});
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status", "--json", "--interval", "0.05"}, {"status", "--interval", "0.05"},
        {"get", "payments", "--interval", "0.05"}, {"processes", "--json"}, {"top", "-n", "3", "-i", "0.05"},
        {"breaker", "payments", "open"}, {"pin", "payments", "8"}, {"--help"}}) {
    EXPECT_EQ(run_to_full(args), 1) << args[0];
    const std::string said = testing::read_file(err);
    EXPECT_NE(said.find("bulkheadctl: cannot write the output: No space left on device"), std::string::npos)
        << args[0] << ": " << said;
  }
  // What it wrote to the segment stays written.
  EXPECT_EQ(shm::pin_limit(pin.load()), 8u);
  EXPECT_EQ(s.dependency(shm::find_dependency(s, "payments").value()).control.breaker_override.load(),
            shm::kOverrideOpen);
}

// The command a pin's output gives to end it works as printed: on the
// segment pinned, for a name the command line would take for an option too.
TEST_F(CtlBinary, TheCommandThatEndsAPinWorksAsPrinted) {
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  for (const std::string dependency : {"payments", "-db", "--json"}) {
    std::atomic<std::uint64_t>& pin =
        s.dependency(shm::find_or_claim_dependency(s, dependency, 12, 0).index).control.limit_pin;
    auto r = run({"--segment", name.str(), "pin", "--", dependency, "8"});
    ASSERT_EQ(r.exit_code, 0) << r.output();
    ASSERT_EQ(shm::pin_limit(pin.load()), 8u);
    const auto from = r.out.find("(`"), to = r.out.find("` ends it sooner)");
    ASSERT_TRUE(from != std::string::npos && to != std::string::npos && from < to) << r.out;
    const std::string command = r.out.substr(from + 2, to - from - 2);
    r = run({"--segment", name.str(), "get", "--interval", "0.05", "--", dependency});
    ASSERT_EQ(r.exit_code, 0) << r.output();
    EXPECT_NE(r.out.find("; `" + command + "` ends it)"), std::string::npos) << command << "\n" << r.out;

    std::istringstream words(command);
    std::vector<std::string> args;
    for (std::string w; words >> w;) args.push_back(w);
    ASSERT_FALSE(args.empty());
    EXPECT_EQ(args[0], "bulkheadctl") << command;
    args.erase(args.begin());
    r = run(args);
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.output();
    EXPECT_EQ(pin.load(), 0u) << command;
  }
}

// bulkheadctl in a time namespace of its own (unshare --time, a container
// CRIU restored), whose CLOCK_MONOTONIC runs a day and more ahead of the
// host's: the pin it writes ends when asked on the host's clock, which the
// daemon reads it with, and it reads the heartbeat and a pin as outside.
TEST_F(CtlBinary, APinAndTheHeartbeatAreInTheHostsClockFromATimeNamespace) {
  const std::string ahead = "100000";  // seconds
  const std::vector<std::string> in_namespace{"/usr/bin/unshare", "--time", "--monotonic", ahead};
  std::vector<std::string> probe = in_namespace;
  probe.push_back("/bin/true");
  if (::access(in_namespace[0].c_str(), X_OK) != 0 || testing::run_command(probe, dir_).exit_code != 0) {
    GTEST_SKIP() << "no time namespace here: needs unshare(1), root and a kernel with CONFIG_TIME_NS";
  }
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  const std::uint32_t index = shm::find_or_claim_dependency(s, "payments", 12, 0).index;
  std::atomic<std::uint64_t>& pin = s.dependency(index).control.limit_pin;
  shm::publish_daemon(s.header());  // this process plays the daemon, outside
  const auto run_inside = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {BULKHEADCTL_PATH, "--segment", name.str()});
    args.insert(args.begin(), in_namespace.begin(), in_namespace.end());
    return testing::run_command(args, dir_);
  };

  const std::uint64_t before_s = monotonic_now_ns() / kSecond;
  auto r = run_inside({"pin", "payments", "8", "--for", "15m"});
  const std::uint64_t after_s = monotonic_now_ns() / kSecond + 1;
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_EQ(shm::pin_limit(pin.load()), 8u);
  EXPECT_GE(shm::pin_until_s(pin.load()), before_s + 900);
  EXPECT_LE(shm::pin_until_s(pin.load()), after_s + 900);

  s.header().heartbeat.store(42);
  s.header().heartbeat_ns.store(monotonic_now_ns());
  r = run_inside({"get", "payments", "--json", "--interval", "0.05", "--stale-after", "86400"});
  ASSERT_EQ(r.exit_code, 0) << r.output();
  const Json get = JsonParser::parse(r.out);
  EXPECT_EQ(get["daemon"]["state"].string, "running") << r.out;
  EXPECT_LT(get["daemon"]["heartbeat_age_s"].number, 86400) << r.out;
  ASSERT_FALSE(get["dependency"]["pin"].is_null()) << r.out;
  EXPECT_EQ(get["dependency"]["pin"]["limit"].number, 8);
  EXPECT_LE(get["dependency"]["pin"]["seconds_left"].number, 901) << r.out;  // its end rounded up
}

// Forcing a breaker writes to the segment: a user who may only read it is
// told so, with the fix.
TEST_F(CtlBinary, BreakerWithoutWriteAccessSaysWhatItNeeds) {
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  shm::find_or_claim_dependency(s, "payments", 12, 0);
  const std::string path = "/dev/shm/" + name.str();
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path.c_str(), 0, kNogroup), 0);
  }
  ASSERT_EQ(::chmod(path.c_str(), 0440), 0);  // its group may read it, no one write
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const int code = as_unprivileged_child([&] {
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl(BULKHEADCTL_PATH, BULKHEADCTL_PATH, "--segment", name.str().c_str(), "breaker", "payments", "open",
            static_cast<char*>(nullptr));
    return 98;  // exec failed
  });
  ::close(fds[1]);
  std::string out;
  char buf[1024];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  EXPECT_EQ(code, 1) << "98: exec failed, 99: could not drop privileges\n" << out;
  EXPECT_NE(out.find("Permission denied"), std::string::npos) << out;
  EXPECT_NE(out.find("(forcing a breaker writes to the segment: run as a member of its group, as clients do)"),
            std::string::npos)
      << out;
  EXPECT_EQ(s.dependency(shm::find_dependency(s, "payments").value()).control.breaker_override.load(),
            shm::kOverrideAuto);
}

TEST_F(CtlBinary, TopWithoutATerminalPrintsSuccessiveSnapshots) {
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  shm::find_or_claim_dependency(s, "payments", 12, 0);
  const auto r = run({"--segment", name.str(), "top", "-n", "2", "--interval", "0.05"});
  EXPECT_EQ(r.exit_code, 0) << r.output();
  EXPECT_EQ(r.output().find("\x1b"), std::string::npos) << "escape sequences into a pipe";
  std::size_t frames = 0;
  for (std::size_t at = 0; (at = r.output().find("bulkheadctl top - ", at)) != std::string::npos; ++at) ++frames;
  EXPECT_EQ(frames, 2u) << r.output();
  EXPECT_NE(r.output().find("payments"), std::string::npos) << r.output();
}

// A terminal of `rows` x `columns`.
winsize window(unsigned short rows, unsigned short columns) {
  winsize size{};
  size.ws_row = rows;
  size.ws_col = columns;
  return size;
}

// `top` on a terminal of `size` (a pseudo-terminal), a frame every
// `interval` seconds: after each read of what it wrote, `quit_now(out,
// terminal, top's pid)` says whether to type q (it may act on the terminal,
// or signal top, first).
// Returns everything top wrote; the terminal's modes after it quit go to
// `after` when given. A top that does not quit within 30 s is killed, and
// the output says so.
std::string drive_top(const std::string& segment, winsize size, const char* interval,
                      const std::function<bool(const std::string&, int, pid_t)>& quit_now, termios* after,
                      int* exit_code) {
  int master = -1;
  const pid_t child = ::forkpty(&master, nullptr, nullptr, &size);
  if (child == 0) {
    ::execl(BULKHEADCTL_PATH, BULKHEADCTL_PATH, "--segment", segment.c_str(), "top", "--interval", interval,
            static_cast<char*>(nullptr));
    std::_Exit(98);
  }
  std::string out;
  bool typed = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    pollfd fd{master, POLLIN, 0};
    if (::poll(&fd, 1, 100) > 0) {
      char buf[4096];
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;  // EIO: the child closed its side
      out.append(buf, static_cast<std::size_t>(n));
    }
    if (!typed && quit_now(out, master, child)) typed = ::write(master, "q", 1) == 1;
    if (std::chrono::steady_clock::now() > give_up) {
      ::kill(child, SIGKILL);
      out += "\n[the test killed top: it did not quit]";
      break;
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (after != nullptr) ::tcgetattr(master, after);
  ::close(master);
  return out;
}

// `top` on a terminal of `rows` x `columns`: waits for its first frame,
// types q, and returns everything it wrote (drive_top()).
std::string top_on_a_terminal(const std::string& segment, unsigned short rows, unsigned short columns,
                              termios* after, int* exit_code) {
  const auto first_frame = [](const std::string& out, int, pid_t) {
    return out.find("bulkheadctl top - ") != std::string::npos;
  };
  return drive_top(segment, window(rows, columns), "0.05", first_frame, after, exit_code);
}

// The frames `top` drew: what each "\x1b[H" (cursor home) ... "\x1b[J"
// (erase below) pair holds, after the sampling notice, as top wrote them.
std::vector<std::string> frames_of(const std::string& out) {
  std::vector<std::string> frames;
  for (std::size_t at = 0; (at = out.find("\x1b[H", at)) != std::string::npos;) {
    const std::size_t end = out.find("\x1b[J", at);
    if (end == std::string::npos) break;
    std::string frame = out.substr(at + 3, end - at - 3);
    std::erase(frame, '\r');  // the terminal's, before each line feed (ONLCR)
    if (frame.find("bulkheadctl top - ") != std::string::npos) frames.push_back(frame);
    at = end;
  }
  return frames;
}

// Before its first frame, top on a terminal says how long it samples: the
// interval as given (it cut "100.000000" to "100.").
TEST_F(CtlBinary, TopOnATerminalSaysTheIntervalItSamples) {
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  const auto sampling = [](const std::string& out, int, pid_t) { return out.find(" s ...") != std::string::npos; };
  for (const std::string interval : {"100", "0.25", "2.5"}) {
    int exit_code = -1;
    const std::string out = drive_top(name.str(), window(24, 80), interval.c_str(), sampling, nullptr, &exit_code);
    EXPECT_EQ(exit_code, 0) << out;
    EXPECT_NE(out.find(": sampling for " + interval + " s ..."), std::string::npos) << out;
  }
}

// On a terminal, top takes keys without Enter, fits each frame to the
// screen, quits on q, and gives the terminal back as it found it.
TEST_F(CtlBinary, TopOnATerminalFitsTheScreenAndQuitsOnQ) {
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  shm::find_or_claim_dependency(s, "payments", 12, 0);
  shm::find_or_claim_dependency(s, "orders", 20, 0);
  termios after{};
  int code = -1;
  // Smaller than a frame: 4 rows of 30 columns.
  const std::string out = top_on_a_terminal(name.str(), 4, 30, &after, &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out.find("[the test killed top"), std::string::npos) << out;
  EXPECT_NE(out.find("\x1b[?1049h"), std::string::npos) << "the alternate screen";
  EXPECT_NE(out.find("\x1b[?1049l"), std::string::npos) << "and back";
  EXPECT_NE(after.c_lflag & ICANON, 0u) << "line mode restored";
  EXPECT_NE(after.c_lflag & ECHO, 0u) << "echo restored";
  const auto frames = frames_of(out);
  ASSERT_FALSE(frames.empty()) << out;
  for (const std::string& frame : frames) {
    // Four rows: three line feeds, none after the last (it would scroll).
    EXPECT_EQ(std::count(frame.begin(), frame.end(), '\n'), 3) << frame;
    std::istringstream lines(frame);
    std::string last;
    for (std::string line; std::getline(lines, line); last = line) {
      // A line is its text and "\x1b[K".
      const std::size_t erase = line.find("\x1b[K");
      ASSERT_NE(erase, std::string::npos) << line;
      EXPECT_LE(erase, 30u) << line;
    }
    // The last row says how many lines were cut: the frame has 9.
    EXPECT_EQ(last.rfind("... 6 more lines: name PATT", 0), 0u) << frame;
  }
  // Taller than a frame: every line of the status, and no empty one after
  // its last.
  const std::string tall = top_on_a_terminal(name.str(), 200, 200, &after, &code);
  EXPECT_EQ(code, 0) << tall;
  const auto whole = frames_of(tall);
  ASSERT_FALSE(whole.empty()) << tall;
  EXPECT_NE(whole[0].find("payments"), std::string::npos) << whole[0];
  EXPECT_NE(whole[0].find("orders"), std::string::npos) << whole[0];
  EXPECT_GE(std::count(whole[0].begin(), whole[0].end(), '\n'), 4) << whole[0];
  const std::string last_two_lines = "\x1b[K\n\x1b[K\n";  // the last of them empty
  EXPECT_NE(whole[0].compare(whole[0].size() - last_two_lines.size(), last_two_lines.size(), last_two_lines), 0)
      << "an empty line after the status: " << whole[0];
}

// A terminal that changes size while top waits for its next frame (here an
// hour away) has what top shows redrawn to its new size at once.
TEST_F(CtlBinary, TopRedrawsToATerminalThatChangedSize) {
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  bool resized = false;
  const std::string notice = "bulkheadctl top: /dev/shm/" + name.str();
  int code = 0;
  const std::string out = drive_top(
      name.str(), window(24, 200), "3600",
      [&](const std::string& written, int terminal, pid_t) {
        if (!resized && written.find(notice) != std::string::npos) {
          const winsize smaller = window(3, 20);
          resized = ::ioctl(terminal, TIOCSWINSZ, &smaller) == 0;  // the kernel sends top SIGWINCH
        }
        return resized && written.find("\x1b[H" + notice.substr(0, 20) + "\x1b[K") != std::string::npos;
      },
      nullptr, &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out.find("[the test killed top"), std::string::npos) << "no redraw cut to 20 columns: " << out;
}

// Ctrl-Z (SIGTSTP): top gives the terminal back (its modes, the shell's
// screen) before it stops, and takes it again, redrawn, when continued.
// Here top's process group, a session of its own, is orphaned, so the
// kernel drops the stop itself: top leaves the screen and comes back.
TEST_F(CtlBinary, TopGivesTheTerminalBackAtCtrlZ) {
  TempSegmentName name{"ctl-bin"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  const std::string enter = "\x1b[?1049h", leave = "\x1b[?1049l";
  bool suspended = false;
  int code = 0;
  const std::string out = drive_top(
      name.str(), window(24, 100), "0.05",
      [&](const std::string& written, int, pid_t top) {
        if (!suspended && written.find("bulkheadctl top - ") != std::string::npos) {
          suspended = ::kill(top, SIGTSTP) == 0;
          return false;
        }
        const std::size_t left = written.find(leave);
        return suspended && left != std::string::npos && written.find(enter, left) != std::string::npos;
      },
      nullptr, &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out.find("[the test killed top"), std::string::npos) << "the screen not given back at Ctrl-Z: " << out;
  const auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = 0; (at = out.find(what, at)) != std::string::npos; at += what.size()) ++n;
    return n;
  };
  EXPECT_EQ(count(enter), 2u);  // at the start, and when continued
  EXPECT_EQ(count(leave), 2u);  // at Ctrl-Z, and at q
}

// A segment made anew under top's name (bulkheadd --recreate-segment, or
// an operator's rm before a restart) is what top shows next, not the one
// it mapped first, which no daemon or client uses any more.
TEST_F(CtlBinary, TopFollowsASegmentMadeAnewUnderItsName) {
  TempSegmentName name{"ctl-bin"};
  std::optional<shm::Segment> s = shm::Segment::create(name, testing::small_segment());
  shm::find_or_claim_dependency(*s, "olddep", 12, 0);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl(BULKHEADCTL_PATH, BULKHEADCTL_PATH, "--segment", name.c_str(), "top", "--interval", "0.05",
            static_cast<char*>(nullptr));
    std::_Exit(98);
  }
  ::close(fds[1]);
  std::string out;
  bool replaced = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < give_up) {
    pollfd fd{fds[0], POLLIN, 0};
    if (::poll(&fd, 1, 100) > 0) {
      char buf[4096];
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    if (!replaced && out.find("\nolddep ") != std::string::npos) {
      s.reset();
      shm::Segment::remove(name);
      s = shm::Segment::create(name, testing::small_segment());
      shm::find_or_claim_dependency(*s, "newdep", 12, 0);
      replaced = true;
    }
    if (replaced && out.find("\nnewdep ") != std::string::npos) break;
  }
  ::kill(child, SIGTERM);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(fds[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("\nnewdep "), std::string::npos) << out.substr(out.size() > 2000 ? out.size() - 2000 : 0);
}

}  // namespace
}  // namespace bulkhead::ctl
