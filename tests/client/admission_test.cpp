// Admission against a real segment: the limit holds under threads and
// processes, counts return to zero, outcomes reach the statistics.
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/rseq.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "bulkhead/bulkhead.h"
#include "bulkhead/client.hpp"
#include "shm/segment.hpp"
#include "shm/stats.hpp"
#include "tests/support/children.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {

using testing::TempSegmentName;

// Occupancy seen by the callers themselves, in memory shared across fork.
struct Occupancy {
  std::atomic<int> now{0};
  std::atomic<int> peak{0};
  std::atomic<long> admitted{0};
  void enter() {
    const int n = now.fetch_add(1) + 1;
    int p = peak.load();
    while (n > p && !peak.compare_exchange_weak(p, n)) {
    }
    admitted.fetch_add(1);
  }
  void leave() { now.fetch_sub(1); }
};

class AdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    segment_.emplace(shm::Segment::create(name_, testing::small_segment()));
    segment_->header().default_limit.store(20);
  }

  // The slot index of a dependency the client looked up.
  std::uint32_t slot_of(const std::string& dep) { return *shm::find_dependency(*segment_, dep); }
  void set_limit(const std::string& dep, std::uint32_t limit) {
    segment_->dependency(slot_of(dep)).control.limit.store(limit);
    segment_->dependency(slot_of(dep)).partitions.admit_limit.store(limit);  // no partitions
  }
  // Process slots ready for `pid`.
  std::uint32_t slots_of(pid_t pid) {
    std::uint32_t n = 0;
    for (std::uint32_t p = 0; p < segment_->header().max_processes; ++p) {
      const shm::ProcessIdentity& id = segment_->process(p).identity;
      n += id.state.load() == shm::kSlotReady && id.pid.load() == pid ? 1 : 0;
    }
    return n;
  }
  std::uint64_t held_total(std::uint32_t dep) {
    std::uint64_t sum = 0;
    for (std::uint32_t p = 0; p < segment_->header().max_processes; ++p) sum += segment_->held(p, dep).load();
    return sum;
  }
  // Hammers `dep` for `iterations` acquire/release pairs, recording what it
  // saw in `occupancy`.
  static void hammer(bh_dep* dep, Occupancy* occupancy, int iterations) {
    for (int i = 0; i < iterations; ++i) {
      bh_permit permit;
      if (bh_try_acquire(dep, &permit) == 0) {
        occupancy->enter();
        std::this_thread::yield();
        occupancy->leave();
        bh_release(&permit, i % 3 == 0 ? BH_DROPPED : BH_SUCCESS);
      }
    }
  }

  TempSegmentName name_{"adm"};
  std::optional<shm::Segment> segment_;
};

TEST_F(AdmissionTest, OpensSharedAndLooksUpANewNameWithTheDefaultLimit) {
  Client client(name_.str());
  EXPECT_EQ(client.mode(), Client::Mode::kShared);
  Dependency dep = client.dependency("payments");
  EXPECT_EQ(dep.limit(), 20);
  EXPECT_EQ(dep.inflight(), 0);
  // A second lookup returns the same handle.
  EXPECT_EQ(client.dependency("payments").handle(), dep.handle());
}

// The status tells a running daemon from none: not yet (a segment made
// that no daemon ticked on: the daemon publishes its pid just after it
// makes it), stopped (pid 0), or killed (its pid gone), when the limits
// stay those it last published.
TEST_F(AdmissionTest, TheStatusSaysWhetherADaemonRuns) {
  const auto status = [&] { return std::string(Client(name_.str()).status()); };
  const std::string attached = "shared: attached to /dev/shm/" + name_.str();
  EXPECT_EQ(status(), attached + " (no daemon has governed it yet: the limits are those it was made with, until "
                                 "bulkheadd ticks)");
  shm::publish_daemon(segment_->header());  // this process: alive
  EXPECT_EQ(status(), attached + " (daemon pid " + std::to_string(::getpid()) + ")");
  segment_->header().heartbeat.store(3);  // it ticked
  shm::withdraw_daemon(segment_->header());
  EXPECT_EQ(status(), attached + " (no daemon, the last one stopped: the limits are the last it published, until "
                                 "bulkheadd runs again)");
  shm::publish_daemon(segment_->header());
  const pid_t gone = ::fork();
  if (gone == 0) std::_Exit(0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  segment_->header().daemon_pid.store(gone);
  EXPECT_EQ(status(), attached + " (daemon pid " + std::to_string(gone) +
                          " is gone: the limits are the last it published, until bulkheadd runs again)");
}

TEST_F(AdmissionTest, RejectsAtTheLimitWithoutTouchingTheCount) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  set_limit("payments", 2);
  Permit a = dep.try_acquire();
  Permit b = dep.try_acquire();
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  const std::uint64_t word = segment_->dependency(slot_of("payments")).admission.word.load();
  Permit c = dep.try_acquire();
  EXPECT_FALSE(c);
  EXPECT_EQ(c.reason(), BH_REJECT_LIMIT);
  // A rejection never writes the admission word.
  EXPECT_EQ(segment_->dependency(slot_of("payments")).admission.word.load(), word);
  EXPECT_EQ(shm::read_counters(*segment_, slot_of("payments")).rejected, 1u);
  a.success();
  EXPECT_TRUE(dep.try_acquire());
}

