// libbulkhead: the C ABI, and the admission hot path behind it.
//
// Hot path (bh_try_acquire + bh_release), per call:
//   acquire  one load of the limit (daemon's line), a compare-and-swap loop
//            on the admission word (the contended line), one add to this
//            process's held count (its own line), one load of the stripe's
//            peak in-flight, one clock read;
//   release  one clock read, two or three adds to this process's stripe,
//            one add to the held count, one add to the admission word.
// A rejection reads the admission word and counts itself on the stripe; it
// never writes the admission line.
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "bulkhead/bulkhead.h"
#include "shm/segment.hpp"

namespace shm = bulkhead::shm;

namespace {

// The slot a standalone client keeps in its own memory, shaped like the
// segment's so that the hot path is the same code.
struct LocalSlot {
  shm::DependencyControl control{};
  shm::DependencyAdmission admission{};
  std::atomic<std::uint32_t> held{0};
  shm::StatsStripe stripe{};
};

thread_local std::string t_last_error;

int fail(int code, std::string why) {
  t_last_error = std::move(why);
  return -code;
}

std::uint64_t monotonic_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

// Raises an atomic to `value` if it is below; one load when it is not.
template <typename T>
void raise_to(std::atomic<T>& a, T value) {
  T seen = a.load(std::memory_order_relaxed);
  while (value > seen && !a.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

template <typename T>
void lower_to(std::atomic<T>& a, T value) {
  T seen = a.load(std::memory_order_relaxed);
  while (value < seen && !a.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

struct bh_dep {
  std::atomic<std::uint64_t>* admission;
  const std::atomic<std::uint32_t>* limit;
  const std::atomic<std::uint32_t>* flags;  // the daemon's kDependency* flags
  std::atomic<std::uint32_t>* held;
  shm::StatsStripe* stats;
  std::uint32_t index;  // slot in the segment; unused standalone
  std::unique_ptr<LocalSlot> local;
};

struct bh_client {
  std::optional<shm::Segment> segment;
  std::uint32_t process_index = 0;
  std::uint32_t static_limit = UINT32_MAX;
  std::string status;
  std::mutex mutex;  // guards deps: cold path only
  std::map<std::string, std::unique_ptr<bh_dep>, std::less<>> deps;
};

namespace {

// A forked child inherits its parent's process slot; permits it takes must
// be counted against a slot of its own, or the daemon would give them back
// when the parent dies (and miss them when the child does). Every open
// client is re-registered in the child.
std::mutex g_clients_mutex;
std::vector<bh_client*> g_clients;

void rebind_after_fork() {
  // The child has one thread; the parent held g_clients_mutex across fork
  // (see the prepare handler), so it is safe to take.
  for (bh_client* c : g_clients) {
    if (!c->segment) continue;
    try {
      c->process_index = shm::claim_process_slot(*c->segment);
    } catch (const shm::SegmentError& e) {
      // No slot for the child: its permits go on counting in the parent's
      // slot. Rare (table full) and bounded; say so in the status.
      c->status += std::string(" (after fork: ") + e.what() + ")";
      continue;
    }
    const std::uint32_t stripe = c->segment->stripe_of_process(c->process_index);
    for (auto& [name, dep] : c->deps) {
      dep->held = &c->segment->held(c->process_index, dep->index);
      dep->stats = &c->segment->stripe(dep->index, stripe);
    }
  }
  g_clients_mutex.unlock();
}

void install_fork_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork([] { g_clients_mutex.lock(); }, [] { g_clients_mutex.unlock(); },
                     rebind_after_fork);
  });
}

std::uint32_t env_static_limit() {
  const char* text = std::getenv("BULKHEAD_STATIC_LIMIT");
  if (text == nullptr || *text == '\0') return UINT32_MAX;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value <= 0) return UINT32_MAX;
  return value >= static_cast<long>(UINT32_MAX) ? UINT32_MAX : static_cast<std::uint32_t>(value);
}

void record(bh_dep* d, int outcome, std::uint64_t latency_ns) {
  shm::StatsStripe& s = *d->stats;
  // Relaxed: statistics are counters read on their own by the daemon; they
  // publish no other memory.
  switch (outcome) {
    case BH_SUCCESS:
      s.histogram[shm::histogram_bucket(latency_ns)].fetch_add(1, std::memory_order_relaxed);
      s.rtt_sum_ns.fetch_add(latency_ns, std::memory_order_relaxed);
      lower_to(s.rtt_min_ns, latency_ns);
      raise_to(s.rtt_max_ns, latency_ns);
      break;
    case BH_DROPPED:
      s.dropped.fetch_add(1, std::memory_order_relaxed);
      break;
    default:  // BH_IGNORE, and any value the caller made up
      s.ignored.fetch_add(1, std::memory_order_relaxed);
      break;
  }
}

void give_back(bh_dep* d) {
  // Held count first, then the shared word: a process that dies between the
  // two leaves the shared count larger than the sum of held counts, which
  // the daemon's reclaim can only under-correct, never over-correct.
  // Release pairs with the daemon's acquire loads in its reclaim scan.
  d->held->fetch_sub(1, std::memory_order_release);
  d->admission->fetch_add(shm::kAdmissionRelease, std::memory_order_release);
}

}  // namespace

extern "C" {

int bh_client_open(const char* segment, bh_client** out) {
  bh_options options{};
  options.segment = segment;
  return bh_client_open_opts(&options, out);
}

int bh_client_open_opts(const bh_options* options, bh_client** out) {
  if (out == nullptr) return fail(EINVAL, "bh_client_open: out is NULL");
  *out = nullptr;
  const bh_options defaults{};
  if (options == nullptr) options = &defaults;
  std::string name;
  if (options->segment != nullptr) {
    name = options->segment;
  } else if (const char* env = std::getenv("BULKHEAD_SEGMENT"); env != nullptr && *env != '\0') {
    name = env;
  } else {
    name = "bulkhead";
  }

  auto client = std::unique_ptr<bh_client>(new (std::nothrow) bh_client());
  if (!client) return fail(ENOMEM, "bh_client_open: out of memory");
  client->static_limit = options->static_limit > 0
                             ? static_cast<std::uint32_t>(std::min<long>(options->static_limit, UINT32_MAX))
                             : env_static_limit();
  try {
    client->segment = shm::Segment::attach(name, shm::Access::kReadWrite);
    client->process_index = shm::claim_process_slot(*client->segment);
    client->status = "shared: attached to /dev/shm/" + name + " (daemon pid " +
                     std::to_string(client->segment->header().daemon_pid.load(std::memory_order_relaxed)) + ")";
  } catch (const shm::SegmentError& e) {
    if (e.code() != ENOENT || (options->flags & BH_OPEN_REQUIRE_SEGMENT) != 0) {
      return fail(e.code(), e.what());
    }
    client->segment.reset();
    client->status = "standalone: no segment /dev/shm/" + name + ", static limit " +
                     (client->static_limit == UINT32_MAX ? std::string("none")
                                                         : std::to_string(client->static_limit));
  } catch (const std::exception& e) {
    return fail(EIO, e.what());
  }
  install_fork_handlers();
  {
    std::lock_guard lock(g_clients_mutex);
    g_clients.push_back(client.get());
  }
  *out = client.release();
  return 0;
}

void bh_client_close(bh_client* c) {
  if (c == nullptr) return;
  {
    std::lock_guard lock(g_clients_mutex);
    std::erase(g_clients, c);
  }
  if (c->segment) {
    bool holds = false;
    for (auto& [name, dep] : c->deps) holds |= dep->held->load(std::memory_order_relaxed) != 0;
    // A slot that still holds permits stays taken: the daemon gives them
    // back when this process exits, as for a crash.
    if (!holds) shm::release_process_slot(*c->segment, c->process_index);
  }
  delete c;
}

int bh_client_mode(const bh_client* c) {
  if (c == nullptr) return fail(EINVAL, "bh_client_mode: client is NULL");
  return c->segment ? BH_MODE_SHARED : BH_MODE_STANDALONE;
}

const char* bh_client_status(const bh_client* c) {
  return c == nullptr ? "no client" : c->status.c_str();
}

int bh_dependency(bh_client* c, const char* name, bh_dep** out) {
  if (c == nullptr || name == nullptr || out == nullptr) {
    return fail(EINVAL, "bh_dependency: NULL argument");
  }
  *out = nullptr;
  if (const char* why = shm::check_dependency_name(name)) {
    return fail(EINVAL, std::string("dependency name '") + name + "' " + why);
  }
  std::lock_guard lock(c->mutex);
  if (auto it = c->deps.find(std::string_view(name)); it != c->deps.end()) {
    *out = it->second.get();
    return 0;
  }
  auto dep = std::make_unique<bh_dep>();
  try {
    if (c->segment) {
      shm::Segment& s = *c->segment;
      const shm::Header& h = s.header();
      std::uint32_t index;
      if ((h.flags.load(std::memory_order_relaxed) & shm::kHeaderStrict) != 0) {
        const auto found = shm::find_dependency(s, name);
        if (!found) {
          return fail(ENOENT, std::string("dependency '") + name +
                                  "' is not in bulkheadd's config, and the daemon is strict");
        }
        index = *found;
      } else {
        index = shm::find_or_claim_dependency(s, name, h.default_limit.load(std::memory_order_relaxed), 0)
                    .index;
      }
      shm::DependencySlot& slot = s.dependency(index);
      dep->index = index;
      dep->admission = &slot.admission.word;
      dep->limit = &slot.control.limit;
      dep->flags = &slot.control.flags;
      dep->held = &s.held(c->process_index, index);
      dep->stats = &s.stripe(index, s.stripe_of_process(c->process_index));
    } else {
      dep->local = std::make_unique<LocalSlot>();
      dep->local->control.limit.store(c->static_limit, std::memory_order_relaxed);
      dep->local->stripe.rtt_min_ns.store(UINT64_MAX, std::memory_order_relaxed);
      dep->index = 0;
      dep->admission = &dep->local->admission.word;
      dep->limit = &dep->local->control.limit;
      dep->flags = &dep->local->control.flags;
      dep->held = &dep->local->held;
      dep->stats = &dep->local->stripe;
    }
  } catch (const shm::SegmentError& e) {
    return fail(e.code(), e.what());
  } catch (const std::exception& e) {
    return fail(ENOMEM, e.what());
  }
  *out = dep.get();
  c->deps.emplace(name, std::move(dep));
  return 0;
}

int bh_try_acquire(bh_dep* d, bh_permit* out) {
  if (d == nullptr || out == nullptr) return fail(EINVAL, "bh_try_acquire: NULL argument");
  // Relaxed: the limit is a lone value; a stale one for an instant after
  // the daemon changes it is harmless (the next call sees the new one).
  const std::uint32_t limit = d->limit->load(std::memory_order_relaxed);
  // Relaxed: the admission word protects no other memory; its atomicity
  // alone keeps in-flight under the limit.
  std::uint64_t word = d->admission->load(std::memory_order_relaxed);
  bool over = false;
  do {
    over = shm::admission_inflight(word) >= limit;
    // Shadow mode admits past the limit: read only on the way to a
    // rejection, so the admitted path pays nothing for it. Relaxed: a
    // lone flag, like the limit.
    if (over && (d->flags->load(std::memory_order_relaxed) & shm::kDependencyShadow) == 0) {
      d->stats->rejected.fetch_add(1, std::memory_order_relaxed);
      out->dep_ = nullptr;
      return BH_REJECT_LIMIT;
    }
  } while (!d->admission->compare_exchange_weak(word, word + shm::kAdmissionAcquire,
                                                std::memory_order_relaxed));
  if (over) d->stats->shadow_admitted.fetch_add(1, std::memory_order_relaxed);
  // Shared word first, then held (see give_back()). Release pairs with the
  // daemon's acquire load of held: if it sees this add it sees the CAS.
  d->held->fetch_add(1, std::memory_order_release);
  raise_to(d->stats->max_inflight, shm::admission_inflight(word) + 1);
  out->dep_ = d;
  out->start_ns_ = monotonic_ns();
  return 0;
}

void bh_release(bh_permit* p, int outcome) {
  if (p == nullptr || p->dep_ == nullptr) return;
  const std::uint64_t now = outcome == BH_SUCCESS ? monotonic_ns() : 0;
  bh_release_latency(p, outcome, now - p->start_ns_);
}

void bh_release_latency(bh_permit* p, int outcome, std::uint64_t latency_ns) {
  if (p == nullptr || p->dep_ == nullptr) return;
  bh_dep* d = p->dep_;
  p->dep_ = nullptr;
  record(d, outcome, latency_ns);
  give_back(d);
}

long bh_limit(const bh_dep* d) {
  if (d == nullptr) return fail(EINVAL, "bh_limit: NULL dependency");
  return static_cast<long>(d->limit->load(std::memory_order_relaxed));
}

long bh_inflight(const bh_dep* d) {
  if (d == nullptr) return fail(EINVAL, "bh_inflight: NULL dependency");
  return static_cast<long>(shm::admission_inflight(d->admission->load(std::memory_order_relaxed)));
}

const char* bh_last_error(void) { return t_last_error.c_str(); }

}  // extern "C"
