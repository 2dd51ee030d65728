// The limit algorithm interface, and the registry of algorithms by name.
//
// A policy turns a stream of windows into a concurrency limit. It is a pure
// function of those windows and its parameters: no clock, no I/O, no globals,
// so the same windows always give the same limits (the simulator and the
// daemon run the same code). A policy is owned and called by one thread, the
// control loop, and needs no lock.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policies/window.hpp"

namespace bulkhead::policies {

// The range every policy keeps its limit in, and where it starts. These come
// from the config's min_limit / max_limit / initial_limit, not from the
// policy's own parameters, so that every policy is bounded the same way.
struct Bounds {
  double min = 1;       // calls
  double max = 1000;    // calls
  double initial = 20;  // calls
};

// A policy's tunables as the config gives them: name to number. A factory
// takes out the keys it knows; any key left over is an error.
using ParamMap = std::map<std::string, double, std::less<>>;

// Thrown by a factory for an unknown or out-of-range parameter. what() names
// the parameter and the reason, e.g. "backoff = 1.2: must be in [0.5, 1)";
// key() is the config key at fault ("backoff", "min_limit", the unknown
// one), so that a config error can point at its line, or empty when no key
// is (an unknown policy).
class ParamError : public std::invalid_argument {
 public:
  ParamError(std::string key, const std::string& message)
      : std::invalid_argument(message), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

// The ParamError of a key the policy has no parameter of (a config's typo,
// or another policy's parameter), as opposed to a value its parameter
// refuses.
class UnknownParamError : public ParamError {
 public:
  using ParamError::ParamError;
};

// The latency a policy compares recent latency with: what it takes for the
// dependency's own, with no queue in front of it. Operators see it on the
// daemon's /metrics; nothing feeds it back into a limit.
struct Baseline {
  // In nanoseconds; 0 when the policy keeps none (aimd, fixed) or has not
  // measured it yet.
  double latency_ns = 0;
  // A measurement of it is under way: balance's drain (the limit held down
  // for it), gradient's minRTT measurement.
  bool measuring = false;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // The registry name, e.g. "aimd".
  virtual std::string_view name() const = 0;
  // Called by the control loop once per completed window. Returns the new
  // limit; the loop clamps it to [bounds.min, bounds.max] and publishes its
  // integer part.
  virtual double update(const Window& window) = 0;
  // The limit the policy holds now (before any window: bounds.initial).
  virtual double limit() const = 0;
  // What the policy takes for the dependency's no-load latency now.
  virtual Baseline baseline() const { return {}; }
  // Whether the limit is learned from windows (true), and so continues from
  // the one in force across reloads and restarts, or is the config's
  // initial_limit whatever was in force (fixed).
  virtual bool learns() const { return true; }
};

using Factory = std::function<std::unique_ptr<Policy>(const Bounds&, const ParamMap&)>;

// Maps names to factories. The global registry always has "fixed".
class Registry {
 public:
  // Adds a factory; throws std::logic_error on a duplicate name.
  void add(std::string name, Factory factory);
  // Builds a policy; throws ParamError on an unknown name or a bad parameter.
  std::unique_ptr<Policy> create(std::string_view name, const Bounds& bounds,
                                 const ParamMap& params) const;
  bool contains(std::string_view name) const;
  // Registered names, sorted.
  std::vector<std::string> names() const;
  // The same, comma-separated, for errors: "aimd, balance, fixed, ...".
  std::string known() const;

 private:
  std::map<std::string, Factory, std::less<>> factories_;
};

// The registry with every built-in policy: fixed, aimd, gradient2, vegas,
// gradient.
const Registry& builtin_registry();

}  // namespace bulkhead::policies
