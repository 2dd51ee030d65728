// What callers of tests/client/stats_hammer.cpp counted, by outcome: one
// thread's, one process's (the hammer prints it) or several processes'
// together (tests/client/percpu_test.cpp sums them against the segment's).
#pragma once

#include <cstdint>

namespace bulkhead::testing {

struct StatsTally {
  std::uint64_t ok = 0, sum_ns = 0, dropped = 0, failed = 0, ignored = 0;
  std::uint64_t rejected = 0;  // at the hammered dependency's limit
  std::uint64_t refused = 0;   // at the other's, whose limit is 0

  StatsTally& operator+=(const StatsTally& o) {
    ok += o.ok;
    sum_ns += o.sum_ns;
    dropped += o.dropped;
    failed += o.failed;
    ignored += o.ignored;
    rejected += o.rejected;
    refused += o.refused;
    return *this;
  }
  // Every attempt: released, rejected or refused.
  std::uint64_t attempts() const { return ok + dropped + failed + ignored + rejected + refused; }
};

}  // namespace bulkhead::testing
