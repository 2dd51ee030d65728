#include "daemon/metrics.hpp"

#include <vector>

namespace bulkhead::daemon {

namespace {

// Seconds. Segment buckets are at most 12.5% wide, so a sample lands at
// most one Prometheus bucket above where it belongs.
const prometheus::Histogram::BucketBoundaries& latency_bounds() {
  static const prometheus::Histogram::BucketBoundaries bounds{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,     10};
  return bounds;
}

}  // namespace

Metrics::Metrics(const std::string& listen)
    : registry_(std::make_shared<prometheus::Registry>()),
      limit_(prometheus::BuildGauge()
                 .Name("bulkhead_limit")
                 .Help("Concurrency limit published for the dependency, in calls.")
                 .Register(*registry_)),
      inflight_(prometheus::BuildGauge()
                    .Name("bulkhead_inflight")
                    .Help("Calls to the dependency in flight host-wide at the last tick.")
                    .Register(*registry_)),
      requests_(prometheus::BuildCounter()
                    .Name("bulkhead_requests_total")
                    .Help("Calls by outcome: success, dropped, ignored, failed, or rejected at the limit.")
                    .Register(*registry_)),
      latency_(prometheus::BuildHistogram()
                   .Name("bulkhead_latency_seconds")
                   .Help("Latency of successful calls, admission to release.")
                   .Register(*registry_)),
      tick_(prometheus::BuildHistogram()
                .Name("bulkhead_daemon_tick_seconds")
                .Help("Time the daemon spent in one control-loop tick.")
                .Register(*registry_)),
      reloads_(prometheus::BuildCounter()
                   .Name("bulkhead_config_reloads_total")
                   .Help("Configuration reloads by result: applied or rejected.")
                   .Register(*registry_)),
      reclaimed_(prometheus::BuildCounter()
                     .Name("bulkhead_permits_reclaimed_total")
                     .Help("Permits given back on behalf of processes that died holding them.")
                     .Register(*registry_)),
      shadow_(prometheus::BuildCounter()
                  .Name("bulkhead_shadow_rejections_total")
                  .Help("Calls over the limit that shadow mode (enforce = false) admitted: "
                        "the rejections enforcing would have made.")
                  .Register(*registry_)),
      min_limit_(prometheus::BuildGauge()
                     .Name("bulkhead_min_limit")
                     .Help("Lowest limit the config allows the dependency (min_limit), in calls.")
                     .Register(*registry_)),
      max_limit_(prometheus::BuildGauge()
                     .Name("bulkhead_max_limit")
                     .Help("Highest limit the config allows the dependency (max_limit), in calls.")
                     .Register(*registry_)),
      queue_rejections_(prometheus::BuildCounter()
                            .Name("bulkhead_queue_rejections_total")
                            .Help("Calls that asked to wait (bh_acquire) and were refused, by reason: "
                                  "queue_full, or deadline (passed, or the expected wait exceeded it).")
                            .Register(*registry_)),
      waiters_(prometheus::BuildGauge()
                   .Name("bulkhead_queue_waiters")
                   .Help("Calls waiting for a permit of the dependency, host-wide, at the last tick.")
                   .Register(*registry_)),
      wait_(prometheus::BuildHistogram()
                .Name("bulkhead_queue_wait_seconds")
                .Help("Time calls spent in the dependency's wait queue, admitted or not.")
                .Register(*registry_)),
      waiters_reclaimed_(prometheus::BuildCounter()
                             .Name("bulkhead_waiters_reclaimed_total")
                             .Help("Wait-queue places freed on behalf of processes that died waiting.")
                             .Register(*registry_)),
      breaker_state_(prometheus::BuildGauge()
                         .Name("bulkhead_breaker_state")
                         .Help("Circuit breaker state: 1 for the state it is in (closed, open, half_open), "
                               "0 for the others.")
                         .Register(*registry_)),
      breaker_transitions_(prometheus::BuildCounter()
                               .Name("bulkhead_breaker_transitions_total")
                               .Help("Circuit breaker transitions, by the state entered.")
                               .Register(*registry_)),
      breaker_rejected_(prometheus::BuildCounter()
                            .Name("bulkhead_breaker_rejections_total")
                            .Help("Calls refused because the circuit breaker was open (or half open "
                                  "with every trial call out): BH_REJECT_OPEN_CIRCUIT.")
                            .Register(*registry_)),
      breaker_shadow_(prometheus::BuildCounter()
                          .Name("bulkhead_breaker_shadow_rejections_total")
                          .Help("Calls the open circuit breaker would have refused, admitted by shadow "
                                "mode (enforce = false).")
                          .Register(*registry_)),
      partition_inflight_(prometheus::BuildGauge()
                              .Name("bulkhead_partition_inflight")
                              .Help("Calls of the partition in flight host-wide at the last tick.")
                              .Register(*registry_)),
      partition_guaranteed_(prometheus::BuildGauge()
                                .Name("bulkhead_partition_guaranteed")
                                .Help("Calls in flight guaranteed to the partition: floor(share x limit).")
                                .Register(*registry_)),
      partition_rejected_(prometheus::BuildCounter()
                              .Name("bulkhead_partition_rejected_total")
                              .Help("Calls of the partition refused at admission (the dependency at its "
                                    "limit, capacity reserved for other partitions, or a hard cap).")
                              .Register(*registry_)),
      tick_seconds_(tick_.Add({}, prometheus::Histogram::BucketBoundaries{
                                      0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05})),
      reloads_ok_(reloads_.Add({{"result", "applied"}})),
      reloads_failed_(reloads_.Add({{"result", "rejected"}})) {
  const auto& bounds = latency_bounds();
  for (std::uint32_t b = 0; b < shm::kHistogramBuckets; ++b) {
    const double upper_s = static_cast<double>(shm::histogram_bucket_upper_ns(b)) / 1e9;
    std::uint8_t p = 0;
    while (p < bounds.size() && bounds[p] < upper_s) ++p;
    bucket_map_[b] = p;  // == bounds.size(): the +Inf bucket
  }
  exposer_ = std::make_unique<prometheus::Exposer>(listen);
  exposer_->RegisterCollectable(registry_);
}

Metrics::~Metrics() {
  exposer_.reset();  // stop serving before the registry goes
}

std::uint16_t Metrics::port() const {
  const auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : static_cast<std::uint16_t>(ports.front());
}

Metrics::Dependency& Metrics::dependency(const std::string& name) {
  auto it = dependencies_.find(name);
  if (it != dependencies_.end()) return it->second;
  const prometheus::Labels labels{{"dependency", name}};
  auto with = [&](const char* outcome) {
    prometheus::Labels l = labels;
    l.emplace("outcome", outcome);
    return &requests_.Add(l);
  };
  auto rejected_for = [&](const char* reason) {
    prometheus::Labels l = labels;
    l.emplace("reason", reason);
    return &queue_rejections_.Add(l);
  };
  Dependency d{&limit_.Add(labels),   &inflight_.Add(labels), with("success"),
               with("dropped"),      with("ignored"),        with("rejected"),
               &shadow_.Add(labels), &latency_.Add(labels, latency_bounds()),
               rejected_for("queue_full"), rejected_for("deadline"), &waiters_.Add(labels),
               &wait_.Add(labels, latency_bounds()), with("failed"),
               nullptr, nullptr, nullptr, &breaker_rejected_.Add(labels), &breaker_shadow_.Add(labels)};
  auto state = [&](const char* name) {
    prometheus::Labels l = labels;
    l.emplace("state", name);
    return &breaker_state_.Add(l);
  };
  d.breaker_closed = state("closed");
  d.breaker_open = state("open");
  d.breaker_half_open = state("half_open");
  d.breaker_closed->Set(1);
  for (const char* to : {"closed", "open", "half_open"}) breaker_transitions_.Add({{"dependency", name}, {"to", to}});
  // At 0 from the start: a dead waiter is rare, and a dashboard should not
  // have to tell "none yet" from "no such series".
  waiters_reclaimed_.Add(labels);
  return dependencies_.emplace(name, d).first->second;
}

void Metrics::observe_latency(Dependency& d,
                              const std::array<std::uint64_t, shm::kHistogramBuckets>& counts,
                              std::uint64_t sum_ns) {
  observe(*d.latency, counts, sum_ns);
}

void Metrics::observe_wait(Dependency& d, const std::array<std::uint64_t, shm::kHistogramBuckets>& counts,
                           std::uint64_t sum_ns) {
  observe(*d.wait, counts, sum_ns);
}

void Metrics::observe(prometheus::Histogram& histogram,
                      const std::array<std::uint64_t, shm::kHistogramBuckets>& counts,
                      std::uint64_t sum_ns) {
  // One vector for every call, not one each: this runs twice per
  // dependency per tick.
  std::vector<double>& increments = increments_;
  increments.assign(latency_bounds().size() + 1, 0.0);
  bool any = false;
  for (std::uint32_t b = 0; b < counts.size(); ++b) {
    if (counts[b] == 0) continue;
    increments[bucket_map_[b]] += static_cast<double>(counts[b]);
    any = true;
  }
  if (any) histogram.ObserveMultiple(increments, static_cast<double>(sum_ns) / 1e9);
}

void Metrics::observe_tick(double seconds) { tick_seconds_.Observe(seconds); }

void Metrics::count_reload(bool ok) { (ok ? reloads_ok_ : reloads_failed_).Increment(); }

void Metrics::count_reclaimed(const std::string& dependency, std::uint64_t permits) {
  reclaimed_.Add({{"dependency", dependency}}).Increment(static_cast<double>(permits));
}

void Metrics::set_limit_bounds(const std::string& dependency, double min_limit, double max_limit) {
  min_limit_.Add({{"dependency", dependency}}).Set(min_limit);
  max_limit_.Add({{"dependency", dependency}}).Set(max_limit);
}

void Metrics::count_breaker_transition(const std::string& dependency, const std::string& to) {
  breaker_transitions_.Add({{"dependency", dependency}, {"to", to}}).Increment();
}

void Metrics::count_reclaimed_waiters(const std::string& dependency, std::uint64_t places) {
  waiters_reclaimed_.Add({{"dependency", dependency}}).Increment(static_cast<double>(places));
}

void Metrics::observe_partition(const std::string& dependency, const std::string& partition,
                                std::uint32_t inflight, std::uint32_t guaranteed, std::uint64_t rejected) {
  const prometheus::Labels labels{{"dependency", dependency}, {"partition", partition}};
  partition_inflight_.Add(labels).Set(inflight);
  partition_guaranteed_.Add(labels).Set(guaranteed);
  partition_rejected_.Add(labels).Increment(static_cast<double>(rejected));
}

}  // namespace bulkhead::daemon
