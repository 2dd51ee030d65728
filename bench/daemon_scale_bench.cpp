// bulkhead-scale-bench: what does one daemon tick cost, and how much memory
// does the daemon hold, at fleet-sized capacities (issue 7, item 3)?
//
// For each size (dependencies x processes) it creates a segment of its own,
// /dev/shm/bhscale-<pid>, with those capacities, and forks one real process
// per process slot. Each process opens a libbulkhead client on the segment
// (so it holds a real process slot, checked alive by the daemon's
// dead-process scan every tick) and, once per round, goes through its share
// of the dependencies: per dependency it releases the permit it held since
// the last round, completes `samples` calls (bh_try_acquire_untimed +
// bh_release_latency, latencies that vary by dependency and round, one in
// ten dropped) and takes a permit it holds across the tick. Every
// dependency therefore gets at least window_min_samples (10) completions
// between two ticks, and every tick has a real window to close and a real
// policy update to run for every dependency, with permits in flight for the
// drift scan to sum.
//
// The daemon is the real control loop (daemon/control_loop.*) with the real
// Prometheus metrics (daemon/metrics.*, listening on a free loopback port),
// as bulkheadd runs them, on a fake clock advanced 100 ms per tick. Rounds
// and ticks alternate: the processes write, then the loop ticks alone, so
// the tick's CPU time (CLOCK_THREAD_CPUTIME_ID) is the tick's own. Each size
// runs in a process of its own, so that its resident memory (VmRSS, split
// into RssAnon, the daemon's own, and RssShmem, the segment pages it
// touched, and VmHWM, the peak) is that size's.
//
// After the ticks and a scrape, one reload (SIGHUP's work, timed): the
// same config with --patterns pattern tables that match none of the names.
//
// Checks, whatever the timings: every measured tick hands a window to the
// policy of every dependency (the controller's window count grows by one)
// and the segment carries the limit each controller answered; otherwise it
// exits 1. That is what the ctest smoke run looks at.
//
//   bulkhead-scale-bench                      # the table: 256/1024/4096 x 16/256
//   bulkhead-scale-bench --deps 4096 --processes 256 --ticks 50
//   bulkhead-scale-bench --deps 16384 --processes 16 --ticks 3 --patterns 5000
//   bulkhead-scale-bench --smoke              # 64 x 8, 3 ticks: checks only
//
// The timing figures need a quiet machine: on a shared one, other tenants'
// work evicts the tick's cache lines between ticks.
#include <arpa/inet.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/cleanup.hpp"
#include "bulkhead/bulkhead.h"
#include "daemon/config.hpp"
#include "daemon/control_loop.hpp"
#include "daemon/metrics.hpp"
#include "shm/segment.hpp"

