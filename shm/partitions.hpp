// Partitions of a dependency's limit: the admission rule, and how the
// daemon publishes names, shares and caps in the partition line
// (layout.hpp, DependencyPartitions). Shared by the client (which admits),
// the daemon (which publishes) and the tools (which show).
//
// Rule. Partitions p = 0 ("default": calls that name none), 1 and 2 share
// the limit L. Each has a guaranteed count g_p (the daemon publishes
// floor(share_p x L), so the g_p never sum above L) and an in-flight count
// c_p; T = c_0 + c_1 + c_2 is the dependency's in-flight count. The unused
// guarantees U = sum over p of max(0, g_p - c_p) are capacity held back
// for partitions that have not used their share. A call of partition p is
// admitted when
//     T < L  and  ( c_p < g_p                          within its guarantee
//                   or (p not capped and T + U < L) )  borrowing idle capacity
// so a borrower takes only capacity that no other partition's unused
// guarantee reserves, and a hard-capped partition never goes past g_p.
// While the limit holds still and every call follows the rule,
// sum over p of max(c_p, g_p) <= L stays true, and then a partition under
// its guarantee always finds T < L: it gets its share whenever it asks.
// When the limit falls below what is in flight, nobody is admitted until T
// is under the new L (guarantees included): T < L is never waived.
//
// The check and the increment are one compare-and-swap of the admission
// word, which holds T and c_1, c_2 (layout.hpp), so no admission can slip
// between another's check and its increment.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "shm/layout.hpp"

namespace bulkhead::shm {

enum class PartitionVerdict {
  kAdmit,
  kAtLimit,    // T >= L: the dependency is at its limit
  kReserved,   // under L, but what is left is other partitions' unused guarantee
  kCapped,     // a hard-capped partition at its guarantee
  kFieldFull,  // its 16-bit count is full (only reachable in shadow mode)
};

// Whether a call of partition `p` may be admitted with the admission word
// at `word`, under `rule` (partition_rule()) and the cap bits `caps`.
constexpr PartitionVerdict partition_verdict(std::uint64_t word, std::uint64_t rule,
                                             std::uint32_t caps, std::uint32_t p) {
  const std::uint32_t total = admission_inflight(word);
  const std::uint32_t limit = rule_limit(rule);
  const std::uint32_t mine = partition_inflight(word, p);
  if (p != 0 && mine >= kPartitionFieldMax) return PartitionVerdict::kFieldFull;
  if (total >= limit) return PartitionVerdict::kAtLimit;
  if (mine < rule_guarantee(rule, p)) return PartitionVerdict::kAdmit;
  if ((caps >> p) & 1u) return PartitionVerdict::kCapped;
  std::uint64_t unused = 0;
  for (std::uint32_t q = 0; q < kMaxPartitions; ++q) {
    const std::uint32_t g = rule_guarantee(rule, q);
    const std::uint32_t c = partition_inflight(word, q);
    if (c < g) unused += g - c;
  }
  return std::uint64_t{total} + unused < limit ? PartitionVerdict::kAdmit : PartitionVerdict::kReserved;
}

// Guarantees for limit L from shares in millionths (the daemon's config):
// floor(share x L), so that they never sum above L when the shares sum to
// at most 1'000'000 (each term rounds down, so their sum is at most the
// floor of the sum).
inline constexpr std::uint32_t kShareOne = 1'000'000;
constexpr std::uint32_t guaranteed_count(std::uint32_t share_ppm, std::uint32_t limit) {
  return static_cast<std::uint32_t>(std::uint64_t{share_ppm} * limit / kShareOne);
}

// The fast path's limit for calls that name no partition, which checks T
// alone: with T < L - g_1 - g_2 the rule admits a call of partition 0
// whatever the other counts (if c_0 < g_0 it is within its guarantee;
// else U <= g_1 + g_2, so T + U < L). A capped partition 0 needs c_0,
// which only the rule reads: 0, every such call takes the rule.
constexpr std::uint32_t unnamed_admit_limit(std::uint64_t rule, std::uint32_t caps) {
  if (caps & 1u) return 0;
  const std::uint32_t reserved = rule_guarantee(rule, 1) + rule_guarantee(rule, 2);
  const std::uint32_t limit = rule_limit(rule);
  return limit > reserved ? limit - reserved : 0;
}

// The name of partition 0, which every partitioned dependency has.
inline constexpr std::string_view kDefaultPartition = "default";

// nullptr when `name` may name a partition, else why not.
constexpr const char* check_partition_name(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > kMaxPartitionNameLength) return "is longer than 15 bytes";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return "has a character other than A-Z a-z 0-9 . _ -";
  }
  return nullptr;
}

// A partition name as the two words of DependencyPartitions::names, NUL-padded.
struct PackedName {
  std::uint64_t words[2] = {0, 0};
  friend bool operator==(const PackedName&, const PackedName&) = default;
};
inline PackedName pack_partition_name(std::string_view name) {
  char bytes[16] = {};
  std::memcpy(bytes, name.data(), name.size() < 15 ? name.size() : 15);
  PackedName out;
  std::memcpy(out.words, bytes, sizeof bytes);
  return out;
}
inline std::string_view unpack_partition_name(const PackedName& packed, char (&buffer)[16]) {
  std::memcpy(buffer, packed.words, sizeof buffer);
  buffer[15] = '\0';
  return std::string_view(buffer, ::strnlen(buffer, 15));
}
// Relaxed loads: readers check the shape's version before and after (see
// resolve in client.cpp), and a name is only ever compared, never trusted.
inline PackedName load_partition_name(const DependencyPartitions& line, std::uint32_t p) {
  PackedName out;
  out.words[0] = line.names[p - 1][0].load(std::memory_order_relaxed);
  out.words[1] = line.names[p - 1][1].load(std::memory_order_relaxed);
  return out;
}
// Relaxed stores: the daemon publishes them with a new shape version
// (release), which readers load with acquire.
inline void store_partition_name(DependencyPartitions& line, std::uint32_t p, const PackedName& name) {
  line.names[p - 1][0].store(name.words[0], std::memory_order_relaxed);
  line.names[p - 1][1].store(name.words[1], std::memory_order_relaxed);
}

}  // namespace bulkhead::shm
