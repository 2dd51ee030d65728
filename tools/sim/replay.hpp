// Trace replay: windows from a CSV straight into one policy.
//
// Each line `rtt_ns,inflight,dropped` is one window, the triple Netflix's
// windowed limits hand their algorithm: it becomes a policies::Window with
// ok = 1, every latency field (sum, min, max, p10, p50, p90, p99) = rtt_ns,
// max_inflight = inflight = inflight, dropped = dropped, duration_ns =
// window_ms (the triple says nothing of time; a policy that steps per
// round trip or drains by window time needs it), and goes to the policy
// directly (no Controller: no carry-over, no minimum sample count).
// The answer, clamped to the bounds, is printed one per line, so a policy
// can be checked against a recorded trace or another implementation.
//
// Thread-safety: a call shares nothing with another.
#pragma once

#include <iosfwd>
#include <stdexcept>
#include <string>

#include "policies/policy.hpp"

namespace bulkhead::sim {

struct ReplayOptions {
  std::string policy;
  policies::ParamMap params;
  policies::Bounds bounds{1, 1000, 20};  // --min-limit, --max-limit, --initial-limit
  double window_ms = 100;                // --window-ms: each window's length (the daemon's default tick)
};

// "SOURCE:LINE: reason" for a bad line, "--max-limit 5: must be >=
// --min-limit (10)" for bad bounds; policies::ParamError for a bad policy
// name or parameter.
class ReplayError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads lines until the end of `in`, or until a write to `out` fails (the
// caller checks `out`). Empty lines, lines starting with '#' and a first
// line "rtt_ns,inflight,dropped" are skipped. Returns the number of windows
// replayed.
std::size_t replay(std::istream& in, std::ostream& out, const ReplayOptions& options,
                   const std::string& source = "<stdin>");

}  // namespace bulkhead::sim