namespace bulkhead::bench {
namespace {

constexpr std::uint64_t kTickNs = 100'000'000;  // the default tick_ms, on the fake clock
constexpr int kWarmupTicks = 3;                 // adoption, first windows, metrics created

struct Size {
  std::uint32_t dependencies;
  std::uint32_t processes;
};

struct Options {
  std::vector<Size> sizes;
  std::uint32_t stripes = 8;
  std::uint32_t samples = 12;  // completions per dependency per process per round
  int ticks = 20;
  std::uint32_t patterns = 0;  // pattern tables the reload adds
  bool metrics = true;
  bool smoke = false;
};

// What one size's run reports to the parent, in a shared mapping.
struct Result {
  int ok;  // 1: ran and every check held
  char error[256];
  std::uint64_t segment_bytes;
  double tick_cpu_ms_median;
  double tick_cpu_ms_max;
  double tick_wall_ms_median;
  double round_ms_median;  // the processes' writes between two ticks, wall time
  std::uint64_t completions_per_round;
  std::uint64_t vm_rss_kb, rss_anon_kb, rss_shmem_kb, vm_hwm_kb;
  double lookup_found_ns;  // a claimed name's slot found
  double lookup_miss_ns;   // a name not claimed: the probe ends
  double pattern_scan_ns;  // no published pattern matches it
  double reload_parse_ms;  // a reload's config read and checked, as bulkheadd's SIGHUP does
  double reload_apply_ms;  // then applied to every dependency (ControlLoop::apply())
  // One Prometheus scrape of /metrics after the ticks (0 without metrics):
  // the text's bytes and series, the bytes gzip'd as Prometheus asks for
  // them, and the daemon's memory after both (VmHWM: their peak).
  std::uint64_t scrape_bytes, scrape_series, scrape_gzip_bytes;
  std::uint64_t scraped_rss_kb, scraped_rss_anon_kb, scraped_hwm_kb;
  std::uint64_t trimmed_rss_kb;  // then after Metrics::trim_after_scrape(), as bulkheadd's next tick does
  double trim_ms;                // what that call took, wall time
};

// --- Rounds: the parent and the writer processes, through futex words in
// --- a shared mapping made before the forks.

struct Rounds {
  alignas(64) std::atomic<std::uint32_t> round{0};  // the parent bumps it; 0: set up
  alignas(64) std::atomic<std::uint32_t> done{0};   // writers that finished the round
  alignas(64) std::atomic<std::uint32_t> stop{0};
  alignas(64) std::atomic<std::uint32_t> failed{0};
  char error[256];
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen) {
  // Shared, not private: the word lives in a mapping of several processes.
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, seen, nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

template <typename T>
T* shared_new() {
  void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
  return new (p) T();
}

std::string dependency_name(std::uint32_t d) {
  char name[32];
  std::snprintf(name, sizeof name, "dep-%05u", d);
  return name;
}

// The dependencies writer `w` of `processes` writes to: every one whose
// index is w modulo processes, or with fewer dependencies than processes,
// the one at w modulo dependencies (several writers then share it).
std::vector<std::uint32_t> share_of(std::uint32_t w, const Size& size) {
  std::vector<std::uint32_t> mine;
  if (size.dependencies < size.processes) {
    mine.push_back(w % size.dependencies);
  } else {
    for (std::uint32_t d = w; d < size.dependencies; d += size.processes) mine.push_back(d);
  }
  return mine;
}

[[noreturn]] void writer_fail(Rounds* r, const std::string& why) {
  if (r->failed.exchange(1) == 0) std::snprintf(r->error, sizeof r->error, "%s", why.c_str());
  r->done.fetch_add(1);
  futex_wake_all(r->done);
  ::_exit(2);
}

// A writer process's whole life: a client of its own, its share of the
// dependencies, one burst of completions per round.
[[noreturn]] void writer_main(std::uint32_t w, const Size& size, const Options& o,
                              const std::string& segment, Rounds* r, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);
  cleanup::keep_on_signal();
  bh_options options{};
  options.segment = segment.c_str();
  options.flags = BH_OPEN_REQUIRE_SEGMENT;
  bh_client* client = nullptr;
  if (bh_client_open_opts(&options, &client) != 0) writer_fail(r, std::string("bh_client_open: ") + bh_last_error());
  const std::vector<std::uint32_t> mine = share_of(w, size);
  std::vector<bh_dep*> deps(mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    if (bh_dependency(client, dependency_name(mine[i]).c_str(), &deps[i]) != 0) {
      writer_fail(r, std::string("bh_dependency: ") + bh_last_error());
    }
  }
  std::vector<bh_permit> held(deps.size());
  std::vector<bool> holding(deps.size(), false);
  std::uint64_t rng = 0x9e3779b97f4a7c15ull * (w + 1);
  for (std::uint32_t round = 1;; ++round) {
    // Announce the previous round done (round 1: set up), then wait for this one.
    r->done.fetch_add(1);
    futex_wake_all(r->done);
    for (std::uint32_t seen; (seen = r->round.load()) < round && r->stop.load() == 0;) futex_wait(r->round, seen);
    const bool stop = r->stop.load() != 0;
    for (std::size_t i = 0; i < deps.size(); ++i) {
      // A latency per dependency, drifting by round: 0.5 to 5 ms.
      const std::uint64_t base_ns = 500'000 + (mine[i] % 10) * 450'000;
      const std::uint64_t round_ns = base_ns + (round % 8) * base_ns / 16;
      if (holding[i]) {
        bh_release_latency(&held[i], BH_SUCCESS, round_ns);
        holding[i] = false;
      }
      if (stop) continue;
      for (std::uint32_t s = 0; s < o.samples; ++s) {
        bh_permit p;
        // The limit may be below what the writers sharing a dependency
        // hold at once: a refusal is a refusal, counted by the library.
        if (bh_try_acquire_untimed(deps[i], &p) != 0) continue;
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        const std::uint64_t jitter_ns = (rng >> 33) % (round_ns / 4 + 1);
        bh_release_latency(&p, s % 10 == 9 ? BH_DROPPED : BH_SUCCESS, round_ns + jitter_ns);
      }
      holding[i] = bh_try_acquire_untimed(deps[i], &held[i]) == 0;
    }
    if (stop) break;
  }
  bh_client_close(client);
  ::_exit(0);
}

// --- Measuring.

double cpu_ms_now() {
  timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double wall_ms_now() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// The body of GET /metrics on loopback `port`, asking for gzip or not.
std::string scrape(std::uint16_t port, bool gzip) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("scrape: cannot connect to 127.0.0.1:" + std::to_string(port));
  }
  const std::string request = std::string("GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n") +
                              (gzip ? "Accept-Encoding: gzip\r\n" : "") + "\r\n";
  if (::write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    throw std::runtime_error("scrape: cannot send the request");
  }
  std::string response;
  char buffer[64 * 1024];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) response.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  const std::size_t body = response.find("\r\n\r\n");
  if (response.compare(0, 12, "HTTP/1.1 200") != 0 || body == std::string::npos) {
    throw std::runtime_error("scrape: no 200 answer");
  }
  return response.substr(body + 4);
}

