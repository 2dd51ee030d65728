#include "daemon/metrics.hpp"

#include <malloc.h>
#include <netdb.h>
#include <prometheus/metric_family.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>
#include <utility>
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

constexpr const char* kOutcomes[5] = {"success", "dropped", "ignored", "rejected", "failed"};
constexpr const char* kStates[3] = {"closed", "open", "half_open"};
// Labels of bulkhead_segment_slots(_used), in Metrics::slots_of_'s order.
constexpr std::array<const char*, 2> kTables = {"dependencies", "processes"};

// Opens a connection to `address` and closes it, giving up after 100 ms.
void poke(const sockaddr_storage& address, socklen_t size) {
  const int fd = ::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  const timeval timeout{0, 100'000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  (void)::connect(fd, reinterpret_cast<const sockaddr*>(&address), size);
  ::close(fd);
}

prometheus::MetricFamily family(const char* name, const char* help, prometheus::MetricType type,
                                std::size_t series) {
  prometheus::MetricFamily f{name, help, type, {}};
  f.metric.reserve(series);
  return f;
}

// A series labelled with the dependency, and one more label when `key` is given.
prometheus::ClientMetric& series(prometheus::MetricFamily& f, const std::string& dependency,
                                 const char* key = nullptr, const char* value = nullptr) {
  prometheus::ClientMetric& m = f.metric.emplace_back();
  m.label.push_back({"dependency", dependency});
  if (key != nullptr) m.label.push_back({key, value});
  return m;
}

void gauge(prometheus::MetricFamily& f, const std::string& dependency, double value, const char* key = nullptr,
           const char* label = nullptr) {
  series(f, dependency, key, label).gauge.value = value;
}

void counter(prometheus::MetricFamily& f, const std::string& dependency, double value, const char* key = nullptr,
             const char* label = nullptr) {
  series(f, dependency, key, label).counter.value = value;
}

void histogram(prometheus::MetricFamily& f, const std::string& dependency, const Metrics::Histogram& h) {
  prometheus::ClientMetric::Histogram& out = series(f, dependency).histogram;
  const auto& bounds = latency_bounds();
  out.bucket.resize(Metrics::kBuckets);
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b < Metrics::kBuckets; ++b) {
    cumulative += h.counts[b];
    out.bucket[b].cumulative_count = cumulative;
    out.bucket[b].upper_bound = b < bounds.size() ? bounds[b] : std::numeric_limits<double>::infinity();
  }
  out.sample_count = cumulative;
  out.sample_sum = h.sum_s;
}

}  // namespace

