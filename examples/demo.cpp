// bulkhead-demo: several processes call two simulated dependencies through
// libbulkhead while bulkheadd learns their limits; once a second it prints
// what the segment shows.
//
// The simulated dependency behaves like a server with `capacity` workers:
// a call's latency is its base latency times max(1, in-flight / capacity),
// with in-flight counted host-wide, so admitting more than the dependency
// can serve only makes every call slower. Midway through the run the
// latency of "payments" jumps 5x (a slow database), then heals; "recs"
// stays steady, and keeps its limit, which is the point of a bulkhead.
//
// Usage: bulkhead-demo [--segment NAME] [--seconds N] [--processes N] [--threads N]
// (--help says more). It exits 1 if bulkheadd stops ticking meanwhile.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bulkhead/client.hpp"
#include "shm/names.hpp"
#include "shm/segment.hpp"
#include "shm/stats.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Simulated {
  const char* name;
  double capacity;                    // calls it serves at once without slowing
  std::chrono::microseconds base;     // latency when not overloaded
  double slow_factor;                 // base multiplier during the slow phase
  std::chrono::milliseconds timeout;  // the caller gives up (a dropped call)
};

const Simulated kDependencies[] = {
    {"payments", 8, 4000us, 5.0, 200ms},
    {"recs", 16, 2000us, 1.0, 200ms},
};

// A daemon silent this long has stopped (it ticks every 100 ms by default).
constexpr double kStaleAfterS = 3;

struct Options {
  std::string segment = "bulkhead";
  int seconds = 30;
  int processes = 4;
  int threads = 12;  // per process and dependency
};

// The slow phase runs through the middle third of the run.
bool slow_phase(Clock::time_point start, int seconds, Clock::time_point now) {
  const double t = std::chrono::duration<double>(now - start).count();
  return t >= seconds / 3.0 && t < 2.0 * seconds / 3.0;
}

void caller(bulkhead::Dependency dep, const Simulated& sim, Clock::time_point start,
            const Options& o, unsigned seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> jitter(0.0, 0.25);
  const auto end = start + std::chrono::seconds(o.seconds);
  for (auto now = Clock::now(); now < end; now = Clock::now()) {
    bulkhead::Permit permit = dep.try_acquire();
    if (!permit) {
      std::this_thread::sleep_for(2ms);  // shed: the caller would serve a fallback
      continue;
    }
    const double factor = slow_phase(start, o.seconds, now) ? sim.slow_factor : 1.0;
    const double load = std::max(1.0, static_cast<double>(dep.inflight()) / sim.capacity);
    const auto latency = std::chrono::duration_cast<std::chrono::microseconds>(
        sim.base * factor * load * jitter(rng));
    if (latency > sim.timeout) {
      std::this_thread::sleep_for(sim.timeout);
      permit.dropped();
    } else {
      std::this_thread::sleep_for(latency);
      permit.success();
    }
  }
}

