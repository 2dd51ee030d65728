// The whole loop with the real bulkheadd binary: clients record, the daemon
// learns, publishes, serves /metrics, reloads, gives back permits of dead
// processes, and exits cleanly.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bulkhead/client.hpp"
#include "shm/cpus.hpp"
#include "shm/wait_queue.hpp"
#include "tests/support/children.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/temp_segment.hpp"
#include "tests/support/waiter.hpp"

namespace bulkhead {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::TempSegmentName;

class DaemonIntegration : public ::testing::Test {
 protected:
  std::string config(const std::string& extra = "") const {
    return "[daemon]\nsegment = \"" + segment_.str() +
           "\"\ntick_ms = 20\nmetrics_listen = \"127.0.0.1:0\"\nmax_dependencies = 16\n"
           "max_processes = 16\nstats_stripes = 2\n\n[defaults]\npolicy = \"gradient2\"\n"
           "min_limit = 2\nmax_limit = 200\ninitial_limit = 20\n" + extra;
  }

  // A daemon made ready on the test's segment, then stopped with `sig`:
  // the segment stays, with the header as that daemon left it.
  void run_a_daemon_and_stop_it(int sig) {
    DaemonProcess first(BULKHEADD_PATH, dir_, config());
    ASSERT_TRUE(first.wait_ready(segment_)) << first.log();
    first.signal(sig);
    ASSERT_TRUE(first.wait_exit(10s));
  }
  // A daemon started now (its config and log in `dir`) refuses the
  // segment, its log saying `why`.
  void expect_a_daemon_refused(const std::string& why, const std::string& dir) {
    DaemonProcess second(BULKHEADD_PATH, dir, config());
    ASSERT_TRUE(second.wait_exit(20s)) << second.log();
    EXPECT_NE(second.exit_code(), 0);
    EXPECT_NE(second.log().find(why), std::string::npos) << second.log();
  }

  TempSegmentName segment_{"it"};
  testing::TempDir temp_dir_;
  std::string dir_ = temp_dir_.path();
};

// Closed-loop callers of one dependency whose latency is `base` times the
// current factor: the workload a test makes slow and heals.
class Workload {
 public:
  Workload(Dependency dep, int threads, std::chrono::microseconds base) : dep_(dep), base_(base) {
    for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { run(); });
  }
  ~Workload() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }
  void set_factor(int f) { factor_ = f; }

 private:
  // Each call takes base x factor, and reports exactly that as its
  // latency (the sleep only paces the calls): what the daemon sees does not
  // depend on how late a loaded machine wakes a sleeper.
  void run() {
    while (!stop_) {
      Permit p = dep_.try_acquire_untimed();
      if (!p) {
        std::this_thread::sleep_for(1ms);
        continue;
      }
      const std::chrono::microseconds latency = base_ * factor_.load();
      std::this_thread::sleep_for(latency);
      p.release(Outcome::kSuccess, latency);
    }
  }
  Dependency dep_;
  std::chrono::microseconds base_;
  std::atomic<int> factor_{1};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// The lowest and highest limit seen while sampling for `duration`.
struct LimitRange {
  long lo, hi;
};
LimitRange limit_range(const Dependency& dep, std::chrono::milliseconds duration) {
  LimitRange r{dep.limit(), dep.limit()};
  for (auto end = std::chrono::steady_clock::now() + duration; std::chrono::steady_clock::now() < end;) {
    std::this_thread::sleep_for(20ms);
    r.lo = std::min(r.lo, dep.limit());
    r.hi = std::max(r.hi, dep.limit());
  }
  return r;
}

TEST_F(DaemonIntegration, LimitFallsWhenLatencyJumpsAndRecoversWhenItHeals) {
  // More callers than max_limit, so that the limit is always in use
  // (gradient2 holds still while a dependency is app-limited).
  DaemonProcess daemon(BULKHEADD_PATH, dir_, config("\n[dependency.checkout]\nmax_limit = 24\n"));
  auto seg = daemon.wait_ready(segment_);
  ASSERT_TRUE(seg) << daemon.log();

  Client client(segment_.str());
  ASSERT_EQ(client.mode(), Client::Mode::kShared);
  Dependency dep = client.dependency("checkout");
  Workload load(dep, 32, 2ms);

  // Each change is waited for, as long as a loaded machine needs, not
  // looked for within a set time.
  const long before = limit_range(dep, 3s).hi;
  load.set_factor(5);
  long slow_lo = before;
  const bool fell = testing::eventually(
      [&] {
        slow_lo = std::min(slow_lo, dep.limit());
        return slow_lo < before * 6 / 10;  // by more than 40%
      },
      60s);
  load.set_factor(1);
  long healed = slow_lo;
  const bool climbed = testing::eventually(
      [&] {
        healed = std::max(healed, dep.limit());
        return healed > slow_lo * 3 / 2 && healed >= before * 8 / 10;
      },
      60s);
  SCOPED_TRACE("limits: warm-up max " + std::to_string(before) + ", slow min " + std::to_string(slow_lo) +
               ", healed max " + std::to_string(healed));
  EXPECT_TRUE(fell);
  EXPECT_TRUE(climbed);

  // The daemon serves the dependency's metrics over HTTP.
  const std::uint16_t port = static_cast<std::uint16_t>(seg->header().metrics_port.load());
  ASSERT_NE(port, 0);
  const std::string metrics = testing::http_get(port, "/metrics");
  EXPECT_NE(metrics.find("200 OK"), std::string::npos) << metrics.substr(0, 200);
  EXPECT_NE(metrics.find("bulkhead_limit{dependency=\"checkout\"}"), std::string::npos);
  EXPECT_NE(metrics.find("bulkhead_requests_total{dependency=\"checkout\",outcome=\"success\"}"),
            std::string::npos);
  EXPECT_NE(metrics.find("bulkhead_latency_seconds_bucket{dependency=\"checkout\""), std::string::npos);
  EXPECT_NE(metrics.find("bulkhead_daemon_tick_seconds_count"), std::string::npos);
}

// The value of the first sample of `series` (name and labels, as exposed)
// in a scrape, or -1 when it has none.
double sample_value(const std::string& metrics, const std::string& series) {
  const std::size_t at = metrics.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(metrics.substr(at + series.size() + 2));
}

