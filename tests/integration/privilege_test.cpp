// Least privilege, with real users: bulkheadd runs as an unprivileged user
// (nobody), creates its segment 0660 in its own group, and a process of a
// user outside that group cannot attach while one inside it can; a segment
// it adopts gets the configured mode and group, as far as it (and the
// unit's system call filter) may change them.
//
// Switching users needs root: run as anyone else these tests skip and
// say so (CI runs as root: scripts/install-deps.sh installs packages).
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "bulkhead/bulkhead.h"
#include "daemon/config.hpp"
#include "shm/segment.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::TempSegmentName;

struct User {
  uid_t uid;
  gid_t gid;
};

User user(const char* name) {
  const passwd* p = ::getpwnam(name);
  if (p == nullptr) return {static_cast<uid_t>(-1), static_cast<gid_t>(-1)};
  return {p->pw_uid, p->pw_gid};
}

// What `body()` returns in a forked child running as `u`, with `groups` as
// its only supplementary groups; -998 if it could not switch.
template <typename Body>
int as_user(const User& u, const std::vector<gid_t>& groups, Body body) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return -999;
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = -998;
    if (::setgroups(groups.size(), groups.data()) == 0 && ::setgid(u.gid) == 0 && ::setuid(u.uid) == 0) {
      rc = body();
    }
    (void)!::write(pipe_fds[1], &rc, sizeof rc);
    std::_Exit(0);
  }
  ::close(pipe_fds[1]);
  int rc = -997;
  (void)!::read(pipe_fds[0], &rc, sizeof rc);
  ::close(pipe_fds[0]);
  ::waitpid(pid, nullptr, 0);
  return rc;
}

// bh_client_open_opts()'s result as `u` with `groups`.
int open_as(const User& u, const std::vector<gid_t>& groups, const std::string& segment) {
  return as_user(u, groups, [&] {
    bh_options options{};
    options.segment = segment.c_str();
    options.flags = BH_OPEN_REQUIRE_SEGMENT;
    bh_client* client = nullptr;
    const int rc = bh_client_open_opts(&options, &client);
    if (rc == 0) bh_client_close(client);
    return rc;
  });
}

// Two unprivileged users of the host: `nobody`, which runs the daemon, and
// `daemon`, in another group. Switching to them needs root: run as anyone
// else these tests skip and say so.
class LeastPrivilege : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch to the users nobody and daemon";
    ASSERT_NE(nobody.uid, static_cast<uid_t>(-1));
    ASSERT_NE(other.uid, static_cast<uid_t>(-1));
    ASSERT_NE(other.gid, nobody.gid);
  }
  const User nobody = user("nobody");
  const User other = user("daemon");
};

TEST_F(LeastPrivilege, TheDaemonRunsUnprivilegedAndOnlyItsGroupAttaches) {
  const User& outsider = other;
  TempSegmentName segment{"priv"};
  const testing::TempDir temp_dir;
  const std::string& dir = temp_dir.path();
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  const std::string config = dir + "/bulkhead.toml";
  testing::write_file(config, "[daemon]\nsegment = \"" + segment.str() +
                                  "\"\ntick_ms = 20\nmetrics_listen = \"127.0.0.1:0\"\n");
  ASSERT_EQ(::chmod(config.c_str(), 0644), 0);
  // setpriv drops every privilege before bulkheadd starts: no root, no
  // capability, no supplementary group.
  ChildProcess daemon({"/usr/bin/setpriv", "--reuid=nobody", "--regid=" + std::to_string(nobody.gid),
                       "--clear-groups", "--inh-caps=-all", BULKHEADD_PATH, "--config", config},
                      dir + "/bulkheadd.log");
  bool up = false;
  for (int i = 0; i < 1000 && !up && !daemon.exited(); ++i) {
    std::this_thread::sleep_for(10ms);
    try {
      shm::Segment s = shm::Segment::attach(segment.str(), shm::Access::kReadOnly);
      up = s.header().heartbeat.load() > 0;
    } catch (const shm::SegmentError&) {
    }
  }
  ASSERT_TRUE(up) << daemon.log();

  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm/" + segment.str()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);  // never world-readable or -writable
  EXPECT_EQ(st.st_uid, nobody.uid);
  EXPECT_EQ(st.st_gid, nobody.gid);

  // A user outside the group: refused, with the reason.
  EXPECT_EQ(open_as(outsider, {}, segment.str()), -EACCES);
  // The same user made a member of the group: attaches.
  EXPECT_EQ(open_as(outsider, {nobody.gid}, segment.str()), 0);

  daemon.signal(SIGTERM);
  ASSERT_TRUE(daemon.wait_exit(10s));
  EXPECT_EQ(daemon.exit_code(), 0) << daemon.log();
}

// Segment::set_file_access() as `u` (no supplementary group): 0, or the
// SegmentError's code.
int set_access_as(const User& u, const std::string& segment, std::uint32_t mode, gid_t group) {
  return as_user(u, {}, [&] {
    try {
      shm::Segment::attach(segment, shm::Access::kReadWrite).set_file_access(mode, group);
      return 0;
    } catch (const shm::SegmentError& e) {
      return e.code();
    }
  });
}