TEST_F(AdmissionTest, ShadowModeAdmitsPastTheLimitAndCountsIt) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  set_limit("payments", 2);
  segment_->dependency(slot_of("payments")).control.flags.store(shm::kDependencyShadow);
  std::vector<Permit> permits;
  for (int i = 0; i < 5; ++i) {
    permits.push_back(dep.try_acquire());
    EXPECT_TRUE(permits.back()) << i;
  }
  EXPECT_EQ(dep.inflight(), 5);
  const shm::DependencyCounters c = shm::read_counters(*segment_, slot_of("payments"));
  EXPECT_EQ(c.shadow_admitted, 3u);  // the three over the limit of 2
  EXPECT_EQ(c.rejected, 0u);
  // Enforcing again rejects at once.
  segment_->dependency(slot_of("payments")).control.flags.store(0);
  EXPECT_EQ(dep.try_acquire().reason(), BH_REJECT_LIMIT);
}

TEST_F(AdmissionTest, ShadowModeAdmitsPastAnOpenBreakerAndCountsIt) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  shm::DependencyControl& control = segment_->dependency(slot_of("payments")).control;
  control.breaker.store(shm::kBreakerOpen);
  EXPECT_EQ(dep.try_acquire().reason(), BH_REJECT_OPEN_CIRCUIT);
  control.flags.store(shm::kDependencyShadow);
  Permit p = dep.try_acquire();
  EXPECT_TRUE(p);
  const shm::DependencyCounters c = shm::read_counters(*segment_, slot_of("payments"));
  EXPECT_EQ(c.open_rejected, 1u);
  EXPECT_EQ(c.shadow_open, 1u);  // the one the breaker would have refused
}

TEST_F(AdmissionTest, AnUntimedPermitTakesTheCallersLatencyAndNeverInventsOne) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  set_limit("payments", 1);
  Permit timed_by_caller = dep.try_acquire_untimed();
  ASSERT_TRUE(timed_by_caller);
  EXPECT_EQ(dep.try_acquire_untimed().reason(), BH_REJECT_LIMIT);  // the same admission rule
  timed_by_caller.release(Outcome::kSuccess, std::chrono::milliseconds(5));
  shm::DependencyCounters c = shm::read_counters(*segment_, slot_of("payments"));
  EXPECT_EQ(c.ok, 1u);
  EXPECT_EQ(c.rtt_sum_ns, 5'000'000u);  // the caller's latency, as given
  EXPECT_EQ(c.rejected, 1u);
  // Released without a latency, a success has none to keep: not a sample.
  Permit forgotten = dep.try_acquire_untimed();
  ASSERT_TRUE(forgotten);
  forgotten.success();
  c = shm::read_counters(*segment_, slot_of("payments"));
  EXPECT_EQ(c.ok, 1u);
  EXPECT_EQ(c.ignored, 1u);
  EXPECT_EQ(c.rtt_sum_ns, 5'000'000u);
  EXPECT_EQ(dep.inflight(), 0);
}

TEST_F(AdmissionTest, ReleasingTwiceGivesBackOnce) {
  bh_client* c = nullptr;
  ASSERT_EQ(bh_client_open(name_.c_str(), &c), 0);
  bh_dep* d = nullptr;
  ASSERT_EQ(bh_dependency(c, "payments", &d), 0);
  bh_permit one, two;
  ASSERT_EQ(bh_try_acquire(d, &one), 0);
  ASSERT_EQ(bh_try_acquire(d, &two), 0);
  bh_release(&one, BH_SUCCESS);
  bh_release(&one, BH_SUCCESS);
  EXPECT_EQ(bh_inflight(d), 1);
  bh_release(&two, BH_IGNORE);
  EXPECT_EQ(bh_inflight(d), 0);
  EXPECT_EQ(held_total(slot_of("payments")), 0u);
  bh_client_close(c);
}

