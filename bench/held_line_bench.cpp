// bulkhead-held-line-bench: what does it cost two threads of one process,
// on two CPUs, to call two different dependencies whose held counts share a
// cache line?
//
// A process's held counts are 8 bytes each, one row per process slot, so
// dependency slots 8k to 8k + 7 share a line of that row (shm/layout.hpp).
// Every admission adds to the caller's held count and every release
// subtracts from it; the two threads' calls on different dependencies share
// no other line (each dependency has its own admission line, and each CPU
// its own statistics stripe), so the held line is the only one they both
// write. For each case the bench reports the median CPU ns per call of each
// thread (bh_try_acquire_untimed + bh_release_latency, as a caller that
// times its calls does) over repetitions:
//
//   alone        one thread, on CPU 0: the baseline;
//   same line    two threads on CPUs 0 and 1, on dependency slots 2 and 3;
//   apart        two threads on CPUs 0 and 1, on dependency slots 7 and 8
//                (neighbours, on two lines);
//
// and the two-thread cases over the baseline. Names are picked whose home
// slot is the one wanted, in an empty table. The bench plays the daemon on
// a segment of its own, /dev/shm/bhheld-<pid>, which it removes at exit.
//
//   bulkhead-held-line-bench                     # about 9 s
//   bulkhead-held-line-bench --seconds 0.2 --repetitions 3
//
// It exits 1 if a call was refused or a permit left in flight, 2 on bad
// arguments, 77 with fewer than two CPUs to run on. Figures never decide it.
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/cleanup.hpp"
#include "bench/cpus.hpp"
#include "bulkhead/bulkhead.h"
#include "shm/segment.hpp"

namespace bulkhead::bench {
namespace {

constexpr std::uint32_t kDependencies = 64;
constexpr std::uint32_t kLimit = 1000;  // never reached: one call in flight per thread

std::uint64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

// A name whose home slot (its hash modulo the table) is `slot`.
std::string name_at(std::uint32_t slot) {
  for (int i = 0;; ++i) {
    const std::string name = "held-" + std::to_string(i);
    if (shm::dependency_name_hash(name) % kDependencies == slot) return name;
  }
}

struct Loop {
  bh_dep* dep = nullptr;
  int cpu = 0;
  double ns_per_call = 0;
  bool failed = false;
};

// Calls `l.dep` for `seconds` on CPU `l.cpu`, once `go` is set.
void run(Loop& l, double seconds, const std::atomic<bool>& go) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(l.cpu, &one);
  ::pthread_setaffinity_np(::pthread_self(), sizeof one, &one);
  while (!go.load(std::memory_order_acquire)) {
  }
  const std::uint64_t until = monotonic_ns() + static_cast<std::uint64_t>(seconds * 1e9);
  const std::uint64_t cpu_before = thread_cpu_ns();
  std::uint64_t calls = 0;
  do {
    for (int i = 0; i < 1000; ++i) {
      bh_permit p;
      if (bh_try_acquire_untimed(l.dep, &p) != 0) {
        l.failed = true;
        return;
      }
      bh_release_latency(&p, BH_SUCCESS, 250'000);
    }
    calls += 1000;
  } while (monotonic_ns() < until);
  l.ns_per_call = static_cast<double>(thread_cpu_ns() - cpu_before) / static_cast<double>(calls);
}

// One repetition of a case: each thread's CPU ns per call.
std::vector<Loop> once(std::vector<Loop> loops, double seconds) {
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (Loop& l : loops) threads.emplace_back([&l, seconds, &go] { run(l, seconds, go); });
  go.store(true, std::memory_order_release);
  for (std::thread& t : threads) t.join();
  return loops;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int main_(int argc, char** argv) {
  double seconds = 1.0;
  int repetitions = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--seconds" || arg == "--repetitions") && i + 1 < argc) {
      char* end = nullptr;
      const double v = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(v > 0) || v > 3600) {
        std::fprintf(stderr, "bulkhead-held-line-bench: %s %s: a number in (0, 3600]\n", arg.c_str(), argv[i]);
        return 2;
      }
      if (arg == "--seconds") {
        seconds = v;
      } else {
        repetitions = static_cast<int>(v);
      }
    } else {
      std::fprintf(stderr, "usage: bulkhead-held-line-bench [--seconds S] [--repetitions N]\n");
      return 2;
    }
  }
  repetitions = std::max(repetitions, 1);
  const std::vector<int> cpus = usable_cpus();
  if (cpus.size() < 2) {
    std::fprintf(stderr, "bulkhead-held-line-bench: needs two CPUs to run on\n");
    return 77;
  }

