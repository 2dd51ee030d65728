#include "tools/ctl/render.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "tools/ctl/json.hpp"

namespace bulkhead::ctl {

namespace {

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string rate(double per_s) { return format("%.0f", per_s); }

// Milliseconds with two decimals below 10 ms, one above; "-" for none.
std::string millis(std::optional<double> ms) {
  if (!ms) return "-";
  return format(*ms < 10 ? "%.2f" : "%.1f", *ms);
}

// A process's pid (a client's, or the daemon's) as bulkheadctl shows it:
// its pid here, and for a process of another pid namespace (a container)
// the one it has there, "4242 (1 in pid:[4026532451])", "?" for a pid here
// not found.
template <class Reading>
std::string pid_text(const Reading& p) {
  if (p.pid_namespace == 0) return std::to_string(p.pid);
  return (p.host_pid > 0 ? std::to_string(p.host_pid) : std::string("?")) +
         format(" (%d in pid:[%llu])", p.pid, static_cast<unsigned long long>(p.pid_namespace));
}

// What a process's pid is about in the JSON: "pid_namespace", its pid
// namespace's inode when that is another than bulkheadctl's (else null),
// and "host_pid", its pid in bulkheadctl's namespace (null: not found).
template <class Reading>
void write_pid_namespace(JsonWriter& j, const Reading& p) {
  if (p.pid_namespace == 0) {
    j.key("pid_namespace").null();
  } else {
    j.key("pid_namespace").value(p.pid_namespace);
  }
  if (p.host_pid > 0) {
    j.key("host_pid").value(std::int32_t{p.host_pid});
  } else {
    j.key("host_pid").null();
  }
}

// A liveness lock as the processes table and JSON name it; null for none.
const char* lock_name(shm::LockState l) {
  switch (l) {
    case shm::LockState::kHeld: return "held";
    case shm::LockState::kDropped: return "gone";
    case shm::LockState::kNone: break;
  }
  return nullptr;
}

const char* liveness_name(shm::Liveness l) {
  switch (l) {
    case shm::Liveness::kAlive: return "alive";
    case shm::Liveness::kDead: return "dead";
    case shm::Liveness::kUnknown: return "unknown";
  }
  return "unknown";
}

// Left- or right-aligned columns, two spaces apart.
std::string render_table(const std::vector<std::string>& headers, const std::vector<bool>& left,
                         const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(headers.size());
  for (std::size_t c = 0; c < headers.size(); ++c) width[c] = headers[c].size();
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      if (c > 0) l += "  ";
      l += left[c] ? cells[c] + pad : pad + cells[c];
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(headers);
  for (const auto& row : rows) line(row);
  return out;
}

std::string dependency_name(const Snapshot& s, std::uint32_t index) {
  const DependencyReading* d = s.at_index(index);
  return d != nullptr ? d->name : "#" + std::to_string(index);
}

std::string segment_line(const Snapshot& s) {
  const auto full = [](std::uint32_t taken, std::uint32_t slots) { return taken >= slots ? " (full)" : ""; };
  // Not reserved: a process whose first write to a page finds /dev/shm
  // full dies of SIGBUS (daemon.segment_reserve).
  const std::string memory = s.reserved >= s.size ? shm::mebibytes(s.size) + " reserved"
                                                  : shm::mebibytes(s.size) + ", not reserved (" +
                                                        shm::mebibytes(s.reserved) + " in memory)";
  return format("segment /dev/shm/%s: ABI %u.%u, %s, %u of %u dependency slots taken%s, %u of %u process slots%s, "
                "%u stripes\n",
                s.segment.c_str(), s.abi_major, s.abi_minor, memory.c_str(), s.dependency_slots_taken,
                s.capacities.max_dependencies, full(s.dependency_slots_taken, s.capacities.max_dependencies),
                s.process_slots_taken, s.capacities.max_processes,
                full(s.process_slots_taken, s.capacities.max_processes), s.capacities.stats_stripes);
}

std::string daemon_line(const Status& st) {
  const DaemonReading& d = st.after.daemon;
  std::string beat = st.heartbeat_age_s
                         ? format("heartbeat %.2f s ago, tick %llu", *st.heartbeat_age_s,
                                  static_cast<unsigned long long>(d.heartbeat))
                         : std::string("no tick yet");
  std::string tail = format(", config generation %llu",
                            static_cast<unsigned long long>(d.config_generation));
  if (d.metrics_port != 0) tail += format(", metrics port %u", d.metrics_port);
  if (d.strict) tail += ", strict";
  if (!d.patterns.empty()) {
    tail += " (patterns";
    for (const std::string& p : d.patterns) tail += " " + p;
    tail += ")";
  }
  switch (st.daemon_state) {
    case DaemonState::kRunning:
      return "daemon: pid " + pid_text(d) + ", running, " + beat + tail + "\n";
    case DaemonState::kStale:
      return "daemon: pid " + pid_text(d) + ", STALE: " + beat +
             (d.liveness == shm::Liveness::kUnknown ? " (its /proc entry is hidden)" : "") + tail +
             "; limits no longer adapt\n";
    case DaemonState::kNone:
      return (d.pid > 0 ? "daemon: none (pid " + pid_text(d) + " is gone); last "
                        : std::string("daemon: none (stopped); last ")) +
             beat + "; clients keep the last limits\n";
  }
  return {};
}

void write_segment(JsonWriter& j, const Snapshot& s) {
  j.key("segment").begin_object();
  j.key("name").value(s.segment);
  j.key("abi_major").value(std::uint32_t{s.abi_major});
  j.key("abi_minor").value(std::uint32_t{s.abi_minor});
  j.key("size_bytes").value(s.size);
  j.key("reserved_bytes").value(s.reserved);
  j.key("max_dependencies").value(s.capacities.max_dependencies);
  j.key("dependency_slots_taken").value(s.dependency_slots_taken);
  j.key("max_processes").value(s.capacities.max_processes);
  j.key("process_slots_taken").value(s.process_slots_taken);
  j.key("stats_stripes").value(s.capacities.stats_stripes);
  j.end_object();
}

void write_daemon(JsonWriter& j, const Status& st) {
  const DaemonReading& d = st.after.daemon;
  j.key("daemon").begin_object();
  j.key("state").value(daemon_state_name(st.daemon_state));
  if (d.pid > 0) {
    j.key("pid").value(d.pid);
    write_pid_namespace(j, d);
  } else {
    j.key("pid").null();
    j.key("pid_namespace").null();
    j.key("host_pid").null();
  }
  j.key("heartbeat").value(d.heartbeat);
  j.key("heartbeat_age_s").value(st.heartbeat_age_s);
  j.key("config_generation").value(d.config_generation);
  j.key("strict").value(d.strict);
  j.key("patterns").begin_array();
  for (const std::string& p : d.patterns) j.value(p);
  j.end_array();
  if (d.metrics_port != 0) {
    j.key("metrics_port").value(d.metrics_port);
  } else {
    j.key("metrics_port").null();
  }
  j.end_object();
}

void write_header(JsonWriter& j, const char* kind, const Snapshot& s) {
  j.key("schema_version").value(std::int64_t{kJsonSchemaVersion});
  j.key("kind").value(kind);
  write_segment(j, s);
}

// Rejections by reason: one key per reason the segment counts.
void write_rejected(JsonWriter& j, const DependencyStatus& d) {
  j.key("rejected").begin_object();
  j.key("limit").value(d.rejected_limit_per_s());
  j.key("queue_full").value(d.rejected_queue_full_per_s());
  j.key("deadline").value(d.rejected_deadline_per_s());
  j.key("open_circuit").value(d.rejected_open_circuit_per_s());
  j.end_object();
}

void write_breaker(JsonWriter& j, const DependencyReading& r) {
  j.key("breaker").begin_object();
  j.key("state").value(std::string(r.breaker_state()));
  j.key("forced").value(r.breaker_forced());
  j.key("override").value(std::string(r.breaker_override_name()));
  j.key("trials_left").value(r.trials_left);
  j.end_object();
}

// The pin as JSON: {"limit", "seconds_left"}, or null without one.
void write_pin(JsonWriter& j, const DependencyReading& r) {
  j.key("pin");
  if (r.pin_limit == 0) {
    j.null();
    return;
  }
  j.begin_object();
  j.key("limit").value(r.pin_limit);
  j.key("seconds_left").value(r.pin_left_s);
  j.end_object();
}

// The limit; "*" when an operator pinned it.
std::string limit_cell(const DependencyReading& r) {
  return std::to_string(r.limit) + (r.pin_limit != 0 ? "*" : "");
}

// "open", "half_open", "closed"; "*" when an operator forced it.
std::string breaker_cell(const DependencyReading& r) {
  return std::string(r.breaker_state()) + (r.breaker_forced() ? "*" : "");
}

}  // namespace

const std::vector<StatusColumn>& status_columns() {
  static const std::vector<StatusColumn> columns{
      {"dependency", true, [](const DependencyStatus& d) { return d.now.name; }},
      {"limit", false, [](const DependencyStatus& d) { return limit_cell(d.now); }},
      {"in-flight", false, [](const DependencyStatus& d) { return std::to_string(d.now.inflight); }},
      {"waiting", false,
       [](const DependencyStatus& d) {
         return std::to_string(d.now.waiters) + "/" + std::to_string(d.now.max_queue);
       }},
      {"p50(ms)", false, [](const DependencyStatus& d) { return millis(d.interval_latency_ms(0.50)); }},
      {"p99(ms)", false, [](const DependencyStatus& d) { return millis(d.interval_latency_ms(0.99)); }},
      {"admitted/s", false, [](const DependencyStatus& d) { return rate(d.admitted_per_s()); }},
      {"rejected/s:limit", false,
       [](const DependencyStatus& d) { return rate(d.rejected_limit_per_s()); }},
      {":queue", false, [](const DependencyStatus& d) { return rate(d.rejected_queue_full_per_s()); }},
      {":deadline", false, [](const DependencyStatus& d) { return rate(d.rejected_deadline_per_s()); }},
      {":open", false, [](const DependencyStatus& d) { return rate(d.rejected_open_circuit_per_s()); }},
      {"failed/s", false, [](const DependencyStatus& d) { return rate(d.failed_per_s()); }},
      {"shadow/s", false, [](const DependencyStatus& d) { return rate(d.shadow_admitted_per_s()); }},
      {"config", true,
       [](const DependencyStatus& d) { return std::string(d.now.configured() ? "own" : "defaults"); }},
      {"mode", true,
       [](const DependencyStatus& d) { return std::string(d.now.shadow() ? "shadow" : "enforce"); }},
      {"breaker", true, [](const DependencyStatus& d) { return breaker_cell(d.now); }},
  };
  return columns;
}

std::string status_text(const Status& st) {
  std::string out = segment_line(st.after) + daemon_line(st);
  out += format("processes: %zu attached, %u alive\n", st.after.processes.size(), st.processes_alive);
  out += format("rates and latency of successful calls over the last %.2f s\n\n", st.interval_s);
  if (st.dependencies.empty()) {
    if (st.names.empty()) return out + "no dependencies yet\n";
    std::string names;
    for (const std::string& n : st.names) names += (names.empty() ? "'" : ", '") + n + "'";
    return out + "no dependency matches " + names + "\n";
  }
  std::vector<std::string> headers;
  std::vector<bool> left;
  for (const StatusColumn& c : status_columns()) {
    headers.emplace_back(c.header);
    left.push_back(c.align_left);
  }
  std::vector<std::vector<std::string>> rows;
  for (const DependencyStatus& d : st.dependencies) {
    std::vector<std::string> row;
    for (const StatusColumn& c : status_columns()) row.push_back(c.cell(d));
    rows.push_back(std::move(row));
  }
  return out + render_table(headers, left, rows);
}

std::string status_json(const Status& st) {
  JsonWriter j;
  j.begin_object();
  write_header(j, "status", st.after);
  write_daemon(j, st);
  j.key("processes").begin_object();
  j.key("attached").value(static_cast<std::uint64_t>(st.after.processes.size()));
  j.key("alive").value(st.processes_alive);
  j.end_object();
  j.key("interval_s").value(st.interval_s);
  j.key("dependencies").begin_array();
  for (const DependencyStatus& d : st.dependencies) {
    j.begin_object();
    j.key("name").value(d.now.name);
    j.key("name_valid").value(d.now.name_valid);
    j.key("slot").value(d.now.index);
    j.key("limit").value(d.now.limit);
    write_pin(j, d.now);
    j.key("inflight").value(d.now.inflight);
    j.key("waiters").value(d.now.waiters);
    j.key("max_queue").value(d.now.max_queue);
    j.key("configured").value(d.now.configured());
    j.key("shadow").value(d.now.shadow());
    write_breaker(j, d.now);
    j.key("per_s").begin_object();
    j.key("admitted").value(d.admitted_per_s());
    j.key("failed").value(d.failed_per_s());
    write_rejected(j, d);
    j.key("shadow_admitted").value(d.shadow_admitted_per_s());
    j.end_object();
    j.key("latency_ms").begin_object();
    j.key("samples").value(d.delta.ok);
    j.key("p50").value(d.interval_latency_ms(0.50));
    j.key("p99").value(d.interval_latency_ms(0.99));
    j.end_object();
    j.end_object();
  }
  j.end_array();
  j.end_object();
  return j.str();
}

namespace {

struct Percentiles {
  const char* label;
  double q;
};
constexpr Percentiles kDetailPercentiles[] = {{"p50", 0.50}, {"p90", 0.90}, {"p99", 0.99}, {"p999", 0.999}};

std::optional<double> mean_ms(std::uint64_t sum_ns, std::uint64_t n) {
  if (n == 0) return std::nullopt;
  return static_cast<double>(sum_ns) / static_cast<double>(n) / 1e6;
}

struct Holder {
  const ProcessReading* process;
  std::uint32_t permits;
};

std::vector<Holder> holders(const Snapshot& s, std::uint32_t index) {
  std::vector<Holder> out;
  for (const ProcessReading& p : s.processes) {
    for (const auto& h : p.held) {
      if (h.dependency == index) out.push_back({&p, h.permits});
    }
  }
  return out;
}

}  // namespace

std::string dependency_text(const Status& st, const DependencyStatus& d) {
  const DependencyReading& r = d.now;
  const shm::DependencyCounters& c = r.counters;
  std::string out = format("dependency %s (slot %u) on /dev/shm/%s\n", r.name.c_str(), r.index,
                           st.after.segment.c_str());
  out += format("  limit       %s", limit_cell(r).c_str());
  if (r.pin_limit != 0) {
    out += format(" (pinned by an operator at %u, %s left; `%s` ends it)", r.pin_limit,
                  describe_duration(r.pin_left_s).c_str(),
                  unpin_command(st.after.segment, st.after.default_segment, r.name).c_str());
  }
  out += format("\n  in flight   %u\n", r.inflight);
  out += std::string("  config      ") +
         (r.configured() ? "a table in the config (its own, or a pattern's)" : "[defaults] (no table in the config)") +
         "\n";
  out += std::string("  mode        ") +
         (r.shadow() ? "shadow (enforce = false: admits past the limit)" : "enforce") + "\n";
  out += "  breaker     " + breaker_cell(r) +
         (r.breaker_forced() ? " (forced by an operator)" : "") +
         "; bulkheadctl override: " + r.breaker_override_name() +
         ((r.breaker & shm::kBreakerStateMask) == shm::kBreakerHalfOpen
              ? format("; %u trial call(s) left", r.trials_left)
              : std::string()) + "\n";
  out += format("  generation  %llu (config generation that last set it)\n",
                static_cast<unsigned long long>(r.generation));
  out += daemon_line(st);
  out += format("\ncalls since the segment was created, and per second over the last %.2f s\n",
                st.interval_s);
  auto row = [&](const char* name, std::uint64_t total, std::uint64_t delta) {
    return std::vector<std::string>{
        std::string("  ") + name, std::to_string(total),
        rate(d.interval_s > 0 ? static_cast<double>(delta) / d.interval_s : 0.0)};
  };
  out += render_table({"  outcome", "total", "per second"}, {true, false, false},
                      {row("success", c.ok, d.delta.ok), row("dropped", c.dropped, d.delta.dropped),
                       row("ignored", c.ignored, d.delta.ignored),
                       row("failed", c.failed, d.delta.failed),
                       row("rejected: limit", c.rejected, d.delta.rejected),
                       row("rejected: queue full", c.queue_full, d.delta.queue_full),
                       row("rejected: deadline", c.deadline_rejected, d.delta.deadline_rejected),
                       row("rejected: open circuit", c.open_rejected, d.delta.open_rejected),
                       row("shadow admitted", c.shadow_admitted, d.delta.shadow_admitted),
                       row("shadow admitted: open circuit", c.shadow_open, d.delta.shadow_open)});
  out += "\nlatency of successful calls (ms)\n";
  std::vector<std::string> lh{"  window", "samples"};
  for (const auto& p : kDetailPercentiles) lh.emplace_back(p.label);
  lh.emplace_back("mean");
  auto latency_row = [&](std::string label, const shm::DependencyCounters& counts) {
    std::vector<std::string> cells{std::move(label), std::to_string(counts.ok)};
    for (const auto& p : kDetailPercentiles) {
      const std::uint64_t ns = shm::histogram_quantile_ns(counts.histogram, p.q);
      cells.push_back(counts.ok == 0 ? "-" : millis(static_cast<double>(ns) / 1e6));
    }
    cells.push_back(millis(mean_ms(counts.rtt_sum_ns, counts.ok)));
    return cells;
  };
  out += render_table(lh, {true, false, false, false, false, false, false},
                      {latency_row(format("  last %.2f s", st.interval_s), d.delta),
                       latency_row("  since created", c)});
  if (!r.partitions.empty()) {
    out += "\npartitions (guaranteed: floor(share x limit))\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& p : r.partitions) {
      rows.push_back({"  " + p.name, std::to_string(p.guaranteed) + (p.hard_cap ? " (hard cap)" : ""),
                      std::to_string(p.inflight), std::to_string(p.rejected)});
    }
    out += render_table({"  partition", "guaranteed", "in flight", "rejected"}, {true, false, false, false}, rows);
  }
  out += "\npermits held\n";
  const auto held = holders(st.after, r.index);
  if (held.empty()) out += "  none\n";
  for (const Holder& h : held) {
    out += format("  pid %s (slot %u, %s): %u\n", pid_text(*h.process).c_str(), h.process->slot,
                  liveness_name(h.process->liveness), h.permits);
  }
  out += "\nbounds (min_limit, max_limit) and the policy are not in the segment: see\n"
         "bulkhead_min_limit and bulkhead_max_limit on the daemon's /metrics.\n";
  return out;
}

