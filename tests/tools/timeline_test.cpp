// The schedule as functions of time, and the capacity and ideal
// concurrency that follow from it.
#include "tools/sim/timeline.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace bulkhead::sim {
namespace {

Scenario scenario(const std::string& extra_dependency, const std::string& extra_clients) {
  return parse_scenario("duration_s = 100\n[dependency]\nworkers = 10\nbase_latency_ms = 10\n" +
                            extra_dependency + "[clients]\nrate = 500\n" + extra_clients,
                        "t.toml");
}

TEST(SimPiecewise, StepsAndRamps) {
  Piecewise p;
  p.add(0, 1);
  p.add(10, 1);
  p.add(10, 5);  // a step at 10
  p.add(10, 5);
  p.add(20, 15);  // a ramp from 10 to 20
  EXPECT_EQ(p.at(-1), 1);
  EXPECT_EQ(p.at(9.99), 1);
  EXPECT_EQ(p.at(10), 5);
  EXPECT_EQ(p.at(15), 10);
  EXPECT_EQ(p.at(20), 15);
  EXPECT_EQ(p.at(99), 15);
  EXPECT_EQ(p.integral(0), 0);
  EXPECT_EQ(p.integral(10), 10);        // 1 for 10 s; the step adds nothing
  EXPECT_EQ(p.integral(15), 10 + 37.5);  // half the ramp: 5 to 10 over 5 s
  EXPECT_EQ(p.integral(30), 10 + 100 + 150);
}

TEST(SimTimeline, WorkerRampMovesOneWorkerAtATime) {
  const Timeline t(scenario("[[dependency.change]]\nat_s = 10\nworkers = 14\nramp_s = 4\n", ""));
  // 10 -> 14 over [10, 14]: a step at each crossing of k + 1/2.
  ASSERT_EQ(t.worker_steps().size(), 5u);
  EXPECT_EQ(t.worker_steps()[1].t_ns, to_ns(10.5));
  EXPECT_EQ(t.worker_steps()[4].t_ns, to_ns(13.5));
  EXPECT_EQ(t.workers_at(to_ns(10.4)), 10u);
  EXPECT_EQ(t.workers_at(to_ns(10.5)), 11u);
  EXPECT_EQ(t.workers_at(to_ns(50)), 14u);
}

// A change at once is one step, not one per worker: from 10 to 100000
// workers and back would otherwise be 199980 events in every run.
TEST(SimTimeline, AChangeAtOnceIsOneStep) {
  const Timeline t(scenario("[[dependency.change]]\nat_s = 10\nworkers = 100000\n"
                            "[[dependency.change]]\nat_s = 20\nworkers = 10\n"
                            "[[dependency.change]]\nat_s = 30\nworkers = 12\nramp_s = 1e-10\n",
                            ""));
  ASSERT_EQ(t.worker_steps().size(), 4u);
  EXPECT_EQ(t.worker_steps()[1].t_ns, to_ns(10));
  EXPECT_EQ(t.worker_steps()[1].workers, 100000u);
  EXPECT_EQ(t.worker_steps()[2].workers, 10u);
  // Two workers over a tenth of a nanosecond: both steps round to one instant.
  EXPECT_EQ(t.worker_steps()[3].t_ns, to_ns(30));
  EXPECT_EQ(t.worker_steps()[3].workers, 12u);
  EXPECT_EQ(t.workers_at(to_ns(10) - 1), 10u);
  EXPECT_EQ(t.workers_at(to_ns(15)), 100000u);
}

TEST(SimTimeline, IdealConcurrencyIsLittlesLawAtNoLoad) {
  // Capacity 10 / 10 ms = 1000/s; demand 500/s, then 2000/s from 50 s.
  const Timeline t(scenario("", "[[clients.change]]\nat_s = 50\nrate = 2000\n"));
  EXPECT_FALSE(t.saturated(to_ns(10)));
  EXPECT_DOUBLE_EQ(t.ideal_concurrency(to_ns(10)), 500 * 0.010);  // demand x latency
  EXPECT_TRUE(t.saturated(to_ns(60)));
  EXPECT_DOUBLE_EQ(t.ideal_concurrency(to_ns(60)), 10);  // the workers
  EXPECT_NEAR(t.mean_capacity(), 1000, 1e-6);
  EXPECT_NEAR(t.mean_offered(), (500 * 50 + 2000 * 50) / 100.0, 1e-6);
  EXPECT_NEAR(t.mean_achievable(), (500 * 50 + 1000 * 50) / 100.0, 1e-6);
  ASSERT_EQ(t.change_times_s().size(), 2u);
  EXPECT_EQ(t.change_times_s()[1], 50);
}

TEST(SimTimeline, ChangesAtTheSameInstantAreOneChange) {
  const Timeline t(scenario("[[dependency.change]]\nat_s = 50\nworkers = 20\n",
                            "[[clients.change]]\nat_s = 50\nrate = 2000\n"));
  EXPECT_EQ(t.change_times_s(), (std::vector<double>{0, 50}));
}

TEST(SimTimeline, DemandAtCapacityIsSaturated) {
  // 10 workers of 10 ms: 1000 calls/s, offered exactly.
  const Timeline t(scenario("", "[[clients.change]]\nat_s = 50\nrate = 1000\n"));
  EXPECT_EQ(t.capacity(to_ns(60)), 1000);
  EXPECT_TRUE(t.saturated(to_ns(60)));
}

TEST(SimTimeline, LatencyCreepKeepsTheIdealAtTheWorkers) {
  const Timeline t(scenario("[[dependency.change]]\nat_s = 20\nbase_latency_ms = 30\nramp_s = 40\n",
                            "[[clients.change]]\nat_s = 1\nrate = 5000\n"));
  EXPECT_DOUBLE_EQ(t.mean_service_s(40), 0.020);  // half way up the ramp
  EXPECT_NEAR(t.capacity(to_ns(40)), 500, 1e-9);
  EXPECT_DOUBLE_EQ(t.ideal_concurrency(to_ns(40)), 10);
}

TEST(SimTimeline, ANetworkDelayAddsCallsInFlightButNoCapacity) {
  // 10 workers x 10 ms, and 30 ms of network from 20 s: the dependency
  // still completes 1000/s, but each call is in flight 40 ms.
  const Timeline t(scenario("network_ms = 5\n[[dependency.change]]\nat_s = 20\nnetwork_ms = 30\n",
                            "[[clients.change]]\nat_s = 1\nrate = 5000\n"));
  EXPECT_DOUBLE_EQ(t.network_s(10), 0.005);
  EXPECT_DOUBLE_EQ(t.network_s(30), 0.030);
  EXPECT_NEAR(t.capacity(to_ns(30)), 1000, 1e-9);
  EXPECT_DOUBLE_EQ(t.ideal_concurrency(to_ns(30)), 40);
  EXPECT_NEAR(t.noload_p99_ms(), 10 * std::log(100.0) + 5, 1e-9);
}

TEST(SimTimeline, NoLoadP99OfEachServiceDistribution) {
  EXPECT_NEAR(Timeline(scenario("service = \"constant\"\n", "")).noload_p99_ms(), 10, 1e-9);
  EXPECT_NEAR(Timeline(scenario("", "")).noload_p99_ms(), 10 * std::log(100.0), 1e-9);
  // exp(sigma z99 - sigma^2 / 2) with sigma 1: 6.21 x the mean.
  EXPECT_NEAR(Timeline(scenario("service = \"lognormal\"\nsigma = 1\n", "")).noload_p99_ms(), 62.1, 0.05);
}

// At t = 0 means with a change at 0 s, which the run starts with; a ramp
// from 0 s starts from the [dependency] values.
TEST(SimTimeline, NoLoadP99IsThatOfTheValuesAtZero) {
  const Timeline at_once(scenario("[[dependency.change]]\nat_s = 0\nbase_latency_ms = 100\nnetwork_ms = 50\n", ""));
  EXPECT_NEAR(at_once.noload_p99_ms(), 100 * std::log(100.0) + 50, 1e-9);
  EXPECT_DOUBLE_EQ(at_once.mean_service_s(0), 0.1);  // as the run's first calls are served
  const Timeline ramp(scenario("[[dependency.change]]\nat_s = 0\nbase_latency_ms = 100\nramp_s = 10\n", ""));
  EXPECT_NEAR(ramp.noload_p99_ms(), 10 * std::log(100.0), 1e-9);
}

}  // namespace
}  // namespace bulkhead::sim
