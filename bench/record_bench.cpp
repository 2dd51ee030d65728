// bulkhead-record-bench: what does recording outcomes cost when many
// processes hammer one dependency, with the statistics on one stripe that
// every process writes (stats_stripes = 1, the "before") and striped as
// by default (issue 7, item 2)?
//
// For each setting and each N of processes, N forked processes (each a
// libbulkhead client with a process slot of its own, child i pinned to CPU
// i modulo the CPUs it may use) loop for a fixed time on one dependency:
//
//   cas_floor      the admission algorithm alone on the dependency's
//                  admission word: compare-and-swap +1 under the limit,
//                  then add -1 (no held count, no statistics): what every
//                  setting below shares, the line all processes contend on
//                  whatever the stripes;
//   record         bh_try_acquire_untimed + bh_release_latency(BH_SUCCESS,
//                  latency): admission, held count, and the recording (a
//                  histogram bucket, the latency sum, the window minimum and
//                  maximum, the peak in-flight) on the process's stripe;
//
// with the segment's statistics on 1 stripe, on 8 (Capacities' default),
// and on 8 with the process slots placed so that slot p % 8 is 0 for every
// process (the slots between are taken first). Which stripe a call writes
// is the client's choice (assign_stripes() in client/client.cpp): with more
// stripes than CPUs, the stripe of the CPU it runs on, added to without a
// lock prefix, so the slot placement no longer matters, and the last row
// checks that it does not; with fewer, the stripe of the CPU modulo the
// stripes, with locked adds.
//
// Each process reports its calls, its own CPU time and the real time it
// ran; the table gives the median over the processes of CPU ns per call,
// the calls per second of all processes together, and their CPU time over
// the real time they ran on the CPUs they may use. CPU time for the cost,
// not real time: with more processes than
// CPUs each is off its CPU part of the time, which is not a cost of the
// call. On a machine with C CPUs at most C processes run at once, so at
// most C write a line at the same instant whatever N is: N > C adds
// processes that take turns (the table says how many CPUs there were).
//
//   bulkhead-record-bench                       # 1, 2, 4, 8, 16 processes
//   bulkhead-record-bench --processes 2,8 --seconds 1
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/cleanup.hpp"
#include "bench/cpus.hpp"
#include "bulkhead/bulkhead.h"
#include "shm/segment.hpp"