// Wall time per call of `lookup(i)` over i = 0 .. n-1, in ns; throws when
// one answers other than `expect`.
template <typename Lookup>
double ns_per_lookup(std::uint32_t n, bool expect, const char* what, Lookup lookup) {
  const double start = wall_ms_now();
  for (std::uint32_t i = 0; i < n; ++i) {
    if (lookup(i) != expect) {
      throw std::runtime_error(std::string(what) + ": lookup " + std::to_string(i) + " answered " +
                               (expect ? "no" : "yes"));
    }
  }
  return (wall_ms_now() - start) * 1e6 / n;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// A "Key:   123 kB" line of /proc/self/status, in kB; 0 when absent.
std::uint64_t status_kb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size() + 1, key + ":") == 0) {
      return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
    }
  }
  return 0;
}

std::string config_text(const std::string& segment, const Size& size, const Options& o) {
  return "[daemon]\nsegment = \"" + segment + "\"\nmax_dependencies = " + std::to_string(size.dependencies) +
         "\nmax_processes = " + std::to_string(size.processes) + "\nstats_stripes = " +
         std::to_string(o.stripes) + "\nmetrics_listen = \"" + (o.metrics ? "127.0.0.1:0" : "") +
         "\"\nlog_level = \"warn\"\n";
}