TEST_F(AdmissionTest, OutcomesReachTheStatisticsButOnlySuccessesCarryLatency) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  dep.try_acquire().release(Outcome::kSuccess, std::chrono::milliseconds(3));
  dep.try_acquire().release(Outcome::kSuccess, std::chrono::milliseconds(5));
  dep.try_acquire().release(Outcome::kDropped, std::chrono::seconds(30));
  dep.try_acquire().ignore();
  { Permit abandoned = dep.try_acquire(); }  // destroyed unreleased: ignored
  const shm::DependencyCounters c = shm::read_counters(*segment_, slot_of("payments"));
  EXPECT_EQ(c.ok, 2u);
  EXPECT_EQ(c.dropped, 1u);
  EXPECT_EQ(c.ignored, 2u);
  EXPECT_EQ(c.rtt_sum_ns, 8'000'000u);  // the dropped call's 30 s are not in it
  const shm::WindowExtremes e = shm::take_window_extremes(*segment_, slot_of("payments"));
  EXPECT_EQ(e.rtt_min_ns, 3'000'000u);
  EXPECT_EQ(e.rtt_max_ns, 5'000'000u);
  EXPECT_EQ(e.max_inflight, 1u);
}

TEST_F(AdmissionTest, ALatencyThatWrappedBelowZeroCountsAsZero) {
  bh_client* c = nullptr;
  ASSERT_EQ(bh_client_open(name_.c_str(), &c), 0);
  bh_dep* d = nullptr;
  ASSERT_EQ(bh_dependency(c, "payments", &d), 0);
  bh_permit p;
  ASSERT_EQ(bh_try_acquire_untimed(d, &p), 0);
  bh_release_latency(&p, BH_SUCCESS, 4'000'000);
  const std::uint64_t start = 5'000'000, end = 4'000'000;  // an end read before its start
  ASSERT_EQ(bh_try_acquire_untimed(d, &p), 0);
  bh_release_latency(&p, BH_SUCCESS, end - start);
  {
    Client client(name_.str());
    client.dependency("payments").try_acquire_untimed().release(Outcome::kSuccess, std::chrono::nanoseconds(-7));
  }
  const shm::DependencyCounters counters = shm::read_counters(*segment_, slot_of("payments"));
  EXPECT_EQ(counters.ok, 3u);
  EXPECT_EQ(counters.rtt_sum_ns, 4'000'000u);  // not 4 ms less 1 ms, wrapped
  const shm::WindowExtremes e = shm::take_window_extremes(*segment_, slot_of("payments"));
  EXPECT_EQ(e.rtt_min_ns, 0u);
  EXPECT_EQ(e.rtt_max_ns, 4'000'000u);
  bh_client_close(c);
}

TEST_F(AdmissionTest, LatencyIsMeasuredFromAcquireToRelease) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  Permit p = dep.try_acquire();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  p.success();
  const shm::DependencyCounters c = shm::read_counters(*segment_, slot_of("payments"));
  EXPECT_GE(c.rtt_sum_ns, 20'000'000u);
}

TEST_F(AdmissionTest, TwoThreadsNeverExceedTheLimit) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  set_limit("payments", 1);
  Occupancy occupancy;
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) threads.emplace_back(hammer, dep.handle(), &occupancy, 200'000);
  for (auto& t : threads) t.join();
  EXPECT_EQ(occupancy.peak.load(), 1);
  EXPECT_GT(occupancy.admitted.load(), 0);
  EXPECT_EQ(dep.inflight(), 0);
  EXPECT_EQ(held_total(slot_of("payments")), 0u);
}

