// A simulation scenario: one dependency, its clients, the limiter's
// settings; read from a TOML file (docs/simulator.md lists every key).
//
// parse_scenario() returns a whole, valid Scenario or throws ScenarioError
// "FILE:LINE: KEY: REASON", as bulkheadd does for its config: unknown keys
// and tables, wrong types and out-of-range values are all errors.
//
// Thread-safety: a Scenario is plain data; the functions share no state.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "control/controller.hpp"
#include "policies/policy.hpp"

namespace bulkhead::sim {

enum class ServiceKind { kConstant, kExponential, kLognormal };

// How admission is shared: one host-wide limit for every process (what
// bulkhead does), or a limiter of its own in every process group.
enum class LimiterMode { kHost, kPerProcess };

// At at_s the dependency gets new workers, a new mean latency and/or a new
// network delay, reached linearly over ramp_s (0: at once).
struct DependencyChange {
  double at_s = 0;
  std::optional<std::uint32_t> workers;
  std::optional<double> base_latency_ms;
  std::optional<double> network_ms;
  double ramp_s = 0;
};

// At at_s the offered rate becomes `rate`, linearly over ramp_s.
struct RateChange {
  double at_s = 0;
  double rate = 0;  // calls/s, all processes together
  double ramp_s = 0;
};

struct Scenario {
  std::string source;       // the file, as named in errors
  std::string name;         // output file names; default: the file's stem
  std::string description;  // one line for the table
  double duration_s = 0;    // simulated time
  std::uint64_t seed = 1;
  std::uint32_t tick_ms = 100;  // the daemon's tick

  // [dependency]
  std::uint32_t workers = 0;  // calls served at once
  double base_latency_ms = 0;  // mean service time
  ServiceKind service = ServiceKind::kExponential;
  double sigma = 1;  // lognormal shape
  // Added to every call's latency on its way back, holding no worker (a
  // network path): latency that no limit can shorten.
  double network_ms = 0;
  // Calls that may wait for a worker; beyond it the dependency fails the
  // call at once (a dropped outcome). Absent: unbounded.
  std::optional<std::uint32_t> queue_limit;
  std::vector<DependencyChange> dependency_changes;  // in time order

  // [clients]
  std::uint32_t processes = 1;
  LimiterMode limiter = LimiterMode::kHost;
  double rate = 0;  // calls/s at t = 0, all processes together
  std::vector<RateChange> rate_changes;  // in time order
  double timeout_ms = 1000;  // from admission
  std::uint32_t retries = 0;  // per call, after a rejection, timeout or error
  double retry_delay_ms = 0;

  // [limits]: bounds and windowing for every policy (policy name and
  // params are filled in per run).
  control::LimitSettings limits;
  // [policy.NAME]: each policy's own parameters.
  std::map<std::string, policies::ParamMap, std::less<>> policy_params;

  // The settings a run of `policy` uses.
  control::LimitSettings settings_for(std::string_view policy) const;
};

class ScenarioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses TOML text; `source` names it in errors and gives the default name.
Scenario parse_scenario(std::string_view text, std::string_view source);
// Reads and parses a file.
Scenario load_scenario_file(const std::string& path);

// "KEY=NUMBER" as a policy parameter (bulkhead-sim's --param), or nullopt
// when it has no such shape: no key, no value, or more than a number.
std::optional<std::pair<std::string, double>> parse_param(std::string_view spec);

// Sets one policy parameter from "POLICY.KEY=VALUE" (bulkhead-sim run
// --param), over the scenario's own [policy.POLICY] KEY. Throws
// ScenarioError naming `spec` when it has no such shape, the policy is
// unknown, or the policy refuses the value (the key or its range).
void set_policy_param(Scenario& scenario, std::string_view spec);

}  // namespace bulkhead::sim
