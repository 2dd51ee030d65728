// The built bulkheadctl against a real bulkheadd and a real client process
// whose calls the test knows: the numbers it prints are the ones the client
// made, while the daemon runs, after the client dies and after the daemon
// stops.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "bulkhead/client.hpp"
#include "shm/histogram.hpp"
#include "tests/support/children.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/json.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {

using namespace std::chrono_literals;
using testing::Json;
using testing::JsonParser;

constexpr int kSuccesses = 40, kDropped = 4, kIgnored = 2, kHeld = 5, kRejected = 7;
constexpr auto kLatency = 3ms;

// In a client process: its calls of "orders" (successes of kLatency,
// dropped, ignored), then kHeld permits it keeps and kRejected refused
// attempts. The client and the permits are leaked on purpose: the process
// is killed holding them.
bool make_known_calls(const std::string& segment) {
  auto* client = new Client(segment);
  Dependency orders = client->dependency("orders");
  bool ok = true;
  for (int i = 0; i < kSuccesses + kDropped + kIgnored; ++i) {
    Permit p = orders.try_acquire();
    ok = ok && p;
    p.release(i < kSuccesses ? Outcome::kSuccess : i < kSuccesses + kDropped ? Outcome::kDropped : Outcome::kIgnore,
              kLatency);
  }
  auto* held = new std::vector<Permit>;
  for (int i = 0; i < kHeld; ++i) held->push_back(orders.try_acquire());
  for (const Permit& p : *held) ok = ok && p;
  for (int i = 0; i < kRejected; ++i) ok = ok && !orders.try_acquire();
  return ok;
}

class CtlIntegration : public ::testing::Test {
 protected:
  std::string config() const {
    return testing::small_daemon_config(segment_.str()) +
           "\n[dependency.orders]\npolicy = \"fixed\"\ninitial_limit = 5\n";
  }

  Json ctl_json(const std::vector<std::string>& args) {
    std::vector<std::string> argv{BULKHEADCTL_PATH, "--segment", segment_.str()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--json");
    const auto r = testing::run_command(argv, dir_);
    EXPECT_EQ(r.exit_code, 0) << r.output();
    return JsonParser::parse(r.output());
  }

  const Json& dependency(const Json& status, const std::string& name) {
    for (const Json& d : status["dependencies"].array) {
      if (d["name"].string == name) return d;
    }
    throw std::runtime_error("no " + name + " in the status");
  }

  testing::TempSegmentName segment_{"ctl-it"};
  testing::TempDir temp_dir_;
  std::string dir_ = temp_dir_.path();
};

TEST_F(CtlIntegration, StatusGetAndProcessesShowWhatTheClientDid) {
  testing::DaemonProcess daemon(BULKHEADD_PATH, dir_, config());
  auto seg = daemon.wait_ready(segment_);
  ASSERT_TRUE(seg) << daemon.log();
  testing::PausedChild client([&] { return make_known_calls(segment_.str()); });
  ASSERT_TRUE(client.ok()) << "the client's calls did not go as planned";

  const Json status = ctl_json({"status", "--interval", "0.2"});
  EXPECT_EQ(status["daemon"]["state"].string, "running");
  EXPECT_EQ(status["daemon"]["pid"].number, daemon.pid());
  EXPECT_EQ(status["processes"]["attached"].number, 1);
  EXPECT_EQ(status["processes"]["alive"].number, 1);
  const Json& orders = dependency(status, "orders");
  EXPECT_EQ(orders["limit"].number, kHeld);
  EXPECT_EQ(orders["inflight"].number, kHeld);
  EXPECT_TRUE(orders["configured"].boolean);
  EXPECT_FALSE(orders["shadow"].boolean);
  // The client made all its calls before the interval.
  EXPECT_EQ(orders["per_s"]["admitted"].number, 0);
  EXPECT_EQ(orders["per_s"]["rejected"]["limit"].number, 0);
  EXPECT_TRUE(orders["latency_ms"]["p50"].is_null());

  const Json get = ctl_json({"get", "orders", "--interval", "0.1"});
  const Json& counters = get["dependency"]["counters"];
  EXPECT_EQ(counters["success"].number, kSuccesses);
  EXPECT_EQ(counters["dropped"].number, kDropped);
  EXPECT_EQ(counters["ignored"].number, kIgnored);
  EXPECT_EQ(counters["rejected"]["limit"].number, kRejected);
  const std::uint64_t ns = std::chrono::nanoseconds(kLatency).count();
  const std::uint32_t b = shm::histogram_bucket(ns);
  const double mid_ms =
      static_cast<double>(shm::histogram_bucket_lower_ns(b) + shm::histogram_bucket_upper_ns(b)) / 2e6;
  const Json& since = get["dependency"]["latency_ms"]["since_created"];
  EXPECT_EQ(since["samples"].number, kSuccesses);
  EXPECT_NEAR(since["p50"].number, mid_ms, 0.001);
  EXPECT_NEAR(since["p999"].number, mid_ms, 0.001);
  EXPECT_NEAR(since["mean"].number, 3.0, 0.001);
  ASSERT_EQ(get["dependency"]["held_by"].array.size(), 1u);
  EXPECT_EQ(get["dependency"]["held_by"][0]["pid"].number, client.pid());
  EXPECT_EQ(get["dependency"]["held_by"][0]["permits"].number, kHeld);

  const Json processes = ctl_json({"processes"});
  ASSERT_EQ(processes["processes"].array.size(), 1u);
  const Json& p = processes["processes"][0];
  EXPECT_EQ(p["pid"].number, client.pid());
  EXPECT_EQ(p["state"].string, "alive");
  ASSERT_EQ(p["held"].array.size(), 1u);
  EXPECT_EQ(p["held"][0]["dependency"].string, "orders");
  EXPECT_EQ(p["held"][0]["permits"].number, kHeld);

  // The text shows the same row.
  const auto text = testing::run_command({BULKHEADCTL_PATH, "--segment", segment_.str(), "status", "-i", "0.1"}, dir_);
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.output().find("daemon: pid " + std::to_string(daemon.pid()) + ", running"), std::string::npos)
      << text.output();
  EXPECT_NE(text.output().find("orders"), std::string::npos) << text.output();