// The per-dependency families, built from a copy of the records at each
// scrape, on the exposer's thread.
class Metrics::DependencySeries : public prometheus::Collectable {
 public:
  explicit DependencySeries(const Metrics& owner) : owner_(owner) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    // Relaxed: a lone time, read by trim_after_scrape().
    owner_.collected_ns_.store(static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000u +
                                   static_cast<std::uint64_t>(now.tv_nsec),
                               std::memory_order_relaxed);
    std::vector<Dependency> deps;
    {
      const std::lock_guard<std::mutex> lock(owner_.mu_);
      deps.assign(owner_.dependencies_.begin(), owner_.dependencies_.end());
    }
    const std::size_t n = deps.size();
    using prometheus::MetricType;
    auto limit = family("bulkhead_limit", "Concurrency limit published for the dependency, in calls.",
                        MetricType::Gauge, n);
    auto pinned = family("bulkhead_limit_pinned",
                         "1 while an operator's pin (bulkheadctl pin) holds the limit, else 0.",
                         MetricType::Gauge, n);
    auto inflight = family("bulkhead_inflight", "Calls to the dependency in flight host-wide at the last tick.",
                           MetricType::Gauge, n);
    auto requests = family("bulkhead_requests_total",
                           "Calls by outcome: success, dropped, ignored, failed, or rejected at the limit.",
                           MetricType::Counter, 5 * n);
    auto latency = family("bulkhead_latency_seconds", "Latency of successful calls, admission to release.",
                          MetricType::Histogram, n);
    auto shadow = family("bulkhead_shadow_rejections_total",
                         "Calls over the limit that shadow mode (enforce = false) admitted: "
                         "the rejections enforcing would have made.",
                         MetricType::Counter, n);
    auto min_limit = family("bulkhead_min_limit",
                            "Lowest limit the config allows the dependency (min_limit), in calls.",
                            MetricType::Gauge, n);
    auto max_limit = family("bulkhead_max_limit",
                            "Highest limit the config allows the dependency (max_limit), in calls.",
                            MetricType::Gauge, n);
    auto queue_rejections = family("bulkhead_queue_rejections_total",
                                   "Calls that asked to wait (bh_acquire, or a queue of the caller's own "
                                   "such as bulkhead::Executor's) and were refused, by reason: queue_full, "
                                   "or deadline (passed, or the expected wait exceeded it).",
                                   MetricType::Counter, 2 * n);
    auto waiters = family("bulkhead_queue_waiters",
                          "Calls waiting for a permit of the dependency, host-wide, at the last tick.",
                          MetricType::Gauge, n);
    auto wait = family("bulkhead_queue_wait_seconds",
                       "Time calls spent in the dependency's wait queue, admitted or not; for dependencies "
                       "with a queue (max_queue > 0), or calls that waited.",
                       MetricType::Histogram, n);
    auto waiters_reclaimed = family("bulkhead_waiters_reclaimed_total",
                                    "Wait-queue places freed on behalf of processes that died waiting.",
                                    MetricType::Counter, n);
    // From 0, with every dependency: increase() sees the first permits
    // given back only on a series that was there before them.
    auto permits_reclaimed = family("bulkhead_permits_reclaimed_total",
                                    "Permits given back on behalf of processes that died or exec'd holding "
                                    "them, or found in flight with no process holding them.",
                                    MetricType::Counter, n);
    auto breaker_state = family("bulkhead_breaker_state",
                                "Circuit breaker state: 1 for the state it is in (closed, open, half_open), "
                                "0 for the others.",
                                MetricType::Gauge, 3 * n);
    auto breaker_forced = family("bulkhead_breaker_forced",
                                 "1 while an operator holds the circuit breaker in its state (config force, "
                                 "or bulkheadctl breaker open|closed), else 0.",
                                 MetricType::Gauge, n);
    auto transitions = family("bulkhead_breaker_transitions_total",
                              "Circuit breaker transitions, by the state entered.", MetricType::Counter, 3 * n);
    auto breaker_rejected = family("bulkhead_breaker_rejections_total",
                                   "Calls refused because the circuit breaker was open (or half open "
                                   "with every trial call out): BH_REJECT_OPEN_CIRCUIT.",
                                   MetricType::Counter, n);
    auto breaker_shadow = family("bulkhead_breaker_shadow_rejections_total",
                                 "Calls the open circuit breaker would have refused, admitted by shadow "
                                 "mode (enforce = false).",
                                 MetricType::Counter, n);
    auto baseline = family("bulkhead_policy_baseline_seconds",
                           "Latency the limit policy takes for the dependency's own, with no queue in front "
                           "of it: what it compares recent latency with. Absent for policies that keep none "
                           "(aimd, fixed), and until one is measured.",
                           MetricType::Gauge, n);
    auto measuring = family("bulkhead_policy_measuring",
                            "1 while the limit policy measures its baseline latency (balance drains: the "
                            "limit is held down for it), else 0.",
                            MetricType::Gauge, n);
    auto policy = family("bulkhead_policy_info",
                         "The limit policy the dependency runs, in the label policy; always 1.",
                         MetricType::Gauge, n);
    for (const Dependency& d : deps) {
      gauge(limit, d.name, d.limit);
      gauge(policy, d.name, 1, "policy", d.policy.c_str());
      gauge(pinned, d.name, d.pinned ? 1 : 0);
      if (d.baseline_s > 0) gauge(baseline, d.name, d.baseline_s);
      gauge(measuring, d.name, d.measuring ? 1 : 0);
      gauge(inflight, d.name, d.inflight);
      for (std::size_t o = 0; o < d.requests.size(); ++o) {
        counter(requests, d.name, d.requests[o], "outcome", kOutcomes[o]);
      }
      histogram(latency, d.name, d.latency);
      counter(shadow, d.name, d.shadow);
      gauge(min_limit, d.name, d.min_limit);
      gauge(max_limit, d.name, d.max_limit);
      counter(queue_rejections, d.name, d.queue_full, "reason", "queue_full");
      counter(queue_rejections, d.name, d.deadline, "reason", "deadline");
      gauge(waiters, d.name, d.waiters);
      if (d.queue || std::any_of(d.wait.counts.begin(), d.wait.counts.end(), [](std::uint64_t n) { return n != 0; })) {
        histogram(wait, d.name, d.wait);
      }
      counter(waiters_reclaimed, d.name, d.waiters_reclaimed);
      counter(permits_reclaimed, d.name, d.permits_reclaimed);
      for (std::uint8_t s = 0; s < 3; ++s) {
        gauge(breaker_state, d.name, d.breaker_state == s ? 1 : 0, "state", kStates[s]);
        counter(transitions, d.name, d.transitions[s], "to", kStates[s]);
      }
      gauge(breaker_forced, d.name, d.breaker_forced ? 1 : 0);
      counter(breaker_rejected, d.name, d.breaker_rejected);
      counter(breaker_shadow, d.name, d.breaker_shadow);
    }
    std::vector<prometheus::MetricFamily> out;
    out.reserve(21);
    for (auto* f : {&limit, &pinned, &inflight, &requests, &latency, &shadow, &min_limit, &max_limit, &queue_rejections,
                    &waiters, &wait, &waiters_reclaimed, &permits_reclaimed, &breaker_state, &breaker_forced,
                    &transitions, &breaker_rejected, &breaker_shadow, &policy, &baseline, &measuring}) {
      out.push_back(std::move(*f));
    }
    return out;
  }

 private:
  const Metrics& owner_;
};

