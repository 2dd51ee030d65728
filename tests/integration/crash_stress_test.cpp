// Permits under SIGKILL: processes that take and release permits on
// several dependencies as fast as they can are killed at random moments,
// a thousand times, while the real bulkheadd runs. Afterwards every
// dependency's in-flight count is exactly what live processes really
// hold (here: the one permit this test keeps on each), and stays so.
//
// Kills land anywhere, including between a call's update of the shared
// word and of its process's held count: the dead-process scan gives back
// what the dead held, the drift scan what no process holds.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
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

constexpr int kKills = 1000;
constexpr int kProcesses = 6;
const std::vector<std::string> kDependencies = {"alpha", "beta", "gamma"};

// A caller: takes and releases permits on every dependency in turn,
// sometimes holding a few at once, until it is killed.
[[noreturn]] void caller(const std::string& segment, unsigned seed) {
  Client client(segment);
  std::vector<Dependency> deps;
  for (const auto& name : kDependencies) deps.push_back(client.dependency(name));
  std::minstd_rand rng(seed);
  std::vector<Permit> held;
  for (;;) {
    Dependency& d = deps[rng() % deps.size()];
    if (Permit p = d.try_acquire()) held.push_back(std::move(p));
    if (held.size() > rng() % 4) {
      held.back().success();
      held.pop_back();
    }
  }
}

TEST(CrashStress, AThousandKillsLeaveExactlyThePermitsReallyHeld) {
  TempSegmentName segment{"crash"};
  const testing::TempDir temp_dir;
  const std::string& dir = temp_dir.path();
  DaemonProcess daemon(BULKHEADD_PATH, dir,
                       testing::test_daemon_config(
                           segment.str(), "max_dependencies = 16\nmax_processes = 32\nstats_stripes = 2\n",
                           "[defaults]\npolicy = \"fixed\"\nmin_limit = 1\nmax_limit = 1000\ninitial_limit = 1000\n"));
  const auto seg = daemon.wait_ready(segment.str());
  ASSERT_TRUE(seg) << daemon.log();

  Client client(segment.str());
  std::vector<Dependency> deps;
  std::vector<Permit> mine;  // one permit held throughout on each dependency
  for (const auto& name : kDependencies) {
    deps.push_back(client.dependency(name));
    mine.push_back(deps.back().try_acquire());
    ASSERT_TRUE(mine.back());
  }

  std::mt19937 rng(12345);
  std::vector<pid_t> callers;
  auto spawn = [&] {
    const unsigned seed = static_cast<unsigned>(rng());
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Never back into the test's body: a caller whose open throws (the
      // process table full of dead callers the daemon has not yet freed,
      // on a loaded machine) would go on as the test, and its destructors
      // stop the daemon (SIGTERM) under the real one.
      try {
        caller(segment.str(), seed);
      } catch (...) {
      }
      std::_Exit(3);
    }
    ASSERT_GT(pid, 0);
    callers.push_back(pid);
  };
  for (int i = 0; i < kProcesses; ++i) spawn();
  for (int kill = 0; kill < kKills; ++kill) {
    // A random moment: sometimes before the victim has attached at all.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    const std::size_t victim = rng() % callers.size();
    ::kill(callers[victim], SIGKILL);
    ::waitpid(callers[victim], nullptr, 0);
    callers.erase(callers.begin() + static_cast<std::ptrdiff_t>(victim));
    spawn();
  }
  for (pid_t pid : callers) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }

  // The dead are found within a tick or two; the permits lost mid-call
  // three ticks after that. Wait for it (generously: on a loaded machine
  // a 20 ms tick can take far longer) ...
  const auto settled = [&] {
    for (const Dependency& d : deps) {
      if (d.inflight() != 1) return false;
    }
    return true;
  };
  for (int i = 0; i < 2000 && !settled(); ++i) std::this_thread::sleep_for(10ms);
  for (std::size_t i = 0; i < deps.size(); ++i) {
    EXPECT_EQ(deps[i].inflight(), 1) << kDependencies[i] << "\n" << daemon.log();
  }
  // ... and nothing drifts afterwards, in either direction.
  ASSERT_TRUE(testing::wait_ticks(*seg, 10)) << daemon.log();  // ten scans of the dead
  for (std::size_t i = 0; i < deps.size(); ++i) EXPECT_EQ(deps[i].inflight(), 1) << kDependencies[i];
  EXPECT_NE(daemon.log().find("given back"), std::string::npos);
  // What it took (informational: where the kills land is chance).
  const std::string log = daemon.log();
  const auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (auto at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  std::cout << kKills << " kills: " << count("died holding") << " give-backs from dead processes, "
            << count("that no process holds") << " of permits lost mid-call, "
            << count("short of what processes hold") << " restored\n";

  for (Permit& p : mine) p.success();
  for (std::size_t i = 0; i < deps.size(); ++i) EXPECT_EQ(deps[i].inflight(), 0) << kDependencies[i];
}

}  // namespace
}  // namespace bulkhead