// The daemon's /metrics, scraped every few ticks until `done` holds of it or
// 20 s passed; the last scrape.
std::string scrape_until(std::uint16_t port, const std::function<bool(const std::string&)>& done) {
  std::string metrics = testing::http_get(port, "/metrics");
  for (auto give_up = std::chrono::steady_clock::now() + 20s;
       !done(metrics) && std::chrono::steady_clock::now() < give_up;) {
    std::this_thread::sleep_for(20ms);
    metrics = testing::http_get(port, "/metrics");
  }
  return metrics;
}

// The policy's baseline is the dependency's own latency, in seconds; a
// policy that keeps none (fixed) has no such series. Each dependency's
// policy is a series of its own.
TEST_F(DaemonIntegration, MetricsShowThePolicyAndItsBaselineLatency) {
  DaemonProcess daemon(BULKHEADD_PATH, dir_,
                       config("\n[dependency.b]\npolicy = \"balance\"\n"
                              "\n[dependency.f]\npolicy = \"fixed\"\n"));
  auto seg = daemon.wait_ready(segment_);
  ASSERT_TRUE(seg) << daemon.log();
  Client client(segment_.str());
  Dependency b = client.dependency("b");
  Workload load(b, 4, 2ms);  // under the limit: balance's baseline follows the latency

  const std::uint16_t port = static_cast<std::uint16_t>(seg->header().metrics_port.load());
  ASSERT_NE(port, 0);
  const std::string baseline_b = "bulkhead_policy_baseline_seconds{dependency=\"b\"}";
  const std::string metrics =
      scrape_until(port, [&](const std::string& m) { return sample_value(m, baseline_b) >= 0; });
  // Each call reports 2 ms; the histogram's buckets are within 6%.
  const double seconds = sample_value(metrics, baseline_b);
  EXPECT_NEAR(seconds, 0.002, 0.00012) << metrics;
  EXPECT_EQ(metrics.find("bulkhead_policy_baseline_seconds{dependency=\"f\"}"), std::string::npos);
  EXPECT_EQ(sample_value(metrics, "bulkhead_policy_measuring{dependency=\"f\"}"), 0) << metrics;
  const double measuring = sample_value(metrics, "bulkhead_policy_measuring{dependency=\"b\"}");
  EXPECT_TRUE(measuring == 0 || measuring == 1) << metrics;
  // Which policy each runs: alerts leave out the limit that fixed holds at min_limit.
  EXPECT_EQ(sample_value(metrics, "bulkhead_policy_info{dependency=\"b\",policy=\"balance\"}"), 1) << metrics;
  EXPECT_EQ(sample_value(metrics, "bulkhead_policy_info{dependency=\"f\",policy=\"fixed\"}"), 1) << metrics;
}

// The daemon publishes a dependency's queue from its config; a call waits
// in it, and its wait shows in /metrics.
TEST_F(DaemonIntegration, CallsWaitInTheConfiguredQueueAndTheWaitIsAMetric) {
  DaemonProcess daemon(BULKHEADD_PATH, dir_,
                       config("\n[dependency.q]\npolicy = \"fixed\"\ninitial_limit = 1\n"
                              "min_limit = 1\nmax_queue = 4\nqueue_order = \"lifo\"\n"));
  auto seg = daemon.wait_ready(segment_);
  ASSERT_TRUE(seg) << daemon.log();
  Client client(segment_.str());
  Dependency dep = client.dependency("q");
  const std::uint32_t slot = *shm::find_dependency(*seg, "q");
  EXPECT_EQ(seg->dependency(slot).control.max_queue.load(), 4u);
  EXPECT_NE(seg->dependency(slot).control.flags.load() & shm::kDependencyLifo, 0u);

  Permit held = dep.try_acquire();
  ASSERT_TRUE(held);
  testing::BackgroundWaiter waiter(dep);
  while (shm::queue_length(seg->queue(slot), seg->queue_slots()) != 1) std::this_thread::yield();
  held.success();
  EXPECT_EQ(waiter.result(), 0);

  const std::uint16_t port = static_cast<std::uint16_t>(seg->header().metrics_port.load());
  ASSERT_NE(port, 0);
  const std::string want = "bulkhead_queue_wait_seconds_count{dependency=\"q\"} 1";
  const std::string metrics =
      scrape_until(port, [&](const std::string& m) { return m.find(want) != std::string::npos; });
  EXPECT_NE(metrics.find(want), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("bulkhead_queue_rejections_total{dependency=\"q\",reason=\"queue_full\"} 0"),
            std::string::npos);
  EXPECT_NE(metrics.find("bulkhead_queue_waiters{dependency=\"q\"} 0"), std::string::npos);
}

TEST_F(DaemonIntegration, GivesBackThePermitsOfAProcessThatDied) {
  DaemonProcess daemon(BULKHEADD_PATH, dir_, config());
  ASSERT_TRUE(daemon.wait_ready(segment_)) << daemon.log();
  Client client(segment_.str());
  Dependency dep = client.dependency("orders");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    Permit a = dep.try_acquire(), b = dep.try_acquire(), c = dep.try_acquire();
    const char ok = (a && b && c) ? 'y' : 'n';
    (void)!::write(ready[1], &ok, 1);
    ::pause();
    std::_Exit(0);
  }
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  Permit mine = dep.try_acquire();
  ASSERT_TRUE(mine);
  EXPECT_EQ(dep.inflight(), 4);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  // Within a few 20 ms ticks; the wait is generous for a loaded machine.
  for (int i = 0; i < 500 && dep.inflight() != 1; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(dep.inflight(), 1);  // only this process's permit remains
  EXPECT_NE(daemon.log().find("died holding 3 permit(s) of orders"), std::string::npos) << daemon.log();
  mine.success();
  EXPECT_EQ(dep.inflight(), 0);
}

