#include "tools/sim/replay.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <istream>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

#include "policies/params.hpp"
#include "policies/window.hpp"
#include "shm/layout.hpp"

namespace bulkhead::sim {
namespace {

// Reads field `name` of a line into `out`; throws naming the field and why.
template <typename T>
void parse_field(std::string_view field, const char* name, T& out, const std::string& where) {
  while (!field.empty() && (field.front() == ' ' || field.front() == '\t')) field.remove_prefix(1);
  while (!field.empty() && (field.back() == ' ' || field.back() == '\t')) field.remove_suffix(1);
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), out);
  if (ec == std::errc{} && end == field.data() + field.size() && !field.empty()) return;
  const std::string why = ec == std::errc::result_out_of_range
                              ? "more than " + std::to_string(std::numeric_limits<T>::max())
                              : "not an unsigned integer";
  throw ReplayError(where + name + " \"" + std::string(field.substr(0, 40)) + "\": " + why);
}

// The bounds checked in the words of the command line, where replay's come
// from: "--max-limit 5: must be >= --min-limit (10)". A limit is at most
// bulkheadd's max_limit ceiling, which also keeps it within the window's
// 32-bit limit field.
void check_bounds(const policies::Bounds& bounds) {
  try {
    policies::validate_bounds(bounds, {"--min-limit", "--max-limit", "--initial-limit", " "});
  } catch (const policies::ParamError& e) {
    throw ReplayError(e.what());
  }
  if (bounds.max > shm::kMaxLimit) {
    throw ReplayError("--max-limit " + policies::format_number(bounds.max) + ": must be <= " +
                      std::to_string(shm::kMaxLimit) + ", as bulkheadd's max_limit");
  }
}

// The most drops one window may report (2^32 - 1: far more than a window
// holds).
constexpr std::uint64_t kMaxDropped = 0xffffffffu;

// The longest window --window-ms may give, in ms.
constexpr double kMaxWindowMs = 3'600'000;

}  // namespace

std::size_t replay(std::istream& in, std::ostream& out, const ReplayOptions& options,
                   const std::string& source) {
  check_bounds(options.bounds);
  const std::unique_ptr<policies::Policy> policy =
      policies::builtin_registry().create(options.policy, options.bounds, options.params);
  const policies::Bounds& b = options.bounds;
  // At most an hour: the daemon's windows close within window_max_ms
  // (10 min at most) of a tick (1 min at most), and nanoseconds past 2^63
  // would not round to an integer window length at all.
  if (!(options.window_ms > 0) || !(options.window_ms <= kMaxWindowMs)) {
    throw ReplayError("--window-ms " + policies::format_number(options.window_ms) +
                      ": must be a positive number of ms, at most " + policies::format_number(kMaxWindowMs) +
                      " (an hour)");
  }
  const auto duration_ns = static_cast<std::uint64_t>(std::llround(options.window_ms * 1e6));
  double limit = std::clamp(policy->limit(), b.min, b.max);
  std::string line;
  std::size_t number = 0, windows = 0;
  while (std::getline(in, line)) {
    ++number;
    std::string_view text = line;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    // A byte order mark, as spreadsheets save CSV as UTF-8: not part of the
    // header it comes before.
    if (number == 1 && text.starts_with("\xef\xbb\xbf")) text.remove_prefix(3);
    if (text.find_first_not_of(" \t") == std::string_view::npos || text.front() == '#') continue;
    if (number == 1 && text == "rtt_ns,inflight,dropped") continue;

    const std::size_t c1 = text.find(',');
    const std::size_t c2 = c1 == std::string_view::npos ? c1 : text.find(',', c1 + 1);
    std::uint64_t rtt_ns = 0, dropped = 0;
    std::uint32_t inflight = 0;
    const std::string where = source + ":" + std::to_string(number) + ": ";
    if (c2 == std::string_view::npos || text.find(',', c2 + 1) != std::string_view::npos) {
      throw ReplayError(where + "expected rtt_ns,inflight,dropped (three unsigned integers), got \"" +
                        std::string(text.substr(0, 80)) + "\"");
    }
    parse_field(text.substr(0, c1), "rtt_ns", rtt_ns, where);
    parse_field(text.substr(c1 + 1, c2 - c1 - 1), "inflight", inflight, where);
    parse_field(text.substr(c2 + 1), "dropped", dropped, where);
    // A window's samples are counted in 64 bits with its one ok call: more
    // drops than a window could hold would wrap that count to nothing.
    if (dropped > kMaxDropped) {
      throw ReplayError(source + ":" + std::to_string(number) + ": dropped " + std::to_string(dropped) +
                        ": at most " + std::to_string(kMaxDropped) + " a window");
    }

    policies::Window w;
    w.ok = 1;
    w.dropped = dropped;
    w.rtt_sum_ns = w.rtt_min_ns = w.rtt_max_ns = rtt_ns;
    w.rtt_p10_ns = w.rtt_p50_ns = w.rtt_p90_ns = w.rtt_p99_ns = rtt_ns;
    w.max_inflight = inflight;
    w.inflight = inflight;
    w.limit = static_cast<std::uint32_t>(std::max(1.0, std::floor(limit)));
    w.duration_ns = duration_ns;
    const double answer = policy->update(w);
    limit = std::clamp(std::isfinite(answer) ? answer : b.min, b.min, b.max);
    out << policies::format_number(limit) << '\n';
    ++windows;
    if (!out) break;  // nobody reads on (a closed pipe): the caller tells it, and stdin may never end
  }
  if (in.bad()) throw ReplayError(source + ": read error");
  return windows;
}

}  // namespace bulkhead::sim