  const cleanup::SegmentName segment_name("bhheld-" + std::to_string(::getpid()));
  const std::string& name = segment_name.str();
  shm::CreateOptions options;
  options.capacities = {kDependencies, 4, 4, 8};
  shm::Segment segment = shm::Segment::create(name, options);
  const std::uint32_t slots[] = {2, 3, 7, 8};
  std::string names[4];
  for (int i = 0; i < 4; ++i) {
    names[i] = name_at(slots[i]);
    if (shm::find_or_claim_dependency(segment, names[i], kLimit, 0).index != slots[i]) {
      throw std::runtime_error("dependency " + names[i] + " did not land on slot " + std::to_string(slots[i]));
    }
  }

  bh_options client_options{};
  client_options.segment = name.c_str();
  client_options.flags = BH_OPEN_REQUIRE_SEGMENT;
  bh_client* client = nullptr;
  if (bh_client_open_opts(&client_options, &client) != 0) {
    throw std::runtime_error(std::string("bh_client_open: ") + bh_last_error());
  }
  bh_dep* deps[4];
  for (int i = 0; i < 4; ++i) {
    if (bh_dependency(client, names[i].c_str(), &deps[i]) != 0) {
      throw std::runtime_error(std::string("bh_dependency: ") + bh_last_error());
    }
  }

  struct Case {
    const char* name;
    std::vector<Loop> loops;
  };
  const Case cases[] = {
      {"alone (slot 2)", {{deps[0], cpus[0]}}},
      {"same line (slots 2, 3)", {{deps[0], cpus[0]}, {deps[1], cpus[1]}}},
      {"apart (slots 7, 8)", {{deps[2], cpus[0]}, {deps[3], cpus[1]}}},
  };
  bool failed = false;
  double baseline = 0;
  std::printf("%d repetitions of %.2f s, CPUs %d and %d; CPU ns per call (bh_try_acquire_untimed + "
              "bh_release_latency), median over repetitions\n\n",
              repetitions, seconds, cpus[0], cpus[1]);
  std::printf("%-24s %12s %12s %10s\n", "case", "thread 1", "thread 2", "x alone");
  for (const Case& c : cases) {
    std::vector<std::vector<double>> per_thread(c.loops.size());
    for (int r = 0; r < repetitions; ++r) {
      const std::vector<Loop> done = once(c.loops, seconds);
      for (std::size_t t = 0; t < done.size(); ++t) {
        failed |= done[t].failed;
        per_thread[t].push_back(done[t].ns_per_call);
      }
    }
    double worst = 0;
    char cells[2][32] = {"-", "-"};
    for (std::size_t t = 0; t < per_thread.size(); ++t) {
      const double m = median(per_thread[t]);
      worst = std::max(worst, m);
      std::snprintf(cells[t], sizeof cells[t], "%.1f", m);
    }
    if (baseline == 0) baseline = worst;
    std::printf("%-24s %12s %12s %9.2fx\n", c.name, cells[0], cells[1], worst / baseline);
  }
  for (bh_dep* d : deps) failed |= bh_inflight(d) != 0;
  bh_client_close(client);
  if (failed) std::fprintf(stderr, "bulkhead-held-line-bench: a call was refused or a permit left in flight\n");
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace bulkhead::bench

int main(int argc, char** argv) {
  try {
    return bulkhead::bench::main_(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bulkhead-held-line-bench: %s\n", e.what());
    return 1;
  }
}