Metrics::Metrics(const std::string& listen)
    : registry_(std::make_shared<prometheus::Registry>()),
      tick_(prometheus::BuildHistogram()
                .Name("bulkhead_daemon_tick_seconds")
                .Help("Time the daemon spent in one control-loop tick.")
                .Register(*registry_)),
      reloads_(prometheus::BuildCounter()
                   .Name("bulkhead_config_reloads_total")
                   .Help("Configuration reloads by result: applied or rejected.")
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
      slots_(prometheus::BuildGauge()
                 .Name("bulkhead_segment_slots")
                 .Help("Slots of the segment's table (dependencies, processes): daemon.max_dependencies and "
                       "daemon.max_processes as the segment was made.")
                 .Register(*registry_)),
      slots_used_(prometheus::BuildGauge()
                      .Name("bulkhead_segment_slots_used")
                      .Help("Slots of the segment's table taken at the last tick. A name keeps its dependency "
                            "slot for the segment's life; a full table refuses new names or processes (-ENOSPC).")
                      .Register(*registry_)),
      tick_seconds_(tick_.Add({}, prometheus::Histogram::BucketBoundaries{
                                      0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05})),
      reloads_ok_(reloads_.Add({{"result", "applied"}})),
      reloads_failed_(reloads_.Add({{"result", "rejected"}})),
      series_(std::make_shared<DependencySeries>(*this)) {
  for (std::size_t t = 0; t < kTables.size(); ++t) {
    slots_of_[t] = &slots_.Add({{"table", kTables[t]}});
    slots_used_of_[t] = &slots_used_.Add({{"table", kTables[t]}});
  }
  const auto& bounds = latency_bounds();
  static_assert(kBuckets == 17);
  for (std::uint32_t b = 0; b < shm::kHistogramBuckets; ++b) {
    const double upper_s = static_cast<double>(shm::histogram_bucket_upper_ns(b)) / 1e9;
    // bounds.size(): the +Inf bucket.
    bucket_map_[b] = static_cast<std::uint8_t>(std::ranges::lower_bound(bounds, upper_s) - bounds.begin());
  }
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    // civetweb's own message names no cause; the likely one for an IPv6
    // address is worth naming (mg_check_feature(8) is 0 in Debian 12).
    if (!listen.starts_with('[')) throw;
    throw std::runtime_error(std::string(e.what()) +
                             " (an IPv6 address: the civetweb under prometheus-cpp may be built without IPv6, as "
                             "Debian 12's 1.15 is; listen on an IPv4 address instead)");
  }
  exposer_->RegisterCollectable(series_);
  exposer_->RegisterCollectable(registry_);

  // Resolved now, not while stopping: a host name may need a resolver.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(wake_host(listen).c_str(), std::to_string(port()).c_str(), &hints, &found) == 0) {
    if (found != nullptr && found->ai_addrlen <= sizeof wake_address_) {
      std::memcpy(&wake_address_, found->ai_addr, found->ai_addrlen);
      wake_size_ = found->ai_addrlen;
    }
    ::freeaddrinfo(found);
  }
}

