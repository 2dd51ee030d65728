// bulkheadd's /metrics checked by Prometheus itself: promtool lints a real
// scrape in which every series exists, and a real Prometheus server on
// loopback scrapes a real bulkheadd, evaluates the shipped alert rules and
// answers the queries of the shipped Grafana dashboard.
//
// promtool and prometheus are the binaries of Debian's prometheus package
// that scripts/install-deps.sh extracts into .deps/bin (PROMTOOL_PATH,
// PROMETHEUS_PATH); without them the tests fail and say how to get them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
// property_tree's JSON parser includes boost/bind.hpp, which otherwise
// announces its deprecated global placeholders on every build.
#define BOOST_BIND_GLOBAL_PLACEHOLDERS
#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <chrono>
#include <functional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "bulkhead/client.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {

using namespace std::chrono_literals;
using boost::property_tree::ptree;

// Calls `done` every 200 ms until it returns true or `patience` runs out.
bool eventually(const std::function<bool()>& done, std::chrono::seconds patience = 60s) {
  return testing::eventually(done, patience, 200ms);
}

std::string body_of(const std::string& response) {
  const auto at = response.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : response.substr(at + 4);
}

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::optional<ptree> parse_json(const std::string& text) {
  try {
    std::istringstream in(text);
    ptree tree;
    boost::property_tree::read_json(in, tree);
    return tree;
  } catch (const boost::property_tree::json_parser_error&) {
    return std::nullopt;
  }
}

// A port nobody listens on now (the kernel's choice), for Prometheus.
std::uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// The bulkhead_ names in the lines of `text` that start with `lead` then
// "bulkhead_", each up to the first `end` character.
std::set<std::string> names_after(const std::string& text, const std::string& lead, char end) {
  std::set<std::string> names;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(lead + "bulkhead_", 0) != 0) continue;
    const std::string rest = line.substr(lead.size());
    names.insert(rest.substr(0, rest.find(end)));
  }
  return names;
}

// The metric names in docs/operations.md's metrics table (rows starting
// "| `bulkhead_").
std::set<std::string> documented_metrics() {
  return names_after(testing::read_file(SOURCE_DIR "/docs/operations.md"), "| `", '`');
}

// The metric families a scrape declares with "# TYPE bulkhead_...".
std::set<std::string> scraped_families(const std::string& scrape) {
  return names_after(scrape, "# TYPE ", ' ');
}

// `text` with every `from` replaced by `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// The PromQL queries of the shipped Grafana dashboard, and its variables.
struct Dashboard {
  std::vector<std::string> exprs;
  ptree variables;
};

Dashboard read_dashboard() {
  const auto json = parse_json(testing::read_file(SOURCE_DIR "/docs/grafana/bulkhead.json"));
  if (!json) {
    ADD_FAILURE() << "docs/grafana/bulkhead.json is not JSON";
    return {};
  }
  Dashboard dashboard;
  std::function<void(const ptree&)> collect = [&](const ptree& node) {
    for (const auto& [key, child] : node) {
      if (key == "expr") dashboard.exprs.push_back(child.data());
      collect(child);
    }
  };
  collect(*json);
  dashboard.variables = json->get_child("templating.list", ptree());
  return dashboard;
}

// Closed-loop callers of one dependency over its limit, reporting every
// outcome in turn, so that every per-dependency series moves.
class Traffic {
 public:
  Traffic(Dependency dep, int threads) : dep_(dep) {
    for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t] { run(t); });
  }
  ~Traffic() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

 private:
  void run(int seed) {
    for (unsigned n = static_cast<unsigned>(seed); !stop_; ++n) {
      Permit p = dep_.try_acquire();
      std::this_thread::sleep_for(2ms);
      if (!p) continue;
      if (n % 5 == 3) {
        p.dropped();
      } else if (n % 5 == 4) {
        p.ignore();
      } else {
        p.success();
      }
    }
  }
  Dependency dep_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

class PrometheusCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* tool : {PROMTOOL_PATH, PROMETHEUS_PATH}) {
      ASSERT_EQ(::access(tool, X_OK), 0)
          << tool << " is missing: run scripts/install-deps.sh (it extracts promtool and prometheus "
          << "from Debian's prometheus package into .deps/bin) or configure with "
          << "-DBULKHEAD_PROMETHEUS_DIR=DIR";
    }
  }

  std::string config() const {
    return "[daemon]\nsegment = \"" + segment_.str() +
           "\"\ntick_ms = 50\nmetrics_listen = \"127.0.0.1:0\"\nmax_dependencies = 16\n"
           "max_processes = 16\nstats_stripes = 2\n\n[dependency.checkout]\npolicy = \"fixed\"\n"
           "initial_limit = 4\n"
           // Partitions, so that their series exist: the traffic below is
           // the "default" partition's, which only borrows.
           "[dependency.checkout.partitions]\ncritical = 0.5\n"
           // A policy that keeps a baseline latency (fixed keeps none), and
           // a wait queue, without which there is no wait histogram.
           "[dependency.search]\npolicy = \"balance\"\nmax_queue = 2\n";
  }

  // Starts bulkheadd with callers of "checkout" over its limit of 4, a
  // process that dies holding a permit, and callers of "search", so that
  // every series exists.
  void start_daemon_with_traffic() {
    daemon_.emplace(BULKHEADD_PATH, dir_, config());
    auto seg = daemon_->wait_ready(segment_);
    ASSERT_TRUE(seg) << daemon_->log();
    metrics_port_ = static_cast<std::uint16_t>(seg->header().metrics_port.load());
    ASSERT_NE(metrics_port_, 0);
    client_.emplace(segment_.str());
    Dependency checkout = client_->dependency("checkout");
    die_holding_a_permit(checkout);
    traffic_.emplace(checkout, 8);
    search_traffic_.emplace(client_->dependency("search"), 2);
    ASSERT_TRUE(eventually([&] {
      const std::string s = scrape();
      return s.find("bulkhead_permits_reclaimed_total{dependency=\"checkout\"} 1") != std::string::npos &&
             s.find("bulkhead_policy_baseline_seconds{dependency=\"search\"}") != std::string::npos;
    })) << scrape();
  }

  void die_holding_a_permit(Dependency& dep) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      Permit p = dep.try_acquire();
      const char ok = p ? 'y' : 'n';
      (void)!::write(ready[1], &ok, 1);
      ::pause();
      std::_Exit(0);
    }
    char ok = 0;
    ASSERT_EQ(::read(ready[0], &ok, 1), 1);
    ::close(ready[0]);
    ::close(ready[1]);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    ASSERT_EQ(ok, 'y');
  }

  std::string scrape() const { return body_of(testing::http_get(metrics_port_, "/metrics")); }

  testing::TempSegmentName segment_{"prom"};
  testing::TempDir temp_dir_;
  std::string dir_ = temp_dir_.path();
  std::optional<testing::DaemonProcess> daemon_;
  std::uint16_t metrics_port_ = 0;
  std::optional<Client> client_;
  std::optional<Traffic> traffic_;
  std::optional<Traffic> search_traffic_;
};

// bulkheadd runs one per host, and every host names the same dependencies:
// a panel that summed or drew every host's series at once would mix their
// limits and latencies. Each series the dashboard reads is of the host its
// `instance` variable picks, and so are the dependencies offered.
TEST(GrafanaDashboard, EverySeriesIsOfTheHostChosen) {
  const Dashboard dashboard = read_dashboard();
  ASSERT_GE(dashboard.exprs.size(), 8u);
  const std::string host = R"({instance=~"$instance")";
  // Each word of PromQL that names a series (bulkhead_*, a recording rule
  // of them such as dependency:bulkhead_...:rate5m, up): not a function, a
  // label or a range. (No std::regex: GCC 12 warns of its
  // insides in the sanitizer builds.)
  const auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':'; };
  for (const std::string& expr : dashboard.exprs) {
    for (std::size_t at = 0; at < expr.size();) {
      if (!word_char(expr[at])) {
        ++at;
        continue;
      }
      std::size_t end = at;
      while (end < expr.size() && word_char(expr[end])) ++end;
      const std::string word = expr.substr(at, end - at);
      const bool quoted = at > 0 && expr[at - 1] == '"';
      const bool function = end < expr.size() && expr[end] == '(';
      if (!quoted && !function && (word.find("bulkhead_") != std::string::npos || word == "up")) {
        EXPECT_EQ(expr.compare(end, host.size(), host), 0) << word << " without the host's selector in: " << expr;
      }
      at = end;
    }
  }
  std::vector<std::string> names;
  std::string dependencies;
  for (const auto& [_, variable] : dashboard.variables) {
    names.push_back(variable.get<std::string>("name", ""));
    if (names.back() == "dependency") dependencies = variable.get<std::string>("definition", "");
  }
  EXPECT_EQ(names, (std::vector<std::string>{"instance", "dependency"}));
  EXPECT_NE(dependencies.find(host), std::string::npos) << dependencies;
}

TEST_F(PrometheusCheck, PromtoolAcceptsARealScrapeWithEverySeries) {
  start_daemon_with_traffic();
  if (HasFatalFailure()) return;
  const std::string text = scrape();
  testing::write_file(dir_ + "/scrape.txt", text);

  // Every documented metric is in this scrape (so promtool sees them all),
  // and every metric bulkheadd exports is documented.
  const auto documented = documented_metrics();
  const auto scraped = scraped_families(text);
  ASSERT_FALSE(documented.empty()) << "no metrics table in docs/operations.md";
  for (const auto& name : documented) EXPECT_TRUE(scraped.count(name)) << name << " documented, not scraped";
  for (const auto& name : scraped) {
    EXPECT_TRUE(documented.count(name)) << name << " exported, not in docs/operations.md's metrics table";
  }

  const auto lint = testing::run_command(
      {"/bin/sh", "-c", std::string(PROMTOOL_PATH) + " check metrics < " + dir_ + "/scrape.txt"}, dir_);
  EXPECT_EQ(lint.exit_code, 0) << lint.output();
  EXPECT_EQ(lint.output(), "") << "promtool check metrics complained";
}

