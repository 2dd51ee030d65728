// The soak test: not part of the suite (scripts/soak.sh runs it, for
// BULKHEAD_SOAK_SECONDS, default 120). Eight processes of four threads call
// twenty dependencies without pause while the real bulkheadd is reloaded
// every half second, one reload in four with a broken config. Afterwards:
// every reload was applied or rejected (none lost, none half-applied), the
// daemon's memory did not grow, and not one permit is left in flight.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bulkhead/client.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::TempSegmentName;

constexpr int kProcesses = 8;
constexpr int kThreads = 4;
constexpr int kDependencies = 20;

std::string dependency_name(int i) { return "dep-" + std::to_string(i); }

// One of three valid configs (policies and bounds move between them), or
// a broken one.
std::string config(const std::string& segment, int variant) {
  static const char* kPolicies[] = {"balance", "aimd", "gradient2", "vegas", "gradient", "fixed"};
  std::string text = "[daemon]\nsegment = \"" + segment +
                     "\"\ntick_ms = 20\nmetrics_listen = \"127.0.0.1:0\"\nmax_dependencies = 64\n"
                     "max_processes = 32\nstats_stripes = 4\n\n[defaults]\nmin_limit = 2\nmax_limit = 100\n";
  for (int i = 0; i < kDependencies; ++i) {
    text += "\n[dependency." + dependency_name(i) + "]\npolicy = \"" + kPolicies[(i + variant) % 6] +
            "\"\nmax_limit = " + std::to_string(20 + 10 * ((i + variant) % 5)) + "\n";
  }
  if (variant == 3) text += "\n[dependency.broken]\nmin_limit = 50\nmax_limit = 10\n";
  return text;
}

long rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  long value = 0;
  while (status >> key) {
    if (key == "VmRSS:") {
      status >> value;
      return value;
    }
    status.ignore(1 << 20, '\n');
  }
  return -1;
}

long count(const std::string& text, const std::string& what) {
  long n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Soak, CallsAndReloadsForMinutesLoseNothing) {
  const char* env = std::getenv("BULKHEAD_SOAK_SECONDS");
  const auto duration = std::chrono::seconds(env != nullptr ? std::atoi(env) : 120);
  TempSegmentName segment{"soak"};
  const testing::TempDir temp_dir;
  const std::string& dir = temp_dir.path();
  DaemonProcess daemon(BULKHEADD_PATH, dir, config(segment.str(), 0));
  ASSERT_TRUE(daemon.wait_ready(segment.str())) << daemon.log();

  auto* stop = static_cast<std::atomic<bool>*>(
      ::mmap(nullptr, sizeof(std::atomic<bool>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(stop, MAP_FAILED);
  new (stop) std::atomic<bool>(false);
  std::vector<pid_t> callers;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      Client client(segment.str());
      std::vector<Dependency> deps;
      for (int i = 0; i < kDependencies; ++i) deps.push_back(client.dependency(dependency_name(i)));
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, seed = p * kThreads + t] {
          std::minstd_rand rng(static_cast<unsigned>(seed));
          while (!stop->load(std::memory_order_relaxed)) {
            Permit permit = deps[rng() % deps.size()].try_acquire();
            if (!permit) continue;
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
            if (rng() % 50 == 0) {
              permit.dropped();
            } else {
              permit.success();
            }
          }
        });
      }
      for (auto& t : threads) t.join();
      std::_Exit(0);
    }
    ASSERT_GT(pid, 0);
    callers.push_back(pid);
  }

  // Warm up, then take the daemon's memory as the baseline.
  std::this_thread::sleep_for(std::min<std::chrono::seconds>(duration / 4, 10s));
  const long rss_start = rss_kib(daemon.pid());
  int reloads = 0, broken = 0;
  for (auto end = std::chrono::steady_clock::now() + duration; std::chrono::steady_clock::now() < end;) {
    const int variant = reloads % 4;
    testing::write_file(daemon.config_path(), config(segment.str(), variant));
    daemon.signal(SIGHUP);
    ++reloads;
    broken += variant == 3;
    std::this_thread::sleep_for(500ms);
  }
  const long rss_end = rss_kib(daemon.pid());

  stop->store(true);
  for (pid_t pid : callers) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  ASSERT_FALSE(daemon.wait_exit(0s)) << daemon.log();
  const std::string log = daemon.log();
  EXPECT_EQ(count(log, "reloaded "), reloads - broken) << log.substr(log.size() > 4000 ? log.size() - 4000 : 0);
  EXPECT_EQ(count(log, "reload rejected"), broken);
  std::cout << reloads << " reloads (" << broken << " broken) in " << duration.count()
            << " s; bulkheadd RSS " << rss_start << " KiB after warm-up, " << rss_end << " KiB at the end\n";
  EXPECT_LE(rss_end, rss_start + rss_start / 10 + 2048) << "the daemon's memory grew";

  Client client(segment.str());
  for (int i = 0; i < kDependencies; ++i) {
    EXPECT_EQ(client.dependency(dependency_name(i)).inflight(), 0) << dependency_name(i);
  }
  ::munmap(stop, sizeof(std::atomic<bool>));
}

}  // namespace
}  // namespace bulkhead