// A restarted bulkheadd gives the segment it adopts the configured mode and
// group. Its owner may chmod, but not chown to a group it is not in (nor
// chown at all under bulkheadd.service's system call filter): a new mode
// with the group unchanged must not need a chown, and a refused new group
// must leave the mode as it was, as the daemon's warning says.
TEST_F(LeastPrivilege, AnAdoptedSegmentsAccessChangesOnlyWhatDiffers) {
  TempSegmentName segment{"access"};
  shm::CreateOptions options;
  options.capacities = {4, 4, 1, 0};
  options.mode = 0660;
  options.group = 0;  // a group nobody is not in
  shm::Segment created = shm::Segment::create(segment.str(), options);
  const std::string path = "/dev/shm/" + segment.str();
  ASSERT_EQ(::chown(path.c_str(), nobody.uid, static_cast<gid_t>(-1)), 0);
  const auto mode_and_group = [&] {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return std::pair{st.st_mode & 07777, st.st_gid};
  };

  EXPECT_EQ(set_access_as(nobody, segment.str(), 0640, 0), 0);
  EXPECT_EQ(mode_and_group(), std::pair(0640u, gid_t{0}));

  EXPECT_EQ(set_access_as(nobody, segment.str(), 0600, other.gid), EPERM);
  EXPECT_EQ(mode_and_group(), std::pair(0640u, gid_t{0}));
}

// Group= changed in bulkheadd.service: the restarted daemon runs in another
// group, and the unit's filter refuses the chown that would give the
// segment it adopts that group (deny_chown stands in for the filter). It
// keeps the old group and says how to change it; --recreate-segment makes
// the segment anew, in the new group; a change of mode alone needs no chown.
TEST_F(LeastPrivilege, UnderTheUnitsFilterANewGroupNeedsTheSegmentMadeAnew) {
  TempSegmentName segment{"regroup"};
  const std::string path = "/dev/shm/" + segment.str();
  const testing::TempDir temp_dir;
  const std::string& dir = temp_dir.path();
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  const std::string config = dir + "/bulkhead.toml";
  const auto write_config = [&](const std::string& extra) {
    testing::write_file(config, "[daemon]\nsegment = \"" + segment.str() +
                                    "\"\ntick_ms = 20\nmetrics_listen = \"127.0.0.1:0\"\n" + extra);
    ASSERT_EQ(::chmod(config.c_str(), 0644), 0);
  };
  // Runs bulkheadd as nobody in `group` until it has opened the segment,
  // stops it, and returns its log.
  int runs = 0;
  const auto run_as_nobody_in = [&](gid_t group, const std::vector<std::string>& flags) {
    std::vector<std::string> argv{"/usr/bin/setpriv", "--reuid=nobody", "--regid=" + std::to_string(group),
                                  "--clear-groups", "--inh-caps=-all", DENY_CHOWN_PATH, BULKHEADD_PATH,
                                  "--config", config};
    argv.insert(argv.end(), flags.begin(), flags.end());
    ChildProcess daemon(argv, dir + "/bulkheadd-" + std::to_string(++runs) + ".log");
    for (int i = 0; i < 1000 && daemon.log().find("configured dependencies") == std::string::npos &&
                    !daemon.exited();
         ++i) {
      std::this_thread::sleep_for(10ms);
    }
    daemon.signal(SIGTERM);
    EXPECT_TRUE(daemon.wait_exit(10s));
    EXPECT_EQ(daemon.exit_code(), 0) << daemon.log();
    return daemon.log();
  };
  const auto mode_and_group = [&] {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return std::pair{st.st_mode & 07777, st.st_gid};
  };

  write_config("");
  run_as_nobody_in(nobody.gid, {});
  ASSERT_EQ(mode_and_group(), std::pair(0660u, nobody.gid));

  std::string log = run_as_nobody_in(other.gid, {});
  EXPECT_NE(log.find("chown to group " + std::to_string(other.gid) + ": Operation not permitted; kept 0660"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("remove " + path), std::string::npos) << log;
  EXPECT_EQ(mode_and_group(), std::pair(0660u, nobody.gid));

  log = run_as_nobody_in(other.gid, {"--recreate-segment"});
  EXPECT_NE(log.find("replacing segment " + path), std::string::npos) << log;
  EXPECT_EQ(mode_and_group(), std::pair(0660u, other.gid));

  write_config("segment_mode = 0o640\n");
  log = run_as_nobody_in(other.gid, {});
  EXPECT_NE(log.find("mode 0660 -> 0640"), std::string::npos) << log;
  EXPECT_EQ(log.find("warn"), std::string::npos) << log;
  EXPECT_EQ(mode_and_group(), std::pair(0640u, other.gid));

  // A segment it does not own (root's, here), it may neither change nor
  // remove (/dev/shm is sticky): even with --recreate-segment it adopts it
  // as it is, and says who may.
  ASSERT_EQ(::chown(path.c_str(), 0, static_cast<gid_t>(-1)), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0660), 0);
  log = run_as_nobody_in(other.gid, {"--recreate-segment"});
  EXPECT_NE(log.find("kept 0660"), std::string::npos) << log;
  EXPECT_NE(log.find("run bulkheadd as the segment's owner (uid 0)"), std::string::npos) << log;
  EXPECT_EQ(log.find("replacing segment"), std::string::npos) << log;
  EXPECT_EQ(mode_and_group(), std::pair(0660u, other.gid));
}

TEST(LeastPrivilegeDefaults, MetricsListenOnLoopbackByDefault) {
  const auto config = daemon::parse_config(daemon::embedded_default_config(), "default");
  EXPECT_EQ(config.daemon.metrics_listen.rfind("127.0.0.1:", 0), 0u) << config.daemon.metrics_listen;
  EXPECT_EQ(config.daemon.segment_mode & 0007, 0u);
}

}  // namespace
}  // namespace bulkhead
