// libFuzzer harness: bulkheadd's config parser on arbitrary bytes.
//
// A config is either refused with a ConfigError that names the file and
// says why, or accepted whole; an accepted one must hold what the daemon
// relies on without checking again: bounds in order, a policy that builds
// with its parameters, a sane tick and segment. Anything else (a crash, a
// sanitizer report, another exception, an empty message) is a finding.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "daemon/config.hpp"
#include "policies/policy.hpp"
#include "shm/names.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void check_dependency(const bulkhead::daemon::DependencyConfig& d) {
  check(d.bounds.min >= 1 && d.bounds.min <= d.bounds.initial && d.bounds.initial <= d.bounds.max);
  check(d.window_min_samples >= 1);
  // The factory validated the parameters once; it must accept them again.
  check(bulkhead::policies::builtin_registry().create(d.policy, d.bounds, d.params) != nullptr);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto config = bulkhead::daemon::parse_config(text, "fuzz.toml");
    check(!config.daemon.segment.empty() && config.daemon.tick.count() > 0);
    check((config.daemon.segment_mode & 0007) == 0);  // never world-accessible
    check_dependency(config.defaults);
    for (const auto& d : config.dependencies) {
      check(!d.name.empty());
      check_dependency(d);
      check(config.find(d.name) == &d);
    }
    // A strict daemon publishes each pattern in a slot of its own: the
    // parser must never accept more names and patterns than the table holds.
    check(!config.daemon.strict ||
          config.dependencies.size() + config.patterns.size() <= config.daemon.max_dependencies);
    for (const auto& p : config.patterns) {
      check(bulkhead::shm::is_pattern(p.name) && bulkhead::shm::check_pattern(p.name) == nullptr);
      check(config.find(p.name) == nullptr);
      check_dependency(p);
    }
  } catch (const bulkhead::daemon::ConfigError& e) {
    const std::string what = e.what();
    check(what.rfind("fuzz.toml", 0) == 0 && what.size() > std::string_view("fuzz.toml: ").size());
  }
  return 0;
}
