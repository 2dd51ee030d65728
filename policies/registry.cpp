// The policy registry, and the built-in one.
//
// Adding a policy costs one file pair, one line in builtin_registry() below
// and one test file; the conformance test picks it up by name.
#include <stdexcept>
#include <utility>

#include "policies/aimd.hpp"
#include "policies/balance.hpp"
#include "policies/fixed.hpp"
#include "policies/gradient.hpp"
#include "policies/gradient2.hpp"
#include "policies/params.hpp"
#include "policies/policy.hpp"
#include "policies/vegas.hpp"

namespace bulkhead::policies {

void Registry::add(std::string name, Factory factory) {
  if (name.empty()) throw std::logic_error("policy registry: empty name");
  if (!factory) throw std::logic_error("policy registry: no factory for '" + name + "'");
  if (factories_.contains(name)) {
    throw std::logic_error("policy registry: '" + name + "' is already registered");
  }
  factories_.emplace(std::move(name), std::move(factory));
}

std::unique_ptr<Policy> Registry::create(std::string_view name, const Bounds& bounds,
                                         const ParamMap& params) const {
  const auto it = factories_.find(name);
  if (it == factories_.end()) {
    throw ParamError("", "unknown policy '" + std::string(name) + "' (known: " + known() + ")");
  }
  // Checked here as well as in each policy, so that no registered factory
  // can skip it.
  validate_bounds(bounds);
  std::unique_ptr<Policy> policy = it->second(bounds, params);
  if (!policy) throw std::logic_error("policy registry: factory for '" + it->first + "' gave null");
  return policy;
}

bool Registry::contains(std::string_view name) const { return factories_.contains(name); }

std::vector<std::string> Registry::names() const {
  std::vector<std::string> names;
  names.reserve(factories_.size());
  for (const auto& [name, factory] : factories_) names.push_back(name);
  return names;  // std::map keeps them sorted
}

std::string Registry::known() const {
  std::string out;
  for (const auto& [name, factory] : factories_) out += out.empty() ? name : ", " + name;
  return out;
}

namespace {

// The factory of a policy with parameters: P(bounds, P::parse_params(map)).
template <typename P>
std::unique_ptr<Policy> create_with_params(const Bounds& bounds, const ParamMap& params) {
  return std::make_unique<P>(bounds, P::parse_params(params));
}

}  // namespace

const Registry& builtin_registry() {
  // Built on first use; a function-local static, so the first call may come
  // from any thread and no static initialization order is involved.
  static const Registry registry = [] {
    Registry r;
    r.add(std::string(FixedPolicy::kName), &FixedPolicy::create);  // the fallback: always here
    r.add(std::string(AimdPolicy::kName), &create_with_params<AimdPolicy>);
    r.add(std::string(Gradient2Policy::kName), &create_with_params<Gradient2Policy>);
    r.add(std::string(VegasPolicy::kName), &create_with_params<VegasPolicy>);
    r.add(std::string(GradientPolicy::kName), &create_with_params<GradientPolicy>);
    r.add(std::string(BalancePolicy::kName), &create_with_params<BalancePolicy>);
    return r;
  }();
  return registry;
}

}  // namespace bulkhead::policies
