// bulkhead-bench: what does admission cost next to the floor the hardware
// sets?
//
// Each case is reported in ns per acquire+release pair (real time), then as a
// ratio to the raw pair of the same setting, measured in the same run:
//
//   raw_pair                 fetch_add(1) + fetch_sub(1) on the admission line
//                            of a dependency slot in a real segment: the
//                            floor, one locked read-modify-write each way;
//   acquire_release          bh_try_acquire + bh_release: the library's own
//                            timing, two clock reads;
//   acquire_release_latency  bh_try_acquire + bh_release_latency: the caller
//                            supplies the latency, no clock read;
//   reject_at_limit          bh_try_acquire against a published limit of 0.
//                            A rejection must not write the admission line:
//                            the case fails if the line's word changed.
//
// Settings: one thread; and two processes on two CPUs contending on one
// dependency, where a forked child attaches to the segment by name and spins
// the same loop while the parent is measured.
//
// The benchmark plays the daemon on a segment of its own,
// /dev/shm/bhbench-<pid>: it creates it, publishes the limits, reclaims the
// process slots of children that are gone, and removes it at exit (and on
// SIGINT, SIGTERM, SIGHUP).
//
//   bulkhead-bench                           # about 10 s on 2 cores
//   bulkhead-bench --benchmark_min_time=0.2 --benchmark_repetitions=5
//
// With repetitions the table takes each case's median. --benchmark_format is
// not honoured (the table rides on the console reporter); for machine-readable
// figures add --benchmark_out=FILE --benchmark_out_format=json.
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bulkhead/bulkhead.h"
#include "shm/segment.hpp"

namespace bulkhead::bench {
namespace {

// Each on a slot, and so an admission line, of its own.
constexpr char kRawDependency[] = "bench-raw";        // the raw pairs' line
constexpr char kAdmitDependency[] = "bench-admit";    // the admission cases
constexpr char kRejectDependency[] = "bench-reject";  // published limit 0
// bench-admit's limit: never reached (at most 2 in flight), so every
// try_acquire below it must succeed.
constexpr std::uint32_t kAdmitLimit = 1024;
// What the caller-latency cases report: a plausible downstream call.
constexpr std::uint64_t kCallerLatencyNs = 250'000;
// Pairs the child spins between two looks at its stop flag.
constexpr int kChildBatch = 64;
constexpr auto kChildStartTimeout = std::chrono::seconds(10);
constexpr auto kChildStopTimeout = std::chrono::seconds(5);

// --- One pair of each kind: the parent's measured loop and the child's
// --- spinning loop call the same functions.

// Relaxed: the floor is the locked read-modify-write itself. On x86-64 every
// memory order compiles to the same lock add / lock sub, as do the library's
// relaxed compare-and-swap and release add.
inline void raw_pair(std::atomic<std::uint64_t>& word) {
  word.fetch_add(1, std::memory_order_relaxed);
  word.fetch_sub(1, std::memory_order_relaxed);
}

// Non-zero when the call was not admitted.
inline int own_timing_pair(bh_dep* dep) {
  bh_permit permit;
  const int rc = bh_try_acquire(dep, &permit);
  bh_release(&permit, BH_SUCCESS);  // does nothing for an empty permit
  return rc;
}

inline int caller_latency_pair(bh_dep* dep) {
  bh_permit permit;
  const int rc = bh_try_acquire(dep, &permit);
  bh_release_latency(&permit, BH_SUCCESS, kCallerLatencyNs);
  return rc;
}

enum class Loop { kRawPair, kOwnTiming, kCallerLatency };

// --- CPUs.

struct CpuPair {
  int parent;
  int child;
};

// The first two CPUs this process may run on, or nullopt with fewer.
std::optional<CpuPair> two_cpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return std::nullopt;
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  if (cpus.size() < 2) return std::nullopt;
  return CpuPair{cpus[0], cpus[1]};
}

bool pin_to(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return ::sched_setaffinity(0, sizeof one, &one) == 0;
}

// Pins the calling thread to one CPU while it lives, then restores its mask.
class PinnedTo {
 public:
  explicit PinnedTo(int cpu) {
    saved_ok_ = ::sched_getaffinity(0, sizeof saved_, &saved_) == 0;
    pinned_ = saved_ok_ && pin_to(cpu);
  }
  ~PinnedTo() {
    if (saved_ok_) ::sched_setaffinity(0, sizeof saved_, &saved_);
  }
  PinnedTo(const PinnedTo&) = delete;
  PinnedTo& operator=(const PinnedTo&) = delete;
  explicit operator bool() const { return pinned_; }