[[noreturn]] void run_worker(const Options& o, Clock::time_point start, int worker, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // stopped with the demo
  if (::getppid() != parent) std::_Exit(1);
  try {
    bulkhead::Client client(o.segment);
    std::vector<std::thread> threads;
    for (const Simulated& sim : kDependencies) {
      bulkhead::Dependency dep = client.dependency(sim.name);
      for (int t = 0; t < o.threads; ++t) {
        threads.emplace_back(caller, dep, std::cref(sim), start, std::cref(o),
                             static_cast<unsigned>(worker * 1000 + t));
      }
    }
    for (auto& t : threads) t.join();
    std::_Exit(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker %d: %s\n", worker, e.what());
    std::_Exit(1);
  }
}

// Seconds since bulkheadd's last tick, as the segment says (both on
// CLOCK_MONOTONIC, which bh_now_ns() reads).
double heartbeat_age_s(const bulkhead::shm::Segment& segment) {
  const double now_ns = static_cast<double>(bh_now_ns());
  return (now_ns - static_cast<double>(segment.header().heartbeat_ns.load(std::memory_order_relaxed))) / 1e9;
}

// Prints a line per dependency each second; false if bulkheadd stopped
// ticking (its limits no longer adapt: the demo would show nothing).
bool report(const bulkhead::shm::Segment& segment, Clock::time_point start, const Options& o) {
  namespace shm = bulkhead::shm;
  struct Seen {
    std::uint32_t index;
    shm::DependencyCounters last;
  };
  std::vector<Seen> seen;
  for (const Simulated& sim : kDependencies) {
    for (int tries = 0; tries < 100; ++tries) {  // workers claim the names
      if (auto i = shm::find_dependency(segment, sim.name)) {
        seen.push_back({*i, shm::read_counters(segment, *i)});
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
  }
  std::printf("%5s  %-9s %6s %9s %9s %9s %10s %10s\n", "t(s)", "dependency", "limit", "in-flight",
              "p50(ms)", "p99(ms)", "admitted/s", "rejected/s");
  for (int second = 1; second <= o.seconds; ++second) {
    std::this_thread::sleep_until(start + std::chrono::seconds(second));
    if (const double age = heartbeat_age_s(segment); age > kStaleAfterS) {
      std::fprintf(stderr, "bulkhead-demo: bulkheadd has not ticked for %.0f s: its limits no longer adapt "
                   "(is it still running? its log says why it stopped)\n", age);
      return false;
    }
    const bool slow = slow_phase(start, o.seconds, Clock::now() - 500ms);
    for (Seen& s : seen) {
      const shm::DependencySlot& slot = segment.dependency(s.index);
      const shm::DependencyCounters now = shm::read_counters(segment, s.index);
      const shm::DependencyCounters d = now.since(s.last);
      s.last = now;
      std::printf("%5d  %-9s %6u %9u %9.1f %9.1f %10llu %10llu%s\n", second, slot.identity.name,
                  slot.control.limit.load(std::memory_order_relaxed),
                  shm::admission_inflight(slot.admission.word.load(std::memory_order_relaxed)),
                  static_cast<double>(shm::histogram_quantile_ns(d.histogram, 0.50)) / 1e6,
                  static_cast<double>(shm::histogram_quantile_ns(d.histogram, 0.99)) / 1e6,
                  static_cast<unsigned long long>(d.ok + d.dropped + d.ignored),
                  static_cast<unsigned long long>(d.rejected),
                  slow && std::strcmp(slot.identity.name, "payments") == 0 ? "  <- latency x5" : "");
    }
    std::fflush(stdout);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"bulkhead-demo: processes call two simulated dependencies, payments and recs, through libbulkhead\n"
               "while bulkheadd learns their limits; payments' latency jumps 5x through the middle third of the\n"
               "run. Once a second it prints what the segment shows. scripts/demo.sh runs it beside a bulkheadd."};
  app.add_option("--segment", o.segment, "the segment bulkheadd publishes in")
      ->envname("BULKHEAD_SEGMENT")
      ->default_str("bulkhead")
      ->type_name("NAME")
      ->check(CLI::Validator(
          [](std::string& name) {
            const char* why = bulkhead::shm::check_segment_name(name);
            return why != nullptr ? std::string(why) : std::string();
          },
          "", "SEGMENT"));
  app.add_option("--seconds", o.seconds, "how long it runs")->check(CLI::Range(3, 86400))->default_val(30);
  app.add_option("--processes", o.processes, "client processes")->check(CLI::Range(1, 64))->default_val(4);
  app.add_option("--threads", o.threads, "calling threads per process and dependency")
      ->check(CLI::Range(1, 256))
      ->default_val(12);
  CLI11_PARSE(app, argc, argv);

  std::optional<bulkhead::shm::Segment> segment;
  try {
    segment = bulkhead::shm::Segment::attach(o.segment, bulkhead::shm::Access::kReadOnly);
  } catch (const bulkhead::shm::SegmentError& e) {
    std::fprintf(stderr, "bulkhead-demo: %s (is bulkheadd running?)\n", e.what());
    return 1;
  }
  std::printf("bulkhead-demo: %d processes x %d threads per dependency on /dev/shm/%s, %d s;\n"
              "payments' latency jumps 5x from %.1f s to %.1f s.\n\n",
              o.processes, o.threads, o.segment.c_str(), o.seconds, o.seconds / 3.0, 2 * o.seconds / 3.0);
  std::fflush(stdout);  // not copied into the workers' buffers
  const auto start = Clock::now();
  const pid_t parent = ::getpid();
  std::vector<pid_t> workers;
  for (int w = 0; w < o.processes; ++w) {
    const pid_t pid = fork();
    if (pid == 0) run_worker(o, start, w, parent);
    if (pid < 0) {
      std::perror("bulkhead-demo: fork");
      break;
    }
    workers.push_back(pid);
  }
  bool ok = static_cast<int>(workers.size()) == o.processes && report(*segment, start, o);
  if (!ok) {
    for (pid_t pid : workers) ::kill(pid, SIGTERM);
  }
  for (pid_t pid : workers) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok ? 0 : 1;
}