TEST_F(AdmissionTest, FourProcessesNeverExceedTheLimit) {
  {
    Client client(name_.str());
    client.dependency("payments");
  }
  set_limit("payments", 3);
  auto* occupancy = static_cast<Occupancy*>(
      ::mmap(nullptr, sizeof(Occupancy), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(occupancy, MAP_FAILED);
  new (occupancy) Occupancy();
  testing::run_children(4, [&](int) {
    bh_client* client = nullptr;
    bh_dep* dep = nullptr;
    if (bh_client_open(name_.c_str(), &client) != 0 || bh_dependency(client, "payments", &dep) != 0) {
      return 2;
    }
    std::thread second(hammer, dep, occupancy, 50'000);
    hammer(dep, occupancy, 50'000);
    second.join();
    bh_client_close(client);
    return 0;
  });
  EXPECT_LE(occupancy->peak.load(), 3);
  EXPECT_GT(occupancy->admitted.load(), 0);
  const std::uint32_t slot = slot_of("payments");
  EXPECT_EQ(shm::admission_inflight(segment_->dependency(slot).admission.word.load()), 0u);
  EXPECT_EQ(held_total(slot), 0u);
  // Every process released its slot at close.
  for (std::uint32_t p = 0; p < segment_->header().max_processes; ++p) {
    EXPECT_EQ(segment_->process(p).identity.state.load(), shm::kSlotFree) << p;
  }
  ::munmap(occupancy, sizeof(Occupancy));
}

TEST_F(AdmissionTest, PermitsAreHeldInTheCallersProcessSlot) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  Permit p = dep.try_acquire();
  ASSERT_TRUE(p);
  const std::uint32_t slot = slot_of("payments");
  std::uint32_t mine = UINT32_MAX;
  for (std::uint32_t i = 0; i < segment_->header().max_processes; ++i) {
    if (segment_->process(i).identity.pid.load() == ::getpid()) mine = i;
  }
  ASSERT_NE(mine, UINT32_MAX);
  EXPECT_EQ(segment_->held(mine, slot).load(), 1u);
  p.success();
  EXPECT_EQ(segment_->held(mine, slot).load(), 0u);
}

TEST_F(AdmissionTest, AForkedChildCountsItsPermitsInItsOwnSlot) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    Permit p = dep.try_acquire();
    char c = p ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();  // hold it until killed
    std::_Exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  const std::uint32_t slot = slot_of("payments");
  std::uint32_t parent_held = 0, child_held = 0;
  for (std::uint32_t i = 0; i < segment_->header().max_processes; ++i) {
    const auto& id = segment_->process(i).identity;
    if (id.state.load() != shm::kSlotReady) continue;
    if (id.pid.load() == ::getpid()) parent_held += segment_->held(i, slot).load();
    if (id.pid.load() == pid) child_held += segment_->held(i, slot).load();
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_EQ(parent_held, 0u);
  EXPECT_EQ(child_held, 1u);
}

// fork() while another thread is inside the client (its mutex held, its
// map of dependencies being written): the child, whose only thread is the
// one that forked, can still use the client. Each child has seconds to
// name a dependency; one that hangs is killed by its alarm and fails.
TEST_F(AdmissionTest, AChildForkedWhileAnotherThreadNamesDependenciesCanUseTheClient) {
  Client client(name_.str());
  std::atomic<bool> stop{false};
  std::thread namer([&] {
    for (int i = 0; !stop.load(); ++i) (void)client.dependency(i % 2 == 0 ? "payments" : "orders");
  });
  int failures = 0;
  for (int i = 0; i < 200 && failures == 0; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(10);
      Dependency dep = client.dependency("payments");
      Permit p = dep.try_acquire();
      std::_Exit(p ? 0 : 1);
    }
    ASSERT_GT(pid, 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  stop = true;
  namer.join();
  EXPECT_EQ(failures, 0);
}

// A child inherits its parent's permits in memory, not in its held
// counts: it must not give them back (the parent does), or the in-flight
// count would fall below what is held until the daemon's drift scan.
TEST_F(AdmissionTest, AForkedChildNeverGivesBackItsParentsPermits) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  Permit first = dep.try_acquire(), second = dep.try_acquire();
  ASSERT_TRUE(first && second);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Step by step; the exit code names the first step that went wrong.
    // A grandchild holds copies of the same permits, and none of its own.
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      first.success();
      second.success();
      std::_Exit(dep.inflight() == 2 ? 0 : 1);
    }
    int status = 0;
    if (::waitpid(grandchild, &status, 0) != grandchild || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::_Exit(5);
    }
    first.success();  // holds none of its own: not its permit
    if (dep.inflight() != 2) std::_Exit(1);
    Permit own = dep.try_acquire();
    if (!own || dep.inflight() != 3) std::_Exit(2);
    second.success();  // holds one: gives back one (which one does not matter)
    if (dep.inflight() != 2) std::_Exit(3);
    own.success();  // holds none any more
    if (dep.inflight() != 2) std::_Exit(4);
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(dep.inflight(), 2);
  EXPECT_EQ(held_total(slot_of("payments")), 2u);
  first.success();
  second.success();
  EXPECT_EQ(dep.inflight(), 0);
  EXPECT_EQ(held_total(slot_of("payments")), 0u);
}

// The outcome of a call a child inherited is its parent's too: the child's
// release records nothing (a failure it reported would count twice for the
// circuit breaker, once from each process).
TEST_F(AdmissionTest, AForkedChildRecordsNoOutcomeForItsParentsPermit) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  Permit inherited = dep.try_acquire();
  ASSERT_TRUE(inherited);
  const pid_t pid = ::fork();
  if (pid == 0) {
    inherited.failed();
    Permit own = dep.try_acquire();  // its own call's outcome counts
    if (!own) std::_Exit(1);
    own.dropped();
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const std::uint32_t slot = slot_of("payments");
  EXPECT_EQ(shm::read_counters(*segment_, slot).failed, 0u);
  EXPECT_EQ(shm::read_counters(*segment_, slot).dropped, 1u);
  inherited.success();
  EXPECT_EQ(shm::read_counters(*segment_, slot).ok, 1u);
  EXPECT_EQ(dep.inflight(), 0);
}

// A forked child takes its process slot at its first call into the
// library, not at fork(): a child that only execs another program takes
// none. (Taken at fork(), the slot stayed until the program exited: exec
// keeps the pid and the start time, so the daemon took it for the client.)
TEST_F(AdmissionTest, AForkedChildThatExecsTakesNoProcessSlot) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  Permit mine = dep.try_acquire();  // held across the fork: the child's copy is the parent's
  ASSERT_TRUE(mine);
  testing::ExecdChild execd;
  ASSERT_TRUE(execd.ok()) << "the child did not exec /bin/sleep";
  const std::uint32_t slots = slots_of(execd.pid());
  execd.kill();
  EXPECT_EQ(slots, 0u);
  EXPECT_EQ(slots_of(::getpid()), 1u);
  EXPECT_EQ(held_total(slot_of("payments")), 1u);
}

// ... and one that calls takes it then, and counts its permits there.
TEST_F(AdmissionTest, AForkedChildTakesItsProcessSlotAtItsFirstCall) {
  Client client(name_.str());
  Dependency dep = client.dependency("payments");
  int forked[2], go[2], called[2];
  ASSERT_EQ(::pipe(forked), 0);
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(called), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    char c = 'y';
    (void)!::write(forked[1], &c, 1);  // past fork(), and its handlers
    if (::read(go[0], &c, 1) != 1) std::_Exit(1);
    Permit p = dep.try_acquire();
    c = p ? 'y' : 'n';
    (void)!::write(called[1], &c, 1);
    ::pause();  // hold it until killed
    std::_Exit(0);
  }
  ::close(forked[1]);
  ::close(called[1]);
  char c = 0;
  ASSERT_EQ(::read(forked[0], &c, 1), 1);
  const std::uint32_t slots_before_its_call = slots_of(pid);
  (void)!::write(go[1], &c, 1);
  const bool admitted = ::read(called[0], &c, 1) == 1 && c == 'y';
  const std::uint32_t slots_after_its_call = slots_of(pid);
  const std::uint64_t held = held_total(slot_of("payments"));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  for (int fd : {forked[0], go[0], go[1], called[0]}) ::close(fd);
  EXPECT_EQ(slots_before_its_call, 0u);
  EXPECT_TRUE(admitted);
  EXPECT_EQ(slots_after_its_call, 1u);
  EXPECT_EQ(held, 1u);  // in the child's slot: the parent holds none
  EXPECT_EQ(slots_of(::getpid()), 1u);
}

