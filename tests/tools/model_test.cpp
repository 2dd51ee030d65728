// The event model on its own: queueing sanity, Little's law, queueing
// theory's busy share, timeouts, arrivals, and that runs do not disturb
// each other's random numbers.
#include "tools/sim/model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace bulkhead::sim {
namespace {

// 16 workers x 20 ms exponential: capacity 800 calls/s.
Scenario overload(double rate, const std::string& clients_extra = "", double timeout_ms = 500) {
  return parse_scenario("duration_s = 60\nseed = 11\n[dependency]\nworkers = 16\nbase_latency_ms = 20\n"
                        "[clients]\ntimeout_ms = " +
                            std::to_string(timeout_ms) + "\nrate = " + std::to_string(rate) + "\n" +
                            clients_extra,
                        "m.toml");
}

RunSpec no_limit() { return {"none", false, {}}; }

RunSpec fixed(const Scenario& s, std::uint32_t limit) {
  control::LimitSettings settings = s.settings_for("fixed");
  settings.bounds = {1, static_cast<double>(limit), static_cast<double>(limit)};
  return {"fixed", true, settings};
}

struct Simulated {
  Scenario scenario;
  Timeline timeline;
  Workload workload;
  RunResult result;
};

Simulated run(const Scenario& s, const RunSpec& spec) {
  Timeline t(s);
  Workload w = make_workload(s, t);
  RunResult r = simulate(s, t, w, spec);
  return {s, t, std::move(w), std::move(r)};
}

// The workload's arrivals in [a, b) seconds.
double arrivals_between(const Workload& w, double a, double b) {
  std::size_t n = 0;
  for (std::uint64_t at : w.arrival_ns) n += at >= to_ns(a) && at < to_ns(b);
  return static_cast<double>(n);
}

double per_s(std::uint64_t count, const Simulated& r) { return static_cast<double>(count) / r.timeline.duration_s(); }

TEST(SimModel, NoLimiterAtThreeTimesOverloadCollapses) {
  const Simulated r = run(overload(2400), no_limit());
  // The queue grows until every call waits out its timeout: the workers are
  // busy all along, almost only on calls whose callers have given up.
  EXPECT_LT(per_s(r.result.ok, r), 0.1 * 800);
  EXPECT_GT(r.result.timed_out, r.result.admitted * 9 / 10);
  EXPECT_GT(r.result.wasted, 0u);
  EXPECT_EQ(r.result.rejected, 0u);
  EXPECT_NEAR(r.result.busy_integral / static_cast<double>(r.result.duration_ns), 16, 0.2);
}

TEST(SimModel, StaticLimitAtTheWorkersKeepsGoodputNearCapacity) {
  const Scenario s = overload(2400);
  const Simulated r = run(s, fixed(s, 16));
  EXPECT_GT(per_s(r.result.ok, r), 0.94 * 800);
  EXPECT_LT(per_s(r.result.ok, r), 1.03 * 800);
  EXPECT_EQ(r.result.timed_out, 0u);
  EXPECT_GT(r.result.rejected, r.result.arrivals / 2);
  // Nothing ever waits for a worker, so latency is the service time alone.
  for (const TickRow& row : r.result.series) ASSERT_EQ(row.queue, 0u);
  for (const TickRow& row : r.result.series) ASSERT_LE(row.inflight, 16u);
}

TEST(SimModel, LittlesLawHolds) {
  // 70% and 90% load, no limiter, a timeout no call reaches. At 90% the
  // queue holds about a fifth of the calls at the dependency.
  for (const double load : {0.7, 0.9}) {
    const Scenario s = overload(800 * load, "", 60000);
    const Simulated r = run(s, no_limit());
    const double duration_s = r.timeline.duration_s();
    // In service: mean busy workers = completions/s x mean service time.
    const double busy = r.result.busy_integral / static_cast<double>(r.result.duration_ns);
    const double throughput = static_cast<double>(r.result.served) / duration_s;
    EXPECT_NEAR(busy, throughput * 0.020, 0.03 * busy) << load;
    EXPECT_NEAR(busy, load * 16, 0.03 * 16) << load;
    // In the system (queue + service): L = lambda W with W the measured latency.
    const double in_system = r.result.in_system_integral / static_cast<double>(r.result.duration_ns);
    const double mean_latency_s =
        std::accumulate(r.result.latencies_ns.begin(), r.result.latencies_ns.end(), 0.0) /
        static_cast<double>(r.result.latencies_ns.size()) / kNsPerS;
    EXPECT_NEAR(in_system, static_cast<double>(r.result.ok) / duration_s * mean_latency_s, 0.03 * in_system)
        << load;
  }
}

// A caller gives up at its timeout even when the answer comes the same
// nanosecond: constant 20 ms calls with a 20 ms timeout all time out, and
// the dependency's work on them is wasted.
TEST(SimModel, TheTimeoutWinsATieWithTheAnswer) {
  const Scenario s = parse_scenario(
      "duration_s = 10\nseed = 5\n[dependency]\nworkers = 16\nbase_latency_ms = 20\nservice = \"constant\"\n"
      "[clients]\nrate = 1200\ntimeout_ms = 20\n",
      "tie.toml");
  const Simulated r = run(s, no_limit());
  EXPECT_GT(r.result.timed_out, 10'000u);
  EXPECT_EQ(r.result.ok, 0u);
  EXPECT_EQ(r.result.wasted, r.result.served);
}

// A ramp from no traffic at all: 0 to 1000 calls/s from 10 s to 20 s, so a
// quarter of the ramp's 5000 calls in its first half.
TEST(SimModel, ArrivalsFollowARampFromZero) {
  const Scenario s = parse_scenario(
      "duration_s = 20\n[dependency]\nworkers = 1\nbase_latency_ms = 1\n[clients]\nrate = 0\n"
      "[[clients.change]]\nat_s = 10\nrate = 1000\nramp_s = 10\n",
      "r.toml");
  const Timeline t(s);
  const Workload w = make_workload(s, t);
  const auto count_between = [&](double a, double b) { return arrivals_between(w, a, b); };
  EXPECT_EQ(count_between(0, 10), 0);
  EXPECT_NEAR(count_between(10, 15), 1250, 3 * 36);  // 3 sigma of Poisson
  EXPECT_NEAR(count_between(15, 20), 3750, 3 * 62);
}

// Workers added while calls wait take them at once, not at the next
// completion (nor at the next arrival: none comes after 0.3 s): one worker
// of constant 1 s calls, ten from 0.5 s, and a queue long before then.
// From 0.5 s to 2 s all ten are busy.
TEST(SimModel, AddedWorkersTakeQueuedCallsAtOnce) {
  const Scenario s = parse_scenario(
      "duration_s = 2\nseed = 2\n[dependency]\nworkers = 1\nbase_latency_ms = 1000\nservice = \"constant\"\n"
      "[[dependency.change]]\nat_s = 0.5\nworkers = 10\n[clients]\nrate = 100\ntimeout_ms = 60000\n"
      "[[clients.change]]\nat_s = 0.3\nrate = 0\n",
      "w.toml");
  const Simulated r = run(s, no_limit());
  const double worker_s = r.result.busy_integral / kNsPerS;
  EXPECT_GT(worker_s, 15.0);  // 1.5 s x 10, plus the first worker's half second
  EXPECT_LT(worker_s, 15.5);
}

// Each sum of a tick's rates over the run is the run's count.
TEST(SimModel, TheTicksAddUpToTheRun) {
  const Scenario s = overload(2400, "", 60);
  const Simulated r = run(s, fixed(s, 40));
  ASSERT_GT(r.result.timed_out, 0u);
  ASSERT_GT(r.result.rejected, 0u);
  double ok = 0, rejected = 0, timeouts = 0;
  for (const TickRow& row : r.result.series) {
    ok += row.goodput_per_s * 0.1;
    rejected += row.rejected_per_s * 0.1;
    timeouts += row.timeouts_per_s * 0.1;
  }
  EXPECT_NEAR(ok, static_cast<double>(r.result.ok), 1e-6 * ok);
  EXPECT_NEAR(rejected, static_cast<double>(r.result.rejected), 1e-6 * rejected);
  EXPECT_NEAR(timeouts, static_cast<double>(r.result.timed_out), 1e-6 * timeouts);
}

// A tick's p50 and p99 (the CSV's) are nearest ranks of the latencies of
// the calls that succeeded in it: with one tick as long as the run, those
// of every success.
TEST(SimModel, ATicksPercentilesAreNearestRanksOfItsCalls) {
  const Scenario s = parse_scenario(
      "duration_s = 2\ntick_ms = 2000\nseed = 5\n[dependency]\nworkers = 16\nbase_latency_ms = 20\n"
      "[clients]\nrate = 400\ntimeout_ms = 500\n",
      "r.toml");
  const Simulated r = run(s, no_limit());
  ASSERT_EQ(r.result.series.size(), 1u);
  const std::vector<std::uint64_t>& sorted = r.result.latencies_ns;
  ASSERT_GT(sorted.size(), 700u);
  const auto nearest_rank_ms = [&](double q) {
    const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
    return static_cast<double>(sorted[rank - 1]) / 1e6;
  };
  EXPECT_DOUBLE_EQ(r.result.series[0].p50_ms, nearest_rank_ms(0.50));
  EXPECT_DOUBLE_EQ(r.result.series[0].p99_ms, nearest_rank_ms(0.99));
  EXPECT_NE(nearest_rank_ms(0.99), nearest_rank_ms(0.98));
}

// The share of time the W workers of an M/M/W/L queue are busy: Poisson
// arrivals of `load` erlangs (rate x mean service time), exponential
// service, at most L calls in the system and the rest turned away. A
// birth-death chain: p(n) / p(n - 1) = load / min(n, W).
double queueing_theory_busy(double load, int workers, int limit) {
  double p = 1, total = 1, busy = 0;
  for (int n = 1; n <= limit; ++n) {
    p *= load / std::min(n, workers);
    total += p;
    busy += std::min(n, workers) * p;
  }
  return busy / workers / total;
}

TEST(SimModel, AFixedLimitKeepsTheWorkersAsBusyAsQueueingTheorySays) {
  // With Poisson arrivals, exponential service and a fixed limit L, the
  // dependency is the M/M/W/L queue, whose busy share has a closed form.
  // The cases docs/policies.md quotes (20 ms calls, 2000 a second: 40
  // erlangs): 32 workers at 1.25x their capacity, where a limit at the
  // workers idles one in fourteen and the share climbs with the limit
  // (92.7%, 98.4%, 99.2%, 99.8% at 32, 38, 41, 48), and 8 workers at 5x,
  // where one call over them is enough (99.4% at 9).
  struct Case {
    int workers;
    int limit;
  };
  for (const Case c : {Case{32, 32}, Case{32, 38}, Case{32, 41}, Case{32, 48}, Case{8, 9}}) {
    const Scenario s = parse_scenario("duration_s = 60\nseed = 11\n[dependency]\nworkers = " +
                                          std::to_string(c.workers) +
                                          "\nbase_latency_ms = 20\n[clients]\ntimeout_ms = 500\nrate = 2000\n",
                                      "mmwl.toml");
    const Simulated r = run(s, fixed(s, static_cast<std::uint32_t>(c.limit)));
    const double busy = r.result.busy_integral / static_cast<double>(r.result.duration_ns) / c.workers;
    EXPECT_NEAR(busy, queueing_theory_busy(40, c.workers, c.limit), 0.005)
        << c.workers << " workers, limit " << c.limit;
    EXPECT_EQ(r.result.timed_out, 0u);
  }
}

TEST(SimModel, ANetworkDelayHoldsThePermitButNoWorker) {
  // Constant 20 ms service, 30 ms of network: every call takes exactly 50
  // ms. A limit of 16 (the workers) now keeps only 16 x 20 / 50 = 6.4 of
  // them busy; a limit of 40 keeps all 16 busy, and capacity is unchanged.
  const Scenario s = parse_scenario(
      "duration_s = 30\nseed = 3\n[dependency]\nworkers = 16\nbase_latency_ms = 20\nservice = \"constant\"\n"
      "network_ms = 30\n[clients]\nrate = 2400\ntimeout_ms = 500\n",
      "n.toml");
  const Simulated at_workers = run(s, fixed(s, 16));
  for (const std::uint64_t latency : at_workers.result.latencies_ns) ASSERT_EQ(latency, 50'000'000u);
  EXPECT_NEAR(per_s(at_workers.result.ok, at_workers), 16 / 0.050, 0.02 * 320);
  EXPECT_NEAR(at_workers.result.busy_integral / static_cast<double>(at_workers.result.duration_ns), 6.4, 0.2);
  const Simulated at_ideal = run(s, fixed(s, 40));
  EXPECT_NEAR(per_s(at_ideal.result.ok, at_ideal), 800, 0.03 * 800);
  EXPECT_EQ(at_ideal.result.timed_out, 0u);
}

TEST(SimModel, ArrivalsFollowTheRateProfile) {
  const Scenario s = parse_scenario(
      "duration_s = 100\n[dependency]\nworkers = 1\nbase_latency_ms = 1\n[clients]\nprocesses = 4\n"
      "rate = 1000\n[[clients.change]]\nat_s = 40\nrate = 100\n[[clients.change]]\nat_s = 60\nrate = 3000\n"
      "ramp_s = 20\n",
      "a.toml");
  const Timeline t(s);
  const Workload w = make_workload(s, t);
  const auto count_between = [&](double a, double b) { return arrivals_between(w, a, b); };
  EXPECT_NEAR(count_between(0, 40), 40'000, 3 * 200);          // 3 sigma of Poisson
  EXPECT_NEAR(count_between(40, 60), 2'000, 3 * 45);
  EXPECT_NEAR(count_between(60, 80), 20 * (100 + 3000) / 2.0, 3 * 180);  // the ramp's mean
  EXPECT_NEAR(count_between(80, 100), 60'000, 3 * 245);
  EXPECT_TRUE(std::is_sorted(w.arrival_ns.begin(), w.arrival_ns.end()));
  // Every process group makes a quarter of the calls.
  for (std::uint32_t p = 0; p < 4; ++p) {
    const auto n = static_cast<double>(std::count(w.process.begin(), w.process.end(), p));
    EXPECT_NEAR(n / static_cast<double>(w.process.size()), 0.25, 0.01);
  }
}

TEST(SimModel, ExponentialWorkHasMeanOne) {
  const Scenario s = parse_scenario(
      "duration_s = 1\n[dependency]\nworkers = 1\nbase_latency_ms = 1\n[clients]\nrate = 10\n", "e.toml");
  RandomStream rng(s.seed, Stream::kServiceSize, 0);
  double sum = 0;
  constexpr int kDraws = 100'000;
  for (int i = 0; i < kDraws; ++i) sum += draw_service_size(rng, s);
  EXPECT_NEAR(sum / kDraws, 1.0, 0.01);
}

TEST(SimModel, LognormalWorkHasMeanOneAndItsShape) {
  const Scenario s = parse_scenario(
      "duration_s = 100\n[dependency]\nworkers = 1\nbase_latency_ms = 1\nservice = \"lognormal\"\nsigma = 1\n"
      "[clients]\nrate = 2000\n",
      "l.toml");
  RandomStream rng(s.seed, Stream::kServiceSize, 0);
  std::vector<double> sizes(200'000);
  for (double& size : sizes) size = draw_service_size(rng, s);
  EXPECT_NEAR(std::accumulate(sizes.begin(), sizes.end(), 0.0) / static_cast<double>(sizes.size()), 1.0, 0.02);
  std::sort(sizes.begin(), sizes.end());
  // Median exp(-1/2), p99 exp(2.326 - 1/2).
  EXPECT_NEAR(sizes[sizes.size() / 2], std::exp(-0.5), 0.01);
  EXPECT_NEAR(sizes[sizes.size() * 99 / 100], std::exp(2.3263 - 0.5), 0.15);
}

TEST(SimModel, QueueLimitFailsCallsAtOnce) {
  const Scenario s = parse_scenario(
      "duration_s = 20\n[dependency]\nworkers = 4\nbase_latency_ms = 10\nqueue_limit = 0\n[clients]\nrate = 1000\n",
      "q.toml");
  const Simulated r = run(s, no_limit());
  EXPECT_GT(r.result.errors, r.result.arrivals / 2);
  EXPECT_EQ(r.result.timed_out, 0u);
  for (const TickRow& row : r.result.series) ASSERT_EQ(row.queue, 0u);
}

TEST(SimModel, RetriesAreNewAttemptsAfterTheDelay) {
  const Scenario s = overload(2400, "retries = 2\nretry_delay_ms = 10\n");
  const Simulated r = run(s, fixed(s, 16));
  EXPECT_GT(r.result.retries, 0u);
  EXPECT_EQ(r.result.attempts, r.result.arrivals + r.result.retries);
  // Every rejected or timed-out original is retried (until the end).
  EXPECT_LE(r.result.retries, r.result.rejected + r.result.timed_out);
}

// A call is tried at most 1 + retries times: with one retry and a limit
// of 1 at 3x overload, nearly every call is refused twice.
TEST(SimModel, ACallIsRetriedAtMostRetriesTimes) {
  const Scenario s = overload(2400, "retries = 1\nretry_delay_ms = 10\n");
  const Simulated r = run(s, fixed(s, 1));
  EXPECT_LE(r.result.retries, r.result.arrivals);
  EXPECT_GT(r.result.retries, r.result.arrivals * 9 / 10);
}

// Timeouts and calls the dependency's full queue fails are retried too,
// not only the limiter's rejections.
TEST(SimModel, TimeoutsAndFailuresAreRetried) {
  const Simulated timeouts = run(overload(2400, "retries = 1\n"), no_limit());
  EXPECT_EQ(timeouts.result.rejected, 0u);
  EXPECT_GT(timeouts.result.retries, timeouts.result.timed_out / 2);
  const Scenario full = parse_scenario(
      "duration_s = 20\n[dependency]\nworkers = 4\nbase_latency_ms = 10\nqueue_limit = 0\n[clients]\nrate = 1000\n"
      "retries = 1\n",
      "q.toml");
  const Simulated failures = run(full, no_limit());
  EXPECT_EQ(failures.result.timed_out, 0u);
  EXPECT_GT(failures.result.retries, failures.result.errors / 3);
}

TEST(SimModel, PerProcessLimitersAddUp) {
  const Scenario s = overload(2400, "processes = 4\nlimiter = \"per-process\"\n");
  const Simulated r = run(s, fixed(s, 3));
  EXPECT_EQ(r.result.initial_limit, 12);
  // Each process's calls count against its own limit of 3: together 12 in
  // flight at 3x overload.
  std::uint32_t most = 0;
  for (const TickRow& row : r.result.series) most = std::max(most, row.inflight);
  EXPECT_EQ(most, 12u);
  EXPECT_EQ(r.result.series.front().limit, 12);
}

// The baseline of per-process limiters is the mean of those that have one:
// 20 ms of constant service at low load, whichever process measured it, and
// none (0) in the first tick, before any window closed (5 calls a process
// of the 10 a window needs). Windows close at different ticks in different
// processes: a limiter with no baseline yet does not pull the mean down.
TEST(SimModel, TheBaselineOfSeveralLimitersIsTheMeanOfThoseThatHaveOne) {
  const Scenario s = parse_scenario(
      "duration_s = 10\nseed = 4\n[dependency]\nworkers = 16\nbase_latency_ms = 20\nservice = \"constant\"\n"
      "[clients]\nprocesses = 4\nlimiter = \"per-process\"\nrate = 200\ntimeout_ms = 500\n",
      "b.toml");
  const Simulated r = run(s, {"balance", true, s.settings_for("balance")});
  EXPECT_EQ(r.result.series.front().baseline_ms, 0);
  for (const TickRow& row : r.result.series) {
    if (row.baseline_ms == 0) continue;
    // A histogram bucket is at most 12.5% wide.
    EXPECT_NEAR(row.baseline_ms, 20, 2.5) << "at " << static_cast<double>(row.t_ns) / 1e9 << " s";
  }
  EXPECT_NEAR(r.result.series.back().baseline_ms, 20, 2.5);
}

TEST(SimModel, EveryRunMeetsTheSameCalls) {
  const Scenario s = overload(2400);
  const Timeline t(s);
  const Workload a = make_workload(s, t);
  const Workload b = make_workload(s, t);
  EXPECT_EQ(a.arrival_ns, b.arrival_ns);
  EXPECT_EQ(a.process, b.process);
  // A run's numbers do not depend on which other runs happened before it.
  const RunResult first = simulate(s, t, a, fixed(s, 16));
  (void)simulate(s, t, a, no_limit());
  const RunResult again = simulate(s, t, a, fixed(s, 16));
  EXPECT_EQ(first.latencies_ns, again.latencies_ns);
  EXPECT_EQ(first.rejected, again.rejected);
}

TEST(SimModel, TheLimitComesFromTheControllerEveryTick) {
  Scenario s = overload(2400);
  const Simulated r = run(s, {"aimd", true, s.settings_for("aimd")});
  ASSERT_EQ(r.result.series.size(), 600u);  // 60 s of 100 ms ticks
  EXPECT_EQ(r.result.initial_limit, 20);
  // Under overload every window uses the limit, so AIMD grows it by one per
  // window until drops come.
  EXPECT_EQ(r.result.series[0].limit, 21);
  EXPECT_EQ(r.result.series[1].limit, 22);
}

}  // namespace
}  // namespace bulkhead::sim
