#include "control/controller.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "shm/histogram.hpp"

namespace bulkhead::control {

namespace {

void merge_into(shm::WindowExtremes& into, const shm::WindowExtremes& e) {
  into.rtt_min_ns = std::min(into.rtt_min_ns, e.rtt_min_ns);
  into.rtt_max_ns = std::max(into.rtt_max_ns, e.rtt_max_ns);
  into.max_inflight = std::max(into.max_inflight, e.max_inflight);
}

// Whether `b` builds the policy `a` built, `learns` saying whether that
// one's limit is learned (else initial_limit is the limit: fixed).
bool same_policy(const LimitSettings& a, const LimitSettings& b, bool learns) {
  return a.policy == b.policy && a.params == b.params && a.bounds.min == b.bounds.min &&
         a.bounds.max == b.bounds.max && (learns || a.bounds.initial == b.bounds.initial);
}

std::uint64_t to_ns(std::chrono::milliseconds ms) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(ms).count());
}

}  // namespace

void Controller::OpenWindow::add(const shm::DependencyCounters& delta) {
  ok += delta.ok;
  dropped += delta.dropped;
  ignored += delta.ignored;
  rejected += delta.rejected;
  shadow_admitted += delta.shadow_admitted;
  rtt_sum_ns += delta.rtt_sum_ns;
  if (delta.ok == 0) return;
  shm::for_each_bucket_with_counts(
      delta.histogram_used(),
      [this](std::uint32_t b, std::uint64_t n) {
        histogram[b] += n;
        first = std::min(first, b);
        end = std::max(end, b + 1);
      },
      delta.histogram_first);
}

void Controller::OpenWindow::clear() {
  if (first < end) std::fill(histogram.begin() + first, histogram.begin() + end, 0);
  ok = dropped = ignored = rejected = shadow_admitted = rtt_sum_ns = 0;
  first = shm::kHistogramBuckets;
  end = 0;
}

Controller::Controller(const LimitSettings& settings, std::uint32_t current_limit, std::uint64_t now_ns)
    : settings_(settings), limit_(current_limit), window_start_ns_(now_ns) {
  rebuild_policy();
}

bool Controller::reconfigure(const LimitSettings& settings) {
  const bool rebuild = !same_policy(settings_, settings, policy_->learns());
  settings_ = settings;
  if (rebuild) rebuild_policy();
  return rebuild;
}

void Controller::rebuild_policy() {
  const policies::Registry& registry = policies::builtin_registry();
  policies::Bounds bounds = settings_.bounds;
  // Continue from the limit in force, within the new bounds ...
  bounds.initial = std::clamp(limit_ > 0 ? static_cast<double>(limit_) : bounds.initial, bounds.min,
                              bounds.max);
  policy_ = registry.create(settings_.policy, bounds, settings_.params);
  // ... unless the policy does not learn one: then the config's is the limit.
  if (!policy_->learns() && bounds.initial != settings_.bounds.initial) {
    policy_ = registry.create(settings_.policy, settings_.bounds, settings_.params);
  }
  set_limit(policy_->limit());
}

void Controller::set_limit(double limit) {
  const policies::Bounds& b = settings_.bounds;
  const double clamped = std::clamp(std::isfinite(limit) ? limit : b.min, b.min, b.max);
  limit_ = static_cast<std::uint32_t>(std::max(1.0, std::floor(clamped)));
}

void Controller::pin(std::uint32_t limit) { pinned_ = std::max<std::uint32_t>(limit, 1); }

void Controller::unpin(std::uint64_t now_ns) {
  if (pinned_ == 0) return;
  limit_ = pinned_;
  pinned_ = 0;
  rebuild_policy();
  discard_window(now_ns);
}

void Controller::discard_window(std::uint64_t now_ns) {
  open_.clear();
  extremes_ = {};
  window_start_ns_ = now_ns;
}

bool Controller::observe(const TickObservation& o, std::uint64_t now_ns) {
  if (pinned_ != 0) {
    discard_window(now_ns);
    return false;
  }
  open_.add(o.delta);
  merge_into(extremes_, o.extremes);
  const std::uint64_t samples = open_.ok + open_.dropped;
  // A time before the window's start (a clock that went back) ages it from
  // there: unsigned, now - start would be an age of centuries.
  window_start_ns_ = std::min(window_start_ns_, now_ns);
  const std::uint64_t age_ns = now_ns - window_start_ns_;
  const std::uint64_t max_age_ns = to_ns(settings_.window_max_age);
  if (samples >= settings_.window_min_samples || (age_ns >= max_age_ns && samples > 0)) {
    close_window(o.inflight, now_ns);
    return true;
  }
  if (age_ns >= max_age_ns) discard_window(now_ns);
  return false;
}

void Controller::close_window(std::uint32_t inflight, std::uint64_t now_ns) {
  policies::Window w;
  w.ok = open_.ok;
  w.dropped = open_.dropped;
  w.ignored = open_.ignored;
  // In shadow mode a call over the limit is admitted, not rejected; to the
  // policy it is a rejection all the same (the limit was reached).
  w.rejected = open_.rejected + open_.shadow_admitted;
  w.rtt_sum_ns = open_.rtt_sum_ns;
  if (w.ok > 0) {
    w.rtt_min_ns = extremes_.rtt_min_ns == UINT64_MAX ? 0 : extremes_.rtt_min_ns;
    w.rtt_max_ns = extremes_.rtt_max_ns;
    constexpr double kQuantiles[] = {0.10, 0.50, 0.90, 0.99};
    std::uint64_t at[std::size(kQuantiles)];
    const std::uint32_t first = std::min(open_.first, open_.end);  // an empty range when no bucket holds one
    shm::histogram_quantiles_ns(std::span<const std::uint64_t>(open_.histogram).subspan(first, open_.end - first),
                                kQuantiles, at, first);
    w.rtt_p10_ns = at[0];
    w.rtt_p50_ns = at[1];
    w.rtt_p90_ns = at[2];
    w.rtt_p99_ns = at[3];
  }
  w.limit = limit_;
  // Clients write the peak; trust it no further than the limit allows.
  w.max_inflight = std::min(extremes_.max_inflight, std::max<std::uint32_t>(limit_, 1));
  w.inflight = inflight;
  w.duration_ns = now_ns - window_start_ns_;

  set_limit(policy_->update(w));
  last_window_ = w;
  ++windows_;
  discard_window(now_ns);
}

}  // namespace bulkhead::control
