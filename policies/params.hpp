// Parameter and bounds checking shared by every policy.
//
// A config hands a factory its policy's tunables as a ParamMap (name to
// number). Each policy declares its parameters once, in a table of ParamSpec
// (key, the Params member it fills, the valid range). read_params() takes
// those keys out of the map with their range checks and refuses any key left
// over; check_params() holds a Params built in code to the same table, so a
// policy constructed directly (tests, the simulator) is checked exactly like
// one built from a config. validate_bounds() is the one place Bounds are
// checked.
//
// Every error is a ParamError whose what() names the key and the reason in
// the words a config uses, e.g. "backoff = 1.2: must be in [0.5, 1)"; the
// caller adds file and line.
//
// Thread-safety: plain functions and a reader object used by one thread.
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "policies/policy.hpp"

namespace bulkhead::policies {

// The values one parameter may take: an interval, optionally integers only.
// Non-finite values (nan, inf) are never valid.
class Range {
 public:
  // [lo, hi]
  static constexpr Range closed(double lo, double hi) { return {lo, false, hi, false}; }
  // [lo, hi)
  static constexpr Range closed_open(double lo, double hi) { return {lo, false, hi, true}; }
  // (lo, hi]
  static constexpr Range open_closed(double lo, double hi) { return {lo, true, hi, false}; }
  // [lo, inf)
  static constexpr Range at_least(double lo) { return {lo, false, kInf, true}; }
  // (lo, inf)
  static constexpr Range above(double lo) { return {lo, true, kInf, true}; }
  // The same interval, integers only.
  constexpr Range integers() const {
    Range r = *this;
    r.integer_ = true;
    return r;
  }

  bool contains(double value) const;
  // The rule as an error gives it after "must be ": "in [0.5, 1)", "> 0",
  // "an integer >= 1".
  std::string describe() const;

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr Range(double lo, bool lo_open, double hi, bool hi_open)
      : lo_(lo), hi_(hi), lo_open_(lo_open), hi_open_(hi_open) {}

  double lo_;
  double hi_;
  bool lo_open_;
  bool hi_open_;
  bool integer_ = false;
};

// A number as errors print it: the shortest text that reads back to the same
// double ("1.2", "5000", "inf", "nan").
std::string format_number(double value);

// Throws ParamError "KEY = VALUE: must be RULE" unless `range` holds `value`.
void check_param(std::string_view key, double value, const Range& range);

// The words a bounds error names them by: the config keys by default,
// since that is where the user has to look; a command line's flags where
// they come from one (is " ": "--min-limit 0: must be >= 1").
struct BoundNames {
  std::string_view min = "min_limit";
  std::string_view max = "max_limit";
  std::string_view initial = "initial_limit";
  std::string_view is = " = ";
};

// Throws ParamError unless 1 <= min <= initial <= max and all are finite,
// naming the bound at fault: "min_limit = 0: must be >= 1",
// "initial_limit = 300: must be in [min_limit, max_limit] = [20, 200]".
void validate_bounds(const Bounds& bounds, const BoundNames& names = {});

// Takes a policy's keys out of a copy of its ParamMap, one at a time, then
// refuses whatever is left over.
class ParamReader {
 public:
  // `policy` is the registry name, used in the left-over error.
  ParamReader(std::string_view policy, const ParamMap& params);

  // The value of `key` if the map has it, else `fallback`; throws ParamError
  // (see check_param) when the given value is outside `range`. The key counts
  // as known either way.
  double take(std::string_view key, double fallback, const Range& range);

  // Throws UnknownParamError "unknown parameter 'foo' for policy 'aimd'
  // (known: backoff, timeout_ms)" for the first key (in name order) no
  // take() asked for. Call once, after the last take().
  void finish() const;

 private:
  std::string policy_;
  ParamMap left_;
  std::vector<std::string> known_;
};

// One row of a policy's parameter table.
template <typename P>
struct ParamSpec {
  std::string_view key;  // the config key, snake_case
  double P::*member;     // the Params field it sets
  Range range;           // its valid values
};

// Builds a P from its in-class defaults and the map; throws ParamError.
template <typename P, std::size_t N>
P read_params(std::string_view policy, const ParamMap& params,
              const std::array<ParamSpec<P>, N>& specs) {
  ParamReader reader(policy, params);
  P p;
  for (const ParamSpec<P>& spec : specs) {
    p.*spec.member = reader.take(spec.key, p.*spec.member, spec.range);
  }
  reader.finish();
  return p;
}

// Throws ParamError for the first field of `p` outside its range.
template <typename P, std::size_t N>
void check_params(const P& p, const std::array<ParamSpec<P>, N>& specs) {
  for (const ParamSpec<P>& spec : specs) check_param(spec.key, p.*spec.member, spec.range);
}

}  // namespace bulkhead::policies