TEST_F(DaemonIntegration, SIGTERMStopsADaemonWhoseTicksTakeLongerThanTheirPeriod) {
  // 16384 dependencies, with calls to learn from in every tick, take a
  // tick over the 10 ms period, so a tick is always due: the
  // signal must be taken between ticks all the same. Counted in ticks, not
  // time. Under ThreadSanitizer, whose ticks are many times slower, an
  // eighth of them (16384 took over a minute for three ticks on a loaded
  // machine).
#if defined(__SANITIZE_THREAD__)
  constexpr int kDependencies = 2048;
#else
  constexpr int kDependencies = 16384;
#endif
  DaemonProcess daemon(BULKHEADD_PATH, dir_,
                       "[daemon]\nsegment = \"" + segment_.str() +
                           "\"\ntick_ms = 10\nmax_dependencies = 16384\nmax_processes = 4\nstats_stripes = 2\n"
                           "segment_reserve = false\nmetrics_listen = \"\"\n");
  ASSERT_TRUE(daemon.wait_ready(segment_)) << daemon.log();
  Client client(segment_.str());
  std::vector<Dependency> deps;
  for (int i = 0; i < kDependencies; ++i) deps.push_back(client.dependency("d" + std::to_string(i)));
  std::atomic<bool> stop{false};
  std::thread calls([&] {
    while (!stop) {
      for (Dependency& d : deps) {
        if (Permit p = d.try_acquire_untimed()) p.release(Outcome::kSuccess, 1ms);
      }
    }
  });
  // Stopped and joined however the test ends (a joinable thread's
  // destruction would abort the test binary).
  const std::unique_ptr<void, std::function<void(void*)>> stop_calls(&stop, [&](void*) {
    stop = true;
    calls.join();
  });
  shm::Segment segment = shm::Segment::attach(segment_.str(), shm::Access::kReadOnly);
  ASSERT_TRUE(testing::wait_ticks(segment, 3)) << daemon.log();
  const std::uint64_t signalled_at = segment.header().heartbeat.load();
  daemon.signal(SIGTERM);
  const bool exited = daemon.wait_exit(60s);
  ASSERT_TRUE(exited) << "SIGTERM not taken in 60 s\n" << daemon.log();
  // Taken after the tick in progress, or the one it was about to start:
  // not whenever a tick happens to end early, as the loop once did.
  EXPECT_LE(segment.header().heartbeat.load() - signalled_at, 2u);
  EXPECT_EQ(daemon.exit_code(), 0) << daemon.log();
  EXPECT_NE(daemon.log().find("stopping"), std::string::npos) << daemon.log();
}

