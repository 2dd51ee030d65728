#include "tools/sim/model.hpp"
#include "tools/sim/recorder.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <queue>
#include <tuple>

#include "shm/histogram.hpp"
#include "shm/stats.hpp"
#include "tools/sim/random.hpp"

namespace bulkhead::sim {

double draw_service_size(RandomStream& rng, const Scenario& s) {
  switch (s.service) {
    case ServiceKind::kConstant:
      return 1.0;
    case ServiceKind::kExponential:
      return rng.exponential();
    case ServiceKind::kLognormal:
      return rng.lognormal_unit_mean(s.sigma);
  }
  return 1.0;
}

namespace {

// The next arrival after `t_s` of a Poisson process whose rate is
// `scale` x the piecewise-linear profile: the time at which the profile's
// integral from t_s reaches an Exp(1) draw (time rescaling). Negative when
// that is past the end.
double next_arrival_s(const Piecewise& profile, double scale, double t_s, double end_s,
                      double mass) {
  const auto& knots = profile.knots();
  while (t_s < end_s) {
    // The segment holding t_s: up to the next knot after it, or the end.
    const auto next = std::upper_bound(knots.begin(), knots.end(), t_s,
                                       [](double t, const Piecewise::Knot& k) { return t < k.t_s; });
    const double seg_end = next == knots.end() ? end_s : std::min(next->t_s, end_s);
    const double a = scale * profile.at(t_s);
    const double b = next == knots.end() || next == knots.begin()
                         ? 0.0
                         : scale * (next->value - (next - 1)->value) / (next->t_s - (next - 1)->t_s);
    const double span = seg_end - t_s;
    const double seg_mass = a * span + b * span * span / 2;
    if (seg_mass >= mass) {
      // Solve a s + b s^2 / 2 = mass for the root in [0, span]; this form
      // is stable for b of either sign and for b = 0.
      const double root = std::sqrt(std::max(0.0, a * a + 2 * b * mass));
      const double s = a + root > 0 ? 2 * mass / (a + root) : span;
      return t_s + std::min(s, span);
    }
    mass -= seg_mass;
    t_s = seg_end;
  }
  return -1;
}

}  // namespace

Workload make_workload(const Scenario& s, const Timeline& timeline) {
  struct Arrival {
    std::uint64_t t_ns;
    std::uint32_t process;
  };
  std::vector<Arrival> all;
  const double scale = 1.0 / s.processes;
  for (std::uint32_t p = 0; p < s.processes; ++p) {
    RandomStream rng(s.seed, Stream::kArrivals, p);
    double t = 0;
    for (;;) {
      t = next_arrival_s(timeline.rate_profile(), scale, t, timeline.duration_s(), rng.exponential());
      if (t < 0) break;
      const std::uint64_t t_ns = to_ns(t);
      if (t_ns >= timeline.duration_ns()) break;
      all.push_back({t_ns, p});
    }
  }
  std::sort(all.begin(), all.end(), [](const Arrival& a, const Arrival& b) {
    return std::tie(a.t_ns, a.process) < std::tie(b.t_ns, b.process);
  });
  Workload w;
  w.arrival_ns.reserve(all.size());
  w.process.reserve(all.size());
  for (const Arrival& a : all) {
    w.arrival_ns.push_back(a.t_ns);
    w.process.push_back(a.process);
  }
  return w;
}

namespace {

enum class EventType : std::uint8_t { kArrival, kRetry, kServiceDone, kResponse, kTimeout, kWorkers, kTick };

struct Event {
  std::uint64_t t_ns;
  std::uint64_t seq;
  EventType type;
  std::uint32_t index;  // into the workload, calls_, retries_ or worker steps
};

struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.t_ns != b.t_ns ? a.t_ns > b.t_ns : a.seq > b.seq;
  }
};

struct Call {
  std::uint64_t admitted_ns;
  std::uint32_t process;
  std::uint32_t attempt;  // 0: the original call
  bool waiting;           // the caller still holds its permit
};

struct PendingRetry {
  std::uint32_t process;
  std::uint32_t attempt;
};

// One admission point: the host's (one for all processes) or a process's.
struct Limiter {
  std::unique_ptr<control::Controller> controller;  // null: no limit
  std::uint32_t inflight = 0;
  Recorder recorder;  // what its callers recorded since the last tick

  std::uint32_t limit() const { return controller ? controller->limit() : UINT32_MAX; }
};

