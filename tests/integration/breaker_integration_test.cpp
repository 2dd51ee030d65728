// The circuit breaker with the real bulkheadd and bulkheadctl: forked
// processes report failures, the daemon opens the breaker host-wide, half
// opens it after the sleep window, closes it on trial successes; operators
// force it through the config (SIGHUP) and bulkheadctl; /metrics and the
// log say so.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "bulkhead/client.hpp"
#include "tests/support/children.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/json.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::eventually;
using testing::Json;
using testing::JsonParser;


class BreakerIntegration : public ::testing::Test {
 protected:
  std::string config(const std::string& breaker_extra = "") const {
    return testing::small_daemon_config(segment_.str()) +
           "\n[dependency.pay]\npolicy = \"fixed\"\ninitial_limit = 40\n"
           "[dependency.pay.breaker]\nenabled = true\nminimum_calls = 10\nsleep_window_ms = 300\n"
           "half_open_calls = 2\n" + breaker_extra;
  }
  // `processes` forked processes report `calls` calls of "pay" each. A test
  // that wants the breaker open reports exactly minimum_calls failures: it
  // opens only on the tick that counts the last of them, so no reporter
  // meets it open half way (a loaded machine spreads them over ticks).
  void report(int processes, int calls, Outcome outcome) {
    const std::string segment = segment_.str();
    testing::run_children(processes, [&](int) {
      Client c(segment);
      Dependency d = c.dependency("pay");
      for (int i = 0; i < calls; ++i) {
        Permit p = d.try_acquire();
        if (!p) return 1;
        p.release(outcome, 1ms);
      }
      return 0;
    });
  }
  testing::RunResult ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{BULKHEADCTL_PATH, "--segment", segment_.str()};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::run_command(argv, dir_);
  }
  Json ctl_get_json() {
    const auto r = ctl({"get", "pay", "--interval", "0.05", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.output();
    return JsonParser::parse(r.output());
  }
  std::string metrics(const shm::Segment& seg) {
    return testing::http_get(static_cast<std::uint16_t>(seg.header().metrics_port.load()), "/metrics");
  }

  testing::TempSegmentName segment_{"brk-it"};
  testing::TempDir temp_dir_;
  std::string dir_ = temp_dir_.path();
};

TEST_F(BreakerIntegration, OpensFromFailuresOfSeveralProcessesHalfOpensAndCloses) {
  DaemonProcess daemon(BULKHEADD_PATH, dir_, config());
  auto seg = daemon.wait_ready(segment_);
  ASSERT_TRUE(seg) << daemon.log();
  Client client(segment_.str());
  Dependency pay = client.dependency("pay");

  report(2, 5, Outcome::kFailed);
  ASSERT_TRUE(eventually([&] { return pay.breaker() == BreakerState::kOpen; })) << daemon.log();
  // Refused at once, the in-flight count untouched (nothing else calls).
  Permit refused = pay.try_acquire();
  EXPECT_EQ(refused.reason(), BH_REJECT_OPEN_CIRCUIT);
  EXPECT_EQ(pay.inflight(), 0);

  // After the sleep window: half open, two trial calls host-wide.
  ASSERT_TRUE(eventually([&] { return pay.breaker() == BreakerState::kHalfOpen; })) << daemon.log();
  Permit a = pay.try_acquire(), b = pay.try_acquire(), c = pay.try_acquire();
  EXPECT_TRUE(a);
  EXPECT_TRUE(b);
  EXPECT_EQ(c.reason(), BH_REJECT_OPEN_CIRCUIT);
  a.success();
  b.success();
  ASSERT_TRUE(eventually([&] { return pay.breaker() == BreakerState::kClosed; })) << daemon.log();
  EXPECT_TRUE(pay.try_acquire());

  // Transitions are log lines and metrics.
  const std::string log = daemon.log();
  // The 10 failures may span ticks: it opens on the one that counts the last.
  EXPECT_NE(log.find("dependency pay: circuit breaker closed -> open: "), std::string::npos) << log;
  EXPECT_NE(log.find("calls failed (100% >= 50%)"), std::string::npos) << log;
  EXPECT_NE(log.find("circuit breaker open -> half_open: sleep window over"), std::string::npos) << log;
  EXPECT_NE(log.find("circuit breaker half_open -> closed: 2 trial call(s) succeeded"), std::string::npos) << log;
  std::string m;
  const bool seen = eventually([&] {
    m = metrics(*seg);
    return m.find("bulkhead_breaker_rejections_total{dependency=\"pay\"} 2") != std::string::npos;
  });
  EXPECT_TRUE(seen) << m;
  EXPECT_NE(m.find("bulkhead_breaker_state{dependency=\"pay\",state=\"closed\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("bulkhead_breaker_state{dependency=\"pay\",state=\"open\"} 0"), std::string::npos) << m;
  EXPECT_NE(m.find("bulkhead_breaker_transitions_total{dependency=\"pay\",to=\"open\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("bulkhead_breaker_transitions_total{dependency=\"pay\",to=\"half_open\"} 1"), std::string::npos)
      << m;
  EXPECT_NE(m.find("bulkhead_breaker_transitions_total{dependency=\"pay\",to=\"closed\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("bulkhead_requests_total{dependency=\"pay\",outcome=\"failed\"} 10"), std::string::npos) << m;
}

TEST_F(BreakerIntegration, ATrialFailureReopensIt) {
  DaemonProcess daemon(BULKHEADD_PATH, dir_, config());
  auto seg = daemon.wait_ready(segment_);
  ASSERT_TRUE(seg) << daemon.log();
  Client client(segment_.str());
  Dependency pay = client.dependency("pay");
  report(2, 5, Outcome::kDropped);  // timeouts count as failures
  ASSERT_TRUE(eventually([&] { return pay.breaker() == BreakerState::kHalfOpen; })) << daemon.log();
  Permit trial = pay.try_acquire();
  ASSERT_TRUE(trial);
  trial.failed();
  ASSERT_TRUE(eventually([&] { return pay.breaker() == BreakerState::kOpen; })) << daemon.log();
  EXPECT_NE(daemon.log().find("half_open -> open: a trial call failed"), std::string::npos) << daemon.log();
}

TEST_F(BreakerIntegration, ForcedByConfigReloadAndByBulkheadctl) {
  DaemonProcess daemon(BULKHEADD_PATH, dir_, config());
  auto seg = daemon.wait_ready(segment_);
  ASSERT_TRUE(seg) << daemon.log();
  Client client(segment_.str());
  Dependency pay = client.dependency("pay");

  // The config forces it open: SIGHUP applies it.
  testing::write_file(daemon.config_path(), config("force = \"open\"\n"));
  daemon.signal(SIGHUP);
  ASSERT_TRUE(eventually([&] { return pay.breaker() == BreakerState::kOpen; })) << daemon.log();
  // Past the 300 ms sleep window, by the clock and by the daemon's ticks:
  // forced, it stays open.
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(testing::wait_ticks(*seg, 25)) << daemon.log();
  EXPECT_EQ(pay.breaker(), BreakerState::kOpen);
  Json j = ctl_get_json();
  EXPECT_EQ(j["dependency"]["breaker"]["state"].string, "open");
  EXPECT_TRUE(j["dependency"]["breaker"]["forced"].boolean);
  EXPECT_EQ(j["dependency"]["breaker"]["override"].string, "auto");

  // bulkheadctl's override wins over the config, and outlasts the ticks.
  auto r = ctl({"breaker", "pay", "closed"});
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.output().find("breaker of pay: override closed"), std::string::npos) << r.output();
  ASSERT_TRUE(eventually([&] { return pay.breaker() == BreakerState::kClosed; })) << daemon.log();
  EXPECT_NE(daemon.log().find("circuit breaker open -> closed: forced closed by bulkheadctl"), std::string::npos)
      << daemon.log();
  report(2, 20, Outcome::kFailed);
  ASSERT_TRUE(testing::wait_ticks(*seg, 10)) << daemon.log();  // which counted the failures
  EXPECT_EQ(pay.breaker(), BreakerState::kClosed);
  j = ctl_get_json();
  EXPECT_EQ(j["dependency"]["breaker"]["state"].string, "closed");
  EXPECT_TRUE(j["dependency"]["breaker"]["forced"].boolean);
  EXPECT_EQ(j["dependency"]["breaker"]["override"].string, "closed");
  const auto text = ctl({"status", "--interval", "0.05"});
  EXPECT_NE(text.output().find("closed*"), std::string::npos) << text.output();

  // Back to auto: the config's force decides again.
  r = ctl({"breaker", "pay", "auto"});
  ASSERT_EQ(r.exit_code, 0) << r.output();
  ASSERT_TRUE(eventually([&] { return pay.breaker() == BreakerState::kOpen; })) << daemon.log();
  EXPECT_NE(daemon.log().find("circuit breaker closed -> open: forced open by the config (breaker.force)"),
            std::string::npos)
      << daemon.log();

  // Usage errors and unknown names.
  EXPECT_EQ(ctl({"breaker", "pay", "half_open"}).exit_code, 2);
  EXPECT_EQ(ctl({"breaker", "nope", "open"}).exit_code, 3);
}

}  // namespace
}  // namespace bulkhead
