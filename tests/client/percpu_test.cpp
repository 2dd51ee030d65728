// Statistics added without a lock prefix (client/percpu.hpp): the
// restartable sequence itself, then exact totals when several processes,
// each with more threads than CPUs, record on one dependency while their
// threads are moved between CPUs and interrupted by a timer signal
// (tests/client/stats_hammer.cpp), with CPUs' own stripes and without.
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "client/percpu.hpp"
#include "shm/segment.hpp"
#include "shm/stats.hpp"
#include "tests/support/stats_tally.hpp"
#include "tests/support/temp_segment.hpp"

extern char** environ;

namespace bulkhead {
namespace {

using testing::StatsTally;
using testing::TempSegmentName;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr long kCalls = 50'000;  // per thread: the sanitizers slow every call
#else
constexpr long kCalls = 1'000'000;
#endif

int allowed_cpus() {
  cpu_set_t set;
  return ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

TEST(PerCpu, AddCommitsOnlyOnTheCpuItNames) {
  if (!percpu::kBuilt || !percpu::registered()) GTEST_SKIP() << "needs x86-64 and glibc's rseq registration";
  std::atomic<std::uint64_t> wide{0};
  std::atomic<std::uint32_t> narrow{0xfffffff0u};
  // A sequence aborted by preemption or a signal returns false: try again
  // on the CPU the thread is on then, as a caller would.
  for (int committed = 0; committed < 1000;) {
    const std::uint32_t cpu = percpu::cpu_start();
    if (percpu::add_on_cpu(&wide, std::uint64_t{3} << 32, cpu)) ++committed;
  }
  for (int committed = 0; committed < 1000;) {
    const std::uint32_t cpu = percpu::cpu_start();
    if (percpu::add_on_cpu(&narrow, 1u, cpu)) ++committed;
  }
  EXPECT_EQ(wide.load(), std::uint64_t{3000} << 32);
  EXPECT_EQ(narrow.load(), 0xfffffff0u + 1000u);  // 32 bits: wraps, touches nothing beside
  // On a CPU the thread is not on the sequence never commits: the
  // comparison with the kernel's cpu_id fails. (One past the last possible
  // CPU: no thread is ever there.)
  const std::uint32_t nowhere = percpu::possible_cpus();
  ASSERT_GT(nowhere, 0u);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(percpu::add_on_cpu(&wide, std::uint64_t{1}, nowhere));
    EXPECT_FALSE(percpu::add_on_cpu(&narrow, 1u, nowhere));
  }
  EXPECT_EQ(wide.load(), std::uint64_t{3000} << 32);
  EXPECT_EQ(narrow.load(), 0xfffffff0u + 1000u);
}

TEST(PerCpu, PossibleCpusCoversEveryCpuThisProcessMayRunOn) {
  cpu_set_t set;
  ASSERT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  const std::uint32_t cpus = percpu::possible_cpus();
  ASSERT_GT(cpus, 0u);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) {
      EXPECT_LT(static_cast<std::uint32_t>(c), cpus);
    }
  }
}

// What one stats_hammer process reported.
struct Report {
  testing::StatsTally tally;
  unsigned rseq_size = 0;
  std::uint64_t signals = 0;
};

class PerCpuStatsTest : public ::testing::Test {
 protected:
  // A segment of `stripes` stripes with two dependencies: "hammered",
  // limit 8 (a thread preempted while it holds a permit may make others be
  // refused), and "refused", limit 0.
  void make_segment(std::uint32_t stripes) {
    segment_.emplace(shm::Segment::create(name_, testing::small_segment(4, 16, stripes)));
    index_ = shm::find_or_claim_dependency(*segment_, "hammered", 8, 0).index;
    refused_index_ = shm::find_or_claim_dependency(*segment_, "refused", 0, 0).index;
  }

