// bulkheadd speaks systemd's notify protocol (Type=notify): the real binary
// runs with NOTIFY_SOCKET pointing at a datagram socket this test owns, and
// the test reads what a service manager would, in order: READY=1 once the
// segment is published, WATCHDOG=1 every tick, RELOADING=1 (with
// MONOTONIC_USEC=) and READY=1 around a good and a broken reload, STOPPING=1
// on SIGTERM, STATUS= lines along the way.
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bulkhead/client.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {

using namespace std::chrono_literals;

// One sd_notify() datagram: its "KEY=value" lines and the sender's pid.
struct Notification {
  std::vector<std::string> lines;
  pid_t sender = 0;

  bool has(const std::string& assignment) const {
    for (const auto& l : lines) {
      if (l == assignment) return true;
    }
    return false;
  }
  // The value of KEY, or "" when the datagram does not set it.
  std::string value(const std::string& key) const {
    for (const auto& l : lines) {
      if (l.rfind(key + "=", 0) == 0) return l.substr(key.size() + 1);
    }
    return {};
  }
};

// The service manager's end: an AF_UNIX datagram socket that records the
// sender's credentials, as systemd's does.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, sizeof addr.sun_path - 1);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("cannot bind " + path);
    }
    const int on = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
    const timeval timeout{0, 100'000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  }
  ~NotifySocket() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }

  std::string env() const { return "NOTIFY_SOCKET=" + path_; }

  // Reads datagrams until one satisfies `done` (returned) or `patience`
  // runs out (nullopt); every datagram read is appended to received().
  template <typename Pred>
  std::optional<Notification> wait_for(Pred done, std::chrono::seconds patience = 20s) {
    const auto give_up = std::chrono::steady_clock::now() + patience;
    while (std::chrono::steady_clock::now() < give_up) {
      auto n = receive();
      if (!n) continue;
      received_.push_back(*n);
      if (done(*n)) return n;
    }
    return std::nullopt;
  }
  const std::vector<Notification>& received() const { return received_; }

 private:
  std::optional<Notification> receive() {
    char buf[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
    iovec iov{buf, sizeof buf};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(fd_, &msg, 0);
    if (n <= 0) return std::nullopt;
    Notification out;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred cred;
        std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
        out.sender = cred.pid;
      }
    }
    std::string text(buf, static_cast<std::size_t>(n));
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t nl = std::min(text.find('\n', at), text.size());
      if (nl > at) out.lines.push_back(text.substr(at, nl - at));
      at = nl + 1;
    }
    return out;
  }

  std::string path_;
  int fd_ = -1;
  std::vector<Notification> received_;
};

std::uint64_t monotonic_us() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000u + static_cast<std::uint64_t>(ts.tv_nsec) / 1000u;
}

auto with(const std::string& assignment) {
  return [assignment](const Notification& n) { return n.has(assignment); };
}

// The lifecycle messages (not WATCHDOG=1 or STATUS=) in the order received.
std::vector<std::string> lifecycle(const std::vector<Notification>& received) {
  std::vector<std::string> out;
  for (const auto& n : received) {
    for (const char* m : {"READY=1", "RELOADING=1", "STOPPING=1"}) {
      if (n.has(m)) out.push_back(m);
    }
  }
  return out;
}

class SystemdNotify : public ::testing::Test {
 protected:
  std::string config(const std::string& extra = "") const {
    return "[daemon]\nsegment = \"" + segment_.str() +
           "\"\ntick_ms = 20\nmetrics_listen = \"\"\nmax_dependencies = 16\nmax_processes = 16\n"
           "stats_stripes = 2\n\n[dependency.pinned]\npolicy = \"fixed\"\ninitial_limit = 5\n" + extra;
  }

  testing::TempSegmentName segment_{"notify"};
  testing::TempDir temp_dir_;
  std::string dir_ = temp_dir_.path();
  NotifySocket notify_{dir_ + "/notify.sock"};
};