TEST_F(PrometheusCheck, PrometheusScrapesTheDaemonEvaluatesTheRulesAndAnswersTheDashboard) {
  start_daemon_with_traffic();
  if (HasFatalFailure()) return;

  const std::uint16_t port = free_loopback_port();
  testing::write_file(dir_ + "/prometheus.yml",
                      "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                      "rule_files:\n  - " SOURCE_DIR "/docs/prometheus/bulkhead-alerts.yml\n"
                      "scrape_configs:\n  - job_name: bulkhead\n    static_configs:\n"
                      "      - targets: ['127.0.0.1:" + std::to_string(metrics_port_) + "']\n");
  testing::ChildProcess prometheus(
      {PROMETHEUS_PATH, "--config.file=" + dir_ + "/prometheus.yml", "--storage.tsdb.path=" + dir_ + "/tsdb",
       "--web.listen-address=127.0.0.1:" + std::to_string(port)},
      dir_ + "/prometheus.log");
  auto api = [&](const std::string& path) { return body_of(testing::http_get(port, path)); };
  // The result vector of an instant query; nullopt unless status is success.
  auto query = [&](const std::string& promql) -> std::optional<ptree> {
    auto reply = parse_json(api("/api/v1/query?query=" + url_encode(promql)));
    if (!reply || reply->get<std::string>("status", "") != "success") return std::nullopt;
    return reply->get_child("data.result");
  };
  auto first_value = [&](const std::string& promql) -> std::optional<double> {
    auto result = query(promql);
    if (!result || result->empty()) return std::nullopt;
    return std::stod(std::prev(result->front().second.get_child("value").end())->second.data());
  };

  ASSERT_TRUE(eventually([&] { return api("/-/ready").find("Ready") != std::string::npos || prometheus.exited(); }))
      << prometheus.log();
  ASSERT_FALSE(prometheus.exited()) << prometheus.log();
  // Target discovery batches every 5 s: the first scrape comes after ~6 s.
  ASSERT_TRUE(eventually([&] { return first_value("up{job=\"bulkhead\"}") == 1.0; })) << prometheus.log();

  EXPECT_EQ(first_value("bulkhead_limit{dependency=\"checkout\"}"), 4.0);
  std::optional<double> ok_rate, rejected_rate;
  EXPECT_TRUE(eventually([&] {
    ok_rate = first_value("rate(bulkhead_requests_total{dependency=\"checkout\",outcome=\"success\"}[5s])");
    rejected_rate = first_value("rate(bulkhead_requests_total{dependency=\"checkout\",outcome=\"rejected\"}[5s])");
    return ok_rate > 0.0 && rejected_rate > 0.0;
  })) << "success/s " << ok_rate.value_or(-1) << ", rejected/s " << rejected_rate.value_or(-1);

  // Every query of the Grafana dashboard parses and shows data, with the
  // dashboard's variables as Grafana would fill them in.
  const std::vector<std::string> exprs = read_dashboard().exprs;
  ASSERT_GE(exprs.size(), 8u);
  for (std::string expr : exprs) {
    expr = replace_all(replace_all(expr, "$__rate_interval", "5s"), "$dependency", ".*");
    expr = replace_all(expr, "$instance", ".*");
    std::optional<ptree> result;
    EXPECT_TRUE(eventually([&] { return (result = query(expr)) && !result->empty(); }, 20s))
        << "dashboard query " << (result ? "shows no data" : "fails") << ": " << expr;
  }

  // The shipped rules load and evaluate without error on real series.
  std::string problems;
  EXPECT_TRUE(eventually([&] {
    problems.clear();
    auto rules = parse_json(api("/api/v1/rules"));
    if (!rules) return false;
    int count = 0;
    const ptree none;
    for (const auto& [_, group] : rules->get_child("data.groups", none)) {
      for (const auto& [__, rule] : group.get_child("rules", none)) {
        ++count;
        if (rule.get<std::string>("health", "") != "ok") {
          problems += rule.get<std::string>("name", "?") + ": " + rule.get<std::string>("health", "?") + " " +
                      rule.get<std::string>("lastError", "") + "\n";
        }
      }
    }
    if (count == 0) problems = "no rules loaded";
    return problems.empty();
  })) << problems << prometheus.log();
  std::optional<double> ratio;
  EXPECT_TRUE(eventually([&] {
    ratio = first_value("dependency:bulkhead_rejection_ratio:rate5m{dependency=\"checkout\"}");
    return ratio > 0.0 && ratio < 1.0;
  })) << "recorded rejection ratio " << ratio.value_or(-1);
  // What BulkheadSegmentTableNearlyFull divides, one ratio per table, from
  // the real daemon: the two series match label for label.
  std::optional<ptree> tables;
  EXPECT_TRUE(eventually([&] {
    return (tables = query("bulkhead_segment_slots_used / bulkhead_segment_slots > 0")) && tables->size() == 2;
  })) << "segment tables' ratios: " << (tables ? tables->size() : 0);
}

}  // namespace
}  // namespace bulkhead