Metrics::~Metrics() {
  // Stop serving before the records and the registry go. civetweb 1.15
  // (Debian 12) sees the stop only when the poll of its listening socket
  // returns, up to 2 s (its SOCKET_TIMEOUT_QUANTUM) after the last
  // connection, or the start; connections opened and closed until the
  // server is gone end that poll at once.
  std::atomic<bool> stopped{false};
  std::thread waker;
  if (wake_size_ > 0) {
    waker = std::thread([&] {
      while (!stopped.load(std::memory_order_acquire)) {
        poke(wake_address_, wake_size_);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  exposer_.reset();
  stopped.store(true, std::memory_order_release);
  if (waker.joinable()) waker.join();
}

std::string Metrics::wake_host(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

std::uint16_t Metrics::port() const {
  const auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : static_cast<std::uint16_t>(ports.front());
}

Metrics::Dependency& Metrics::dependency(const std::string& name) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return *it->second;
  const std::lock_guard<std::mutex> lock(mu_);
  Dependency& d = dependencies_.emplace_back();
  d.name = name;
  by_name_.emplace(name, &d);
  return d;
}

void Metrics::add(Histogram& into, std::span<const std::uint64_t> counts, std::uint32_t first,
                  std::uint64_t sum_ns) {
  // Most buckets of a tick are empty: skipping them keeps the adds off a
  // chain through the same few counts.
  shm::for_each_bucket_with_counts(
      counts, [&](std::uint32_t b, std::uint64_t n) { into.counts[bucket_map_[b]] += n; }, first);
  into.sum_s += static_cast<double>(sum_ns) / 1e9;
}

void Metrics::observe(Dependency& d, const Tick& t) {
  const std::lock_guard<std::mutex> lock(mu_);
  d.limit = t.limit;
  d.pinned = t.pinned;
  d.inflight = t.inflight;
  d.waiters = t.waiters;
  d.requests[0] += static_cast<double>(t.success);
  d.requests[1] += static_cast<double>(t.dropped);
  d.requests[2] += static_cast<double>(t.ignored);
  d.requests[3] += static_cast<double>(t.rejected);
  d.requests[4] += static_cast<double>(t.failed);
  d.shadow += static_cast<double>(t.shadow);
  d.queue_full += static_cast<double>(t.queue_full);
  d.deadline += static_cast<double>(t.deadline);
  d.breaker_rejected += static_cast<double>(t.breaker_rejected);
  d.breaker_shadow += static_cast<double>(t.breaker_shadow);
  d.breaker_state = t.breaker_state;
  d.breaker_forced = t.breaker_forced;
  d.baseline_s = t.baseline_ns / 1e9;
  d.measuring = t.measuring;
  d.queue = t.queue;
  if (!t.latency.empty()) add(d.latency, t.latency, t.latency_first, t.latency_sum_ns);
  if (!t.wait.empty()) add(d.wait, t.wait, t.wait_first, t.wait_sum_ns);
}

void Metrics::observe_tick(double seconds) { tick_seconds_.Observe(seconds); }

bool Metrics::trim_after_scrape(std::uint64_t now_ns) {
  constexpr std::uint64_t kAfterNs = 1'000'000'000;
  const std::uint64_t collected = collected_ns_.load(std::memory_order_relaxed);
  if (collected == trimmed_ns_ || now_ns < collected + kAfterNs) return false;
  trimmed_ns_ = collected;
  ::malloc_trim(0);
  return true;
}

void Metrics::count_reload(bool ok) { (ok ? reloads_ok_ : reloads_failed_).Increment(); }

void Metrics::count_reclaimed(const std::string& name, std::uint64_t permits) {
  Dependency& d = dependency(name);
  const std::lock_guard<std::mutex> lock(mu_);
  d.permits_reclaimed += static_cast<double>(permits);
}

void Metrics::set_policy(const std::string& name, const std::string& policy, double min_limit,
                         double max_limit) {
  Dependency& d = dependency(name);
  const std::lock_guard<std::mutex> lock(mu_);
  d.policy = policy;
  d.min_limit = min_limit;
  d.max_limit = max_limit;
}

void Metrics::count_breaker_transition(const std::string& name, const std::string& to) {
  Dependency& d = dependency(name);
  const std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t s = 0; s < 3; ++s) {
    if (to == kStates[s]) d.transitions[s] += 1;
  }
}

void Metrics::count_reclaimed_waiters(const std::string& name, std::uint64_t places) {
  Dependency& d = dependency(name);
  const std::lock_guard<std::mutex> lock(mu_);
  d.waiters_reclaimed += static_cast<double>(places);
}

void Metrics::set_occupancy(std::uint32_t dependencies, std::uint32_t max_dependencies, std::uint32_t processes,
                            std::uint32_t max_processes) {
  slots_used_of_[0]->Set(dependencies);
  slots_of_[0]->Set(max_dependencies);
  slots_used_of_[1]->Set(processes);
  slots_of_[1]->Set(max_processes);
}

Metrics::Partition Metrics::partition(const std::string& dependency, const std::string& partition) {
  const prometheus::Labels labels{{"dependency", dependency}, {"partition", partition}};
  ++partition_lookups_;
  return {&partition_inflight_.Add(labels), &partition_guaranteed_.Add(labels), &partition_rejected_.Add(labels)};
}

void Metrics::observe_partition(const Partition& series, std::uint32_t inflight, std::uint32_t guaranteed,
                                std::uint64_t rejected) {
  series.inflight->Set(inflight);
  series.guaranteed->Set(guaranteed);
  series.rejected->Increment(static_cast<double>(rejected));
}

void Metrics::remove_partition(const std::string& dependency, const std::string& partition) {
  const prometheus::Labels labels{{"dependency", dependency}, {"partition", partition}};
  // Add() finds the series (or makes one no tick observed); Remove() takes it out.
  partition_inflight_.Remove(&partition_inflight_.Add(labels));
  partition_guaranteed_.Remove(&partition_guaranteed_.Add(labels));
  partition_rejected_.Remove(&partition_rejected_.Add(labels));
}

}  // namespace bulkhead::daemon
