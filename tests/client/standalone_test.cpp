// With no segment the client still works, on a static limit of its own.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>

#include "bulkhead/client.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {

using testing::TempSegmentName;

// Options for a standalone client (no segment of that name) with `limit`.
bh_options static_limit_of(const TempSegmentName& name, long limit) {
  bh_options o{};
  o.segment = name.c_str();
  o.static_limit = limit;
  return o;
}

TEST(Standalone, NoSegmentMeansStandaloneAdmittingEverything) {
  TempSegmentName name{"none"};
  Client client(name.str());
  EXPECT_EQ(client.mode(), Client::Mode::kStandalone);
  EXPECT_NE(client.status().find("standalone"), std::string_view::npos);
  Dependency dep = client.dependency("payments");
  std::vector<Permit> permits;
  for (int i = 0; i < 10'000; ++i) {
    permits.push_back(dep.try_acquire());
    ASSERT_TRUE(permits.back());
  }
  EXPECT_EQ(dep.inflight(), 10'000);
}

TEST(Standalone, StaticLimitCaps) {
  TempSegmentName name{"none"};
  Client client(static_limit_of(name, 2));
  Dependency dep = client.dependency("payments");
  EXPECT_EQ(dep.limit(), 2);
  Permit a = dep.try_acquire(), b = dep.try_acquire(), c = dep.try_acquire();
  EXPECT_TRUE(a);
  EXPECT_TRUE(b);
  EXPECT_FALSE(c);
  EXPECT_EQ(c.reason(), BH_REJECT_LIMIT);
  // No queue without a daemon: a call that would wait is refused at once.
  EXPECT_EQ(dep.acquire(std::chrono::seconds(60)).reason(), BH_REJECT_QUEUE_FULL);
  a.success();
  EXPECT_EQ(dep.inflight(), 1);
  EXPECT_TRUE(dep.acquire(std::chrono::seconds(60)));
}

// A standalone client's counts are its process's: a forked child starts
// from no call in flight, and its release of a permit its parent held
// gives back nothing (the parent's own release does).
TEST(Standalone, AForkedChildStartsFromNoCallsInFlight) {
  TempSegmentName name{"none"};
  Client client(static_limit_of(name, 2));
  Dependency dep = client.dependency("payments");
  Permit inherited = dep.try_acquire();
  ASSERT_TRUE(inherited);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Step by step; the exit code names the first step that went wrong.
    if (dep.inflight() != 0) std::_Exit(1);
    inherited.success();  // the parent's
    if (dep.inflight() != 0) std::_Exit(2);
    Permit a = dep.try_acquire(), b = dep.try_acquire();
    if (!a || !b) std::_Exit(3);  // its whole static limit
    if (dep.try_acquire()) std::_Exit(4);
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(dep.inflight(), 1);
  inherited.success();
  EXPECT_EQ(dep.inflight(), 0);
}

TEST(Standalone, StaticLimitFromTheEnvironment) {
  TempSegmentName name{"none"};
  ::setenv("BULKHEAD_STATIC_LIMIT", "7", 1);
  Client client(name.str());
  ::unsetenv("BULKHEAD_STATIC_LIMIT");
  EXPECT_EQ(client.dependency("x").limit(), 7);
}

// A value that is no positive whole number is ignored, not taken as a
// limit of 0 that would refuse every call; the status says so, naming it.
TEST(Standalone, AStaticLimitFromTheEnvironmentThatIsNoPositiveNumberIsIgnored) {
  TempSegmentName name{"none"};
  for (const char* junk : {"0", "-3", "7x", "x"}) {
    ::setenv("BULKHEAD_STATIC_LIMIT", junk, 1);
    Client client(name.str());
    ::unsetenv("BULKHEAD_STATIC_LIMIT");
    Dependency dep = client.dependency("x");
    EXPECT_EQ(dep.limit(), static_cast<long>(UINT32_MAX)) << junk;
    EXPECT_TRUE(dep.try_acquire()) << junk;
    EXPECT_NE(client.status().find("static limit none ($BULKHEAD_STATIC_LIMIT=\"" + std::string(junk) +
                                   "\" ignored: not a positive whole number)"),
              std::string::npos)
        << client.status();
  }
  ::setenv("BULKHEAD_STATIC_LIMIT", "7", 1);
  Client client(name.str());
  ::unsetenv("BULKHEAD_STATIC_LIMIT");
  EXPECT_EQ(client.status().find("ignored"), std::string::npos) << client.status();
}

TEST(Standalone, SegmentNameFromTheEnvironment) {
  TempSegmentName name{"env"};
  shm::Segment s = shm::Segment::create(name, testing::small_segment());
  ::setenv("BULKHEAD_SEGMENT", name.c_str(), 1);
  Client client;
  ::unsetenv("BULKHEAD_SEGMENT");
  EXPECT_EQ(client.mode(), Client::Mode::kShared);
}

TEST(Standalone, ABadNameIsRefusedNamingTheByteAndWhereTheNameCameFrom) {
  TempSegmentName name{"none"};
  bh_client* c = nullptr;
  ASSERT_EQ(bh_client_open(name.c_str(), &c), 0);
  bh_dep* d = nullptr;
  EXPECT_EQ(bh_dependency(c, "pay\nments", &d), -EINVAL);
  EXPECT_EQ(std::string(bh_last_error()),
            "dependency name 'pay\\x0aments' has a character other than A-Z a-z 0-9 . _ -: '\\x0a' at byte 3");
  EXPECT_EQ(bh_dependency(c, "payments db", &d), -EINVAL);
  EXPECT_EQ(std::string(bh_last_error()),
            "dependency name 'payments db' has a character other than A-Z a-z 0-9 . _ -: ' ' at byte 8");
  const std::string long_name(48, 'a');
  EXPECT_EQ(bh_dependency(c, long_name.c_str(), &d), -EINVAL);
  EXPECT_EQ(std::string(bh_last_error()), "dependency name '" + long_name + "' is longer than 47 bytes: it has 48");
  ASSERT_EQ(bh_dependency(c, "payments", &d), 0);
  bh_dep* p = nullptr;
  EXPECT_EQ(bh_partition(d, "bätch", &p), -EINVAL);
  EXPECT_EQ(std::string(bh_last_error()),
            "partition name 'b\\xc3\\xa4tch' has a character other than A-Z a-z 0-9 . _ -: '\\xc3' at byte 1");
  bh_client_close(c);

  ::setenv("BULKHEAD_SEGMENT", "bulk/head", 1);
  EXPECT_EQ(bh_client_open(nullptr, &c), -EINVAL);
  ::unsetenv("BULKHEAD_SEGMENT");
  EXPECT_EQ(std::string(bh_last_error()),
            "segment name 'bulk/head' has a character other than A-Z a-z 0-9 . _ -: '/' at byte 4 "
            "(the name from $BULKHEAD_SEGMENT)");
  EXPECT_EQ(bh_client_open("bulk/head", &c), -EINVAL);  // given: no word of the environment
  EXPECT_EQ(std::string(bh_last_error()),
            "segment name 'bulk/head' has a character other than A-Z a-z 0-9 . _ -: '/' at byte 4");
}

TEST(Standalone, AMovedFromClientSaysSo) {
  TempSegmentName name{"none"};
  Client client(name.str());
  Client moved(std::move(client));
  try {
    client.dependency("payments");  // moved from: what this test is about
    ADD_FAILURE() << "a moved-from client gave a dependency";
  } catch (const Error& e) {
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_EQ(std::string(e.what()),
              "bh_dependency: the client is NULL (a bulkhead::Client moved from has none): Invalid argument");
  }
  try {
    (void)client.mode();
    ADD_FAILURE() << "a moved-from client has a mode";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "bh_client_mode: the client is NULL (a bulkhead::Client moved from has none): Invalid argument");
  }
  EXPECT_EQ(moved.mode(), Client::Mode::kStandalone);
  bh_dep* d = nullptr;
  EXPECT_EQ(bh_dependency(moved.handle(), nullptr, &d), -EINVAL);
  EXPECT_STREQ(bh_last_error(), "bh_dependency: the name is NULL");
  EXPECT_TRUE(moved.dependency("payments").try_acquire());
}

TEST(Standalone, RequiringTheSegmentFailsWithoutIt) {
  TempSegmentName name{"none"};
  bh_options o{};
  o.segment = name.c_str();
  o.flags = BH_OPEN_REQUIRE_SEGMENT;
  bh_client* c = nullptr;
  EXPECT_EQ(bh_client_open_opts(&o, &c), -ENOENT);
  EXPECT_EQ(std::string(bh_last_error()), "segment /dev/shm/" + name.str() +
                                              ": cannot open: No such file or directory (bulkheadd makes it: is "
                                              "bulkheadd running, on this segment name?)");
  try {
    Client client(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code().value(), ENOENT);
  }
}

}  // namespace
}  // namespace bulkhead
