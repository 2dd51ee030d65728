// libFuzzer harness: bulkheadd's reading of a segment that clients wrote.
//
// Every byte a client can write is untrusted. The harness keeps one real
// segment (small capacities, three configured dependencies with traffic
// recorded, two process slots) and, for each input, restores it, applies
// the input as patches to it, then does what the daemon does with a
// segment: validate it, and when it is valid, adopt its slots and run the
// control loop over it for a few ticks. A valid segment with any contents
// must leave the daemon running, every published limit inside its
// configured bounds (or at a pin, at most kMaxLimit), every breaker word a
// state clients know, and no more trial permits than half_open_calls; an
// invalid one must be refused with a reason. Clients (and bulkheadctl) may
// write the breaker's trials and override words and the limit pin, so the
// seed has a breaker (payments) that runs.
//
// The seed also holds a pattern slot, as a strict daemon left it before a
// reload to this loose config. Before the daemon runs, the harness matches
// a name against the patterns as a strict client would (whatever a slot's
// name bytes, the read stays bounded; only a flagged slot matches); after
// it, no slot may still publish a pattern, as this config has none.
//
// Each input then runs a second daemon, on the same config made strict with
// two pattern tables, one that has the seed's slot and one that must claim
// one. Whatever the segment held, that daemon publishes each of its
// patterns in a slot (unless the segment leaves it none: no free slot, or a
// claim of its name that never finished) and flags no other slot; a client
// that cleared the flag between its ticks has it restored; a fuzzed name
// that a pattern matches runs on that pattern's bounds.
//
// Input: a sequence of patches, each
//   region (1 byte) | index (1 byte) | offset (2 bytes, LE) | length (1 byte) | bytes
// where region picks the header, a dependency slot's identity, control,
// admission, partition or waits line, a statistics stripe, a latency or
// wait histogram, a process slot, its held[] array or a dependency's
// wait-queue records,
// and index the slot (modulo the table). Addresses come from the Segment
// API, so the harness follows the layout as it changes.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "daemon/config.hpp"
#include "daemon/control_loop.hpp"
#include "shm/layout.hpp"
#include "shm/partitions.hpp"
#include "shm/segment.hpp"
#include "shm/stats.hpp"

namespace {

using namespace bulkhead;

constexpr char kDaemon[] = R"(
[daemon]
max_dependencies = 8
max_processes = 4
stats_stripes = 2
queue_slots = 8
)";

constexpr char kTables[] = R"(
[defaults]
min_limit = 2
max_limit = 50
initial_limit = 10
max_queue = 4

[dependency.payments]
policy = "aimd"
min_limit = 3
max_limit = 40
max_queue = 0

[dependency.payments.partitions]
critical = 0.6
batch = { share = 0.3, hard_cap = true }

[dependency.payments.breaker]
enabled = true
minimum_calls = 1
sleep_window_ms = 1000
half_open_calls = 2

[dependency.recs]
policy = "balance"

[dependency.search]
policy = "gradient2"
enforce = false
)";

// The strict daemon's, each with a name it matches.
constexpr char kPatterns[] = R"(
[dependency."db-shard-*"]
policy = "aimd"
max_limit = 30

[dependency."cache-?"]
min_limit = 4
max_limit = 20
)";
constexpr std::pair<const char*, const char*> kMatches[] = {{"db-shard-*", "db-shard-12"}, {"cache-?", "cache-1"}};

struct Fixture {
  daemon::Config config;
  daemon::Config strict;
  std::unique_ptr<shm::Segment> segment;
  std::vector<char> image;  // the segment's bytes before any patch