std::string dependency_json(const Status& st, const DependencyStatus& d) {
  const DependencyReading& r = d.now;
  const shm::DependencyCounters& c = r.counters;
  JsonWriter j;
  j.begin_object();
  write_header(j, "dependency", st.after);
  write_daemon(j, st);
  j.key("interval_s").value(st.interval_s);
  j.key("dependency").begin_object();
  j.key("name").value(r.name);
  j.key("name_valid").value(r.name_valid);
  j.key("slot").value(r.index);
  j.key("limit").value(r.limit);
  write_pin(j, r);
  j.key("inflight").value(r.inflight);
  j.key("waiters").value(r.waiters);
  j.key("max_queue").value(r.max_queue);
  j.key("configured").value(r.configured());
  j.key("shadow").value(r.shadow());
  write_breaker(j, r);
  j.key("generation").value(r.generation);
  j.key("partitions").begin_array();
  for (const auto& p : r.partitions) {
    j.begin_object();
    j.key("name").value(p.name);
    j.key("guaranteed").value(p.guaranteed);
    j.key("hard_cap").value(p.hard_cap);
    j.key("inflight").value(p.inflight);
    j.key("rejected").value(p.rejected);
    j.end_object();
  }
  j.end_array();
  j.key("counters").begin_object();
  j.key("success").value(c.ok);
  j.key("dropped").value(c.dropped);
  j.key("ignored").value(c.ignored);
  j.key("failed").value(c.failed);
  j.key("rejected")
      .begin_object()
      .key("limit")
      .value(c.rejected)
      .key("queue_full")
      .value(c.queue_full)
      .key("deadline")
      .value(c.deadline_rejected)
      .key("open_circuit")
      .value(c.open_rejected)
      .end_object();
  j.key("shadow_admitted").value(c.shadow_admitted);
  j.key("shadow_open_circuit").value(c.shadow_open);
  j.key("latency_sum_ns").value(c.rtt_sum_ns);
  j.end_object();
  j.key("per_s").begin_object();
  j.key("admitted").value(d.admitted_per_s());
  auto per_s = [&](std::uint64_t n) { return d.interval_s > 0 ? static_cast<double>(n) / d.interval_s : 0.0; };
  j.key("success").value(per_s(d.delta.ok));
  j.key("dropped").value(per_s(d.delta.dropped));
  j.key("ignored").value(per_s(d.delta.ignored));
  j.key("failed").value(per_s(d.delta.failed));
  write_rejected(j, d);
  j.key("shadow_admitted").value(d.shadow_admitted_per_s());
  j.end_object();
  auto latency = [&](const char* key, const shm::DependencyCounters& counts) {
    j.key(key).begin_object();
    j.key("samples").value(counts.ok);
    for (const auto& p : kDetailPercentiles) {
      if (counts.ok == 0) {
        j.key(p.label).null();
      } else {
        j.key(p.label).value(static_cast<double>(shm::histogram_quantile_ns(counts.histogram, p.q)) / 1e6);
      }
    }
    j.key("mean").value(mean_ms(counts.rtt_sum_ns, counts.ok));
    j.end_object();
  };
  j.key("latency_ms").begin_object();
  latency("interval", d.delta);
  latency("since_created", c);
  j.end_object();
  j.key("held_by").begin_array();
  for (const Holder& h : holders(st.after, r.index)) {
    j.begin_object();
    j.key("pid").value(h.process->pid);
    write_pid_namespace(j, *h.process);
    j.key("slot").value(h.process->slot);
    j.key("permits").value(h.permits);
    j.end_object();
  }
  j.end_array();
  j.end_object();
  j.end_object();
  return j.str();
}

