#include "policies/params.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace bulkhead::policies {

bool Range::contains(double value) const {
  if (!std::isfinite(value)) return false;
  if (lo_open_ ? !(value > lo_) : !(value >= lo_)) return false;
  if (hi_open_ ? !(value < hi_) : !(value <= hi_)) return false;
  return !integer_ || std::trunc(value) == value;
}

std::string Range::describe() const {
  std::string rule = integer_ ? "an integer " : "";
  if (std::isinf(hi_)) {
    rule += lo_open_ ? "> " : ">= ";
    rule += format_number(lo_);
  } else {
    rule += "in ";
    rule += lo_open_ ? "(" : "[";
    rule += format_number(lo_);
    rule += ", ";
    rule += format_number(hi_);
    rule += hi_open_ ? ")" : "]";
  }
  return rule;
}

std::string format_number(double value) {
  // 32 bytes hold any double in its shortest round-trip form.
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  if (ec != std::errc{}) return "?";
  return std::string(buf, end);
}

namespace {

[[noreturn]] void fail(std::string_view key, double value, std::string_view rule,
                       std::string_view is = " = ") {
  std::string message(key);
  message += is;
  message += format_number(value);
  message += ": must be ";
  message += rule;
  throw ParamError(std::string(key), message);
}

}  // namespace

void check_param(std::string_view key, double value, const Range& range) {
  if (range.contains(value)) return;
  if (!std::isfinite(value)) fail(key, value, "finite");
  fail(key, value, range.describe());
}

void validate_bounds(const Bounds& bounds, const BoundNames& names) {
  const auto check = [&](std::string_view key, double value, const std::string& rule) {
    fail(key, value, rule, names.is);
  };
  if (!std::isfinite(bounds.min)) check(names.min, bounds.min, "finite");
  if (!std::isfinite(bounds.max)) check(names.max, bounds.max, "finite");
  if (!std::isfinite(bounds.initial)) check(names.initial, bounds.initial, "finite");
  if (bounds.min < 1) check(names.min, bounds.min, ">= 1");
  if (bounds.max < bounds.min) {
    check(names.max, bounds.max, ">= " + std::string(names.min) + " (" + format_number(bounds.min) + ")");
  }
  if (bounds.initial < bounds.min || bounds.initial > bounds.max) {
    check(names.initial, bounds.initial,
          "in [" + std::string(names.min) + ", " + std::string(names.max) + "] = [" + format_number(bounds.min) +
              ", " + format_number(bounds.max) + "]");
  }
}

ParamReader::ParamReader(std::string_view policy, const ParamMap& params)
    : policy_(policy), left_(params) {}

double ParamReader::take(std::string_view key, double fallback, const Range& range) {
  known_.emplace_back(key);
  const auto it = left_.find(key);
  if (it == left_.end()) return fallback;
  const double value = it->second;
  left_.erase(it);
  check_param(key, value, range);
  return value;
}

void ParamReader::finish() const {
  if (left_.empty()) return;
  std::vector<std::string> known = known_;
  std::sort(known.begin(), known.end());
  std::string list;
  for (const std::string& key : known) {
    if (!list.empty()) list += ", ";
    list += key;
  }
  if (list.empty()) list = "none";
  const std::string& unknown = left_.begin()->first;
  throw UnknownParamError(unknown, "unknown parameter '" + unknown + "' for policy '" + policy_ +
                   "' (known: " + list + ")");
}

}  // namespace bulkhead::policies