  Fixture()
      : config(daemon::parse_config(std::string(kDaemon) + kTables, "segment_fuzzer.toml")),
        strict(daemon::parse_config(std::string(kDaemon) + "strict = true\n" + kTables + kPatterns,
                                    "segment_fuzzer_strict.toml")) {
    spdlog::set_level(spdlog::level::off);  // the daemon's log lines, by the million
    const std::string name = "bulkhead-fuzz-" + std::to_string(::getpid());
    shm::Segment::remove(name);
    shm::CreateOptions options;
    options.capacities.max_dependencies = config.daemon.max_dependencies;
    options.capacities.max_processes = config.daemon.max_processes;
    options.capacities.stats_stripes = config.daemon.stats_stripes;
    options.capacities.queue_slots = config.daemon.queue_slots;
    segment = std::make_unique<shm::Segment>(shm::Segment::create(name, options));
    shm::Segment::remove(name);  // the mapping lives on; nothing is left in /dev/shm
    // What a live host leaves in it: the daemon's slots, a client's
    // process slot, calls in flight, statistics.
    {
      daemon::ControlLoop loop(*segment, config, nullptr);
      loop.tick(1'000'000'000);
    }
    const std::uint32_t process = shm::claim_process_slot(*segment);
    for (const char* dep : {"payments", "recs", "search"}) {
      const std::uint32_t d = *shm::find_dependency(*segment, dep);
      // One call naming no partition and one of partition 1 (critical,
      // for payments; any other dependency's daemon ignores the field).
      segment->dependency(d).admission.word.fetch_add(shm::kAdmissionAcquire + shm::admission_unit(1));
      segment->held(process, d).store(shm::kAdmissionAcquire + shm::admission_unit(1));
      shm::StatsStripe& s = segment->stripe(d, segment->stripe_of_process(process));
      s.rejected.store(5);
      s.rtt_sum_ns.store(40'000'000);
      segment->latency_histogram(d, segment->stripe_of_process(process)).bucket[40].store(3);
      s.failed.store(4);
    }
    shm::find_or_claim_pattern(*segment, "db-shard-*");
    image.assign(reinterpret_cast<const char*>(&segment->header()),
                 reinterpret_cast<const char*>(&segment->header()) + segment->size());
  }

  // The bytes of region `region`, slot `index`.
  std::pair<char*, std::size_t> region(std::uint8_t region, std::uint8_t index) const {
    const shm::Capacities c = segment->capacities();
    const std::uint32_t d = index % c.max_dependencies;
    const std::uint32_t p = index % c.max_processes;
    switch (region % 12) {
      case 0: return {reinterpret_cast<char*>(&segment->header()), sizeof(shm::Header)};
      case 1: return {reinterpret_cast<char*>(&segment->dependency(d).identity), sizeof(shm::DependencyIdentity)};
      case 2: return {reinterpret_cast<char*>(&segment->dependency(d).control), sizeof(shm::DependencyControl)};
      case 3: return {reinterpret_cast<char*>(&segment->dependency(d).admission), sizeof(shm::DependencyAdmission)};
      case 4: return {reinterpret_cast<char*>(&segment->stripe(d, index / c.max_dependencies % c.stats_stripes)),
                      sizeof(shm::StatsStripe)};
      case 5: return {reinterpret_cast<char*>(&segment->process(p)), sizeof(shm::ProcessIdentity)};
      case 6: return {reinterpret_cast<char*>(&segment->held(p, 0)), c.max_dependencies * sizeof(std::uint64_t)};
      case 7: return {reinterpret_cast<char*>(&segment->dependency(d).partitions), sizeof(shm::DependencyPartitions)};
      case 8: return {reinterpret_cast<char*>(segment->queue(d)), segment->queue_slots() * sizeof(std::uint64_t)};
      case 9: {
        const std::uint32_t stripe = index / c.max_dependencies % c.stats_stripes;
        return {reinterpret_cast<char*>(&segment->latency_histogram(d, stripe)), sizeof(shm::HistogramCounts)};
      }
      case 10: return {reinterpret_cast<char*>(&segment->wait_histogram(d)), sizeof(shm::HistogramCounts)};
      default: return {reinterpret_cast<char*>(&segment->dependency(d).waits), sizeof(shm::DependencyWaits)};
    }
  }
};

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
    // configured partitions, guarantees within the limit.
    if (v.partitions.size() != (d.partitions.empty() ? 0 : 3)) std::abort();
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
    bool claiming = false;  // a claim of the pattern's name that has not finished
    const std::uint64_t hash = shm::dependency_name_hash(pattern);
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint64_t tag = segment.dependency(i).identity.tag.load();
      published |= (segment.dependency(i).control.flags.load() & shm::kDependencyPattern) != 0 &&
                   shm::slot_pattern(segment, i) == pattern;
      free |= (tag & 0xff) == shm::kSlotFree;
      claiming |= (tag & 0xff) == shm::kSlotClaiming && tag >> 8 == hash;
    }
    if (!published && free && !claiming) std::abort();  // a slot it could have claimed
    if (published != shm::matches_pattern(segment, name)) std::abort();
  }
}

Fixture& fixture() {
  static Fixture f;
  return f;
}

// The seed segment with the input's patches.
void patch(const Fixture& f, const std::uint8_t* data, std::size_t size) {
  std::memcpy(&f.segment->header(), f.image.data(), f.image.size());
  for (std::size_t i = 0; i + 5 <= size;) {
    const auto [bytes, length] = f.region(data[i], data[i + 1]);
    const std::size_t offset = (data[i + 2] | std::size_t{data[i + 3]} << 8) % length;
    const std::size_t n = std::min<std::size_t>({data[i + 4], length - offset, size - i - 5});
    std::memcpy(bytes + offset, data + i + 5, n);
    i += 5 + n;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Fixture& f = fixture();
  patch(f, data, size);
  const char* base = reinterpret_cast<const char*>(&f.segment->header());
  int code = 0;
  const std::string refused = shm::validate_segment(base, f.segment->size(), &code);
  if (!refused.empty()) {
    if (code == 0) std::abort();  // a refusal always says which errno
    return 0;
  }
  if (shm::matches_pattern(*f.segment, "db-shard-12") && !publishes_pattern(*f.segment)) std::abort();

  daemon::ControlLoop loop(*f.segment, f.config, nullptr);
  for (std::uint64_t t = 2; t <= 5; ++t) loop.tick(t * 1'000'000'000);
  if (publishes_pattern(*f.segment)) std::abort();
  check_dependencies(*f.segment, f.config, loop);

  // The same segment, under the strict daemon.
  patch(f, data, size);
  daemon::ControlLoop strict(*f.segment, f.strict, nullptr);
  for (std::uint32_t i = 0; i < f.segment->capacities().max_dependencies; ++i) {
    // A client's write: the daemon's flag replaced.
    auto& flags = f.segment->dependency(i).control.flags;
    if (flags.load() == shm::kDependencyPattern) flags.store(shm::kDependencyConfigured);
  }
  for (std::uint64_t t = 2; t <= 5; ++t) strict.tick(t * 1'000'000'000);
  check_patterns(*f.segment);
  check_dependencies(*f.segment, f.strict, strict);
  return 0;
}