// Threads of the child making their first calls at once: one claims the
// slot while the others wait for it (ThreadSanitizer in CI watches the
// lines being rebound), and every permit counts in the child's slot.
TEST_F(AdmissionTest, AForkedChildsThreadsClaimItsProcessSlotOnce) {
  Client client(name_.str());
  Dependency payments = client.dependency("payments");
  Dependency orders = client.dependency("orders");
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::atomic<int> admitted{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        while (!go.load()) std::this_thread::yield();
        Permit p = (t % 2 == 0 ? payments : orders).try_acquire();
        if (p) admitted.fetch_add(1);
        p.success();
      });
    }
    go.store(true);
    for (std::thread& t : threads) t.join();
    if (admitted.load() != 4) std::_Exit(1);
    if (slots_of(::getpid()) != 1) std::_Exit(2);
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(shm::read_counters(*segment_, slot_of("payments")).ok, 2u);
  EXPECT_EQ(shm::read_counters(*segment_, slot_of("orders")).ok, 2u);
}

// With the process table full at fork, a child has no slot to count its
// permits in. It goes standalone: its permits count nowhere in the segment,
// so the daemon has nothing to give back when it dies (counted in its
// parent's slot, they stayed taken until the parent exited), and permits
// inherited from its parent stay the parent's.
TEST_F(AdmissionTest, AForkedChildWithNoProcessSlotGoesStandalone) {
  bh_options options{};
  options.segment = name_.c_str();
  options.static_limit = 1;
  Client client(options);
  Dependency dep = client.dependency("payments");
  Permit inherited = dep.try_acquire();
  ASSERT_TRUE(inherited);
  const testing::FullProcessTable full(*segment_);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Step by step; the exit code names the first step that went wrong.
    if (client.mode() != Client::Mode::kStandalone) std::_Exit(1);
    if (client.status().find("standalone after fork") == std::string_view::npos) std::_Exit(2);
    inherited.success();  // the parent's: gives back nothing
    Permit own = dep.try_acquire();
    if (!own) std::_Exit(3);
    if (dep.try_acquire()) std::_Exit(4);  // at its static limit, 1
    const char c = 'y';
    (void)!::write(ready[1], &c, 1);
    ::pause();  // hold it until killed
    std::_Exit(0);
  }
  ::close(ready[1]);  // a child that exits early ends the read
  char c = 0;
  const bool child_ready = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  const std::uint32_t slot = slot_of("payments");
  const std::uint64_t held_while_child_holds = held_total(slot);
  const std::uint32_t inflight_while_child_holds =
      shm::admission_inflight(segment_->dependency(slot).admission.word.load());
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(child_ready) << "the child exited with " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  EXPECT_EQ(held_while_child_holds, 1u);
  EXPECT_EQ(inflight_while_child_holds, 1u);
  EXPECT_EQ(dep.inflight(), 1);
  inherited.success();
  EXPECT_EQ(held_total(slot), 0u);
  EXPECT_EQ(dep.inflight(), 0);
}

