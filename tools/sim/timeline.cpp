#include "tools/sim/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace bulkhead::sim {
namespace {

// The standard normal's 0.99 quantile (dimensionless).
constexpr double kZ99 = 2.3263478740408408;
// Step of the numeric time averages, in seconds: far below any change.
constexpr double kAverageStepS = 1e-3;

}  // namespace

std::uint64_t to_ns(double seconds) {
  return static_cast<std::uint64_t>(std::llround(seconds * kNsPerS));
}

void Piecewise::add(double t_s, double value) {
  // In time order: a ramp's end and the next change may be a rounding apart
  // (1.1 + 2.2 is 3.3000000000000003), which the scenario's checks allow.
  knots_.push_back({knots_.empty() ? t_s : std::max(t_s, knots_.back().t_s), value});
}

void Piecewise::ramp_to(double t_s, double ramp_s, double value) {
  add(t_s, knots_.back().value);
  add(t_s + ramp_s, value);
}

double Piecewise::at(double t_s) const {
  if (knots_.empty()) return 0;
  // The last knot at or before t: later knots at the same time win.
  const auto next = std::upper_bound(knots_.begin(), knots_.end(), t_s,
                                     [](double t, const Knot& k) { return t < k.t_s; });
  if (next == knots_.begin()) return knots_.front().value;
  const Knot& a = *(next - 1);
  if (next == knots_.end()) return a.value;
  const Knot& b = *next;  // b.t_s > t_s >= a.t_s
  return a.value + (b.value - a.value) * (t_s - a.t_s) / (b.t_s - a.t_s);
}

double Piecewise::integral(double t_s) const {
  double sum = knots_.front().value * std::min(knots_.front().t_s, t_s);  // constant before the first knot
  for (std::size_t i = 0; i + 1 < knots_.size() && knots_[i].t_s < t_s; ++i) {
    const Knot& a = knots_[i];
    const Knot& b = knots_[i + 1];
    if (b.t_s <= a.t_s) continue;  // a step
    const double end = std::min(b.t_s, t_s);
    const double at_end = a.value + (b.value - a.value) * (end - a.t_s) / (b.t_s - a.t_s);
    sum += (a.value + at_end) / 2 * (end - a.t_s);
  }
  if (knots_.back().t_s < t_s) sum += knots_.back().value * (t_s - knots_.back().t_s);
  return sum;
}

Timeline::Timeline(const Scenario& s)
    : duration_s_(s.duration_s), duration_ns_(to_ns(s.duration_s)) {
  // Workers: steps, ramps one worker at a time.
  std::uint32_t workers = s.workers;
  worker_steps_.push_back({0, workers});
  latency_s_.add(0, s.base_latency_ms / 1e3);
  network_s_.add(0, s.network_ms / 1e3);
  for (const DependencyChange& c : s.dependency_changes) {
    if (c.workers && *c.workers != workers) {
      const std::uint32_t to = *c.workers;
      const int sign = to > workers ? 1 : -1;
      const std::uint32_t steps = to > workers ? to - workers : workers - to;
      for (std::uint32_t j = 1; j <= steps; ++j) {
        const double at = c.ramp_s > 0 ? c.at_s + c.ramp_s * (j - 0.5) / steps : c.at_s;
        const std::int64_t step = static_cast<std::int64_t>(workers) + sign * static_cast<std::int64_t>(j);
        // Steps at one instant (a change at once, a ramp too short for its
        // workers) are one step: 1 -> 100000 workers at once would be 99999
        // events in every run.
        const WorkerStep next{to_ns(at), static_cast<std::uint32_t>(step)};
        if (worker_steps_.back().t_ns == next.t_ns) {
          worker_steps_.back() = next;
        } else {
          worker_steps_.push_back(next);
        }
      }
      workers = to;
    }
    if (c.base_latency_ms) latency_s_.ramp_to(c.at_s, c.ramp_s, *c.base_latency_ms / 1e3);
    if (c.network_ms) network_s_.ramp_to(c.at_s, c.ramp_s, *c.network_ms / 1e3);
  }

  rate_.add(0, s.rate);
  for (const RateChange& c : s.rate_changes) rate_.ramp_to(c.at_s, c.ramp_s, c.rate);

  changes_s_.push_back(0);
  for (const DependencyChange& c : s.dependency_changes) changes_s_.push_back(c.at_s);
  for (const RateChange& c : s.rate_changes) changes_s_.push_back(c.at_s);
  std::sort(changes_s_.begin(), changes_s_.end());
  changes_s_.erase(std::unique(changes_s_.begin(), changes_s_.end()), changes_s_.end());

  // Midpoint sums: exact for the piecewise-constant parts, and the linear
  // ones are integrated to far better than the Poisson noise.
  const auto steps = static_cast<std::uint64_t>(std::ceil(duration_s_ / kAverageStepS));
  double capacity_sum = 0, offered_sum = 0, achievable_sum = 0;
  for (std::uint64_t i = 0; i < steps; ++i) {
    const double t0 = static_cast<double>(i) * kAverageStepS;
    const double dt = std::min(kAverageStepS, duration_s_ - t0);
    const double mid = t0 + dt / 2;
    const double cap = capacity(to_ns(mid));
    const double offered = rate_.at(mid);
    capacity_sum += cap * dt;
    offered_sum += offered * dt;
    achievable_sum += std::min(cap, offered) * dt;
  }
  mean_capacity_ = capacity_sum / duration_s_;
  mean_offered_ = offered_sum / duration_s_;
  mean_achievable_ = achievable_sum / duration_s_;

  // The values at t = 0, as the run starts with them: a change at 0 s at
  // once replaces [dependency]'s (as latency_s_.at(0) does); a ramp from
  // 0 s starts from them. Taken as written, in ms, not through the knots.
  double latency_ms = s.base_latency_ms, network_ms = s.network_ms;
  for (const DependencyChange& c : s.dependency_changes) {
    if (c.at_s != 0 || c.ramp_s != 0) continue;
    if (c.base_latency_ms) latency_ms = *c.base_latency_ms;
    if (c.network_ms) network_ms = *c.network_ms;
  }
  switch (s.service) {
    case ServiceKind::kConstant:
      noload_p99_ms_ = latency_ms;
      break;
    case ServiceKind::kExponential:
      noload_p99_ms_ = latency_ms * std::log(100.0);
      break;
    case ServiceKind::kLognormal:
      noload_p99_ms_ = latency_ms * std::exp(s.sigma * kZ99 - s.sigma * s.sigma / 2);
      break;
  }
  noload_p99_ms_ += network_ms;
}

std::uint32_t Timeline::workers_at(std::uint64_t t_ns) const {
  const auto next = std::upper_bound(worker_steps_.begin(), worker_steps_.end(), t_ns,
                                     [](std::uint64_t t, const WorkerStep& w) { return t < w.t_ns; });
  return (next - 1)->workers;  // the first step is at 0 <= t
}

double Timeline::capacity(std::uint64_t t_ns) const {
  const double t_s = static_cast<double>(t_ns) / kNsPerS;
  return workers_at(t_ns) / mean_service_s(t_s);
}

bool Timeline::saturated(std::uint64_t t_ns) const {
  return rate(static_cast<double>(t_ns) / kNsPerS) >= capacity(t_ns);
}

double Timeline::ideal_concurrency(std::uint64_t t_ns) const {
  const double t_s = static_cast<double>(t_ns) / kNsPerS;
  return std::min(capacity(t_ns), rate(t_s)) * (mean_service_s(t_s) + network_s(t_s));
}

}  // namespace bulkhead::sim