// A limit an operator pinned shows in the STATUS= line `systemctl status`
// prints, for as long as the pin holds.
TEST_F(SystemdNotify, StatusSaysWhileALimitIsPinned) {
  testing::DaemonProcess daemon(BULKHEADD_PATH, dir_, config(), {notify_.env(), "WATCHDOG_USEC=2000000"});
  ASSERT_TRUE(notify_.wait_for(with("READY=1"))) << daemon.log();
  shm::Segment seg = shm::Segment::attach(segment_, shm::Access::kReadWrite);
  std::atomic<std::uint64_t>& pin = seg.dependency(*shm::find_dependency(seg, "pinned")).control.limit_pin;
  pin.store(shm::pin_word(3, static_cast<std::uint32_t>(monotonic_us() / 1'000'000 + 600)));
  const auto pinned = notify_.wait_for([](const Notification& n) {
    return n.value("STATUS").find("; 1 limit pinned by an operator (bulkheadctl pin)") != std::string::npos;
  });
  ASSERT_TRUE(pinned) << daemon.log();
  pin.store(0);
  const auto lifted = notify_.wait_for([](const Notification& n) {
    return n.has("WATCHDOG=1") && !n.value("STATUS").empty() && n.value("STATUS").find("pinned") == std::string::npos;
  });
  EXPECT_TRUE(lifted) << daemon.log();
}

// A full table of the segment shows in the STATUS= line too: what it
// refuses, it refuses in the clients, where the operator does not look.
TEST_F(SystemdNotify, StatusSaysWhenTheDependencyTableIsFull) {
  std::string two_slots = config();
  two_slots.replace(two_slots.find("max_dependencies = 16"), 21, "max_dependencies = 2");
  testing::DaemonProcess daemon(BULKHEADD_PATH, dir_, two_slots, {notify_.env(), "WATCHDOG_USEC=2000000"});
  const auto ready = notify_.wait_for(with("READY=1"));
  ASSERT_TRUE(ready) << daemon.log();
  EXPECT_EQ(ready->value("STATUS").find("table full"), std::string::npos) << ready->value("STATUS");
  Client client(segment_.str());
  [[maybe_unused]] Dependency second = client.dependency("second");  // the configured name took the first
  const auto full = notify_.wait_for([](const Notification& n) {
    return n.value("STATUS").find("; dependency table full (2): new names refused") != std::string::npos;
  });
  EXPECT_TRUE(full) << daemon.log();
}