// Opened with BH_OPEN_REQUIRE_SEGMENT, the client refuses standalone mode;
// a child with no process slot refuses every call instead. Closing it
// leaves its parent's slot alone (counted in that slot, it used to free
// it, and the parent's permits with it).
TEST_F(AdmissionTest, AForkedChildWithNoProcessSlotRefusesWhenTheSegmentIsRequired) {
  bh_options options{};
  options.segment = name_.c_str();
  options.flags = BH_OPEN_REQUIRE_SEGMENT;
  Client client(options);
  Dependency dep = client.dependency("payments");
  const testing::FullProcessTable full(*segment_);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (client.mode() != Client::Mode::kStandalone) std::_Exit(1);
    if (client.status().find("refusing every call") == std::string_view::npos) std::_Exit(2);
    const Permit p = dep.try_acquire();
    if (p || p.reason() != BH_REJECT_LIMIT) std::_Exit(3);
    bh_client_close(client.handle());
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::uint32_t mine = 0;
  for (std::uint32_t i = 0; i < segment_->header().max_processes; ++i) {
    const auto& id = segment_->process(i).identity;
    if (id.state.load() == shm::kSlotReady && id.pid.load() == ::getpid()) ++mine;
  }
  EXPECT_EQ(mine, 1u + full.claimed());  // the client's slot, and the ones filling the table
  Permit p = dep.try_acquire();
  EXPECT_TRUE(p);
  p.success();
}

TEST_F(AdmissionTest, StrictDaemonRefusesUnknownNames) {
  segment_->header().flags.store(shm::kHeaderStrict);
  shm::find_or_claim_dependency(*segment_, "known", 5, shm::kDependencyConfigured);
  bh_client* c = nullptr;
  ASSERT_EQ(bh_client_open(name_.c_str(), &c), 0);
  bh_dep* d = nullptr;
  EXPECT_EQ(bh_dependency(c, "unknown", &d), -ENOENT);
  EXPECT_NE(std::string(bh_last_error()).find("strict"), std::string::npos);
  EXPECT_EQ(bh_dependency(c, "known", &d), 0);
  EXPECT_EQ(bh_limit(d), 5);
  bh_client_close(c);
}

