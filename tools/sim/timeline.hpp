// A scenario's schedule as functions of simulated time: workers, mean
// service time, offered rate, and what follows from them (capacity, the
// ideal concurrency of docs/simulator.md).
//
// Thread-safety: immutable once built; any thread may read it.
#pragma once

#include <cstdint>
#include <vector>

#include "tools/sim/scenario.hpp"

namespace bulkhead::sim {

constexpr double kNsPerS = 1e9;
constexpr double kNsPerMs = 1e6;

// A seconds value as integer nanoseconds, the simulator's clock.
std::uint64_t to_ns(double seconds);

// Piecewise linear in time, constant before its first knot and after its
// last. Two knots at one time make a step; at that time the later holds.
class Piecewise {
 public:
  struct Knot {
    double t_s;
    double value;
  };
  // Knots come in time order.
  void add(double t_s, double value);
  // From the last knot's value at t_s to `value` at t_s + ramp_s (a step
  // when ramp_s is 0). After at least one add().
  void ramp_to(double t_s, double ramp_s, double value);
  double at(double t_s) const;
  // The integral of at() from 0 to t_s (value x seconds), exact: the
  // trapezoids of the linear pieces. After at least one add() at or after 0.
  double integral(double t_s) const;
  const std::vector<Knot>& knots() const { return knots_; }

 private:
  std::vector<Knot> knots_;
};

class Timeline {
 public:
  struct WorkerStep {
    std::uint64_t t_ns;
    std::uint32_t workers;
  };

  explicit Timeline(const Scenario& scenario);

  double duration_s() const { return duration_s_; }
  std::uint64_t duration_ns() const { return duration_ns_; }
  // Every change of the worker count, the first at 0, each at its own
  // instant. A ramp moves one worker at a time, at the instants the linear
  // ramp crosses k + 1/2; a change at once is one step.
  const std::vector<WorkerStep>& worker_steps() const { return worker_steps_; }
  std::uint32_t workers_at(std::uint64_t t_ns) const;
  // Mean service time (base latency), in seconds.
  double mean_service_s(double t_s) const { return latency_s_.at(t_s); }
  // Network delay added to every call, in seconds.
  double network_s(double t_s) const { return network_s_.at(t_s); }
  // Offered calls/s of all processes together (retries not counted).
  double rate(double t_s) const { return rate_.at(t_s); }
  const Piecewise& rate_profile() const { return rate_; }
  // Calls/s the dependency completes when every worker is busy.
  double capacity(std::uint64_t t_ns) const;
  // Offered rate at or above capacity: the limit binds.
  bool saturated(std::uint64_t t_ns) const;
  // Little's law at no load: min(capacity, offered rate) x (base latency
  // + network delay); workers x (1 + network / base latency) when
  // saturated. In calls.
  double ideal_concurrency(std::uint64_t t_ns) const;
  // The start (0) and every change's at_s, sorted, each once.
  const std::vector<double>& change_times_s() const { return changes_s_; }

  // Time averages over the run, in calls/s: capacity, offered rate, and
  // min(capacity, offered) taken at every instant (what a perfect limiter
  // could complete).
  double mean_capacity() const { return mean_capacity_; }
  double mean_offered() const { return mean_offered_; }
  double mean_achievable() const { return mean_achievable_; }
  // The 99th percentile of the latency at t = 0, no queueing (service time
  // and network delay), in ms.
  double noload_p99_ms() const { return noload_p99_ms_; }

 private:
  double duration_s_;
  std::uint64_t duration_ns_;
  std::vector<WorkerStep> worker_steps_;
  Piecewise latency_s_;
  Piecewise network_s_;
  Piecewise rate_;
  std::vector<double> changes_s_;
  double mean_capacity_ = 0;
  double mean_offered_ = 0;
  double mean_achievable_ = 0;
  double noload_p99_ms_ = 0;
};

}  // namespace bulkhead::sim
