// The segment the libFuzzer harnesses patch, and how an input patches it.
//
// One real segment, made once per harness: small capacities, the slots of
// three configured dependencies after the daemon's first tick, one
// client's process slot holding two calls on each (one naming partition
// 1) with statistics recorded, and the slot of a process that died
// holding a call on each and waiting in recs' queue (its pid is that of a
// child reaped at once: a daemon that ticks gives them back). For each input the harness restores it and
// applies the input as patches. payments has a breaker that runs and
// partitions; recs runs balance, search gradient2 in shadow mode. The
// seed also holds a pattern slot, db-shard-*, as a strict daemon left it
// before a reload to this loose config; `strict` is the same config made
// strict with two pattern tables, one that has that slot and one without;
// `reload` is what the harnesses reload each daemon to between its ticks.
//
// Input: a sequence of patches, each
//   region (1 byte) | index (1 byte) | offset (2 bytes, LE) | length (1 byte) | bytes
// where region picks the header, a dependency slot's identity, control,
// admission, partition or waits line, a statistics stripe, a latency or
// wait histogram, a process slot, its held[] array or a dependency's
// wait-queue records, and index the slot (modulo the table). Addresses
// come from the Segment API, so the harnesses follow the layout as it
// changes.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "daemon/config.hpp"
#include "daemon/control_loop.hpp"
#include "shm/layout.hpp"
#include "shm/partitions.hpp"
#include "shm/segment.hpp"
#include "shm/stats.hpp"
#include "shm/wait_queue.hpp"

namespace bulkhead::fuzz {

inline constexpr char kDaemon[] = R"(
[daemon]
max_dependencies = 8
max_processes = 4
stats_stripes = 2
queue_slots = 8
)";

inline constexpr char kTables[] = R"(
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
inline constexpr char kPatterns[] = R"(
[dependency."db-shard-*"]
policy = "aimd"
max_limit = 30

[dependency."cache-?"]
min_limit = 4
max_limit = 20
)";
// What the daemon is reloaded to between its ticks, and back: every
// dependency's policy, bounds and flags moved, payments' partitions renamed
// and its breaker given more trial calls, recs given partitions.
inline constexpr char kReloadTables[] = R"(
[defaults]
min_limit = 1
max_limit = 70
initial_limit = 12
max_queue = 8
queue_order = "lifo"

[dependency.payments]
policy = "gradient2"
min_limit = 5
max_limit = 60
max_queue = 0
enforce = false

[dependency.payments.partitions]
critical = 0.5
bulk = { share = 0.2, hard_cap = true }

[dependency.payments.breaker]
enabled = true
minimum_calls = 1
sleep_window_ms = 1000
half_open_calls = 5

[dependency.recs]
policy = "aimd"
max_limit = 9
initial_limit = 6
max_queue = 0

[dependency.recs.partitions]
critical = 0.5

[dependency.search]
policy = "balance"
)";

inline constexpr std::pair<const char*, const char*> kMatches[] = {{"db-shard-*", "db-shard-12"},
                                                                  {"cache-?", "cache-1"}};

struct SeedSegment {
  daemon::Config config;
  daemon::Config strict;
  daemon::Config reload;
  std::string name = "bulkhead-fuzz-" + std::to_string(::getpid());
  std::unique_ptr<shm::Segment> segment;
  std::vector<char> image;  // the segment's bytes before any patch

  // keep_name: the segment's name stays in /dev/shm until the harness
  // exits (a client attaches by name); otherwise only the mapping lives.
  explicit SeedSegment(bool keep_name)
      : config(daemon::parse_config(std::string(kDaemon) + kTables, "seed.toml")),
        strict(daemon::parse_config(std::string(kDaemon) + "strict = true\n" + kTables + kPatterns,
                                    "seed_strict.toml")),
        reload(daemon::parse_config(std::string(kDaemon) + kReloadTables, "seed_reload.toml")) {
    spdlog::set_level(spdlog::level::off);  // the daemon's log lines, by the million
    shm::Segment::remove(name);
    shm::CreateOptions options;
    options.capacities.max_dependencies = config.daemon.max_dependencies;
    options.capacities.max_processes = config.daemon.max_processes;
    options.capacities.stats_stripes = config.daemon.stats_stripes;
    options.capacities.queue_slots = config.daemon.queue_slots;
    segment = std::make_unique<shm::Segment>(shm::Segment::create(name, options));
    if (!keep_name) shm::Segment::remove(name);  // the mapping lives on; nothing is left in /dev/shm
    // What a live host leaves in it: the daemon's slots, a client's
    // process slot, calls in flight, statistics.
    {
      daemon::ControlLoop loop(*segment, config, nullptr);
      loop.tick(1'000'000'000);
    }
    const std::uint32_t process = shm::claim_process_slot(*segment).index;
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
    // A process that died holding a call on each and waiting for recs.
    const std::uint32_t gone = shm::claim_process_slot(*segment).index;
    if (const pid_t child = ::fork(); child == 0) {
      ::_exit(0);
    } else {
      ::waitpid(child, nullptr, 0);
      segment->process(gone).identity.pid.store(child);
    }
    for (const char* dep : {"payments", "recs", "search"}) {
      const std::uint32_t d = *shm::find_dependency(*segment, dep);
      segment->dependency(d).admission.word.fetch_add(shm::kAdmissionAcquire);
      segment->held(gone, d).store(shm::kAdmissionAcquire);
    }
    segment->queue(*shm::find_dependency(*segment, "recs"))[1].store(shm::queue_record(7, gone));
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

  // The seed with the input's patches.
  void patch(const std::uint8_t* data, std::size_t size) const {
    std::memcpy(&segment->header(), image.data(), image.size());
    for (std::size_t i = 0; i + 5 <= size;) {
      const auto [bytes, length] = region(data[i], data[i + 1]);
      const std::size_t offset = (data[i + 2] | std::size_t{data[i + 3]} << 8) % length;
      const std::size_t n = std::min<std::size_t>({data[i + 4], length - offset, size - i - 5});
      std::memcpy(bytes + offset, data + i + 5, n);
      i += 5 + n;
    }
  }

  ~SeedSegment() { shm::Segment::remove(name); }
};

// Whether a slot holds a claim of `name` that never finished: a client's
// lookup of the name waits for it, the daemon's claim gives up at once.
inline bool claim_unfinished(const shm::Segment& segment, const char* name) {
  const std::uint64_t hash = shm::dependency_name_hash(name);
  for (std::uint32_t d = 0; d < segment.capacities().max_dependencies; ++d) {
    const std::uint64_t tag = segment.dependency(d).identity.tag.load();
    if ((tag & 0xff) == shm::kSlotClaiming && tag >> 8 == hash) return true;
  }
  return false;
}

}  // namespace bulkhead::fuzz