// The daemon registers a configured name with a claim of its slot, then
// publishes it; a strict client that looked the name up in between used to
// skip the claim and refuse the name with -ENOENT.
TEST_F(AdmissionTest, StrictDaemonsNameMidClaimIsFoundNotRefused) {
  segment_->header().flags.store(shm::kHeaderStrict);
  const std::uint64_t hash = shm::dependency_name_hash("known");
  const auto home = static_cast<std::uint32_t>(hash % segment_->capacities().max_dependencies);
  shm::DependencySlot& slot = segment_->dependency(home);
  slot.identity.tag.store((hash << 8) | shm::kSlotClaiming);
  bh_client* c = nullptr;
  ASSERT_EQ(bh_client_open(name_.c_str(), &c), 0);
  std::thread daemon([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    slot.identity.name_length = 5;
    std::memcpy(slot.identity.name, "known", 5);
    slot.control.limit.store(5);
    slot.partitions.admit_limit.store(5);
    slot.control.flags.store(shm::kDependencyConfigured);
    slot.identity.tag.store((hash << 8) | shm::kSlotReady, std::memory_order_release);
  });
  bh_dep* d = nullptr;
  EXPECT_EQ(bh_dependency(c, "known", &d), 0) << bh_last_error();
  daemon.join();
  EXPECT_EQ(bh_limit(d), 5);
  bh_client_close(c);
}

// Outcomes land on the stripe of the CPU the caller runs on: two threads
// pinned to two CPUs write two stripes, and the daemon's sum has them all.
TEST_F(AdmissionTest, OutcomesAreRecordedOnTheStripeOfTheCallersCpu) {
  cpu_set_t mine;
  ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
    if (CPU_ISSET(c, &mine)) cpus.push_back(c);
  }
  if (cpus.size() < 2 || __rseq_size == 0) GTEST_SKIP() << "needs two CPUs and glibc's rseq registration";
  bh_client* client = nullptr;
  ASSERT_EQ(bh_client_open(name_.c_str(), &client), 0);
  bh_dep* dep = nullptr;
  ASSERT_EQ(bh_dependency(client, "per-cpu", &dep), 0);
  const std::uint32_t stripes = segment_->capacities().stats_stripes;
  ASSERT_GE(stripes, 2u);
  auto on_cpu = [&](int cpu, int calls) {
    std::thread t([&] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      ASSERT_EQ(::pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
      ::sched_yield();  // now on it: the kernel updates the rseq area on the move
      for (int i = 0; i < calls; ++i) {
        bh_permit p;
        ASSERT_EQ(bh_try_acquire_untimed(dep, &p), 0);
        bh_release_latency(&p, BH_DROPPED, 0);
      }
    });
    t.join();
  };
  on_cpu(cpus[0], 3);
  on_cpu(cpus[1], 5);
  const std::uint32_t index = slot_of("per-cpu");
  EXPECT_EQ(segment_->stripe(index, static_cast<std::uint32_t>(cpus[0]) % stripes).dropped.load(), 3u);
  EXPECT_EQ(segment_->stripe(index, static_cast<std::uint32_t>(cpus[1]) % stripes).dropped.load(), 5u);
  EXPECT_EQ(shm::read_counters(*segment_, index).dropped, 8u);
  bh_client_close(client);
}

TEST_F(AdmissionTest, BadNamesAreEINVAL) {
  bh_client* c = nullptr;
  ASSERT_EQ(bh_client_open(name_.c_str(), &c), 0);
  bh_dep* d = nullptr;
  EXPECT_EQ(bh_dependency(c, "no spaces", &d), -EINVAL);
  EXPECT_NE(std::string(bh_last_error()).find("no spaces"), std::string::npos);
  EXPECT_EQ(bh_dependency(c, nullptr, &d), -EINVAL);
  bh_client_close(c);
}