  // Runs stats_hammer once per entry of `rseq` (false: the process runs
  // with glibc's rseq registration turned off), all at once, with
  // `threads` threads each; returns their reports.
  std::vector<Report> hammer(const std::vector<bool>& rseq, int threads) {
    std::vector<pid_t> pids;
    std::vector<FILE*> outputs;
    const std::string threads_text = std::to_string(threads);
    const std::string calls_text = std::to_string(kCalls);
    for (bool with_rseq : rseq) {
      int out[2];
      EXPECT_EQ(::pipe(out), 0);
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      posix_spawn_file_actions_adddup2(&actions, out[1], 1);
      posix_spawn_file_actions_addclose(&actions, out[0]);
      std::vector<std::string> env_text;
      for (char** e = environ; *e != nullptr; ++e) {
        if (std::string(*e).rfind("GLIBC_TUNABLES=", 0) != 0) env_text.emplace_back(*e);
      }
      if (!with_rseq) env_text.emplace_back("GLIBC_TUNABLES=glibc.pthread.rseq=0");
      std::vector<char*> env;
      for (std::string& e : env_text) env.push_back(e.data());
      env.push_back(nullptr);
      std::string path = STATS_HAMMER_PATH;
      std::string dep = "hammered";
      std::string refused = "refused";
      std::string segment = name_.str();
      std::array<char*, 7> argv{path.data(), segment.data(), dep.data(), refused.data(),
                                const_cast<char*>(threads_text.c_str()), const_cast<char*>(calls_text.c_str()),
                                nullptr};
      pid_t pid = -1;
      EXPECT_EQ(posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), env.data()), 0);
      posix_spawn_file_actions_destroy(&actions);
      ::close(out[1]);
      pids.push_back(pid);
      outputs.push_back(::fdopen(out[0], "r"));
    }
    std::vector<Report> reports;
    for (std::size_t i = 0; i < pids.size(); ++i) {
      Report r;
      StatsTally& t = r.tally;
      const int fields = std::fscanf(outputs[i], "%lu %lu %lu %lu %lu %lu %lu %u %lu", &t.ok, &t.sum_ns, &t.dropped,
                                     &t.failed, &t.ignored, &t.rejected, &t.refused, &r.rseq_size, &r.signals);
      std::fclose(outputs[i]);
      int status = 0;
      ::waitpid(pids[i], &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "stats_hammer status " << status;
      EXPECT_EQ(fields, 9) << "stats_hammer printed no report";
      reports.push_back(r);
    }
    return reports;
  }

  // The callers' totals (of every process run on the segment so far) equal
  // the segment's, to the unit.
  void expect_exact_totals(const std::vector<Report>& reports, std::uint64_t threads_per_process) {
    StatsTally all;
    std::uint64_t signals = 0;
    for (const Report& r : reports) {
      all += r.tally;
      signals += r.signals;
    }
    const shm::DependencyCounters c = shm::read_counters(*segment_, index_);
    EXPECT_EQ(c.ok, all.ok);
    EXPECT_EQ(c.rtt_sum_ns, all.sum_ns);
    EXPECT_EQ(c.dropped, all.dropped);
    EXPECT_EQ(c.failed, all.failed);
    EXPECT_EQ(c.ignored, all.ignored);
    EXPECT_EQ(c.rejected, all.rejected);
    EXPECT_EQ(shm::read_counters(*segment_, refused_index_).rejected, all.refused);
    EXPECT_EQ(all.attempts(), static_cast<std::uint64_t>(kCalls) * threads_per_process * reports.size());
    EXPECT_GT(all.refused, 0u);
    std::printf("%lu ok, %lu rejected, %lu refused, %lu timer signals\n", all.ok, all.rejected, all.refused,
                signals);
  }

  // Outcomes (every counter record() adds to) on stripes [from, to).
  std::uint64_t outcomes_on(std::uint32_t from, std::uint32_t to) {
    std::uint64_t n = 0;
    for (std::uint32_t s = from; s < to; ++s) {
      const shm::StatsStripe& st = segment_->stripe(index_, s);
      n += st.dropped.load() + st.failed.load() + st.ignored.load() + st.rejected.load();
      for (const auto& b : segment_->latency_histogram(index_, s).bucket) n += b.load();
    }
    return n;
  }

  TempSegmentName name_{"percpu"};
  std::optional<shm::Segment> segment_;
  std::uint32_t index_ = 0;
  std::uint32_t refused_index_ = 0;
};