class Writers {
 public:
  Writers(const Size& size, const Options& o, const std::string& segment, Rounds* r) : r_(r) {
    const pid_t parent = ::getpid();
    for (std::uint32_t w = 0; w < size.processes; ++w) {
      const pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
      if (pid == 0) writer_main(w, size, o, segment, r, parent);
      pids_.push_back(pid);
    }
  }
  ~Writers() {
    r_->stop.store(1);
    futex_wake_all(r_->round);
    for (pid_t pid : pids_) {
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  }
  Writers(const Writers&) = delete;
  Writers& operator=(const Writers&) = delete;

  // Every writer has finished `count` announcements; false when one failed.
  bool wait_done(std::uint32_t count) {
    for (std::uint32_t seen; (seen = r_->done.load()) < count;) futex_wait(r_->done, seen);
    return r_->failed.load() == 0;
  }
  // Starts the next round and waits for every writer to finish it.
  bool round(std::uint32_t n, std::uint32_t processes) {
    r_->round.store(n);
    futex_wake_all(r_->round);
    return wait_done((n + 1) * processes);
  }

 private:
  Rounds* r_;
  std::vector<pid_t> pids_;
};

// One size, in the calling (forked) process. Fills `out`.
void run_size(const Size& size, const Options& o, Result* out) {
  const cleanup::SegmentName segment_name("bhscale-" + std::to_string(::getpid()));
  const std::string& segment = segment_name.str();
  const daemon::Config config = daemon::parse_config(config_text(segment, size, o), "bulkhead-scale-bench");
  shm::CreateOptions create;
  create.capacities = {size.dependencies, size.processes, o.stripes, config.daemon.queue_slots};
  create.mode = 0600;
  shm::Segment seg = shm::Segment::create(segment, create);
  out->segment_bytes = seg.size();
  // The names, as clients would claim them (the daemon adopts them at its first tick).
  for (std::uint32_t d = 0; d < size.dependencies; ++d) {
    const auto initial = static_cast<std::uint32_t>(config.defaults.bounds.initial);
    shm::find_or_claim_dependency(seg, dependency_name(d), initial, 0);
  }

  Rounds* rounds = shared_new<Rounds>();
  // The writers are forked before the metrics' threads start.
  Writers writers(size, o, segment, rounds);
  if (!writers.wait_done(size.processes)) throw std::runtime_error(rounds->error);

  std::unique_ptr<daemon::Metrics> metrics;
  if (o.metrics) metrics = std::make_unique<daemon::Metrics>(config.daemon.metrics_listen);
  daemon::ControlLoop loop(seg, config, metrics.get());

  std::uint64_t now_ns = 1'000'000'000;
  std::vector<double> cpu_ms, wall_ms, round_ms;
  std::uint32_t round = 0;
  for (int t = 0; t < kWarmupTicks + o.ticks; ++t) {
    const double round_start = wall_ms_now();
    if (!writers.round(++round, size.processes)) throw std::runtime_error(rounds->error);
    round_ms.push_back(wall_ms_now() - round_start);
    std::vector<std::uint64_t> windows_before;
    for (const auto& v : loop.view()) windows_before.push_back(v.windows);

    now_ns += kTickNs;
    const double wall0 = wall_ms_now(), cpu0 = cpu_ms_now();
    loop.tick(now_ns);
    const double cpu1 = cpu_ms_now(), wall1 = wall_ms_now();
    if (metrics) metrics->observe_tick((wall1 - wall0) / 1e3);  // as bulkheadd's main does

    const auto view = loop.view();
    if (view.size() != size.dependencies) {
      throw std::runtime_error("tick " + std::to_string(t) + ": the loop tracks " + std::to_string(view.size()) +
                               " dependencies of " + std::to_string(size.dependencies));
    }
    if (t < kWarmupTicks) continue;  // the first ticks adopt the slots and open the windows
    cpu_ms.push_back(cpu1 - cpu0);
    wall_ms.push_back(wall1 - wall0);
    for (std::size_t i = 0; i < view.size(); ++i) {
      if (view[i].windows != windows_before[i] + 1) {
        throw std::runtime_error("tick " + std::to_string(t) + ": dependency " + view[i].name + " closed " +
                                 std::to_string(view[i].windows - windows_before[i]) + " windows, not 1");
      }
      const auto index = shm::find_dependency(seg, view[i].name);
      const std::uint32_t published =
          index ? seg.dependency(*index).control.limit.load(std::memory_order_relaxed) : 0;
      if (!index || published != view[i].limit) {
        throw std::runtime_error("tick " + std::to_string(t) + ": dependency " + view[i].name + " publishes " +
                                 std::to_string(published) + ", its policy answered " + std::to_string(view[i].limit));
      }
    }
  }
  out->tick_cpu_ms_median = median(cpu_ms);
  out->tick_cpu_ms_max = cpu_ms.empty() ? 0 : *std::max_element(cpu_ms.begin(), cpu_ms.end());
  out->tick_wall_ms_median = median(wall_ms);
  out->round_ms_median = median(round_ms);
  std::uint64_t completions = 0;
  for (std::uint32_t w = 0; w < size.processes; ++w) completions += share_of(w, size).size() * o.samples;
  out->completions_per_round = completions;
  out->vm_rss_kb = status_kb("VmRSS");
  out->rss_anon_kb = status_kb("RssAnon");
  out->rss_shmem_kb = status_kb("RssShmem");
  out->vm_hwm_kb = status_kb("VmHWM");
  if (metrics) {
    const std::string text = scrape(metrics->port(), false);
    out->scrape_bytes = text.size();
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t end = std::min(text.find('\n', at), text.size());
      out->scrape_series += text[at] != '#' && end > at;
      at = end + 1;
    }
    out->scrape_gzip_bytes = scrape(metrics->port(), true).size();
    out->scraped_rss_kb = status_kb("VmRSS");
    out->scraped_rss_anon_kb = status_kb("RssAnon");
    out->scraped_hwm_kb = status_kb("VmHWM");
    const double trim_start = wall_ms_now();
    if (!metrics->trim_after_scrape(bh_now_ns() + 1'000'000'000)) throw std::runtime_error("no trim after the scrape");
    out->trim_ms = wall_ms_now() - trim_start;
    out->trimmed_rss_kb = status_kb("VmRSS");
  }

  // A client's first lookup of a name (bh_dependency), on the full table:
  // the hash probe that finds a claimed name; the probe for a name not
  // claimed, which ends at a free slot, here none (every client's, before
  // its claim; on a full table the claim is refused, ENOSPC); and what a
  // strict client adds for a name it does not find before it refuses it
  // (ENOENT): every slot's flags scanned for a published pattern
  // (shm::matches_pattern(); none here, each adds a name copy and an
  // fnmatch). Back to back: the slots' lines are in cache after the first.
  std::vector<std::string> names, unknown;
  for (std::uint32_t d = 0; d < size.dependencies; ++d) {
    names.push_back(dependency_name(d));
    unknown.push_back("unknown-" + std::to_string(d));
  }
  // A reload, after the scrape: the same config with o.patterns pattern
  // tables that match none of the names (each name is matched against
  // every one, and each pattern against the earlier ones for a shadow).
  {
    std::string text = config_text(segment, size, o);
    for (std::uint32_t p = 0; p < o.patterns; ++p) {
      text += "[dependency.\"svc-" + std::to_string(p) + "-*\"]\nmax_limit = 500\n";
    }
    const double start = wall_ms_now();
    const daemon::Config next = daemon::parse_config(text, "bulkhead-scale-bench reload", &config.daemon);
    const double parsed = wall_ms_now();
    loop.apply(next);
    out->reload_parse_ms = parsed - start;
    out->reload_apply_ms = wall_ms_now() - parsed;
    if (loop.view().size() != size.dependencies) throw std::runtime_error("the reload lost dependencies");
  }
  out->lookup_found_ns = ns_per_lookup(size.dependencies, true, "a claimed name", [&](std::uint32_t i) {
    return shm::find_dependency(seg, names[i]).has_value();
  });
  out->lookup_miss_ns = ns_per_lookup(size.dependencies, false, "a name not claimed", [&](std::uint32_t i) {
    return shm::find_dependency(seg, unknown[i]).has_value();
  });
  out->pattern_scan_ns = ns_per_lookup(size.dependencies, false, "a name no pattern matches", [&](std::uint32_t i) {
    return shm::matches_pattern(seg, unknown[i]);
  });
  out->ok = 1;
}

bool parse_u32(const char* text, std::uint32_t* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long v = std::strtoul(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v == 0 || v > UINT32_MAX) return false;
  *out = static_cast<std::uint32_t>(v);
  return true;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--deps N --processes P] [--stripes S] [--ticks T] [--samples K] [--patterns N]\n"
               "          [--no-metrics] [--smoke]\n"
               "  without --deps/--processes: every size of 256/1024/4096 dependencies x 16/256 processes\n",
               argv0);
  return 2;
}

}  // namespace
}  // namespace bulkhead::bench

