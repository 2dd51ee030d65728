// bulkheadd's Prometheus endpoint (prometheus-cpp).
//
// The per-dependency series are not prometheus-cpp metric objects: each of
// those is an allocation with its own label map in a hash table, about
// 7.5 KB per dependency for the 28 series of one, and updating them is a
// cache miss per series every tick (30 MiB and 4 ms a tick at 4096
// dependencies: bulkhead-scale-bench, docs/benchmarks.md). They are plain
// numbers instead, one compact record per dependency (Dependency, about
// 0.4 KB), turned into metric families only when a scrape asks
// (DependencySeries::Collect()). The daemon-wide series (tick time,
// reloads) and the partitions' stay prometheus-cpp's own.
//
// Thread safety: the control loop calls every method; the exposer's thread
// collects. A mutex guards the records: observe() takes it once per
// dependency and tick, a scrape while it copies them.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "shm/histogram.hpp"

namespace bulkhead::daemon {

class Metrics {
 public:
  // Prometheus buckets of the latency and wait histograms: 16 bounds and +Inf.
  static constexpr std::size_t kBuckets = 17;
  struct Histogram {
    std::array<std::uint64_t, kBuckets> counts{};  // per bucket, not cumulative
    double sum_s = 0;
  };
  // One dependency's series; written under the lock only.
  struct Dependency {
    std::string name;
    double limit = 0;
    bool pinned = false;  // an operator's pin holds the limit
    std::string policy;   // the limit policy's registry name
    double inflight = 0;
    double min_limit = 0;
    double max_limit = 0;
    double waiters = 0;
    // bulkhead_requests_total by outcome: success, dropped, ignored, rejected, failed.
    std::array<double, 5> requests{};
    double shadow = 0;
    double queue_full = 0;
    double deadline = 0;
    double breaker_rejected = 0;
    double breaker_shadow = 0;
    double waiters_reclaimed = 0;
    double permits_reclaimed = 0;
    std::array<double, 3> transitions{};  // by state entered: closed, open, half_open
    std::uint8_t breaker_state = 0;       // 0 closed, 1 open, 2 half open
    bool breaker_forced = false;          // held there by an operator
    double baseline_s = 0;                // the policy's; 0: none
    bool measuring = false;
    // It has a wait queue (max_queue > 0): its wait histogram is exported,
    // as it is once any call waited. Without, its 19 lines (a third of the
    // dependency's series) would be zeros.
    bool queue = false;
    Histogram latency;
    Histogram wait;
  };

  // What one tick adds to a dependency's counters and sets its gauges to.
  struct Tick {
    std::uint32_t limit = 0;
    bool pinned = false;
    std::uint32_t inflight = 0;
    std::uint32_t waiters = 0;
    std::uint64_t success = 0, dropped = 0, ignored = 0, rejected = 0, failed = 0;
    std::uint64_t shadow = 0, queue_full = 0, deadline = 0, breaker_rejected = 0, breaker_shadow = 0;
    std::uint8_t breaker_state = 0;  // as Dependency::breaker_state
    bool breaker_forced = false;
    // The policy's baseline latency (0: it keeps none) and whether it is
    // measuring it (policies::Baseline).
    double baseline_ns = 0;
    bool measuring = false;
    bool queue = false;  // as Dependency::queue
    // The tick's ok calls by segment histogram bucket (deltas), from
    // bucket latency_first on (the buckets past the span and before it
    // are 0), and their latency sum; empty when there were none. The same
    // for waits.
    std::span<const std::uint64_t> latency;
    std::uint32_t latency_first = 0;
    std::uint64_t latency_sum_ns = 0;
    std::span<const std::uint64_t> wait;
    std::uint32_t wait_first = 0;
    std::uint64_t wait_sum_ns = 0;
  };

  // Listens on `listen` ("host:port"; port 0 picks a free one). Throws
  // std::runtime_error when it cannot bind.
  explicit Metrics(const std::string& listen);
  ~Metrics();

  // The port actually bound.
  std::uint16_t port() const;
  // The host of `listen` ("host:port" or "[v6]:port") that the destructor
  // connects to, to wake the exporter's listener: its own, or loopback when
  // it is a wildcard.
  static std::string wake_host(const std::string& listen);

  // The series of one dependency, created on first use (the record's
  // address stays valid as long as the Metrics).
  Dependency& dependency(const std::string& name);
  // One tick of a dependency.
  void observe(Dependency& d, const Tick& tick);

