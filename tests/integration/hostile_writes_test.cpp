// Every field a client can write is untrusted: while the real bulkheadd
// runs, a vandal process writes random bytes into every client-writable
// part of the segment (the header's live fields, every dependency slot's
// identity, control and admission lines and wait-queue records, every
// statistics stripe, every process slot and held count). The daemon must keep running, keep
// ticking, and once the vandal stops (and an operator lifts any limit pin
// it left: writers may pin, as they may force a breaker) publish limits
// inside their configured bounds again. The identity lines of the two
// configured names are spared (and only those): junk there makes another
// name of the slot, and the check of their limits would find nothing.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shm/layout.hpp"
#include "shm/segment.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::TempSegmentName;

// Writes random bytes at random places of `bytes` bytes at `at`, `n` times.
void scribble(char* at, std::size_t bytes, std::minstd_rand& rng, int n) {
  for (int i = 0; i < n; ++i) {
    const std::size_t offset = rng() % bytes;
    const std::size_t length = std::min<std::size_t>(1 + rng() % 16, bytes - offset);
    for (std::size_t b = 0; b < length; ++b) at[offset + b] = static_cast<char>(rng());
  }
}

std::uint64_t daemon_heartbeat(const shm::Segment& s) { return s.header().heartbeat.load(); }

[[noreturn]] void vandal(const std::string& segment_name, std::chrono::milliseconds duration,
                         const std::vector<std::uint32_t>& spared_identities) {
  shm::Segment s = shm::Segment::attach(segment_name, shm::Access::kReadWrite);
  const shm::Capacities c = s.capacities();
  std::minstd_rand rng(4242);
  // The header's live fields: from daemon_pid on. (The layout fields before
  // it are validated at attach; scribbling them is refused by the next
  // attach, and the fuzzer checks the running daemon ignores them.)
  char* header = reinterpret_cast<char*>(&s.header());
  const std::size_t live = offsetof(shm::Header, daemon_pid);
  for (auto end = std::chrono::steady_clock::now() + duration; std::chrono::steady_clock::now() < end;) {
    scribble(header + live, sizeof(shm::Header) - live, rng, 1);
    for (std::uint32_t d = 0; d < c.max_dependencies; ++d) {
      shm::DependencySlot& slot = s.dependency(d);
      if (std::find(spared_identities.begin(), spared_identities.end(), d) == spared_identities.end()) {
        scribble(reinterpret_cast<char*>(&slot.identity), sizeof(slot.identity), rng, 1);
      }
      scribble(reinterpret_cast<char*>(&slot.control), sizeof(slot.control), rng, 1);
      scribble(reinterpret_cast<char*>(&slot.admission), sizeof(slot.admission), rng, 1);
      scribble(reinterpret_cast<char*>(s.queue(d)), s.queue_slots() * sizeof(std::uint64_t), rng, 1);
      for (std::uint32_t st = 0; st < c.stats_stripes; ++st) {
        scribble(reinterpret_cast<char*>(&s.stripe(d, st)), sizeof(shm::StatsStripe), rng, 2);
      }
    }
    for (std::uint32_t p = 0; p < c.max_processes; ++p) {
      scribble(reinterpret_cast<char*>(&s.process(p)), sizeof(shm::ProcessIdentity), rng, 1);
      scribble(reinterpret_cast<char*>(&s.held(p, 0)), c.max_dependencies * sizeof(std::uint32_t), rng, 1);
    }
    std::this_thread::sleep_for(1ms);
  }
  std::_Exit(0);
}

TEST(HostileWrites, TheDaemonKeepsRunningAndPublishingSaneLimits) {
  TempSegmentName segment{"vandal"};
  const testing::TempDir temp_dir;
  const std::string& dir = temp_dir.path();
  DaemonProcess daemon(BULKHEADD_PATH, dir,
                       testing::test_daemon_config(
                           segment.str(),
                           "max_dependencies = 8\nmax_processes = 8\nstats_stripes = 2\nqueue_slots = 8\n",
                           "[defaults]\nmin_limit = 2\nmax_limit = 50\ninitial_limit = 10\nmax_queue = 4\n\n"
                           "[dependency.payments]\npolicy = \"aimd\"\nmin_limit = 3\nmax_limit = 40\n\n"
                           "[dependency.recs]\npolicy = \"gradient2\"\n"));
  auto attached = daemon.wait_ready(segment.str());
  ASSERT_TRUE(attached) << daemon.log();
  shm::Segment& s = *attached;
  // Configured names: claimed before the daemon says it is ready.
  const auto payments = shm::find_dependency(s, "payments");
  const auto recs = shm::find_dependency(s, "recs");
  ASSERT_TRUE(payments && recs);

  const pid_t pid = ::fork();
  if (pid == 0) vandal(segment.str(), 2000ms, {*payments, *recs});
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the vandal itself failed";

  // The daemon is still there and still ticking ...
  ASSERT_FALSE(daemon.wait_exit(0s)) << daemon.log();
  // (The vandal wrote the heartbeat too: the daemon's next tick puts its
  // own count back, so look for two changes, not for growth.)
  std::uint64_t heartbeat = daemon_heartbeat(s);
  int changes = 0;
  for (int i = 0; i < 1000 && changes < 2; ++i) {
    std::this_thread::sleep_for(10ms);
    if (daemon_heartbeat(s) != heartbeat) {
      heartbeat = daemon_heartbeat(s);
      ++changes;
    }
  }
  const bool ticking = changes == 2;
  EXPECT_TRUE(ticking) << daemon.log();
  // ... and every dependency it tracks gets a limit inside its configured
  // bounds again (it republishes at each window's end), once any pin the
  // vandal's bytes made is lifted, as `bulkheadctl pin NAME off` does.
  ASSERT_EQ(shm::find_dependency(s, "payments"), payments);
  ASSERT_EQ(shm::find_dependency(s, "recs"), recs);
  shm::Segment operator_view = shm::Segment::attach(segment.str(), shm::Access::kReadWrite);
  for (const std::uint32_t index : {*payments, *recs}) operator_view.dependency(index).control.limit_pin.store(0);
  const auto within = [&](std::uint32_t index, std::uint32_t min, std::uint32_t max) {
    const std::uint32_t limit = s.dependency(index).control.limit.load();
    return limit >= min && limit <= max;
  };
  const auto sane = [&] { return within(*payments, 3, 40) && within(*recs, 2, 50); };
  bool ok = false;
  for (int i = 0; i < 1000 && !(ok = sane()); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(ok) << "limits: payments " << s.dependency(*payments).control.limit.load() << ", recs "
                  << s.dependency(*recs).control.limit.load() << ", pins " << std::hex
                  << s.dependency(*payments).control.limit_pin.load() << " "
                  << s.dependency(*recs).control.limit_pin.load() << "\n"
                  << daemon.log();
  daemon.signal(SIGTERM);
  ASSERT_TRUE(daemon.wait_exit(10s));
  EXPECT_EQ(daemon.exit_code(), 0) << daemon.log();
}

}  // namespace
}  // namespace bulkhead