int main(int argc, char** argv) {
  using namespace bulkhead::bench;
  Options o;
  std::uint32_t deps = 0, processes = 0;
  std::string command = argv[0];
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::uint32_t* out) {
      return i + 1 < argc && parse_u32(argv[++i], out);
    };
    std::uint32_t ticks = 0;
    if (a == "--deps") {
      if (!value(&deps)) return usage(argv[0]);
    } else if (a == "--processes") {
      if (!value(&processes)) return usage(argv[0]);
    } else if (a == "--stripes") {
      if (!value(&o.stripes)) return usage(argv[0]);
    } else if (a == "--samples") {
      if (!value(&o.samples)) return usage(argv[0]);
    } else if (a == "--ticks") {
      if (!value(&ticks)) return usage(argv[0]);
      o.ticks = static_cast<int>(std::min<std::uint32_t>(ticks, 100000));
    } else if (a == "--patterns") {
      if (i + 1 >= argc || (std::strcmp(argv[i + 1], "0") != 0 && !parse_u32(argv[i + 1], &o.patterns))) {
        return usage(argv[0]);
      }
      ++i;
    } else if (a == "--no-metrics") {
      o.metrics = false;
    } else if (a == "--smoke") {
      o.smoke = true;
    } else {
      return usage(argv[0]);
    }
  }
  if ((deps == 0) != (processes == 0)) return usage(argv[0]);
  if (o.smoke) {
    o.sizes = {{64, 8}};
    o.ticks = std::min(o.ticks, 3);
  } else if (deps != 0) {
    o.sizes = {{deps, processes}};
  } else {
    for (std::uint32_t d : {256u, 1024u, 4096u}) {
      for (std::uint32_t p : {16u, 256u}) o.sizes.push_back({d, p});
    }
  }
  // A window must close every tick: at least window_min_samples (10) ok
  // completions per dependency per round; one in ten is a drop.
  if (o.samples < 12) o.samples = 12;
  spdlog::set_level(spdlog::level::warn);

  std::printf("One daemon tick (the real control loop%s, fake clock, 100 ms per tick) after a round of\n"
              "writes by real processes; %d measured ticks per size after %d warm-up ticks; %u stats stripes.\n"
              "Each size fills both of the segment's tables, so the daemon logs once per size that they are full.\n"
              "command: %s\n\n",
              o.metrics ? " and Prometheus metrics" : "", o.ticks, kWarmupTicks, o.stripes, command.c_str());
  std::printf("%6s %6s %9s %10s | %9s %9s %9s | %8s %8s %8s %8s | %9s | %7s %7s %7s\n", "deps", "procs", "segment",
              "calls/round", "tick CPU", "max CPU", "wall", "VmRSS", "RssAnon", "RssShmem", "VmHWM", "round", "found",
              "miss", "scan");
  std::printf("%6s %6s %9s %10s | %9s %9s %9s | %8s %8s %8s %8s | %9s | %7s %7s %7s\n", "", "", "MiB", "", "ms", "ms",
              "ms", "MiB", "MiB", "MiB", "MiB", "ms", "ns", "ns", "ns");
  bool failed = false;
  const pid_t parent = ::getpid();
  std::vector<Result*> results;
  for (const Size& size : o.sizes) {
    Result* result = shared_new<Result>();
    results.push_back(result);
    std::fflush(stdout);
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) {
      // Stopped with the bench: the signal's handler removes the segment.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(1);
      try {
        run_size(size, o, result);
      } catch (const std::exception& e) {
        std::snprintf(result->error, sizeof result->error, "%s", e.what());
      }
      std::fflush(stdout);
      ::_exit(result->ok ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!result->ok) {
      std::printf("%6u %6u  FAILED: %s\n", size.dependencies, size.processes,
                  result->error[0] != '\0' ? result->error : "the run died");
      failed = true;
      continue;
    }
    const double mib = 1024.0 * 1024.0;
    std::printf("%6u %6u %9.1f %10llu | %9.2f %9.2f %9.2f | %8.1f %8.1f %8.1f %8.1f | %9.2f | %7.0f %7.0f %7.0f\n",
                size.dependencies, size.processes, static_cast<double>(result->segment_bytes) / mib,
                static_cast<unsigned long long>(result->completions_per_round), result->tick_cpu_ms_median,
                result->tick_cpu_ms_max, result->tick_wall_ms_median, result->vm_rss_kb / 1024.0,
                result->rss_anon_kb / 1024.0, result->rss_shmem_kb / 1024.0, result->vm_hwm_kb / 1024.0,
                result->round_ms_median, result->lookup_found_ns, result->lookup_miss_ns,
                result->pattern_scan_ns);
  }
  if (o.metrics) {
    std::printf("\n%6s %6s | %9s %9s %9s | %8s %8s %8s | %8s %8s\n", "deps", "procs", "scrape", "series", "gzip",
                "VmRSS", "RssAnon", "VmHWM", "trimmed", "trim");
    std::printf("%6s %6s | %9s %9s %9s | %8s %8s %8s | %8s %8s\n", "", "", "MiB", "", "MiB", "MiB", "MiB", "MiB",
                "MiB", "ms");
    for (std::size_t i = 0; i < o.sizes.size(); ++i) {
      const Result& r = *results[i];
      if (!r.ok) continue;
      const double mib = 1024.0 * 1024.0;
      std::printf("%6u %6u | %9.1f %9llu %9.1f | %8.1f %8.1f %8.1f | %8.1f %8.1f\n", o.sizes[i].dependencies,
                  o.sizes[i].processes, static_cast<double>(r.scrape_bytes) / mib,
                  static_cast<unsigned long long>(r.scrape_series), static_cast<double>(r.scrape_gzip_bytes) / mib,
                  r.scraped_rss_kb / 1024.0, r.scraped_rss_anon_kb / 1024.0, r.scraped_hwm_kb / 1024.0,
                  r.trimmed_rss_kb / 1024.0, r.trim_ms);
    }
  }
  std::printf("\n%6s %6s | %8s %9s %9s\n", "deps", "procs", "patterns", "parse", "apply");
  std::printf("%6s %6s | %8s %9s %9s\n", "", "", "", "ms", "ms");
  for (std::size_t i = 0; i < o.sizes.size(); ++i) {
    const Result& r = *results[i];
    if (r.ok) {
      std::printf("%6u %6u | %8u %9.1f %9.1f\n", o.sizes[i].dependencies, o.sizes[i].processes, o.patterns,
                  r.reload_parse_ms, r.reload_apply_ms);
    }
  }
  std::printf("\ntick CPU: median over the measured ticks; targets (issue 7): at most 5 ms of CPU per tick,\n"
              "at most 64 MB resident. RssShmem is the segment's pages the daemon touched (its slots, the\n"
              "process table, the histograms of the stripes written: here those of the CPUs the writers ran\n"
              "on), RssAnon its own memory. A client's first lookup of a name, per name, on the full table,\n"
              "back to back: found, the hash probe to a claimed name; miss, the probe for a name not claimed\n"
              "(through every slot of a full table); scan, what a strict client adds before refusing a name\n"
              "(every slot's flags read for a published pattern).\n");
  if (o.metrics) {
    std::printf("Scrape: one GET /metrics after the ticks, as text (its bytes and series) and gzip'd, as\n"
                "Prometheus asks for it; the daemon's memory after both, VmHWM their peak with the ticks'; trimmed,\n"
                "VmRSS once the memory the scrapes freed went back to the kernel, as after bulkheadd's next\n"
                "tick; trim, what giving it back took.\n");
  }
  std::printf("Reload: then the same config with --patterns pattern tables (svc-N-*) that match none of the\n"
              "names, as SIGHUP takes it: parse (the file read twice, as a restart's too, and its patterns\n"
              "checked for one that an earlier one shadows) and apply (each name matched against every\n"
              "pattern, its settings published). systemd kills a daemon silent for WatchdogSec= (10 s).\n");
  if (o.smoke) {
    std::printf("smoke: %s\n",
                failed ? "FAILED" : "every measured tick closed a window for every dependency and published its limit");
  }
  return failed ? 1 : 0;
}