  void observe_tick(double seconds);
  // Gives the kernel back what a scrape's allocations left free
  // (malloc_trim(3)): at thousands of dependencies its metric families,
  // text and gzip are tens of MiB, which glibc keeps once they are freed,
  // half the daemon's resident memory between scrapes. The control loop's
  // thread calls it after each tick with CLOCK_MONOTONIC's now; it trims
  // once per scrape, a second after the scrape collected, when its text is
  // written and freed. True when it trimmed.
  bool trim_after_scrape(std::uint64_t now_ns);
  void count_reload(bool ok);
  void count_reclaimed(const std::string& dependency, std::uint64_t permits);
  // The policy and the [min_limit, max_limit] the config gives the
  // dependency: alerts compare the limit with the bounds (pinned at the
  // minimum), except under a policy that never moves it (fixed).
  void set_policy(const std::string& dependency, const std::string& policy, double min_limit, double max_limit);
  void count_reclaimed_waiters(const std::string& dependency, std::uint64_t places);
  // The segment's tables: slots taken and slots there are, of dependencies
  // and of processes.
  void set_occupancy(std::uint32_t dependencies, std::uint32_t max_dependencies, std::uint32_t processes,
                     std::uint32_t max_processes);
  // One breaker transition, into state `to` ("closed", "open", "half_open").
  void count_breaker_transition(const std::string& dependency, const std::string& to);
  // A partition's series, found (or made) once and kept by the caller:
  // prometheus-cpp's Family::Add() builds the labels, hashes them and looks
  // them up under a lock, several times the rest of a dependency's tick when
  // done every tick. Valid until remove_partition() of that partition.
  struct Partition {
    prometheus::Gauge* inflight = nullptr;
    prometheus::Gauge* guaranteed = nullptr;
    prometheus::Counter* rejected = nullptr;
  };
  Partition partition(const std::string& dependency, const std::string& partition);
  // One tick of a partition: its in-flight count and guarantee, and the
  // calls refused since the last tick.
  void observe_partition(const Partition& series, std::uint32_t inflight, std::uint32_t guaranteed,
                         std::uint64_t rejected);
  // Series found by partition() so far.
  std::uint64_t partition_lookups() const { return partition_lookups_; }
  // After a reload that removed or renamed a partition: its series go,
  // rather than stay frozen.
  void remove_partition(const std::string& dependency, const std::string& partition);

 private:
  class DependencySeries;

  // CLOCK_MONOTONIC when a scrape last collected the dependencies' series
  // (0: none has); written on the exposer's thread.
  mutable std::atomic<std::uint64_t> collected_ns_{0};
  std::uint64_t trimmed_ns_ = 0;  // the collected_ns_ last trimmed after

  // Created before the exposer and destroyed after it (see ECOSYSTEM.md).
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Histogram>& tick_;
  prometheus::Family<prometheus::Counter>& reloads_;
  prometheus::Family<prometheus::Gauge>& partition_inflight_;
  prometheus::Family<prometheus::Gauge>& partition_guaranteed_;
  prometheus::Family<prometheus::Counter>& partition_rejected_;
  prometheus::Family<prometheus::Gauge>& slots_;
  prometheus::Family<prometheus::Gauge>& slots_used_;
  prometheus::Histogram& tick_seconds_;
  prometheus::Counter& reloads_ok_;
  prometheus::Counter& reloads_failed_;
  // By table: dependencies, processes.
  std::array<prometheus::Gauge*, 2> slots_of_{};
  std::array<prometheus::Gauge*, 2> slots_used_of_{};
  // `counts`: segment buckets from `first` on.
  void add(Histogram& into, std::span<const std::uint64_t> counts, std::uint32_t first, std::uint64_t sum_ns);

  mutable std::mutex mu_;  // guards dependencies_' records
  std::deque<Dependency> dependencies_;           // stable addresses
  std::map<std::string, Dependency*> by_name_;    // the control loop's only
  std::shared_ptr<DependencySeries> series_;
  // Segment bucket -> Prometheus bucket (the first whose bound is at or
  // above the segment bucket's upper edge).
  std::array<std::uint8_t, shm::kHistogramBuckets> bucket_map_{};
  std::uint64_t partition_lookups_ = 0;
  std::unique_ptr<prometheus::Exposer> exposer_;
  // Where a connection reaches the exporter, to wake it when it stops
  // (the destructor); wake_size_ 0: unknown.
  sockaddr_storage wake_address_{};
  socklen_t wake_size_ = 0;
};

}  // namespace bulkhead::daemon