 private:
  cpu_set_t saved_;
  bool saved_ok_ = false;
  bool pinned_ = false;
};

// --- The segment.

// /dev/shm/<name>, for the signal handler. The run loop belongs to Google
// Benchmark, so there is no loop of ours to look at a flag: the handler
// removes the name itself (unlink() is async-signal-safe) and dies of the
// signal. Children reset the handlers.
char g_segment_path[128];

extern "C" void remove_segment_and_die(int sig) {
  ::unlink(g_segment_path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

// Removes a segment name when it goes, whatever happened in between.
class SegmentName {
 public:
  explicit SegmentName(std::string name) : name_(std::move(name)) { shm::Segment::remove(name_); }
  ~SegmentName() { shm::Segment::remove(name_); }
  SegmentName(const SegmentName&) = delete;
  SegmentName& operator=(const SegmentName&) = delete;
  const std::string& str() const { return name_; }

 private:
  std::string name_;
};

// The segment, its three dependencies and the parent's client that every
// case runs on. Thread safety: built by main before any benchmark runs; the
// benchmarks run on one thread.
class Fixture {
 public:
  explicit Fixture(const std::string& name)
      : name_(name),
        segment_(shm::Segment::create(name, segment_options())),
        cpus_(two_cpus()) {
    // What the daemon would publish.
    shm::find_or_claim_dependency(segment_, kRawDependency, kAdmitLimit, 0);
    shm::find_or_claim_dependency(segment_, kAdmitDependency, kAdmitLimit, 0);
    shm::find_or_claim_dependency(segment_, kRejectDependency, 0, 0);

    bh_options options{};
    options.segment = name_.str().c_str();
    options.flags = BH_OPEN_REQUIRE_SEGMENT;
    bh_client* client = nullptr;
    if (bh_client_open_opts(&options, &client) != 0) {
      throw std::runtime_error(std::string("bh_client_open: ") + bh_last_error());
    }
    client_.reset(client);
    if (bh_client_mode(client) != BH_MODE_SHARED) {
      throw std::runtime_error(std::string("client is not shared: ") + bh_client_status(client));
    }
    if (bh_dependency(client, kAdmitDependency, &admit_) != 0 ||
        bh_dependency(client, kRejectDependency, &reject_) != 0) {
      throw std::runtime_error(std::string("bh_dependency: ") + bh_last_error());
    }
  }

  const std::string& name() const { return name_.str(); }
  std::optional<CpuPair> cpus() const { return cpus_; }
  bh_dep* admit() const { return admit_; }
  bh_dep* reject() const { return reject_; }
  std::atomic<std::uint64_t>& word(const char* dependency) const {
    return segment_.dependency(*shm::find_dependency(segment_, dependency)).admission.word;
  }

  // Gives back the process slots of a reaped child, and any permits they
  // still hold, as the daemon's reclaim would: the slot the fork handler gave
  // the client it inherited, and its own client's if it was killed.
  void reclaim(pid_t child) {
    const shm::Capacities caps = segment_.capacities();
    for (std::uint32_t p = 0; p < caps.max_processes; ++p) {
      shm::ProcessIdentity& id = segment_.process(p).identity;
      // Relaxed, here and below: the child is reaped, and waitpid() ordered
      // all its writes before these reads.
      if (id.state.load(std::memory_order_relaxed) != shm::kSlotReady ||
          id.pid.load(std::memory_order_relaxed) != child) {
        continue;
      }
      for (std::uint32_t d = 0; d < caps.max_dependencies; ++d) {
        for (auto n = segment_.held(p, d).exchange(0, std::memory_order_relaxed); n > 0; --n) {
          segment_.dependency(d).admission.word.fetch_add(shm::kAdmissionRelease,
                                                          std::memory_order_relaxed);
        }
      }
      shm::release_process_slot(segment_, p);
    }
  }

 private:
  static shm::CreateOptions segment_options() {
    shm::CreateOptions o;
    // Room for the parent and a child with two clients; 8 stripes, so that
    // the child's slot never shares the parent's statistics stripe.
    o.capacities = {16, 16, 8};
    o.mode = 0600;
    return o;
  }

  struct CloseClient {
    void operator()(bh_client* c) const { bh_client_close(c); }
  };

  SegmentName name_;  // first: removed last, even when the constructor throws
  shm::Segment segment_;
  std::optional<CpuPair> cpus_;
  std::unique_ptr<bh_client, CloseClient> client_;
  bh_dep* admit_ = nullptr;
  bh_dep* reject_ = nullptr;
};

// --- The contending child.

// What parent and child share, in an anonymous shared mapping made before
// the fork.
struct Control {
  alignas(64) std::atomic<int> spinning{0};  // set once by the child
  alignas(64) std::atomic<int> stop{0};      // set once by the parent
  alignas(64) char error[256];               // why the child failed
};

[[noreturn]] void child_fail(Control* control, const std::string& why) {
  std::snprintf(control->error, sizeof control->error, "%s", why.c_str());
  ::_exit(2);
}

// The child's whole life. It never returns into the parent's code.
[[noreturn]] void child_main(const Fixture& fixture, Loop loop, int cpu, pid_t parent,
                             Control* control) {
  try {
    // Die with the parent, whatever kills it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    for (int sig : kCleanupSignals) ::signal(sig, SIG_DFL);
    if (!pin_to(cpu)) child_fail(control, "cannot pin the child to CPU " + std::to_string(cpu));
    // The client inherited from the parent is left alone: the fork handler
    // gave it a process slot of its own, which the parent reclaims.
    // Relaxed loads and stores of the flags: each is a lone value that
    // publishes no other memory.
    auto stopped = [control] { return control->stop.load(std::memory_order_relaxed) != 0; };
    int failed = 0;
    if (loop == Loop::kRawPair) {
      shm::Segment segment = shm::Segment::attach(fixture.name(), shm::Access::kReadWrite);
      const auto index = shm::find_dependency(segment, kRawDependency);
      if (!index) child_fail(control, std::string("no dependency ") + kRawDependency);
      std::atomic<std::uint64_t>& word = segment.dependency(*index).admission.word;
      control->spinning.store(1, std::memory_order_relaxed);
      while (!stopped()) {
        for (int i = 0; i < kChildBatch; ++i) raw_pair(word);
      }
    } else {
      bh_options options{};
      options.segment = fixture.name().c_str();
      options.flags = BH_OPEN_REQUIRE_SEGMENT;
      bh_client* client = nullptr;
      if (bh_client_open_opts(&options, &client) != 0) {
        child_fail(control, std::string("child: bh_client_open: ") + bh_last_error());
      }
      bh_dep* dep = nullptr;
      if (bh_dependency(client, kAdmitDependency, &dep) != 0) {
        child_fail(control, std::string("child: bh_dependency: ") + bh_last_error());
      }
      control->spinning.store(1, std::memory_order_relaxed);
      if (loop == Loop::kOwnTiming) {
        while (!stopped()) {
          for (int i = 0; i < kChildBatch; ++i) failed |= own_timing_pair(dep);
        }
      } else {
        while (!stopped()) {
          for (int i = 0; i < kChildBatch; ++i) failed |= caller_latency_pair(dep);
        }
      }
      bh_client_close(client);
    }
    if (failed != 0) child_fail(control, "child: a try_acquire was refused below the limit");
  } catch (const std::exception& e) {
    child_fail(control, std::string("child: ") + e.what());
  } catch (...) {
    child_fail(control, "child: unknown exception");
  }
  ::_exit(0);
}

pid_t reap(pid_t pid, int* status) {
  pid_t r;
  do {
    r = ::waitpid(pid, status, 0);
  } while (r < 0 && errno == EINTR);
  return r;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by ") + ::strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// A forked child that attaches to the segment and spins one loop on one
// dependency until stopped. However the parent leaves, the child is stopped
// (killed if need be), reaped and its slots reclaimed before this object
// goes. Thread safety: one thread, the one that made it.
class Child {
 public:
  Child(Fixture& fixture, Loop loop, int cpu) : fixture_(fixture) {
    void* shared = ::mmap(nullptr, sizeof(Control), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
      error_ = std::string("mmap: ") + std::strerror(errno);
      return;
    }
    control_ = new (shared) Control();
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) child_main(fixture, loop, cpu, parent, control_);
    if (pid_ < 0) error_ = std::string("fork: ") + std::strerror(errno);
  }

  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      reap(pid_, &status);
      fixture_.reclaim(pid_);
    }
    if (control_ != nullptr) {
      control_->~Control();
      ::munmap(control_, sizeof(Control));
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Waits until the child spins: "" then, else why not (and it is reaped).
  std::string wait_until_spinning() {
    if (pid_ <= 0) return error_;
    const auto give_up_at = std::chrono::steady_clock::now() + kChildStartTimeout;
    while (control_->spinning.load(std::memory_order_relaxed) == 0) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        fixture_.reclaim(std::exchange(pid_, -1));
        return "the child exited before it spun (" + describe_exit(status) + "): " + control_->error;
      }
      if (std::chrono::steady_clock::now() > give_up_at) return "the child did not start in time";
      const timespec pause{0, 100'000};
      ::nanosleep(&pause, nullptr);
    }
    return {};
  }

  // Stops the child and reaps it: "" when it exited cleanly.
  std::string stop() {
    if (pid_ <= 0) return error_;
    control_->stop.store(1, std::memory_order_relaxed);
    const auto give_up_at = std::chrono::steady_clock::now() + kChildStopTimeout;
    int status = 0;
    std::string why;
    while (::waitpid(pid_, &status, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() > give_up_at) {
        ::kill(pid_, SIGKILL);
        reap(pid_, &status);
        why = "the child did not stop in time; killed";
        break;
      }
      const timespec pause{0, 100'000};
      ::nanosleep(&pause, nullptr);
    }
    fixture_.reclaim(std::exchange(pid_, -1));
    if (!why.empty()) return why;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return "the child failed (" + describe_exit(status) + "): " + control_->error;
    }
    return {};
  }

 private:
  Fixture& fixture_;
  Control* control_ = nullptr;
  pid_t pid_ = -1;
  std::string error_;
};

// --- The cases.

void one_thread_raw_pair(benchmark::State& state, Fixture& f) {
  std::atomic<std::uint64_t>& word = f.word(kRawDependency);
  for (auto _ : state) raw_pair(word);
}

void one_thread_acquire_release(benchmark::State& state, Fixture& f) {
  bh_dep* dep = f.admit();
  int failed = 0;
  for (auto _ : state) failed |= own_timing_pair(dep);
  if (failed != 0) state.SkipWithError("a try_acquire was refused below the limit");
}

void one_thread_acquire_release_latency(benchmark::State& state, Fixture& f) {
  bh_dep* dep = f.admit();
  int failed = 0;
  for (auto _ : state) failed |= caller_latency_pair(dep);
  if (failed != 0) state.SkipWithError("a try_acquire was refused below the limit");
}

void one_thread_reject_at_limit(benchmark::State& state, Fixture& f) {
  std::atomic<std::uint64_t>& word = f.word(kRejectDependency);
  // Relaxed: only this thread touches the line during the case.
  const std::uint64_t before = word.load(std::memory_order_relaxed);
  bh_dep* dep = f.reject();
  bool admitted = false;
  for (auto _ : state) {
    bh_permit permit;
    if (bh_try_acquire(dep, &permit) != BH_REJECT_LIMIT) {
      admitted = true;
      bh_release(&permit, BH_IGNORE);
    }
  }
  if (admitted) {
    state.SkipWithError("a try_acquire was admitted at a limit of 0");
  } else if (word.load(std::memory_order_relaxed) != before) {
    state.SkipWithError("a rejection wrote the admission line");
  }
}

// The parent pinned to one CPU runs `loop` under the timer while a child
// pinned to the other spins the same loop on the same dependency.
void two_processes(benchmark::State& state, Fixture& f, Loop loop) {
  const std::optional<CpuPair> cpus = f.cpus();
  if (!cpus) {
    state.SkipWithError("two-process cases need two CPUs");
    return;
  }
  const PinnedTo pinned(cpus->parent);
  if (!pinned) {
    state.SkipWithError("cannot pin the parent to its CPU");
    return;
  }
  const char* dependency = loop == Loop::kRawPair ? kRawDependency : kAdmitDependency;
  std::atomic<std::uint64_t>& word = f.word(dependency);
  Child child(f, loop, cpus->child);
  if (const std::string why = child.wait_until_spinning(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  int failed = 0;
  switch (loop) {
    case Loop::kRawPair:
      for (auto _ : state) raw_pair(word);
      break;
    case Loop::kOwnTiming: {
      bh_dep* dep = f.admit();
      for (auto _ : state) failed |= own_timing_pair(dep);
      break;
    }
    case Loop::kCallerLatency: {
      bh_dep* dep = f.admit();
      for (auto _ : state) failed |= caller_latency_pair(dep);
      break;
    }
  }
  if (const std::string why = child.stop(); !why.empty()) {
    state.SkipWithError(why.c_str());
  } else if (failed != 0) {
    state.SkipWithError("a try_acquire was refused below the limit");
  } else if (shm::admission_inflight(word.load(std::memory_order_relaxed)) != 0) {
    // Relaxed: the child is reaped.
    state.SkipWithError("calls left in flight after both processes stopped");
  }
}

void two_processes_raw_pair(benchmark::State& state, Fixture& f) {
  two_processes(state, f, Loop::kRawPair);
}
void two_processes_acquire_release(benchmark::State& state, Fixture& f) {
  two_processes(state, f, Loop::kOwnTiming);
}
void two_processes_acquire_release_latency(benchmark::State& state, Fixture& f) {
  two_processes(state, f, Loop::kCallerLatency);
}

struct Case {
  const char* name;      // the benchmark's, for --benchmark_filter
  const char* label;     // the table's
  const char* baseline;  // the raw pair of the same setting
  void (*run)(benchmark::State&, Fixture&);
};

constexpr Case kCases[] = {
    {"1thread/raw_pair", "raw fetch_add+fetch_sub pair, 1 thread", "1thread/raw_pair",
     one_thread_raw_pair},
    {"1thread/acquire_release", "try_acquire+release (own timing), 1 thread", "1thread/raw_pair",
     one_thread_acquire_release},
    {"1thread/acquire_release_latency", "try_acquire+release_latency (caller's latency), 1 thread",
     "1thread/raw_pair", one_thread_acquire_release_latency},
    {"1thread/reject_at_limit", "rejection at the limit (try_acquire refused), 1 thread",
     "1thread/raw_pair", one_thread_reject_at_limit},
    {"2proc/raw_pair", "raw fetch_add+fetch_sub pair, 2 processes", "2proc/raw_pair",
     two_processes_raw_pair},
    {"2proc/acquire_release", "try_acquire+release (own timing), 2 processes", "2proc/raw_pair",
     two_processes_acquire_release},
    {"2proc/acquire_release_latency", "try_acquire+release_latency (caller's latency), 2 processes",
     "2proc/raw_pair", two_processes_acquire_release_latency},
};

// --- The report.

double ns_per(benchmark::TimeUnit unit) {
  switch (unit) {
    case benchmark::kNanosecond: return 1;
    case benchmark::kMicrosecond: return 1e3;
    case benchmark::kMillisecond: return 1e6;
    case benchmark::kSecond: return 1e9;
  }
  return 1;
}

// The console report, keeping each case's ns per pair for the ratio table.
// Thread safety: called by Google Benchmark on the thread that runs it.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  using ConsoleReporter::ConsoleReporter;

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const double ns = run.GetAdjustedRealTime() * ns_per(run.time_unit);
      const std::string& name = run.run_name.function_name;
      if (run.run_type == Run::RT_Aggregate) {
        if (run.aggregate_name == "median") medians_[name] = ns;
      } else {
        samples_[name].push_back(ns);
      }
    }
  }

  // Whether any case ran (not so under --benchmark_list_tests).
  bool any() const { return !medians_.empty() || !samples_.empty(); }

  // The case's median over its repetitions; nullopt when it did not run or
  // failed.
  std::optional<double> ns_per_pair(const std::string& name) const {
    if (auto it = medians_.find(name); it != medians_.end()) return it->second;
    auto it = samples_.find(name);
    if (it == samples_.end() || it->second.empty()) return std::nullopt;
    std::vector<double> v = it->second;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }

 private:
  std::map<std::string, double> medians_;
  std::map<std::string, std::vector<double>> samples_;
};

void print_ratios(const RatioReporter& reporter, const std::string& command,
                  std::optional<CpuPair> cpus) {
  if (!reporter.any()) return;
  std::printf("\nAdmission next to the floor: ns per acquire+release pair (real time) and the\n"
              "ratio to the raw atomic pair of the same setting, measured in this run.\n");
  std::printf("command: %s\n", command.c_str());
  if (cpus) std::printf("2 processes: parent on CPU %d, child on CPU %d\n", cpus->parent, cpus->child);
  std::size_t width = 0;
  for (const Case& c : kCases) width = std::max(width, std::strlen(c.label) + 1);
  for (const Case& c : kCases) {
    const std::string label = std::string(c.label) + ":";
    const std::optional<double> ns = reporter.ns_per_pair(c.name);
    const std::optional<double> base = reporter.ns_per_pair(c.baseline);
    if (!ns) {
      std::printf("  %-*s not run (filtered out or failed)\n", static_cast<int>(width), label.c_str());
    } else if (!base || *base <= 0) {
      std::printf("  %-*s %7.1f ns, no raw pair to compare with\n", static_cast<int>(width),
                  label.c_str(), *ns);
    } else {
      std::printf("  %-*s %7.1f ns, %5.1fx raw pair%s\n", static_cast<int>(width), label.c_str(), *ns,
                  *ns / *base, std::strcmp(c.name, c.baseline) == 0 ? " (baseline)" : "");
    }
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace bulkhead::bench

int main(int argc, char** argv) {
  using namespace bulkhead::bench;
  // Before Initialize() takes the benchmark flags out of argv.
  std::string command = argv[0];
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  const std::string name = "bhbench-" + std::to_string(::getpid());
  std::snprintf(g_segment_path, sizeof g_segment_path, "/dev/shm/%s", name.c_str());
  for (int sig : kCleanupSignals) ::signal(sig, remove_segment_and_die);

  std::optional<Fixture> fixture;
  try {
    fixture.emplace(name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bulkhead-bench: %s\n", e.what());
    return 1;
  }
  const std::optional<CpuPair> cpus = fixture->cpus();
  benchmark::AddCustomContext("segment", "/dev/shm/" + name);
  benchmark::AddCustomContext(
      "two-process cases", cpus ? "parent on CPU " + std::to_string(cpus->parent) + ", child on CPU " +
                                      std::to_string(cpus->child)
                                : std::string("skipped: fewer than two CPUs"));
  for (const Case& c : kCases) {
    benchmark::RegisterBenchmark(c.name, [&f = *fixture, run = c.run](benchmark::State& s) { run(s, f); })
        ->Unit(benchmark::kNanosecond)
        ->UseRealTime();
  }

  RatioReporter reporter(::isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_ColorTabular
                                                 : benchmark::ConsoleReporter::OO_Tabular);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_ratios(reporter, command, cpus);
  benchmark::Shutdown();
  return 0;
}