TEST_F(AdmissionTest, AFullDependencyTableIsENOSPCAndTheNamesTakenStillWork) {
  bh_client* c = nullptr;
  ASSERT_EQ(bh_client_open(name_.c_str(), &c), 0);
  bh_dep* first = nullptr;
  ASSERT_EQ(bh_dependency(c, "first", &first), 0);
  for (std::uint32_t i = 1; i < segment_->header().max_dependencies; ++i) {
    shm::find_or_claim_dependency(*segment_, "other-" + std::to_string(i), 20, 0);
  }
  bh_dep* d = first;
  EXPECT_EQ(bh_dependency(c, "one-more", &d), -ENOSPC);
  EXPECT_EQ(d, nullptr);
  EXPECT_EQ(std::string(bh_last_error()), "segment /dev/shm/" + name_.str() + ": dependency table full (" +
                                              std::to_string(segment_->header().max_dependencies) +
                                              " slots, daemon.max_dependencies): cannot add 'one-more'");
  EXPECT_EQ(bh_dependency(c, "first", &d), 0);
  EXPECT_EQ(d, first);
  bh_permit p;
  EXPECT_EQ(bh_try_acquire(d, &p), 0);
  bh_release(&p, BH_SUCCESS);
  bh_client_close(c);
}

TEST_F(AdmissionTest, AFullProcessTableOrAnUnfinishedSegmentIsRefused) {
  bh_client* c = nullptr;
  {
    testing::FullProcessTable full(*segment_);
    EXPECT_EQ(bh_client_open(name_.c_str(), &c), -ENOSPC);
    EXPECT_EQ(c, nullptr);
    EXPECT_EQ(std::string(bh_last_error()), "segment /dev/shm/" + name_.str() + ": process table full (" +
                                                std::to_string(segment_->header().max_processes) +
                                                " slots, daemon.max_processes)");
  }
  segment_->header().magic.store(0);  // what a daemon still making it leaves
  EXPECT_EQ(bh_client_open(name_.c_str(), &c), -EAGAIN);
  EXPECT_EQ(c, nullptr);
}

TEST_F(AdmissionTest, ACorruptSegmentIsRefusedWithTheReason) {
  segment_->header().abi_major = shm::kAbiMajor + 1;
  bh_client* c = nullptr;
  EXPECT_EQ(bh_client_open(name_.c_str(), &c), -EPROTO);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(bh_last_error()).find("ABI major"), std::string::npos) << bh_last_error();
}

TEST_F(AdmissionTest, WrongMagicSizesOrLengthAreRefusedWithTheReason) {
  const auto refused = [&](const char* reason) {
    bh_client* c = nullptr;
    EXPECT_EQ(bh_client_open(name_.c_str(), &c), -EBADMSG) << reason;
    EXPECT_EQ(c, nullptr);
    EXPECT_NE(std::string(bh_last_error()).find(reason), std::string::npos) << bh_last_error();
  };
  const std::uint64_t magic = segment_->header().magic.load();
  segment_->header().magic.store(0x1234);
  refused("wrong magic");
  segment_->header().magic.store(magic);
  segment_->header().max_processes += 1;
  refused("disagree");
  segment_->header().max_processes -= 1;
  const int fd = ::shm_open(("/" + name_.str()).c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ::close(fd);
  refused("the header says");  // truncated: shorter than its header says
}

// A process outside the segment's group is told what would let it in:
// joining the group when the group may read and write the segment, else a
// mode that lets it. Run as nobody, in a child: root opens anything.
TEST_F(AdmissionTest, ARefusedOpenNamesTheSegmentsModeAndGroup) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run a child as a user outside the segment's group";
  const std::string path = "/dev/shm/" + name_.str();
  const auto refusal = [&](mode_t mode) {
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) std::_Exit(99);
      bh_client* c = nullptr;
      const int rc = bh_client_open(name_.c_str(), &c);
      const std::string why = bh_last_error();
      (void)!::write(fds[1], why.data(), why.size());
      std::_Exit(rc == -EACCES ? 0 : 1);
    }
    ::close(fds[1]);
    char buffer[1024];
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    const std::string why(buffer, n > 0 ? static_cast<std::size_t>(n) : 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << ": " << why;
    return why;
  };
  const std::string group_may = refusal(0660);
  EXPECT_EQ(group_may, "segment " + path + ": cannot open: Permission denied (mode 0660, owner root, group root: "
                       "a client reads and writes it: run as a member of group root)");
  const std::string group_reads = refusal(0640);
  EXPECT_NE(group_reads.find("(mode 0640, owner root, group root: group root may not read and write it, as a "
                             "client does; daemon.segment_mode = 0o660 lets it)"),
            std::string::npos)
      << group_reads;
}

}  // namespace
}  // namespace bulkhead
