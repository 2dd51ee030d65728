// libFuzzer harness: bulkheadd's reading of a segment that clients wrote.
//
// Every byte a client can write is untrusted. For each input the harness
// restores the seed segment and applies the input's patches to it
// (tests/fuzz/seed_segment.hpp: what it holds, and the input's format),
// then does what the daemon does with a segment: validate it, and when it
// is valid, adopt its slots and run the control loop over it for a few
// ticks. A valid segment with any contents must leave the daemon running,
// every published limit inside its configured bounds (or at a pin, at
// most kMaxLimit), every breaker word a state clients know, and no more
// trial permits than half_open_calls; an invalid one must be refused with
// a reason. The seed holds the slot of a process that died holding
// permits and waiting, so that each daemon's first tick gives back what it
// held, whatever the input wrote over it. Clients (and bulkheadctl) may write the breaker's trials and
// override words and the limit pin, so the seed has a breaker (payments)
// that runs.
//
// Before the daemon runs, the harness matches a name against the patterns
// as a strict client would (whatever a slot's name bytes, the read stays
// bounded; only a flagged slot matches); after it, no slot may still
// publish a pattern, as the seed's config has none.
//
// Each input then runs a second daemon, on the same config made strict with
// two pattern tables, one that has the seed's slot and one that must claim
// one. Whatever the segment held, that daemon publishes each of its
// patterns in a slot (unless the segment leaves it none: no free slot, or a
// claim of its name that never finished) and flags no other slot; a client
// that cleared the flag between its ticks has it restored; a fuzzed name
// that a pattern matches runs on that pattern's bounds.
//
// Each daemon is reloaded between its ticks, to another config and back
// (the loose one to tables with other policies, bounds, partitions and
// trial calls; the strict one to the loose config, which withdraws its
// patterns): what each config leaves is checked against that config.
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "daemon/config.hpp"
#include "daemon/control_loop.hpp"
#include "shm/layout.hpp"
#include "shm/partitions.hpp"
#include "shm/segment.hpp"
#include "tests/fuzz/seed_segment.hpp"

namespace {

using namespace bulkhead;
using fuzz::claim_unfinished;
using fuzz::kMatches;
using fuzz::SeedSegment;

bool publishes_pattern(const shm::Segment& segment) {
  for (std::uint32_t i = 0; i < segment.capacities().max_dependencies; ++i) {
    if ((segment.dependency(i).control.flags.load() & shm::kDependencyPattern) != 0) return true;
  }
  return false;
}

// What a daemon on `config` leaves, whatever the segment held: every
// limit, breaker and partition line it publishes within what it may.
void check_dependencies(const shm::Segment& segment, const daemon::Config& config, const daemon::ControlLoop& loop) {
  for (const auto& v : loop.view()) {
    const daemon::DependencyConfig d = config.effective(v.name);
    // An operator's pin may hold it anywhere up to kMaxLimit; nothing else
    // takes it outside the configured bounds.
    if (v.pinned != 0 ? v.limit != v.pinned || v.limit > shm::kMaxLimit
                      : v.limit < d.bounds.min || v.limit > d.bounds.max) {
      std::abort();
    }
    const shm::DependencyControl& control = segment.dependency(v.index).control;
    const std::uint32_t breaker = control.breaker.load() & ~shm::kBreakerForced;
    if (breaker > shm::kBreakerHalfOpen) std::abort();
    if (breaker == shm::kBreakerHalfOpen && shm::trials_left(control.trials.load()) > d.breaker.half_open_calls) {
      std::abort();
    }
    // Whatever the partition line held, the daemon republished it: the
    // configured partitions and "default", guarantees within the limit.
    const auto named = std::ranges::count_if(d.partitions, [](const auto& p) { return p.name != "default"; });
    if (v.partitions.size() != (d.partitions.empty() ? 0 : 1 + static_cast<std::size_t>(named))) std::abort();
    std::uint64_t guaranteed = 0;
    for (const auto& p : v.partitions) guaranteed += p.guaranteed;
    if (guaranteed > v.limit) std::abort();
    const shm::DependencyPartitions& line = segment.dependency(v.index).partitions;
    if (line.admit_limit.load() > v.limit) std::abort();
  }
}

// What the strict daemon publishes for its clients: its patterns, each
// flagged as it stores the flag, and nothing else.
void check_patterns(const shm::Segment& segment) {
  if ((segment.header().flags.load() & shm::kHeaderStrict) == 0) std::abort();
  const std::uint32_t n = segment.capacities().max_dependencies;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t flags = segment.dependency(i).control.flags.load();
    if ((flags & shm::kDependencyPattern) == 0) continue;
    const auto pattern = shm::slot_pattern(segment, i);
    if (flags != shm::kDependencyPattern || !pattern ||
        std::ranges::none_of(kMatches, [&](const auto& m) { return *pattern == m.first; })) {
      std::abort();
    }
  }
  for (const auto& [pattern, name] : kMatches) {
    bool published = false;
    bool free = false;
    for (std::uint32_t i = 0; i < n; ++i) {
      published |= (segment.dependency(i).control.flags.load() & shm::kDependencyPattern) != 0 &&
                   shm::slot_pattern(segment, i) == pattern;
      free |= (segment.dependency(i).identity.tag.load() & 0xff) == shm::kSlotFree;
    }
    // Unpublished only when it could claim no slot.
    if (!published && free && !claim_unfinished(segment, pattern)) std::abort();
    if (published != shm::matches_pattern(segment, name)) std::abort();
  }
}

SeedSegment& seed() {
  static SeedSegment f(false);
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  SeedSegment& f = seed();
  f.patch(data, size);
  const char* base = reinterpret_cast<const char*>(&f.segment->header());
  int code = 0;
  const std::string refused = shm::validate_segment(base, f.segment->size(), &code);
  if (!refused.empty()) {
    if (code == 0) std::abort();  // a refusal always says which errno
    return 0;
  }
  if (shm::matches_pattern(*f.segment, "db-shard-12") && !publishes_pattern(*f.segment)) std::abort();

  daemon::ControlLoop loop(*f.segment, f.config, nullptr);
  for (std::uint64_t t = 2; t <= 3; ++t) loop.tick(t * 1'000'000'000);
  loop.apply(f.reload);
  loop.tick(4'000'000'000);
  check_dependencies(*f.segment, f.reload, loop);
  loop.apply(f.config);
  loop.tick(5'000'000'000);
  if (publishes_pattern(*f.segment)) std::abort();
  check_dependencies(*f.segment, f.config, loop);

  // The same segment, under the strict daemon.
  f.patch(data, size);
  daemon::ControlLoop strict(*f.segment, f.strict, nullptr);
  for (std::uint32_t i = 0; i < f.segment->capacities().max_dependencies; ++i) {
    // A client's write: the daemon's flag replaced.
    auto& flags = f.segment->dependency(i).control.flags;
    if (flags.load() == shm::kDependencyPattern) flags.store(shm::kDependencyConfigured);
  }
  for (std::uint64_t t = 2; t <= 3; ++t) strict.tick(t * 1'000'000'000);
  strict.apply(f.config);
  strict.tick(4'000'000'000);
  if (publishes_pattern(*f.segment)) std::abort();
  check_dependencies(*f.segment, f.config, strict);
  strict.apply(f.strict);
  strict.tick(5'000'000'000);
  check_patterns(*f.segment);
  check_dependencies(*f.segment, f.strict, strict);
  return 0;
}
