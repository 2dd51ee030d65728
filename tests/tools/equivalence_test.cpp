// The simulator and the daemon compute the same limits from the same calls:
// the daemon through libbulkhead, a real segment and its control loop; the
// simulator through its Recorder and a Controller. Any drift between how
// the client records a call and how the simulator does shows up here.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "bulkhead/bulkhead.h"
#include "control/controller.hpp"
#include "daemon/config.hpp"
#include "daemon/control_loop.hpp"
#include "tests/support/temp_segment.hpp"
#include "tools/sim/recorder.hpp"

namespace bulkhead {
namespace {

constexpr std::uint64_t kTickNs = 100'000'000;

class Equivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(Equivalence, DaemonAndSimulatorPublishTheSameLimits) {
  testing::TempSegmentName name{"eq"};
  const std::string toml = "[daemon]\nsegment = \"" + name.str() +
                           "\"\nmax_dependencies = 4\nmax_processes = 4\nstats_stripes = 2\n"
                           "[defaults]\npolicy = \"" + GetParam() +
                           "\"\nmin_limit = 1\nmax_limit = 200\ninitial_limit = 20\n";
  const daemon::Config config = daemon::parse_config(toml, "eq.toml");
  shm::Segment segment = shm::Segment::create(name, testing::small_segment(4, 4, 2));
  daemon::ControlLoop loop(segment, config, nullptr);
  bh_client* client = nullptr;
  ASSERT_EQ(bh_client_open(name.c_str(), &client), 0);
  bh_dep* dep = nullptr;
  ASSERT_EQ(bh_dependency(client, "eq", &dep), 0);

  // The simulator's side starts where the daemon adopts the dependency.
  std::uint64_t now = 1'000'000'000;
  loop.tick(now);
  control::Controller controller(config.effective("eq"), 0, now);
  sim::Recorder recorder;
  controller.observe(recorder.take(0), now);
  ASSERT_EQ(bh_limit(dep), controller.limit());

  // Bursts of calls, drawn from raw engine output (fixed by the standard):
  // each tries to take up to 60 permits at once, then releases them with a
  // latency that grows with how many it holds and, now and then, a drop.
  std::mt19937_64 rng(42);
  std::vector<bh_permit> permits;
  long lowest = bh_limit(dep), highest = lowest;
  for (int tick = 0; tick < 400; ++tick) {
    const int bursts = 1 + static_cast<int>(rng() % 4);
    for (int b = 0; b < bursts; ++b) {
      const auto want = 1 + static_cast<std::uint32_t>(rng() % 60);
      permits.clear();
      for (std::uint32_t i = 0; i < want; ++i) {
        bh_permit p;
        const bool daemon_admits = bh_try_acquire(dep, &p) == 0;
        const bool sim_admits = permits.size() < controller.limit();
        ASSERT_EQ(daemon_admits, sim_admits) << "tick " << tick;
        if (daemon_admits) {
          permits.push_back(p);
          recorder.admitted(static_cast<std::uint32_t>(permits.size()));
        } else {
          recorder.rejected();
        }
      }
      const double slow = tick >= 150 && tick < 250 ? 5.0 : 1.0;  // a slow spell
      for (bh_permit& p : permits) {
        const auto latency_ns = static_cast<std::uint64_t>(
            1e6 * slow * (1 + static_cast<double>(permits.size()) / 10) * (0.5 + (rng() % 1000) / 1000.0));
        if (rng() % 50 == 0) {
          bh_release_latency(&p, BH_DROPPED, latency_ns);
          recorder.dropped();
        } else {
          bh_release_latency(&p, BH_SUCCESS, latency_ns);
          recorder.succeeded(latency_ns);
        }
      }
    }
    now += kTickNs;
    loop.tick(now);
    controller.observe(recorder.take(0), now);
    ASSERT_EQ(bh_limit(dep), controller.limit()) << "tick " << tick;
    lowest = std::min(lowest, bh_limit(dep));
    highest = std::max(highest, bh_limit(dep));
  }
  // The limits moved: agreeing on a constant would prove nothing.
  EXPECT_LT(lowest, highest);
  bh_client_close(client);
}

INSTANTIATE_TEST_SUITE_P(EveryPolicy, Equivalence,
                         ::testing::Values("balance", "aimd", "gradient2", "vegas", "gradient"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace bulkhead