// One run: the event loop and everything it changes. Built, run once and
// dropped by simulate(); used by one thread.
class Simulation {
 public:
  Simulation(const Scenario& s, const Timeline& timeline, const Workload& workload,
             const RunSpec& spec)
      : s_(s),
        timeline_(timeline),
        workload_(workload),
        service_sizes_(s.seed, Stream::kServiceSize, 0),
        timeout_ns_(to_ns(s.timeout_ms / 1e3)),
        retry_delay_ns_(to_ns(s.retry_delay_ms / 1e3)),
        tick_ns_(std::uint64_t{s.tick_ms} * 1'000'000) {
    const std::uint32_t count = s.limiter == LimiterMode::kHost ? 1 : s.processes;
    limiters_.resize(count);
    if (spec.limited) {
      result_.initial_limit = 0;
      for (Limiter& l : limiters_) {
        l.controller = std::make_unique<control::Controller>(spec.settings, 0, 0);
        result_.initial_limit += l.controller->limit();
      }
    }
    result_.label = spec.label;
    result_.duration_ns = timeline.duration_ns();
    result_.arrivals = workload.arrival_ns.size();
    result_.latencies_ns.reserve(workload.arrival_ns.size());
  }

  RunResult run() {
    const std::uint64_t end_ns = timeline_.duration_ns();
    if (!workload_.arrival_ns.empty()) push(workload_.arrival_ns[0], EventType::kArrival, 0);
    const auto& steps = timeline_.worker_steps();
    workers_ = steps[0].workers;
    for (std::uint32_t i = 1; i < steps.size(); ++i) push(steps[i].t_ns, EventType::kWorkers, i);
    push(tick_ns_, EventType::kTick, 0);

    while (!events_.empty() && events_.top().t_ns <= end_ns) {
      const Event e = events_.top();
      events_.pop();
      now_ = e.t_ns;
      switch (e.type) {
        case EventType::kArrival:
          attempt(workload_.process[e.index], 0);
          if (e.index + 1 < workload_.arrival_ns.size()) {
            push(workload_.arrival_ns[e.index + 1], EventType::kArrival, e.index + 1);
          }
          break;
        case EventType::kRetry: {
          const PendingRetry r = retries_[e.index];
          ++result_.retries;
          attempt(r.process, r.attempt);
          break;
        }
        case EventType::kServiceDone:
          service_done(e.index);
          break;
        case EventType::kResponse:
          respond(e.index);
          break;
        case EventType::kTimeout:
          timeout(e.index);
          break;
        case EventType::kWorkers:
          workers_ = steps[e.index].workers;
          dispatch();
          break;
        case EventType::kTick:
          tick();
          push(now_ + tick_ns_, EventType::kTick, 0);
          break;
      }
    }
    now_ = end_ns;
    account();
    std::sort(result_.latencies_ns.begin(), result_.latencies_ns.end());
    return std::move(result_);
  }

 private:
  void push(std::uint64_t t_ns, EventType type, std::uint32_t index) {
    events_.push({t_ns, seq_++, type, index});
  }

  Limiter& limiter_of(std::uint32_t process) {
    return limiters_[s_.limiter == LimiterMode::kHost ? 0 : process];
  }

  // Adds the time since the last change of the dependency's occupancy.
  void account() {
    const double dt = static_cast<double>(now_ - accounted_ns_);
    result_.busy_integral += static_cast<double>(busy_) * dt;
    result_.in_system_integral += static_cast<double>(busy_ + queue_.size()) * dt;
    accounted_ns_ = now_;
  }

  void attempt(std::uint32_t process, std::uint32_t attempt_no) {
    Limiter& lim = limiter_of(process);
    ++result_.attempts;
    if (lim.inflight >= lim.limit()) {
      lim.recorder.rejected();
      ++result_.rejected;
      ++tick_rejected_;
      maybe_retry(process, attempt_no);
      return;
    }
    ++lim.inflight;
    ++inflight_;
    lim.recorder.admitted(lim.inflight);
    ++result_.admitted;
    const auto id = static_cast<std::uint32_t>(calls_.size());
    calls_.push_back({now_, process, attempt_no, true});
    if (busy_ < workers_) {
      push(now_ + timeout_ns_, EventType::kTimeout, id);  // before the completion: wins a tie
      start(id);
    } else if (s_.queue_limit && queue_.size() >= *s_.queue_limit) {
      // The dependency fails the call at once: dropped, no latency kept.
      calls_[id].waiting = false;
      release(lim);
      lim.recorder.dropped();
      ++result_.errors;
      maybe_retry(process, attempt_no);
    } else {
      push(now_ + timeout_ns_, EventType::kTimeout, id);
      account();
      queue_.push_back(id);
    }
  }

