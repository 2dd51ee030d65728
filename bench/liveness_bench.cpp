// bulkhead-liveness-bench: what does the daemon's test of a process slot's
// liveness lock cost (shm::liveness_lock_dropped(), one fcntl(F_OFD_GETLK))?
// The kernel keeps a file's locks in one list, which a test walks, so the
// cost grows with the processes attached; the daemon tests 64 slots a tick
// (ControlLoop::kLockChecksPerTick) for that reason.
//
// One process claims every slot of a segment of its own of N process
// slots, and takes each slot's lock as a client does (shm::LivenessLock: a
// descriptor each, the soft open-files limit raised toward the hard one),
// then drops the last one's, as exec would. Cases, in ns per test (real
// time):
//
//   held/N     the N - 1 slots with their lock, in turn: the daemon's
//              usual test;
//   dropped/N  the slot whose lock is gone, which walks the whole list: a
//              process that exec'd;
//
// for N = 2, 16, 256, 1024 and 4096 (the most max_processes allows), then
// each over N = 2 (one lock), and what 64 tests cost a tick.
//
//   bulkhead-liveness-bench                          # about 10 s
//   bulkhead-liveness-bench --benchmark_min_time=0.5
//
// It exits 1 if a test says a held lock is gone or a gone one held.
#include <sys/resource.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/cleanup.hpp"
#include "bench/timings.hpp"
#include "daemon/control_loop.hpp"
#include "shm/segment.hpp"

namespace bulkhead::bench {
namespace {

constexpr std::uint32_t kMaxLocks = 4096;

struct Table {
  std::optional<cleanup::SegmentName> name;
  std::optional<shm::Segment> segment;
  std::vector<shm::LivenessLock> locks;
  std::vector<shm::ProcessSnapshot> seen;
};

bool g_failed = false;

// A segment of n process slots, all claimed, each with its lock but the
// last, whose lock is dropped.
Table& table_of(std::uint32_t n) {
  static std::map<std::uint32_t, Table> tables;
  Table& t = tables[n];
  if (t.segment) return t;
  // The tables of the sizes run before are let go first: descriptors.
  for (auto& [size, other] : tables) {
    if (size == n) continue;
    other.locks.clear();
    other.seen.clear();
    other.segment.reset();
    other.name.reset();
  }
  t.name.emplace("bhlive-" + std::to_string(::getpid()) + "-" + std::to_string(n));
  shm::CreateOptions create;
  create.capacities = {1, n, 1, 1};
  create.reserve = false;
  t.segment.emplace(shm::Segment::create(t.name->str(), create));
  for (std::uint32_t i = 0; i < n; ++i) {
    const shm::ProcessClaim claim = shm::claim_process_slot(*t.segment);
    t.locks.emplace_back(*t.segment, claim);
    if (!t.locks.back().held()) {
      std::fprintf(stderr, "bulkhead-liveness-bench: no lock for slot %u (descriptors?)\n", i);
      std::exit(1);
    }
    t.seen.push_back(*shm::read_process_slot(*t.segment, claim.index));
  }
  t.locks.pop_back();  // the last slot's lock dropped, as by exec
  return t;
}

void held(benchmark::State& state) {
  const auto n = static_cast<std::uint32_t>(state.range(0));
  Table& t = table_of(n);
  std::uint32_t i = 0;
  for (auto _ : state) {
    if (shm::liveness_lock_dropped(*t.segment, t.seen[i])) g_failed = true;
    if (++i == n - 1) i = 0;
  }
  if (g_failed) state.SkipWithError("a held lock was found gone");
}

void dropped(benchmark::State& state) {
  const auto n = static_cast<std::uint32_t>(state.range(0));
  Table& t = table_of(n);
  for (auto _ : state) {
    if (!shm::liveness_lock_dropped(*t.segment, t.seen[n - 1])) g_failed = true;
  }
  if (g_failed) state.SkipWithError("a dropped lock was found held");
}

BENCHMARK(held)->Arg(2)->Arg(16)->Arg(256)->Arg(1024)->Arg(4096)->UseRealTime();
BENCHMARK(dropped)->Arg(2)->Arg(16)->Arg(256)->Arg(1024)->Arg(4096)->UseRealTime();

void print_ratios(const TimingReporter& timings) {
  constexpr std::uint32_t kTick = daemon::ControlLoop::kLockChecksPerTick;
  std::printf("\nper test over a table of 2 (one lock), and %u tests a tick (ns per test, real time, this run):\n",
              kTick);
  for (const char* kind : {"held", "dropped"}) {
    const auto base = timings.real_time(std::string(kind) + "/2/real_time");
    if (!base) continue;
    for (const char* n : {"16", "256", "1024", "4096"}) {
      const auto ns = timings.real_time(std::string(kind) + "/" + n + "/real_time");
      if (!ns) continue;
      std::printf("  %-7s %4s slots  %8.1f ns = %6.1fx   a tick: %7.1f us\n", kind, n, *ns, *ns / *base,
                  *ns * kTick / 1000.0);
    }
  }
}

}  // namespace
}  // namespace bulkhead::bench

int main(int argc, char** argv) {
  using namespace bulkhead::bench;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < kMaxLocks + 64) {
    files.rlim_cur = std::min<rlim_t>(kMaxLocks + 64, files.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  TimingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_ratios(reporter);
  return g_failed ? 1 : 0;
}
