// The daemon's control loop on a real segment with a fake clock: clients
// record through the library, the test advances time tick by tick.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "bulkhead/client.hpp"
#include "daemon/config.hpp"
#include "daemon/control_loop.hpp"
#include "daemon/metrics.hpp"
#include "shm/segment.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead::testing {

class LoopFixture : public ::testing::Test {
 protected:
  static constexpr std::uint64_t kTickNs = 100'000'000;  // 100 ms, the default tick

  // A segment of 16 dependencies, `processes` process slots and 2 stats
  // stripes, named after `tag`; `daemon_keys` (TOML lines) join those in
  // the config's [daemon] table.
  LoopFixture(const char* tag, std::uint32_t processes, std::string daemon_keys = "")
      : name_(tag), processes_(processes), daemon_keys_(std::move(daemon_keys)) {}

  // `toml` after the fixture's [daemon] table.
  daemon::Config parse(const std::string& toml, const std::string& file = "test.toml") const {
    return daemon::parse_config("[daemon]\nsegment = \"" + name_.str() +
                                    "\"\nmax_dependencies = 16\nmax_processes = " + std::to_string(processes_) +
                                    "\nstats_stripes = 2\n" + daemon_keys_ + toml,
                                file);
  }
  // `before` runs on the new segment before the loop starts on it: what
  // clients did, or a previous daemon left behind, before this one came.
  void start(const std::string& toml, const std::function<void(shm::Segment&)>& before = {},
             bool with_metrics = false) {
    config_ = parse(toml);
    segment_.emplace(shm::Segment::create(name_, small_segment(16, processes_, 2)));
    if (before) before(*segment_);
    // On a free port of loopback; outlives the loop (declared before it).
    if (with_metrics) metrics_.emplace("127.0.0.1:0");
    loop_.emplace(*segment_, config_, with_metrics ? &*metrics_ : nullptr);
    client_.emplace(name_.str());
  }
  void advance_ticks(int n) {
    for (int i = 0; i < n; ++i) loop_->tick(now_ns_ += kTickNs);
  }
  // The slot of a dependency the test looked up.
  std::uint32_t slot_of(const std::string& name) { return *shm::find_dependency(*segment_, name); }
  daemon::ControlLoop::View view_of(const std::string& name) {
    for (const auto& v : loop_->view()) {
      if (v.name == name) return v;
    }
    ADD_FAILURE() << "no dependency " << name;
    return {};
  }

  TempSegmentName name_;
  std::uint32_t processes_;
  std::string daemon_keys_;
  daemon::Config config_;
  std::optional<shm::Segment> segment_;
  std::optional<daemon::Metrics> metrics_;
  std::optional<daemon::ControlLoop> loop_;
  std::optional<Client> client_;
  std::uint64_t now_ns_ = 1'000'000'000;
};

}  // namespace bulkhead::testing