  // The client dies holding its permits; the daemon gives them back.
  client.kill();
  const auto& word = seg->dependency(*shm::find_dependency(*seg, "orders")).admission.word;
  auto slots_in_use = [&] {
    int n = 0;
    for (std::uint32_t i = 0; i < seg->header().max_processes; ++i) n += seg->process(i).identity.state.load() != 0;
    return n;
  };
  for (int i = 0; i < 500 && (shm::admission_inflight(word.load()) != 0 || slots_in_use() != 0); ++i) {
    std::this_thread::sleep_for(10ms);
  }
  const Json after_death = ctl_json({"status", "--interval", "0.1"});
  EXPECT_EQ(dependency(after_death, "orders")["inflight"].number, 0);
  EXPECT_EQ(after_death["processes"]["attached"].number, 0);

  // With the daemon stopped, bulkheadctl still reads the segment and says so.
  daemon.signal(SIGTERM);
  ASSERT_TRUE(daemon.wait_exit(10s));
  const Json stopped = ctl_json({"status", "--interval", "0.1"});
  EXPECT_EQ(stopped["daemon"]["state"].string, "none");
  EXPECT_TRUE(stopped["daemon"]["pid"].is_null());
  EXPECT_EQ(dependency(stopped, "orders")["limit"].number, kHeld);  // the last published limit
}

// `bulkheadctl pin` through a real daemon: the pinned limit goes out and
// shows in bulkheadctl and /metrics; `pin off` hands it back, and a pin
// whose time is up is cleared; the log says each step.
TEST_F(CtlIntegration, APinHoldsTheLimitUntilLiftedOrOver) {
  testing::DaemonProcess daemon(BULKHEADD_PATH, dir_, config());
  auto seg = daemon.wait_ready(segment_);
  ASSERT_TRUE(seg) << daemon.log();
  Client client(segment_.str());
  Dependency orders = client.dependency("orders");
  auto ctl = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv{BULKHEADCTL_PATH, "--segment", segment_.str()};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::run_command(argv, dir_);
  };
  const auto port = static_cast<std::uint16_t>(seg->header().metrics_port.load());
  auto pinned_gauge = [&] {
    const std::string body = testing::http_get(port, "/metrics");
    const std::string series = "bulkhead_limit_pinned{dependency=\"orders\"} ";
    const auto at = body.find(series);
    return at == std::string::npos ? std::string("absent") : body.substr(at + series.size(), 1);
  };

  auto r = ctl({"pin", "orders", "9", "--for", "10m"});
  ASSERT_EQ(r.exit_code, 0) << r.output();
  ASSERT_TRUE(testing::eventually([&] { return orders.limit() == 9; })) << daemon.log();
  EXPECT_EQ(dependency(ctl_json({"status", "--interval", "0.05"}), "orders")["pin"]["limit"].number, 9);
  EXPECT_TRUE(testing::eventually([&] { return pinned_gauge() == "1"; })) << pinned_gauge();
  EXPECT_NE(daemon.log().find("dependency orders: limit pinned at 9 by an operator for "), std::string::npos)
      << daemon.log();

  ASSERT_EQ(ctl({"pin", "orders", "off"}).exit_code, 0);
  ASSERT_TRUE(testing::eventually([&] { return orders.limit() == 5; })) << daemon.log();  // fixed: initial_limit
  EXPECT_TRUE(testing::eventually([&] { return pinned_gauge() == "0"; })) << pinned_gauge();
  EXPECT_NE(daemon.log().find("dependency orders: pin of the limit at 9 lifted; policy fixed continues from 5"),
            std::string::npos)
      << daemon.log();

  ASSERT_EQ(ctl({"pin", "orders", "2", "--for", "1s"}).exit_code, 0);
  ASSERT_TRUE(testing::eventually([&] { return orders.limit() == 2; })) << daemon.log();
  ASSERT_TRUE(testing::eventually([&] { return orders.limit() == 5; })) << daemon.log();
  const auto& pin = seg->dependency(*shm::find_dependency(*seg, "orders")).control.limit_pin;
  EXPECT_EQ(pin.load(), 0u);
  EXPECT_NE(daemon.log().find("dependency orders: pin of the limit at 2 ended"), std::string::npos) << daemon.log();
  EXPECT_TRUE(dependency(ctl_json({"status", "--interval", "0.05"}), "orders")["pin"].is_null());
}

}  // namespace
}  // namespace bulkhead