TEST_F(SystemdNotify, StartReloadBrokenReloadStopInOrder) {
  testing::DaemonProcess daemon(BULKHEADD_PATH, dir_, config(), {notify_.env(), "WATCHDOG_USEC=2000000"});

  // Start: READY=1 only once the segment carries the daemon's pid and a tick.
  const auto ready = notify_.wait_for(with("READY=1"));
  ASSERT_TRUE(ready) << daemon.log();
  EXPECT_EQ(ready->sender, daemon.pid());
  {
    shm::Segment seg = shm::Segment::attach(segment_, shm::Access::kReadOnly);
    EXPECT_EQ(seg.header().daemon_pid.load(), daemon.pid());
    EXPECT_GT(seg.header().heartbeat.load(), 0u);
  }
  EXPECT_NE(ready->value("STATUS").find("on /dev/shm/" + segment_.str()), std::string::npos)
      << ready->value("STATUS");
  // WATCHDOG=1 keeps coming, one per tick.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(notify_.wait_for(with("WATCHDOG=1"))) << daemon.log();

  // A good reload: RELOADING=1 with the time it started, then READY=1 once
  // the new config is in force.
  shm::Segment seg = shm::Segment::attach(segment_, shm::Access::kReadOnly);
  const auto generation = seg.header().config_generation.load();
  testing::write_file(daemon.config_path(), config("max_limit = 9\n"));
  const std::uint64_t before_us = monotonic_us();
  daemon.signal(SIGHUP);
  const auto reloading = notify_.wait_for(with("RELOADING=1"));
  ASSERT_TRUE(reloading) << daemon.log();
  const std::uint64_t after_us = monotonic_us();
  const std::string stamp = reloading->value("MONOTONIC_USEC");
  ASSERT_FALSE(stamp.empty()) << "RELOADING=1 without MONOTONIC_USEC=";
  EXPECT_GE(std::stoull(stamp), before_us);
  EXPECT_LE(std::stoull(stamp), after_us);
  const auto reloaded = notify_.wait_for(with("READY=1"));
  ASSERT_TRUE(reloaded) << daemon.log();
  EXPECT_EQ(seg.header().config_generation.load(), generation + 1);
  EXPECT_NE(reloaded->value("STATUS").find("config generation " + std::to_string(generation + 1)),
            std::string::npos)
      << reloaded->value("STATUS");

  // A broken reload: the same two messages, the running config stays, and
  // STATUS= says why.
  testing::write_file(daemon.config_path(), config("bogus = 1\n"));
  daemon.signal(SIGHUP);
  ASSERT_TRUE(notify_.wait_for(with("RELOADING=1"))) << daemon.log();
  const auto refused = notify_.wait_for(with("READY=1"));
  ASSERT_TRUE(refused) << daemon.log();
  EXPECT_EQ(seg.header().config_generation.load(), generation + 1);
  EXPECT_NE(refused->value("STATUS").find("reload rejected: "), std::string::npos) << refused->value("STATUS");
  EXPECT_NE(refused->value("STATUS").find("dependency.pinned.bogus"), std::string::npos)
      << refused->value("STATUS");
  ASSERT_TRUE(notify_.wait_for(with("WATCHDOG=1"))) << "the daemon stopped ticking after a broken reload";

  // Stop: STOPPING=1, and nothing after it.
  daemon.signal(SIGTERM);
  ASSERT_TRUE(notify_.wait_for(with("STOPPING=1"))) << daemon.log();
  ASSERT_TRUE(daemon.wait_exit(10s));
  EXPECT_EQ(daemon.exit_code(), 0) << daemon.log();
  notify_.wait_for([](const Notification&) { return false; }, 1s);  // drain what is left
  EXPECT_TRUE(notify_.received().back().has("STOPPING=1"));

  const std::vector<std::string> expected{"READY=1",     "RELOADING=1", "READY=1",
                                          "RELOADING=1", "READY=1",     "STOPPING=1"};
  EXPECT_EQ(lifecycle(notify_.received()), expected);
  for (const auto& n : notify_.received()) EXPECT_EQ(n.sender, daemon.pid());
}

TEST_F(SystemdNotify, WarnsWhenWatchdogSecLeavesRoomForFewerThanThreeTicks) {
  // 20 ms ticks under a 50 ms watchdog: one late tick and systemd kills it.
  testing::DaemonProcess daemon(BULKHEADD_PATH, dir_, config(), {notify_.env(), "WATCHDOG_USEC=50000"});
  ASSERT_TRUE(notify_.wait_for(with("READY=1"))) << daemon.log();
  EXPECT_NE(daemon.log().find("WatchdogSec= (50 ms) is less than three ticks (20 ms each)"), std::string::npos)
      << daemon.log();
}

// No warning under the unit's WatchdogSec=, nor at exactly three ticks,
// nor without a watchdog at all (sd_watchdog_enabled() says 0).
class SystemdNotifyWatchdog : public SystemdNotify, public ::testing::WithParamInterface<const char*> {};

TEST_P(SystemdNotifyWatchdog, NoWarningWhenThreeTicksFit) {
  std::vector<std::string> env{notify_.env()};
  if (*GetParam() != '\0') env.emplace_back(GetParam());
  testing::DaemonProcess daemon(BULKHEADD_PATH, dir_, config(), env);
  ASSERT_TRUE(notify_.wait_for(with("READY=1"))) << daemon.log();
  EXPECT_EQ(daemon.log().find("WatchdogSec="), std::string::npos) << daemon.log();
}

INSTANTIATE_TEST_SUITE_P(Watchdogs, SystemdNotifyWatchdog,
                         ::testing::Values("WATCHDOG_USEC=10000000", "WATCHDOG_USEC=60000", ""));

}  // namespace
}  // namespace bulkhead