// Each CPU's own stripe, the spare and one more. First two processes with
// rseq: the CPUs' stripes take their outcomes, the spare only what a
// sequence that did not commit added instead. Then one process with rseq
// and one without, at once: the spare takes the one without. The stripe
// past the spare is never written.
TEST_F(PerCpuStatsTest, ExactTotalsOnCpusOwnStripesUnderMovesAndSignals) {
  const std::uint32_t cpus = percpu::possible_cpus();
  if (!percpu::kBuilt || !percpu::registered() || cpus == 0 || cpus + 2 > shm::kMaxStatsStripesLimit) {
    GTEST_SKIP() << "needs x86-64, glibc's rseq registration and at most 62 CPUs";
  }
  make_segment(cpus + 2);
  const int threads = 2 * allowed_cpus() + 2;
  std::vector<Report> reports = hammer({true, true}, threads);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_GT(reports[0].rseq_size, 0u);
  expect_exact_totals(reports, threads);
  EXPECT_GT(outcomes_on(0, cpus), 0u) << "no sequence committed on a CPU's stripe";
  std::printf("sequences that did not commit (added on the spare stripe): %lu\n", outcomes_on(cpus, cpus + 1));
  const std::vector<Report> mixed = hammer({true, false}, threads);
  ASSERT_EQ(mixed.size(), 2u);
  EXPECT_EQ(mixed[1].rseq_size, 0u) << "GLIBC_TUNABLES=glibc.pthread.rseq=0 did not turn rseq off";
  reports.insert(reports.end(), mixed.begin(), mixed.end());
  expect_exact_totals(reports, threads);
  EXPECT_EQ(outcomes_on(cpus + 1, cpus + 2), 0u) << "a stripe past the spare was written";
}

// A process without rseq never writes a CPU's stripe: with per-CPU stripes
// every lock-prefixed add goes to the spare, the stripe after them.
TEST_F(PerCpuStatsTest, AProcessWithoutRseqWritesOnlyTheSpareStripe) {
  const std::uint32_t cpus = percpu::possible_cpus();
  if (cpus == 0 || cpus + 2 > shm::kMaxStatsStripesLimit) GTEST_SKIP() << "needs at most 62 CPUs";
  make_segment(cpus + 2);
  const std::vector<Report> reports = hammer({false}, 2);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].rseq_size, 0u);
  expect_exact_totals(reports, 2);
  EXPECT_EQ(outcomes_on(0, cpus), 0u);
  EXPECT_EQ(outcomes_on(cpus + 1, cpus + 2), 0u);
  const StatsTally& t = reports[0].tally;
  EXPECT_EQ(outcomes_on(cpus, cpus + 1), t.attempts() - t.refused);
  for (std::uint32_t s = 0; s < cpus; ++s) EXPECT_EQ(segment_->stripe(refused_index_, s).rejected.load(), 0u);
}

// Fewer stripes than CPUs: no CPU owns a stripe, every add is locked
// (cpu % stripes; with one stripe, the process's).
TEST_F(PerCpuStatsTest, ExactTotalsWithFewerStripesThanCpus) {
  const std::uint32_t cpus = percpu::possible_cpus();
  if (allowed_cpus() < 2 || cpus < 2) GTEST_SKIP() << "needs two CPUs";
  make_segment(std::min(cpus - 1, shm::kMaxStatsStripesLimit));
  const int threads = 2 * allowed_cpus() + 2;
  const std::vector<Report> reports = hammer({true, true}, threads);
  ASSERT_EQ(reports.size(), 2u);
  expect_exact_totals(reports, threads);
}

}  // namespace
}  // namespace bulkhead
