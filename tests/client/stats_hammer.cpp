// stats_hammer SEGMENT DEPENDENCY REFUSED THREADS CALLS: one process of
// percpu_test. THREADS threads make CALLS calls each: acquire/release pairs
// on DEPENDENCY (bh_try_acquire_untimed, bh_release_latency with outcomes
// and latencies the thread chooses), and every eighth call an acquire on
// REFUSED, whose limit is 0, so that the refusals are known too; while a thread moves them from CPU to CPU
// (sched_setaffinity) and a 20 us timer signal interrupts them, so that
// restartable sequences abort and threads share CPUs. Prints what the
// callers did, for the test to compare with the segment's statistics:
//   ok SUM dropped failed ignored rejected refused rseq_size signals
// Exits 1 with a reason on stderr when something fails.
#include <sched.h>
#include <signal.h>
#include <sys/rseq.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "bulkhead/bulkhead.h"
#include "tests/support/stats_tally.hpp"

namespace {

std::atomic<std::uint64_t> g_signals{0};

void on_timer(int) { g_signals.fetch_add(1, std::memory_order_relaxed); }

// The latency of call i of thread t: spread over the histogram's buckets,
// from 0 to about 4 s.
std::uint64_t latency_of(std::uint64_t t, std::uint64_t i) {
  const std::uint64_t x = (i * 2654435761u + t * 40503u) & 0xffffffffu;
  return x >> (x % 23);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: stats_hammer SEGMENT DEPENDENCY REFUSED THREADS CALLS\n");
    return 2;
  }
  const int threads = std::atoi(argv[4]);
  const long calls = std::atol(argv[5]);
  bh_options options{};
  options.segment = argv[1];
  options.flags = BH_OPEN_REQUIRE_SEGMENT;
  bh_client* client = nullptr;
  bh_dep* dep = nullptr;
  bh_dep* refused = nullptr;
  if (bh_client_open_opts(&options, &client) != 0 || bh_dependency(client, argv[2], &dep) != 0 ||
      bh_dependency(client, argv[3], &refused) != 0) {
    std::fprintf(stderr, "stats_hammer: %s\n", bh_last_error());
    return 1;
  }

  struct sigaction action {};
  action.sa_handler = on_timer;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, nullptr);
  sigevent event{};
  event.sigev_notify = SIGEV_SIGNAL;
  event.sigev_signo = SIGUSR1;
  timer_t timer;
  if (timer_create(CLOCK_MONOTONIC, &event, &timer) != 0) {
    std::perror("stats_hammer: timer_create");
    return 1;
  }
  const itimerspec every{{0, 20'000}, {0, 20'000}};
  timer_settime(timer, 0, &every, nullptr);

  cpu_set_t allowed;
  sched_getaffinity(0, sizeof allowed, &allowed);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }

  std::vector<bulkhead::testing::StatsTally> tallies(static_cast<std::size_t>(threads));
  std::vector<std::atomic<pid_t>> tids(static_cast<std::size_t>(threads));
  std::atomic<int> running{threads};
  std::atomic<bool> failed{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      tids[t].store(static_cast<pid_t>(::syscall(SYS_gettid)));
      bulkhead::testing::StatsTally& tally = tallies[t];
      for (long i = 0; i < calls; ++i) {
        bh_permit permit;
        if (i % 8 == 7) {
          if (bh_try_acquire_untimed(refused, &permit) != BH_REJECT_LIMIT) {
            failed = true;
            break;
          }
          ++tally.refused;
          continue;
        }
        const int rc = bh_try_acquire_untimed(dep, &permit);
        if (rc == BH_REJECT_LIMIT) {
          ++tally.rejected;
          continue;
        }
        if (rc != 0) {
          failed = true;
          break;
        }
        switch (i % 7) {
          case 4: bh_release_latency(&permit, BH_DROPPED, 0); ++tally.dropped; break;
          case 5: bh_release_latency(&permit, BH_FAILED, 0); ++tally.failed; break;
          case 6: bh_release_latency(&permit, BH_IGNORE, 0); ++tally.ignored; break;
          default: {
            const std::uint64_t latency = latency_of(static_cast<std::uint64_t>(t), static_cast<std::uint64_t>(i));
            bh_release_latency(&permit, BH_SUCCESS, latency);
            ++tally.ok;
            tally.sum_ns += latency;
          }
        }
      }
      running.fetch_sub(1);
    });
  }
  // Moves each worker to one CPU, then lets it run anywhere, in turn.
  std::thread mover([&] {
    for (std::uint64_t round = 0; running.load() > 0; ++round) {
      for (int t = 0; t < threads; ++t) {
        const pid_t tid = tids[t].load();
        if (tid == 0) continue;
        cpu_set_t set;
        CPU_ZERO(&set);
        if (round % 3 == 2) {
          set = allowed;
        } else {
          CPU_SET(cpus[(round + static_cast<std::uint64_t>(t)) % cpus.size()], &set);
        }
        sched_setaffinity(tid, sizeof set, &set);  // fails harmlessly once a worker has ended
      }
      const timespec pause{0, 200'000};
      nanosleep(&pause, nullptr);
    }
  });
  for (std::thread& w : workers) w.join();
  mover.join();
  timer_delete(timer);
  if (failed) {
    std::fprintf(stderr, "stats_hammer: an acquire failed, or one on REFUSED was admitted\n");
    return 1;
  }
  bulkhead::testing::StatsTally all;
  for (const auto& t : tallies) all += t;
  std::printf("%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %u %" PRIu64 "\n",
              all.ok, all.sum_ns, all.dropped, all.failed, all.ignored, all.rejected, all.refused, __rseq_size,
              g_signals.load());
  bh_client_close(client);
  return 0;
}
