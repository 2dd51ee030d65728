// The hint of a segment refused with EACCES (its mode, owner and group)
// names them from /etc/passwd and /etc/group, not through NSS:
// getpwuid_r() and getgrgid_r() may wait on a directory service (LDAP,
// sssd) on the way to an error, and in a statically linked program load
// the NSS modules of another glibc. They are interposed here to count the
// calls, so this is its own binary (and not built under sanitizers, which
// interpose them too).
#include <dlfcn.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <optional>
#include <string>

#include "bulkhead/bulkhead.h"
#include "shm/segment.hpp"
#include "tests/support/temp_segment.hpp"

namespace {

std::atomic<int> g_lookups{0};

}  // namespace

extern "C" int getpwuid_r(uid_t uid, struct passwd* entry, char* buffer, size_t size, struct passwd** out) {
  using Lookup = int (*)(uid_t, struct passwd*, char*, size_t, struct passwd**);
  static const Lookup real = reinterpret_cast<Lookup>(::dlsym(RTLD_NEXT, "getpwuid_r"));
  ++g_lookups;
  return real(uid, entry, buffer, size, out);
}

extern "C" int getgrgid_r(gid_t gid, struct group* entry, char* buffer, size_t size, struct group** out) {
  using Lookup = int (*)(gid_t, struct group*, char*, size_t, struct group**);
  static const Lookup real = reinterpret_cast<Lookup>(::dlsym(RTLD_NEXT, "getgrgid_r"));
  ++g_lookups;
  return real(gid, entry, buffer, size, out);
}

namespace bulkhead {
namespace {

// Run as nobody, in a child: root opens anything.
TEST(AccessHint, NamesTheOwnerAndGroupWithoutAskingNSS) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run a child as a user outside the segment's group";
  testing::TempSegmentName name{"hint"};
  std::optional<shm::Segment> segment;
  segment.emplace(shm::Segment::create(name.str(), testing::small_segment()));
  const std::string path = "/dev/shm/" + name.str();
  ASSERT_EQ(::chown(path.c_str(), 0, 0), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0660), 0);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) std::_Exit(99);
    bh_client* c = nullptr;
    const int rc = bh_client_open(name.c_str(), &c);
    const std::string why = bh_last_error();
    (void)!::write(fds[1], why.data(), why.size());
    std::_Exit(rc != -EACCES ? 1 : g_lookups.load() != 0 ? 2 : 0);
  }
  ::close(fds[1]);
  char buffer[1024];
  const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string why(buffer, n > 0 ? static_cast<std::size_t>(n) : 0);
  // 2: the hint asked NSS.
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << ": " << why;
  EXPECT_NE(why.find("(mode 0660, owner root, group root: a client reads and writes it: run as a member of group "
                     "root)"),
            std::string::npos)
      << why;
}

}  // namespace
}  // namespace bulkhead