std::string unpin_command(const std::string& segment, bool default_segment, const std::string& name) {
  return "bulkheadctl " + (default_segment ? std::string() : "--segment " + segment + " ") + "pin " +
         (!name.empty() && name[0] == '-' ? "-- " : "") + name + " off";
}

std::string describe_duration(std::uint64_t s) {
  std::string out;
  auto part = [&](std::uint64_t n, const char* unit) {
    if (n == 0) return;
    out += (out.empty() ? "" : " ") + std::to_string(n) + " " + unit;
  };
  if (s < 120) {
    part(s, "s");
  } else {
    part(s / 86400, "d");
    part(s % 86400 / 3600, "h");
    part(s % 3600 / 60, "min");
    part(s < 3600 ? s % 60 : 0, "s");
  }
  return out.empty() ? "0 s" : out;
}

std::string start_time_utc(const Snapshot& s, std::uint64_t ticks) {
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (ticks == 0 || s.boot_time_s == 0 || hz <= 0) return "?";
  // The slot is a client's to write: a start after now is junk.
  const std::uint64_t since_boot_s = ticks / static_cast<std::uint64_t>(hz);
  const auto now_s = static_cast<std::uint64_t>(std::time(nullptr));
  if (now_s < s.boot_time_s || since_boot_s > now_s - s.boot_time_s + 60) return "?";
  const time_t t = static_cast<time_t>(s.boot_time_s + since_boot_s);
  tm utc{};
  ::gmtime_r(&t, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

std::string processes_text(const Snapshot& s) {
  std::string out = segment_line(s);
  out += format("%zu attached processes\n\n", s.processes.size());
  if (s.processes.empty()) return out;
  std::vector<std::vector<std::string>> rows;
  for (const ProcessReading& p : s.processes) {
    std::string held;
    for (const auto& h : p.held) {
      held += (held.empty() ? "" : " ") + dependency_name(s, h.dependency) + "=" + std::to_string(h.permits);
    }
    const char* lock = lock_name(p.lock);
    rows.push_back({std::to_string(p.slot), pid_text(p), start_time_utc(s, p.start_time), lock ? lock : "-",
                    liveness_name(p.liveness), held.empty() ? "-" : held});
  }
  return out + render_table({"slot", "pid", "started", "lock", "state", "permits held"},
                            {false, false, true, true, true, true}, rows);
}

std::string processes_json(const Snapshot& s) {
  JsonWriter j;
  j.begin_object();
  write_header(j, "processes", s);
  j.key("processes").begin_array();
  for (const ProcessReading& p : s.processes) {
    j.begin_object();
    j.key("slot").value(p.slot);
    j.key("pid").value(p.pid);
    write_pid_namespace(j, p);
    j.key("start_time_ticks").value(p.start_time);
    const std::string started = start_time_utc(s, p.start_time);
    if (started == "?") {
      j.key("started_utc").null();
    } else {
      j.key("started_utc").value(started);
    }
    j.key("state").value(liveness_name(p.liveness));
    if (const char* lock = lock_name(p.lock)) {
      j.key("liveness_lock").value(lock);
    } else {
      j.key("liveness_lock").null();
    }
    j.key("held").begin_array();
    for (const auto& h : p.held) {
      j.begin_object();
      j.key("dependency").value(dependency_name(s, h.dependency));
      j.key("slot").value(h.dependency);
      j.key("permits").value(h.permits);
      j.end_object();
    }
    j.end_array();
    j.end_object();
  }
  j.end_array();
  j.end_object();
  return j.str();
}

}  // namespace bulkhead::ctl