// A tick that adopts many names, and a reload that rebuilds many policies,
// log a hundred of them one by one and count the rest in one line: a
// restart that adopted 16384 names logged 32768 lines at once, past
// journald's default RateLimitBurst= (10000 in 30 s), after which journald
// drops every line of the service for the rest of the 30 s.
TEST_F(DaemonIntegration, ManyDependenciesAtOnceAreLoggedAHundredAndACount) {
  std::string text = config();
  text.replace(text.find("max_dependencies = 16"), 21, "max_dependencies = 256");
  const auto count = [](const std::string& log, const std::string& what) {
    std::size_t n = 0;
    for (auto at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  std::optional<Client> client;
  std::vector<Dependency> names;
  {
    DaemonProcess first(BULKHEADD_PATH, dir_, text);
    ASSERT_TRUE(first.wait_ready(segment_)) << first.log();
    client.emplace(segment_.str());
    for (int i = 0; i < 150; ++i) names.push_back(client->dependency("name-" + std::to_string(i)));
    first.signal(SIGTERM);
    ASSERT_TRUE(first.wait_exit(10s));
  }
  const testing::TempDir second_dir;
  DaemonProcess second(BULKHEADD_PATH, second_dir.path(), text);  // adopts the 150 at its first tick
  ASSERT_TRUE(second.wait_ready(segment_)) << second.log();
  EXPECT_EQ(count(second.log(), ": new slot "), 100u) << second.log();
  EXPECT_NE(second.log().find("dependency name-0: new slot "), std::string::npos) << second.log();
  EXPECT_NE(second.log().find("50 more dependencies adopted (at most 100 are logged one by one"), std::string::npos)
      << second.log();

  std::string next = text;
  next.replace(next.find("max_limit = 200"), 15, "max_limit = 300");
  testing::write_file(second.config_path(), next);
  second.signal(SIGHUP);
  for (int i = 0; i < 500 && second.log().find("reloaded") == std::string::npos; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(count(second.log(), "continuing from limit"), 100u) << second.log();
  EXPECT_NE(second.log().find("50 more dependencies' policies rebuilt"), std::string::npos) << second.log();
}

TEST_F(DaemonIntegration, BadReloadKeepsTheRunningConfig) {
  const std::string fixed_one = "\n[dependency.fixed-one]\npolicy = \"fixed\"\ninitial_limit = 7\n";
  DaemonProcess daemon(BULKHEADD_PATH, dir_, config(fixed_one));
  auto seg = daemon.wait_ready(segment_);
  ASSERT_TRUE(seg) << daemon.log();
  Client client(segment_.str());
  Dependency fixed = client.dependency("fixed-one");
  EXPECT_EQ(fixed.limit(), 7);
  const auto generation = seg->header().config_generation.load();

  testing::write_file(daemon.config_path(), config(fixed_one + "bogus = 1\n"));
  daemon.signal(SIGHUP);
  for (int i = 0; i < 500 && daemon.log().find("reload rejected") == std::string::npos; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(daemon.log().find("reload rejected"), std::string::npos) << daemon.log();
  EXPECT_NE(daemon.log().find("bulkhead.toml:18: dependency.fixed-one.bogus"), std::string::npos)
      << daemon.log();
  EXPECT_EQ(seg->header().config_generation.load(), generation);
  EXPECT_EQ(fixed.limit(), 7);

  // A reload is checked against the running capacities, which it cannot
  // change: 17 configured names for the segment's 16 slots are refused,
  // though the file asks for 32.
  std::string crowded = config("\n[dependency.fixed-one]\npolicy = \"fixed\"\ninitial_limit = 7\n");
  crowded.replace(crowded.find("max_dependencies = 16"), 21, "max_dependencies = 32");
  for (int i = 0; i < 16; ++i) crowded += "[dependency.extra-" + std::to_string(i) + "]\n";
  testing::write_file(daemon.config_path(), crowded);
  daemon.signal(SIGHUP);
  const std::string too_many = "17 dependencies configured, more than daemon.max_dependencies (16, the running value";
  for (int i = 0; i < 500 && daemon.log().find(too_many) == std::string::npos; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_NE(daemon.log().find(too_many), std::string::npos) << daemon.log();
  EXPECT_EQ(seg->header().config_generation.load(), generation);

  // A good reload applies. The segment and the metrics endpoint live as
  // long as the process: one that asks for other capacities applies the
  // rest of the file, keeps the running ones, and names each key it kept,
  // only those.
  std::string next = config("\n[dependency.fixed-one]\npolicy = \"fixed\"\ninitial_limit = 9\nmin_limit = 9\n");
  const std::string processes = "max_processes = 16\n";
  ASSERT_NE(next.find(processes), std::string::npos);
  next.replace(next.find(processes), processes.size(), "max_processes = 32\n");
  testing::write_file(daemon.config_path(), next);
  daemon.signal(SIGHUP);
  for (int i = 0; i < 500 && fixed.limit() != 9; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(fixed.limit(), 9);
  EXPECT_EQ(seg->header().config_generation.load(), generation + 1);
  EXPECT_NE(daemon.log().find("reload: daemon.max_processes changes only on restart; keeping the running value"),
            std::string::npos)
      << daemon.log();
  // A plain restart would refuse the segment (its capacities are the
  // running ones): the warning says what changes them.
  EXPECT_NE(daemon.log().find("; a restart refuses the segment, made with the running capacities: stop its clients "
                              "and restart with --recreate-segment (under systemd: stop bulkheadd, remove /dev/shm/" +
                              segment_.str() + ", start it)"),
            std::string::npos)
      << daemon.log();
  EXPECT_EQ(daemon.log().find("reload: daemon.segment "), std::string::npos) << daemon.log();
  EXPECT_EQ(daemon.log().find("reload: daemon.max_dependencies "), std::string::npos) << daemon.log();
  EXPECT_EQ(seg->header().max_processes, 16u);

  daemon.signal(SIGTERM);
  ASSERT_TRUE(daemon.wait_exit(10s));
  EXPECT_EQ(daemon.exit_code(), 0);
  // The segment stays for clients and the next daemon; the pid is cleared,
  // and the namespace it was in.
  EXPECT_EQ(seg->header().daemon_pid.load(), 0);
  EXPECT_EQ(seg->header().daemon_pid_ns_inode.load(), 0u);
  EXPECT_EQ(fixed.limit(), 9);
}

// A reload that names another segment and other capacities: the restart
// makes that segment, with the file's capacities, so the capacities'
// warnings do not send the operator to remove the running one.
TEST_F(DaemonIntegration, AReloadToAnotherSegmentSaysNoRestartRefusesIt) {
  DaemonProcess daemon(BULKHEADD_PATH, dir_, config());
  ASSERT_TRUE(daemon.wait_ready(segment_)) << daemon.log();
  const testing::TempSegmentName other{"other"};
  std::string next = config();
  next.replace(next.find(segment_.str()), segment_.str().size(), other.str());
  next.replace(next.find("max_processes = 16"), 18, "max_processes = 32");
  testing::write_file(daemon.config_path(), next);
  daemon.signal(SIGHUP);
  for (int i = 0; i < 500 && daemon.log().find("reloaded") == std::string::npos; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(daemon.log().find("reload: daemon.segment changes only on restart"), std::string::npos) << daemon.log();
  EXPECT_NE(daemon.log().find("reload: daemon.max_processes changes only on restart; keeping the running value"),
            std::string::npos)
      << daemon.log();
  EXPECT_EQ(daemon.log().find("a restart refuses the segment"), std::string::npos) << daemon.log();
}

TEST_F(DaemonIntegration, ARestartedDaemonAdoptsTheSegmentAndItsLimits) {
  const std::string with_fixed = config("\n[dependency.kept]\npolicy = \"fixed\"\ninitial_limit = 11\n");
  {
    DaemonProcess first(BULKHEADD_PATH, dir_, with_fixed);
    ASSERT_TRUE(first.wait_ready(segment_)) << first.log();
  }
  Client client(segment_.str());
  Dependency kept = client.dependency("kept");
  Permit held = kept.try_acquire();
  ASSERT_TRUE(held);
  DaemonProcess second(BULKHEADD_PATH, dir_, with_fixed);
  ASSERT_TRUE(second.wait_ready(segment_)) << second.log();
  EXPECT_NE(second.log().find("adopted segment"), std::string::npos) << second.log();
  EXPECT_EQ(second.log().find("raised to"), std::string::npos) << second.log();  // its own minor already
  EXPECT_EQ(kept.limit(), 11);
  EXPECT_EQ(kept.inflight(), 1);  // the in-flight count survived
}

// One daemon per segment: a second one, started while the first runs,
// exits and leaves the first in charge.
TEST_F(DaemonIntegration, ASecondDaemonOnTheSegmentRefusesIt) {
  DaemonProcess first(BULKHEADD_PATH, dir_, config());
  ASSERT_TRUE(first.wait_ready(segment_)) << first.log();
  testing::TempDir other_dir;  // first's log stays its own
  ASSERT_NO_FATAL_FAILURE(expect_a_daemon_refused(
      "another bulkheadd (pid " + std::to_string(first.pid()) + ") is running on it", other_dir.path()));
  EXPECT_EQ(shm::Segment::attach(segment_.str(), shm::Access::kReadOnly).header().daemon_pid.load(), first.pid());
}

// A daemon in a container (another pid namespace) records its pid there,
// 1 as a container's init: a daemon of this namespace used to look up pid
// 1 here, find another process (or none), and adopt the segment under the
// running daemon. Here the "daemon" is a process that pid 1 of a namespace
// of its own, recorded in the header as a daemon there records itself.
TEST_F(DaemonIntegration, ADaemonOfAnotherPidNamespaceKeepsItsSegment) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
  ASSERT_NO_FATAL_FAILURE(run_a_daemon_and_stop_it(SIGTERM));
  shm::Segment segment = shm::Segment::attach(segment_.str(), shm::Access::kReadWrite);
  shm::Header& h = segment.header();
  testing::ChildInPidNamespace contained([&] {
    shm::publish_daemon(h);
    return true;
  });
  ASSERT_TRUE(contained.ok());
  ASSERT_EQ(h.daemon_pid.load(), 1);
  const std::string ns = std::to_string(h.daemon_pid_ns_inode.load());
  ASSERT_NO_FATAL_FAILURE(expect_a_daemon_refused(
      "another bulkheadd (pid 1 in pid:[" + ns + "], " + std::to_string(contained.pid()) + " here) is running on it",
      dir_));
  EXPECT_EQ(h.daemon_pid.load(), 1);  // not taken over
  // Gone, the next daemon adopts the segment.
  contained.kill();
  DaemonProcess third(BULKHEADD_PATH, dir_, config());
  ASSERT_TRUE(third.wait_ready(segment_)) << third.log();
  EXPECT_NE(third.log().find("adopted segment /dev/shm/" + segment_.str() + " left by pid 1 in pid:[" + ns + "]"),
            std::string::npos)
      << third.log();
}

// A daemon of ABI 4.3 or older records its pid and start time but no pid
// namespace: one that adopted the segment after a daemon in a container
// was killed runs under that container's namespace. A daemon started then
// used to look its pid up in that namespace, find it gone, and adopt the
// segment under the running one: two daemons on one segment.
TEST_F(DaemonIntegration, AnOlderDaemonUnderAnotherDaemonsNamespaceKeepsItsSegment) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
  ASSERT_NO_FATAL_FAILURE(run_a_daemon_and_stop_it(SIGTERM));
  shm::Segment segment = shm::Segment::attach(segment_.str(), shm::Access::kReadWrite);
  shm::Header& h = segment.header();
  {
    // A daemon in a container, killed: its namespace stays in the header.
    testing::ChildInPidNamespace contained([&] {
      shm::publish_daemon(h);
      return true;
    });
    ASSERT_TRUE(contained.ok());
    contained.kill();
  }
  ASSERT_NE(h.daemon_pid_ns_inode.load(), 0u);
  // The ABI 4.3 daemon that adopts it, here this test: pid and start time.
  h.daemon_start_time.store(shm::own_start_time().value_or(0));
  h.daemon_pid.store(::getpid());
  ASSERT_NO_FATAL_FAILURE(expect_a_daemon_refused(
      "another bulkheadd (pid " + std::to_string(::getpid()) + ") is running on it", dir_));
  EXPECT_EQ(h.daemon_pid.load(), ::getpid());  // not taken over
}

// The other way round: a daemon of this namespace killed, and one of ABI
// 4.3 or older in a container adopts the segment, its pid there under this
// namespace's (pid 1, this namespace's init, started long before). A
// daemon started here used to find pid 1 here with another start time and
// adopt the segment under the running one.
TEST_F(DaemonIntegration, AnOlderContainedDaemonUnderThisNamespaceKeepsItsSegment) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pid namespace";
  ASSERT_NO_FATAL_FAILURE(run_a_daemon_and_stop_it(SIGKILL));
  shm::Segment segment = shm::Segment::attach(segment_.str(), shm::Access::kReadWrite);
  shm::Header& h = segment.header();
  ASSERT_EQ(h.daemon_pid_ns_inode.load(), shm::own_pid_namespace().inode);
  // As a 4.3 daemon records itself: pid and start time, no namespace.
  testing::ChildInPidNamespace contained([&] {
    h.daemon_start_time.store(shm::own_start_time().value_or(0));
    h.daemon_pid.store(::getpid());
    return true;
  });
  ASSERT_TRUE(contained.ok());
  ASSERT_EQ(h.daemon_pid.load(), 1);
  ASSERT_NO_FATAL_FAILURE(
      expect_a_daemon_refused(", " + std::to_string(contained.pid()) + " here) is running on it", dir_));
  EXPECT_EQ(h.daemon_pid.load(), 1);  // not taken over
}

// A daemon that adopts a segment an older minor made serves it at its own
// minor (it reads what that minor added); and a fixed limit is the new
// config's, not the one the segment kept.
TEST_F(DaemonIntegration, AnAdoptedSegmentOfAnOlderMinorTakesTheDaemonsAndAFixedLimitTheConfigs) {
  {
    DaemonProcess first(BULKHEADD_PATH, dir_, config("\n[dependency.kept]\npolicy = \"fixed\"\ninitial_limit = 11\n"));
    ASSERT_TRUE(first.wait_ready(segment_)) << first.log();
    first.signal(SIGTERM);
    ASSERT_TRUE(first.wait_exit(10s));
  }
  shm::Segment::attach(segment_.str(), shm::Access::kReadWrite).header().abi_minor = 0;  // as ABI 4.0 left it
  DaemonProcess second(BULKHEADD_PATH, dir_, config("\n[dependency.kept]\npolicy = \"fixed\"\ninitial_limit = 13\n"));
  auto seg = second.wait_ready(segment_);
  ASSERT_TRUE(seg) << second.log();
  EXPECT_EQ(seg->header().abi_minor, shm::kAbiMinor);
  EXPECT_NE(second.log().find("ABI 4.0 raised to 4." + std::to_string(shm::kAbiMinor)), std::string::npos)
      << second.log();
  Client client(segment_.str());
  EXPECT_EQ(client.dependency("kept").limit(), 13);
}

// stats_stripes = "auto": a new segment gets a stripe for every possible
// CPU and a spare; an existing one is adopted whatever its stripe count.
TEST_F(DaemonIntegration, AutoStripesFitTheHostAndAdoptAnySegment) {
  auto with_stripes = [this](const std::string& value) {
    std::string text = config();
    const std::string two = "stats_stripes = 2\n";
    text.replace(text.find(two), two.size(), "stats_stripes = " + value + "\n");
    return text;
  };
  {
    DaemonProcess five(BULKHEADD_PATH, dir_, with_stripes("5"));
    ASSERT_TRUE(five.wait_ready(segment_)) << five.log();
  }
  {
    DaemonProcess automatic(BULKHEADD_PATH, dir_, with_stripes("\"auto\""));
    ASSERT_TRUE(automatic.wait_ready(segment_)) << automatic.log();
    EXPECT_NE(automatic.log().find("adopted segment"), std::string::npos) << automatic.log();
    EXPECT_EQ(shm::Segment::attach(segment_.str(), shm::Access::kReadOnly).capacities().stats_stripes, 5u);
  }
  shm::Segment::remove(segment_.str());
  DaemonProcess fresh(BULKHEADD_PATH, dir_, with_stripes("\"auto\""));
  ASSERT_TRUE(fresh.wait_ready(segment_)) << fresh.log();
  const std::uint32_t cpus = shm::possible_cpus();
  EXPECT_EQ(shm::Segment::attach(segment_.str(), shm::Access::kReadOnly).capacities().stats_stripes,
            cpus == 0 ? 8u : std::min(cpus + 1, 64u));
}

// What the caller processes of the test below share with the test.
struct CallerBoard {
  std::atomic<long> admitted{0};
  std::atomic<long> errors{0};
  std::atomic<bool> stop{false};
};

TEST_F(DaemonIntegration, ASIGKILLedDaemonLeavesCallersRunningAndItsSuccessorContinues) {
  const std::string cfg = config(
      "\n[dependency.svc]\npolicy = \"aimd\"\nmin_limit = 2\nmax_limit = 200\ninitial_limit = 4\n");
  auto first = std::make_unique<DaemonProcess>(BULKHEADD_PATH, dir_, cfg);
  ASSERT_TRUE(first->wait_ready(segment_)) << first->log();

  // Three caller processes, four threads each, calling as fast as they are
  // admitted (1 ms a call): the limit has somewhere to grow to.
  auto* board = static_cast<CallerBoard*>(
      ::mmap(nullptr, sizeof(CallerBoard), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(board, MAP_FAILED);
  new (board) CallerBoard;
  std::vector<pid_t> callers;
  for (int i = 0; i < 3; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        Client client(segment_.str());
        Dependency svc = client.dependency("svc");
        std::vector<std::thread> threads;
        for (int t = 0; t < 4; ++t) {
          threads.emplace_back([&] {
            while (!board->stop.load()) {
              Permit p = svc.try_acquire();
              if (!p) {
                std::this_thread::yield();
                continue;
              }
              std::this_thread::sleep_for(1ms);
              p.success();
              board->admitted.fetch_add(1);
            }
          });
        }
        for (auto& t : threads) t.join();
      } catch (const std::exception&) {
        board->errors.fetch_add(1);
      }
      std::_Exit(0);
    }
    ASSERT_GT(pid, 0);
    callers.push_back(pid);
  }

  Client client(segment_.str());
  Dependency svc = client.dependency("svc");
  // The limit learns: AIMD grows it while callers use it all.
  for (int i = 0; i < 1000 && svc.limit() < 12; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_GE(svc.limit(), 12) << first->log();

  shm::Segment segment = shm::Segment::attach(segment_.str(), shm::Access::kReadOnly);
  first->signal(SIGKILL);
  ASSERT_TRUE(first->wait_exit(10s));
  const long limit_at_death = svc.limit();

  // Dead daemon: the heartbeat stops, and the pid it published names no
  // process (what bulkheadctl and an alert on the heartbeat show) ...
  const std::uint64_t heartbeat = segment.header().heartbeat.load();
  const long admitted_at_death = board->admitted.load();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(segment.header().heartbeat.load(), heartbeat);
  EXPECT_NE(::kill(segment.header().daemon_pid.load(), 0), 0);
  // ... and the callers go on admitting, on the last published limit.
  EXPECT_TRUE(testing::eventually([&] { return board->admitted.load() > admitted_at_death; }));
  EXPECT_EQ(svc.limit(), limit_at_death);
  EXPECT_EQ(board->errors.load(), 0);

  // Its successor validates and adopts the segment and continues the
  // limit from where it was, not from initial_limit.
  DaemonProcess second(BULKHEADD_PATH, dir_, cfg);
  ASSERT_TRUE(second.wait_ready(segment_)) << second.log();
  EXPECT_NE(second.log().find("adopted segment"), std::string::npos) << second.log();
  EXPECT_GE(svc.limit(), limit_at_death * 8 / 10) << "limit reset? initial_limit is 4";
  const long admitted_at_restart = board->admitted.load();
  for (int i = 0; i < 500 && board->admitted.load() < admitted_at_restart + 100; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GE(board->admitted.load(), admitted_at_restart + 100);

  board->stop.store(true);
  for (pid_t pid : callers) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(board->errors.load(), 0);
  // Every permit came back through the daemon's kill and restart.
  EXPECT_EQ(svc.inflight(), 0);
  ::munmap(board, sizeof(CallerBoard));
}

TEST_F(DaemonIntegration, BadConfigAtStartExitsNonZeroNamingFileAndLine) {
  DaemonProcess daemon(BULKHEADD_PATH, dir_, config("\n[dependency.x]\npolicy = \"nonesuch\"\n"));
  ASSERT_TRUE(daemon.wait_exit(20s));
  EXPECT_EQ(daemon.exit_code(), 78);  // EX_CONFIG: the unit does not restart on it
  EXPECT_NE(daemon.log().find("bulkhead.toml:16: dependency.x.policy"), std::string::npos) << daemon.log();
}

// What main() checks beyond the config file: the --segment override's
// name, and that daemon.segment_group names a group. Each exits 78 (a
// wrong config) saying which, before any segment exists.
TEST_F(DaemonIntegration, BadSegmentNameOrGroupExitsNonZeroNamingIt) {
  const std::string path = dir_ + "/bulkhead.toml";
  testing::write_file(path, config());
  testing::ChildProcess bad_name({BULKHEADD_PATH, "--config", path, "--segment", "a/b"}, dir_ + "/name.log");
  ASSERT_TRUE(bad_name.wait_exit(20s));
  EXPECT_EQ(bad_name.exit_code(), 78);
  EXPECT_NE(bad_name.log().find("--segment: 'a/b' has a character other than A-Z a-z 0-9 . _ -: '/' at byte 1"),
            std::string::npos)
      << bad_name.log();
  // /dev/shm/.. is a directory, as for daemon.segment in the file: not a
  // segment that --recreate-segment could replace.
  testing::ChildProcess dots({BULKHEADD_PATH, "--config", path, "--segment", ".."}, dir_ + "/dots.log");
  ASSERT_TRUE(dots.wait_exit(20s));
  EXPECT_EQ(dots.exit_code(), 78);
  EXPECT_NE(dots.log().find("--segment: '..' names a directory"), std::string::npos) << dots.log();

  std::string grouped = config();
  grouped.insert(grouped.find('\n') + 1, "segment_group = \"bulkhead-no-such-group\"\n");
  DaemonProcess bad_group(BULKHEADD_PATH, dir_, grouped);
  ASSERT_TRUE(bad_group.wait_exit(20s));
  EXPECT_EQ(bad_group.exit_code(), 78);
  EXPECT_NE(bad_group.log().find("bulkhead.toml:2: daemon.segment_group: no group named 'bulkhead-no-such-group'"),
            std::string::npos)
      << bad_group.log();
  EXPECT_THROW(shm::Segment::attach(segment_, shm::Access::kReadOnly), shm::SegmentError);
  // --check-config looks the group up too: it passes only what starts.
  const std::string grouped_path = dir_ + "/grouped.toml";
  testing::write_file(grouped_path, grouped);
  const auto check = testing::run_command({BULKHEADD_PATH, "--check-config", grouped_path}, dir_);
  EXPECT_EQ(check.exit_code, 78) << check.output();
  EXPECT_NE(check.output().find("grouped.toml:2: daemon.segment_group: no group named"), std::string::npos)
      << check.output();
}

TEST_F(DaemonIntegration, CheckConfigValidatesWithoutRunning) {
  const std::string good = dir_ + "/good.toml", bad = dir_ + "/bad.toml";
  testing::write_file(good, config() + "\n[dependency.one]\n[dependency.\"db-*\"]\nmax_limit = 40\n");
  testing::write_file(bad, "[daemon]\ntick_ms = 1\n");
  const auto ok = testing::run_command({BULKHEADD_PATH, "--check-config", good}, dir_);
  EXPECT_EQ(ok.exit_code, 0) << ok.output();
  EXPECT_NE(ok.output().find("good.toml: ok (1 dependency, 1 pattern)\n"), std::string::npos) << ok.output();
  // A shadowed pattern is valid: warned of, and the check passes.
  const std::string shadowed = dir_ + "/shadowed.toml";
  testing::write_file(shadowed, config() + "\n[dependency.\"*\"]\n[dependency.\"db-*\"]\n");
  const auto warned = testing::run_command({BULKHEADD_PATH, "--check-config", shadowed}, dir_);
  EXPECT_EQ(warned.exit_code, 0) << warned.output();
  EXPECT_NE(warned.output().find("warning: " + shadowed + ":"), std::string::npos) << warned.output();
  EXPECT_NE(warned.output().find(": dependency.\"db-*\": never applies"), std::string::npos) << warned.output();
  EXPECT_NE(warned.output().find("shadowed.toml: ok (0 dependencies, 2 patterns)\n"), std::string::npos)
      << warned.output();
  const auto fail = testing::run_command({BULKHEADD_PATH, "--check-config", bad}, dir_);
  EXPECT_EQ(fail.exit_code, 78);
  EXPECT_NE(fail.output().find("bad.toml:2: daemon.tick_ms"), std::string::npos) << fail.output();
  // The command line's overrides are checked with the file, as a start
  // checks them.
  const auto override = testing::run_command(
      {BULKHEADD_PATH, "--check-config", good, "--metrics-listen", "127.0.0.256:9477"}, dir_);
  EXPECT_EQ(override.exit_code, 78) << override.output();
  EXPECT_NE(override.output().find("--metrics-listen: '127.0.0.256:9477': host must be an IPv4 address"),
            std::string::npos)
      << override.output();
  const auto dots = testing::run_command({BULKHEADD_PATH, "--check-config", good, "--segment", ".."}, dir_);
  EXPECT_EQ(dots.exit_code, 78) << dots.output();
  EXPECT_NE(dots.output().find("--segment: '..' names a directory"), std::string::npos) << dots.output();
  // An empty path (a script's unset variable) is refused, not taken for "no
  // path": that would check nothing and start a daemon on the embedded config.
  for (const char* option : {"--check-config", "--config"}) {
    const auto empty = testing::run_command({BULKHEADD_PATH, option, ""}, dir_);
    EXPECT_EQ(empty.exit_code, 105) << option << ": " << empty.output();  // CLI11's ValidationError
    EXPECT_NE(empty.output().find("must not be empty"), std::string::npos) << empty.output();
  }
  // A missing file is the operator's to mend (78); a read that fails (EIO:
  // /proc/self/mem opens, and reading address 0 fails) may pass, so 1,
  // which the unit retries. The same at start.
  const auto missing = testing::run_command({BULKHEADD_PATH, "--check-config", dir_ + "/none.toml"}, dir_);
  EXPECT_EQ(missing.exit_code, 78) << missing.output();
  EXPECT_NE(missing.output().find("none.toml: cannot read: No such file or directory"), std::string::npos)
      << missing.output();
  for (const char* option : {"--check-config", "--config"}) {
    const auto failed = testing::run_command({BULKHEADD_PATH, option, "/proc/self/mem"}, dir_);
    EXPECT_EQ(failed.exit_code, 1) << option << ": " << failed.output();
    EXPECT_NE(failed.output().find("/proc/self/mem: cannot read: Input/output error"), std::string::npos)
        << failed.output();
  }
  const auto listen = testing::run_command({BULKHEADD_PATH, "--config", good, "--metrics-listen", "[::1]]:80"}, dir_);
  EXPECT_EQ(listen.exit_code, 78);
  EXPECT_NE(listen.output().find("--metrics-listen: '[::1]]:80': must be \"host:port\""), std::string::npos)
      << listen.output();
  // Nothing was created.
  EXPECT_THROW(shm::Segment::attach(segment_, shm::Access::kReadOnly), shm::SegmentError);
}

// A restart applies a new segment_mode and segment_group to the segment it
// adopts, as a new segment gets them: changed only on restart, but then.
TEST_F(DaemonIntegration, ARestartGivesTheAdoptedSegmentTheConfiguredModeAndGroup) {
  {
    DaemonProcess first(BULKHEADD_PATH, dir_, config());
    ASSERT_TRUE(first.wait_ready(segment_)) << first.log();
  }
  const group* daemon_group = ::getgrnam("daemon");  // in every Debian's base files
  ASSERT_NE(daemon_group, nullptr);
  const gid_t gid = daemon_group->gr_gid;
  std::string changed = config();
  changed.insert(changed.find('\n') + 1, "segment_mode = 0o600\nsegment_group = \"daemon\"\n");
  DaemonProcess second(BULKHEADD_PATH, dir_, changed);
  ASSERT_TRUE(second.wait_ready(segment_)) << second.log();
  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm/" + segment_.str()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_gid, gid);
  EXPECT_NE(second.log().find("segment /dev/shm/" + segment_.str() + ": mode 0660 -> 0600, group "),
            std::string::npos)
      << second.log();
}

// Bytes of /dev/shm that the segment's file has memory for.
std::uint64_t allocated_bytes(const std::string& name) {
  struct stat st {};
  if (::stat(("/dev/shm/" + name).c_str(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

// A segment left to first touches (daemon.segment_reserve = false, or a
// daemon from before the key) gets all its memory when a daemon that
// reserves adopts it.
TEST_F(DaemonIntegration, AnAdoptedSegmentGetsItsMemoryReserved) {
  std::string sparse = config();
  sparse.insert(sparse.find('\n') + 1, "segment_reserve = false\n");
  {
    DaemonProcess first(BULKHEADD_PATH, dir_, sparse);
    auto seg = first.wait_ready(segment_);
    ASSERT_TRUE(seg) << first.log();
    EXPECT_LT(allocated_bytes(segment_.str()), seg->size());
    EXPECT_NE(first.log().find(" MiB (not reserved: "), std::string::npos) << first.log();
  }
  DaemonProcess second(BULKHEADD_PATH, dir_, config());
  auto seg = second.wait_ready(segment_);
  ASSERT_TRUE(seg) << second.log();
  EXPECT_NE(second.log().find("adopted segment"), std::string::npos) << second.log();
  EXPECT_GE(allocated_bytes(segment_.str()), seg->size());
  EXPECT_NE(second.log().find(" MiB (reserved in /dev/shm) for 16 dependencies"), std::string::npos) << second.log();
}

// A /dev/shm too small for the segment stops the daemon at start, saying
// what it needs and has, rather than leave the first process that writes
// a page past the space to die of SIGBUS. In a mount namespace of its own
// (unshare(1)) with a 1 MiB tmpfs on /dev/shm.
TEST_F(DaemonIntegration, TooSmallADevShmStopsTheDaemonSayingHowMuchItNeeds) {
  const std::string mount = "mount -t tmpfs -o size=1m tmpfs /dev/shm";
  if (testing::run_command({"/usr/bin/unshare", "-m", "/bin/sh", "-c", mount}, dir_).exit_code != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs of its own on /dev/shm (needs CAP_SYS_ADMIN)";
  }
  std::string large = config();
  large.replace(large.find("max_dependencies = 16"), 21, "max_dependencies = 1024");
  const std::string path = dir_ + "/bulkhead.toml";
  testing::write_file(path, large);
  const auto run = testing::run_command(
      {"/usr/bin/unshare", "-m", "/bin/sh", "-c",
       mount + " && exec " + BULKHEADD_PATH + " --config " + path},
      dir_);
  EXPECT_EQ(run.exit_code, 1) << run.output();
  EXPECT_NE(run.output().find("segment /dev/shm/" + segment_.str() + ": cannot reserve its "),
            std::string::npos)
      << run.output();
  EXPECT_NE(run.output().find(" MiB in /dev/shm: No space left on device (1.0 MiB free); free space there, or set "
                              "daemon.segment_reserve = false"),
            std::string::npos)
      << run.output();
}

// The bytes of /dev/shm/NAME.
std::string segment_bytes(const std::string& name) { return testing::read_file("/dev/shm/" + name); }

TEST_F(DaemonIntegration, RefusesAForeignSegment) {
  shm::Segment foreign = shm::Segment::create(segment_, testing::small_segment());
  foreign.header().abi_major = 99;
  const std::string before = segment_bytes(segment_.str());
  DaemonProcess daemon(BULKHEADD_PATH, dir_, config());
  ASSERT_TRUE(daemon.wait_exit(20s));
  EXPECT_NE(daemon.exit_code(), 0);
  EXPECT_NE(daemon.log().find("ABI major 99"), std::string::npos) << daemon.log();
  EXPECT_EQ(segment_bytes(segment_.str()), before);  // not written into
}

TEST_F(DaemonIntegration, RefusesAWrongMagicWrongSizesOrTruncatedSegmentWithoutWritingIt) {
  struct Case {
    const char* reason;
    std::function<void(shm::Segment&)> corrupt;
  };
  const std::vector<Case> cases = {
      {"wrong magic", [](shm::Segment& s) { s.header().magic.store(0x1234); }},
      {"disagree", [](shm::Segment& s) { s.header().dependency_slot_size += 64; }},
      {"the header says", [&](shm::Segment&) {
         const int fd = ::shm_open(("/" + segment_.str()).c_str(), O_RDWR, 0);
         ASSERT_GE(fd, 0);
         ASSERT_EQ(::ftruncate(fd, 8192), 0);
         ::close(fd);
       }},
  };
  for (const Case& c : cases) {
    shm::Segment::remove(segment_.str());
    {
      shm::Segment s = shm::Segment::create(segment_, testing::small_segment());
      c.corrupt(s);
    }
    const std::string before = segment_bytes(segment_.str());
    DaemonProcess daemon(BULKHEADD_PATH, dir_, config());
    ASSERT_TRUE(daemon.wait_exit(20s)) << c.reason;
    EXPECT_NE(daemon.exit_code(), 0) << c.reason;
    EXPECT_NE(daemon.log().find(c.reason), std::string::npos) << daemon.log();
    EXPECT_NE(daemon.log().find("--recreate-segment"), std::string::npos) << daemon.log();
    EXPECT_EQ(segment_bytes(segment_.str()), before) << c.reason << ": written into";
  }
}

}  // namespace
}  // namespace bulkhead