  void start(std::uint32_t id) {
    account();
    ++busy_;
    const double mean_ns = timeline_.mean_service_s(static_cast<double>(now_) / kNsPerS) * kNsPerS;
    const double size = draw_service_size(service_sizes_, s_);
    const auto service_ns = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(size * mean_ns)));
    push(now_ + service_ns, EventType::kServiceDone, id);
  }

  // Starts queued calls while workers are free.
  void dispatch() {
    while (busy_ < workers_ && !queue_.empty()) {
      const std::uint32_t id = queue_.front();
      account();
      queue_.pop_front();
      start(id);
    }
  }

  void release(Limiter& lim) {
    --lim.inflight;
    --inflight_;
  }

  // The worker is free; the answer reaches the caller after the network
  // delay (if its caller has not given up by then).
  void service_done(std::uint32_t id) {
    account();
    --busy_;
    ++result_.served;
    const double network_ns = timeline_.network_s(static_cast<double>(now_) / kNsPerS) * kNsPerS;
    if (network_ns >= 1) {
      push(now_ + static_cast<std::uint64_t>(std::llround(network_ns)), EventType::kResponse, id);
    } else {
      respond(id);
    }
    dispatch();
  }

  void respond(std::uint32_t id) {
    Call& call = calls_[id];
    if (call.waiting) {
      call.waiting = false;
      Limiter& lim = limiter_of(call.process);
      const std::uint64_t latency_ns = now_ - call.admitted_ns;
      lim.recorder.succeeded(latency_ns);
      release(lim);
      ++result_.ok;
      result_.latencies_ns.push_back(latency_ns);
      tick_latencies_ns_.push_back(latency_ns);
    } else {
      ++result_.wasted;
    }
  }

  void timeout(std::uint32_t id) {
    Call& call = calls_[id];
    if (!call.waiting) return;  // completed first
    call.waiting = false;
    Limiter& lim = limiter_of(call.process);
    lim.recorder.dropped();
    release(lim);
    ++result_.timed_out;
    ++tick_timeouts_;
    maybe_retry(call.process, call.attempt);
  }

  void maybe_retry(std::uint32_t process, std::uint32_t attempt_no) {
    if (attempt_no >= s_.retries) return;
    const auto index = static_cast<std::uint32_t>(retries_.size());
    retries_.push_back({process, attempt_no + 1});
    push(now_ + retry_delay_ns_, EventType::kRetry, index);
  }

  void tick() {
    double limit = 0;
    double baseline_sum_ns = 0;
    int baselines = 0;
    for (Limiter& lim : limiters_) {
      const control::TickObservation o = lim.recorder.take(lim.inflight);
      if (lim.controller) {
        lim.controller->observe(o, now_);
        limit += lim.controller->limit();
        if (const double b = lim.controller->policy().baseline().latency_ns; b > 0) {
          baseline_sum_ns += b;
          ++baselines;
        }
      } else {
        limit = kNoLimit;
      }
    }
    TickRow row;
    row.t_ns = now_;
    row.limit = limit;
    row.inflight = inflight_;
    row.queue = static_cast<std::uint32_t>(queue_.size());
    const double tick_s = static_cast<double>(tick_ns_) / kNsPerS;
    if (!tick_latencies_ns_.empty()) {
      std::sort(tick_latencies_ns_.begin(), tick_latencies_ns_.end());
      const auto rank = [&](double q) {
        const auto n = static_cast<double>(tick_latencies_ns_.size());
        const auto r = static_cast<std::size_t>(std::max(1.0, std::ceil(q * n)));
        return static_cast<double>(tick_latencies_ns_[r - 1]) / kNsPerMs;
      };
      row.p50_ms = rank(0.50);
      row.p99_ms = rank(0.99);
    }
    row.goodput_per_s = static_cast<double>(tick_latencies_ns_.size()) / tick_s;
    row.rejected_per_s = static_cast<double>(tick_rejected_) / tick_s;
    row.timeouts_per_s = static_cast<double>(tick_timeouts_) / tick_s;
    if (baselines > 0) row.baseline_ms = baseline_sum_ns / baselines / kNsPerMs;
    result_.series.push_back(row);
    tick_latencies_ns_.clear();
    tick_rejected_ = 0;
    tick_timeouts_ = 0;
  }

  const Scenario& s_;
  const Timeline& timeline_;
  const Workload& workload_;
  RandomStream service_sizes_;  // the work of each service, in the order they start
  const std::uint64_t timeout_ns_;
  const std::uint64_t retry_delay_ns_;
  const std::uint64_t tick_ns_;

  std::priority_queue<Event, std::vector<Event>, Later> events_;
  std::uint64_t seq_ = 0;
  std::uint64_t now_ = 0;
  std::vector<Limiter> limiters_;
  std::vector<Call> calls_;
  std::vector<PendingRetry> retries_;
  std::deque<std::uint32_t> queue_;
  std::uint32_t workers_ = 0;
  std::uint32_t busy_ = 0;
  std::uint32_t inflight_ = 0;
  std::uint64_t accounted_ns_ = 0;

  std::vector<std::uint64_t> tick_latencies_ns_;
  std::uint64_t tick_rejected_ = 0;
  std::uint64_t tick_timeouts_ = 0;
  RunResult result_;
};

}  // namespace

RunResult simulate(const Scenario& scenario, const Timeline& timeline, const Workload& workload,
                   const RunSpec& spec) {
  return Simulation(scenario, timeline, workload, spec).run();
}

}  // namespace bulkhead::sim
