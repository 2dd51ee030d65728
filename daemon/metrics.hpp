// bulkheadd's Prometheus endpoint (prometheus-cpp).
//
// Thread safety: prometheus-cpp's metric objects are safe to update from
// the control loop while the exposer's thread serves scrapes; this class's
// own methods are called by the control loop only.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shm/histogram.hpp"

namespace bulkhead::daemon {

class Metrics {
 public:
  struct Dependency {
    prometheus::Gauge* limit;
    prometheus::Gauge* inflight;
    prometheus::Counter* success;
    prometheus::Counter* dropped;
    prometheus::Counter* ignored;
    prometheus::Counter* rejected;
    prometheus::Counter* shadow;  // over the limit, admitted in shadow mode
    prometheus::Histogram* latency;
    // The wait queue.
    prometheus::Counter* queue_full;  // refused: the queue was full
    prometheus::Counter* deadline;    // refused: the deadline passed or could not be met
    prometheus::Gauge* waiters;       // calls waiting at the last tick
    prometheus::Histogram* wait;      // time calls spent in the queue
    // The circuit breaker.
    prometheus::Counter* failed;          // released BH_FAILED
    prometheus::Gauge* breaker_closed;    // bulkhead_breaker_state{state="closed"}: 1 or 0
    prometheus::Gauge* breaker_open;      // {state="open"}
    prometheus::Gauge* breaker_half_open; // {state="half_open"}
    prometheus::Counter* breaker_rejected;  // refused: open circuit
    prometheus::Counter* breaker_shadow;    // would have been refused; shadow mode admitted
  };

  // Listens on `listen` ("host:port"; port 0 picks a free one). Throws
  // std::runtime_error when it cannot bind.
  explicit Metrics(const std::string& listen);
  ~Metrics();

  // The port actually bound.
  std::uint16_t port() const;

  // The metrics of one dependency, created on first use.
  Dependency& dependency(const std::string& name);
  // Adds a window's ok calls by segment histogram bucket (deltas) and their
  // latency sum to the dependency's Prometheus histogram.
  void observe_latency(Dependency& d, const std::array<std::uint64_t, shm::kHistogramBuckets>& counts,
                       std::uint64_t sum_ns);
  // The same for the time calls waited in the queue.
  void observe_wait(Dependency& d, const std::array<std::uint64_t, shm::kHistogramBuckets>& counts,
                    std::uint64_t sum_ns);

  void observe_tick(double seconds);
  void count_reload(bool ok);
  void count_reclaimed(const std::string& dependency, std::uint64_t permits);
  // The [min_limit, max_limit] the config gives the dependency: alerts
  // compare the limit with them (pinned at the minimum).
  void set_limit_bounds(const std::string& dependency, double min_limit, double max_limit);
  void count_reclaimed_waiters(const std::string& dependency, std::uint64_t places);
  // One breaker transition, into state `to` ("closed", "open", "half_open").
  void count_breaker_transition(const std::string& dependency, const std::string& to);
  // One tick of a partition: its in-flight count and guarantee, and the
  // calls refused since the last tick.
  void observe_partition(const std::string& dependency, const std::string& partition, std::uint32_t inflight,
                         std::uint32_t guaranteed, std::uint64_t rejected);

 private:
  // Created before the exposer and destroyed after it (see ECOSYSTEM.md).
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& limit_;
  prometheus::Family<prometheus::Gauge>& inflight_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Family<prometheus::Histogram>& tick_;
  prometheus::Family<prometheus::Counter>& reloads_;
  prometheus::Family<prometheus::Counter>& reclaimed_;
  prometheus::Family<prometheus::Counter>& shadow_;
  prometheus::Family<prometheus::Gauge>& min_limit_;
  prometheus::Family<prometheus::Gauge>& max_limit_;
  prometheus::Family<prometheus::Counter>& queue_rejections_;
  prometheus::Family<prometheus::Gauge>& waiters_;
  prometheus::Family<prometheus::Histogram>& wait_;
  prometheus::Family<prometheus::Counter>& waiters_reclaimed_;
  prometheus::Family<prometheus::Gauge>& breaker_state_;
  prometheus::Family<prometheus::Counter>& breaker_transitions_;
  prometheus::Family<prometheus::Counter>& breaker_rejected_;
  prometheus::Family<prometheus::Counter>& breaker_shadow_;
  prometheus::Family<prometheus::Gauge>& partition_inflight_;
  prometheus::Family<prometheus::Gauge>& partition_guaranteed_;
  prometheus::Family<prometheus::Counter>& partition_rejected_;
  prometheus::Histogram& tick_seconds_;
  prometheus::Counter& reloads_ok_;
  prometheus::Counter& reloads_failed_;
  void observe(prometheus::Histogram& histogram,
               const std::array<std::uint64_t, shm::kHistogramBuckets>& counts, std::uint64_t sum_ns);

  std::map<std::string, Dependency> dependencies_;
  std::vector<double> increments_;  // observe()'s scratch
  // Segment bucket -> Prometheus bucket (the first whose bound is at or
  // above the segment bucket's upper edge).
  std::array<std::uint8_t, shm::kHistogramBuckets> bucket_map_{};
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace bulkhead::daemon
