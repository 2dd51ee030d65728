// bulkheadctl's output: the text tables people read and the JSON scripts
// read (schema in docs/operations.md, "bulkheadctl"). Pure functions of
// readings: no terminal, no clock, no segment, so tests check them on
// readings they build.
//
// Thread safety: stateless.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tools/ctl/snapshot.hpp"

namespace bulkhead::ctl {

// Bumped when a field changes meaning or goes away; adding a field does not.
inline constexpr int kJsonSchemaVersion = 1;

// One column of the status table. Adding a column (waiters, breaker state)
// is one entry in status_columns(); text and top pick it up.
struct StatusColumn {
  std::string_view header;
  bool align_left;
  std::string (*cell)(const DependencyStatus&);
};
const std::vector<StatusColumn>& status_columns();

// `bulkheadctl status`: segment and daemon lines, then one row per
// dependency.
std::string status_text(const Status& status);
std::string status_json(const Status& status);

// `bulkheadctl get NAME`: everything about one dependency of `status`.
std::string dependency_text(const Status& status, const DependencyStatus& dependency);
std::string dependency_json(const Status& status, const DependencyStatus& dependency);

// `bulkheadctl processes`: the process table.
std::string processes_text(const Snapshot& snapshot);
std::string processes_json(const Snapshot& snapshot);

// The command line that ends the pin of `name` on `segment`, as an
// operator types it: with --segment unless that is the default segment
// (Snapshot::default_segment), and with -- before a name that starts with
// '-' (an option else).
std::string unpin_command(const std::string& segment, bool default_segment, const std::string& name);

// Seconds as "90 s", "10 min", "1 h 30 min", "2 d 4 h".
std::string describe_duration(std::uint64_t seconds);

// Clock ticks after boot as UTC "2026-11-30T06:40:12Z"; "?" when unknown.
std::string start_time_utc(const Snapshot& snapshot, std::uint64_t start_time_ticks);

}  // namespace bulkhead::ctl