namespace bulkhead::bench {
namespace {

constexpr char kDependency[] = "bench-record";
constexpr std::uint32_t kLimit = 1u << 20;  // never reached
// Latencies a release reports, in turn: 0.2 to 0.35 ms, a few buckets.
constexpr std::uint64_t kLatencyNs[] = {200'000, 250'000, 300'000, 350'000};
constexpr std::uint32_t kDefaultStripes = shm::Capacities{}.stats_stripes;

enum class Loop { kCasFloor, kRecord };

struct Setting {
  const char* label;
  Loop loop;
  std::uint32_t stripes;
  bool shared_stripe;  // place every process's slot on stripe 0
};

const Setting kSettings[] = {
    {"cas_floor (admission word only)", Loop::kCasFloor, kDefaultStripes, false},
    {"record, stats_stripes = 1 (before)", Loop::kRecord, 1, false},
    {"record, stats_stripes = 8 (default)", Loop::kRecord, kDefaultStripes, false},
    {"record, 8 stripes, all on one stripe", Loop::kRecord, kDefaultStripes, true},
};

// What each process reports, in a shared mapping.
struct Report {
  alignas(64) std::atomic<int> ready;
  std::uint64_t calls;
  double cpu_ns;
  double wall_ns;  // from go to stop, as this process saw them
  std::uint32_t slot;
  char error[160];
};

struct Shared {
  alignas(64) std::atomic<int> go{0};
  alignas(64) std::atomic<int> stop{0};
  Report reports[256];
};

double clock_ns(clockid_t clock) {
  timespec ts;
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

inline bool cas_pair(std::atomic<std::uint64_t>& word, const std::atomic<std::uint32_t>& limit) {
  const std::uint32_t l = limit.load(std::memory_order_relaxed);
  std::uint64_t seen = word.load(std::memory_order_relaxed);
  do {
    if (shm::admission_at_limit(seen, l)) return false;
  } while (!word.compare_exchange_weak(seen, seen + shm::kAdmissionAcquire, std::memory_order_relaxed));
  word.fetch_add(shm::kAdmissionRelease, std::memory_order_relaxed);
  return true;
}

[[noreturn]] void child_main(const std::string& segment_name, Loop loop, int cpu, Shared* shared, Report* report,
                             pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);
  cleanup::keep_on_signal();
  auto fail = [report](const std::string& why) {
    std::snprintf(report->error, sizeof report->error, "%s", why.c_str());
    report->ready.store(-1);
    ::_exit(2);
  };
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (::sched_setaffinity(0, sizeof one, &one) != 0) fail("cannot pin to CPU " + std::to_string(cpu));
  try {
    shm::Segment segment = shm::Segment::attach(segment_name, shm::Access::kReadWrite);
    bh_options options{};
    options.segment = segment_name.c_str();
    options.flags = BH_OPEN_REQUIRE_SEGMENT;
    bh_client* client = nullptr;
    if (bh_client_open_opts(&options, &client) != 0) fail(std::string("bh_client_open: ") + bh_last_error());
    bh_dep* dep = nullptr;
    if (bh_dependency(client, kDependency, &dep) != 0) fail(std::string("bh_dependency: ") + bh_last_error());
    const std::uint32_t index = *shm::find_dependency(segment, kDependency);
    shm::DependencySlot& slot = segment.dependency(index);
    // Our slot: the one whose pid is ours.
    for (std::uint32_t p = 0; p < segment.capacities().max_processes; ++p) {
      if (segment.process(p).identity.pid.load(std::memory_order_relaxed) == ::getpid()) report->slot = p;
    }
    report->ready.store(1);
    while (shared->go.load(std::memory_order_acquire) == 0) {
    }
    std::uint64_t calls = 0;
    bool refused = false;
    const double cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), wall0 = clock_ns(CLOCK_MONOTONIC);
    while (shared->stop.load(std::memory_order_relaxed) == 0) {
      for (int i = 0; i < 64; ++i) {
        if (loop == Loop::kCasFloor) {
          refused |= !cas_pair(slot.admission.word, slot.control.limit);
        } else {
          bh_permit permit;
          refused |= bh_try_acquire_untimed(dep, &permit) != 0;
          bh_release_latency(&permit, BH_SUCCESS, kLatencyNs[i % 4]);
        }
      }
      calls += 64;
    }
    report->cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    report->wall_ns = clock_ns(CLOCK_MONOTONIC) - wall0;
    report->calls = calls;
    bh_client_close(client);
    if (refused) fail("a call was refused below the limit");
  } catch (const std::exception& e) {
    fail(e.what());
  }
  ::_exit(0);
}

struct Figures {
  double cpu_ns_per_call;  // median over the processes
  double calls_per_s;      // all processes together
  double cpu_share;        // CPU time the processes got, of the CPUs they could use
  std::string slots;
};

// One setting at N processes on a segment of its own.
std::optional<Figures> run(const Setting& s, int n, double seconds, const std::vector<int>& cpus,
                           std::string* error) {
  const cleanup::SegmentName segment_name("bhrecord-" + std::to_string(::getpid()));
  const std::string& name = segment_name.str();
  shm::CreateOptions create;
  create.capacities = {16, static_cast<std::uint32_t>(std::max(64, 8 * n + 8)), s.stripes, 0};
  create.mode = 0600;
  shm::Segment segment = shm::Segment::create(name, create);
  shm::find_or_claim_dependency(segment, kDependency, kLimit, 0);
  // For the shared stripe: take every slot a child would get that is not a
  // multiple of the stripe count, so that children land on 0, 8, 16, ...
  std::vector<shm::ProcessClaim> placeholders;
  if (s.shared_stripe) {
    for (std::uint32_t p = 0; p < s.stripes * static_cast<std::uint32_t>(n); ++p) {
      placeholders.push_back(shm::claim_process_slot(segment));
    }
    std::erase_if(placeholders, [&](const shm::ProcessClaim& slot) {
      if (slot.index % s.stripes != 0) return false;
      shm::release_process_slot(segment, slot);
      return true;
    });
  }
  void* mem = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
  Shared* shared = new (mem) Shared();
  std::vector<pid_t> pids;
  const pid_t parent = ::getpid();
  for (int i = 0; i < n; ++i) {
    std::fflush(stdout);
    const pid_t pid = ::fork();
    const int cpu = cpus[static_cast<std::size_t>(i) % cpus.size()];
    if (pid == 0) child_main(name, s.loop, cpu, shared, &shared->reports[i], parent);
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    pids.push_back(pid);
    // One at a time, so that slots are taken in order.
    while (shared->reports[i].ready.load() == 0) ::usleep(100);
  }
  bool ok = true;
  for (int i = 0; i < n; ++i) ok &= shared->reports[i].ready.load() == 1;
  if (ok) {
    shared->go.store(1, std::memory_order_release);
    ::usleep(static_cast<useconds_t>(seconds * 1e6));
  }
  shared->stop.store(1);
  shared->go.store(1);
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  std::optional<Figures> out;
  if (!ok) {
    for (int i = 0; i < n; ++i) {
      if (shared->reports[i].error[0] != '\0') *error = shared->reports[i].error;
    }
    if (error->empty()) *error = "a process died";
  } else if (const auto idle = std::find_if(shared->reports, shared->reports + n,
                                             [](const Report& r) { return r.calls == 0; });
             idle != shared->reports + n) {
    *error = "process " + std::to_string(idle - shared->reports) + " made no call: raise --seconds";
  } else {
    // Rates over the time the processes ran, not the time asked for: the
    // parent's sleep oversleeps, and processes start and stop a little apart.
    std::vector<double> per_call;
    double calls_per_s = 0, cpu_ns = 0, wall_ns = 0;
    Figures f{};
    for (int i = 0; i < n; ++i) {
      const Report& r = shared->reports[i];
      cpu_ns += r.cpu_ns;
      wall_ns = std::max(wall_ns, r.wall_ns);
      per_call.push_back(r.cpu_ns / static_cast<double>(r.calls));
      calls_per_s += static_cast<double>(r.calls) / (r.wall_ns * 1e-9);
      f.slots += (i ? "," : "") + std::to_string(r.slot % s.stripes);
    }
    std::sort(per_call.begin(), per_call.end());
    f.cpu_ns_per_call = per_call.size() % 2 ? per_call[per_call.size() / 2]
                                            : (per_call[per_call.size() / 2 - 1] + per_call[per_call.size() / 2]) / 2;
    f.calls_per_s = calls_per_s;
    f.cpu_share = cpu_ns / (wall_ns * static_cast<double>(std::min<std::size_t>(n, cpus.size())));
    out = f;
  }
  for (const shm::ProcessClaim& p : placeholders) shm::release_process_slot(segment, p);
  shared->~Shared();
  ::munmap(mem, sizeof(Shared));
  return out;
}

std::vector<int> parse_list(const char* text) {
  std::vector<int> out;
  std::string s(text);
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = s.find(',', pos);
    const std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const int v = std::atoi(item.c_str());
    if (v < 1 || v > 32) return {};
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace
}  // namespace bulkhead::bench

int main(int argc, char** argv) {
  using namespace bulkhead::bench;
  std::vector<int> counts = {1, 2, 4, 8, 16};
  double seconds = 0.5;
  std::string command = argv[0];
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--processes" && i + 1 < argc) {
      counts = parse_list(argv[++i]);
      if (counts.empty()) {
        std::fprintf(stderr, "--processes: a comma-separated list of 1 to 32\n");
        return 2;
      }
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
      if (!(seconds > 0 && seconds <= 60)) {
        std::fprintf(stderr, "--seconds: in (0, 60]\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--processes 1,2,4,8,16] [--seconds 0.5]\n", argv[0]);
      return 2;
    }
  }
  const std::vector<int> cpus = usable_cpus();
  std::printf("Recording outcomes on one dependency from N processes: CPU ns per call (median over the\n"
              "processes), calls per second (all together) and the share of the CPUs the processes were\n"
              "on (100%%: every CPU they may use ran one of them throughout; less: other load took\n"
              "the rest, and processes contended only part of the time). %zu CPUs: at most %zu\n"
              "processes run at once.\n"
              "command: %s\n\n",
              cpus.size(), cpus.size(), command.c_str());
  std::printf("  %-38s", "");
  for (int n : counts) std::printf(" %23s", (std::to_string(n) + (n == 1 ? " process" : " processes")).c_str());
  std::printf("\n");
  bool failed = false;
  std::vector<std::vector<double>> table;
  for (const Setting& s : kSettings) {
    std::printf("  %-38s", s.label);
    std::vector<double> row;
    for (int n : counts) {
      std::string error;
      std::optional<Figures> f;
      try {
        f = run(s, n, seconds, cpus, &error);
      } catch (const std::exception& e) {
        error = e.what();
      }
      if (!f) {
        std::printf(" %23s", "failed");
        std::fprintf(stderr, "%s, %d processes: %s\n", s.label, n, error.c_str());
        failed = true;
        row.push_back(0);
        continue;
      }
      char cell[64];
      std::snprintf(cell, sizeof cell, "%6.1f ns %5.1fM/s %3.0f%%", f->cpu_ns_per_call, f->calls_per_s / 1e6,
                    100 * f->cpu_share);
      std::printf(" %23s", cell);
      std::fflush(stdout);
      row.push_back(f->cpu_ns_per_call);
    }
    std::printf("\n");
    table.push_back(row);
  }
  std::printf("\n  %-38s", "ratio: 1 stripe / 8 stripes");
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double before = table[1][i], after = table[2][i];
    if (before > 0 && after > 0) {
      std::printf(" %22.2fx", before / after);
    } else {
      std::printf(" %23s", "-");
    }
  }
  std::printf("\n  %-38s", "ratio: one shared stripe / 8 stripes");
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double shared = table[3][i], after = table[2][i];
    if (shared > 0 && after > 0) {
      std::printf(" %22.2fx", shared / after);
    } else {
      std::printf(" %23s", "-");
    }
  }
  std::printf("\n");
  return failed ? 1 : 0;
}
