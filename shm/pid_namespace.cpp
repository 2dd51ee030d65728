#include "shm/pid_namespace.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace bulkhead::shm {

namespace {

// How a read of a /proc file of a process went.
enum class Read { kOk, kGone, kHidden };

// ENOENT and ESRCH: the process exited and was reaped since /proc was
// listed. Anything else (EACCES, EPERM): it is there and the caller may
// not see it.
Read failed() { return errno == ENOENT || errno == ESRCH ? Read::kGone : Read::kHidden; }

Read read_namespace(pid_t pid, PidNamespace& out) {
  char path[40];
  std::snprintf(path, sizeof path, "/proc/%d/ns/pid", static_cast<int>(pid));
  struct stat st {};
  if (::stat(path, &st) != 0) return failed();
  out = {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
  return Read::kOk;
}

// The NSpid line of /proc/PID/status: the pid in each namespace from the
// one /proc belongs to down to the process's own. `levels` 0 when there is
// no such line (a kernel before 4.1).
struct NsPid {
  pid_t innermost = 0;
  int levels = 0;
};

Read read_nspid(pid_t pid, NsPid& out) {
  char path[40];
  std::snprintf(path, sizeof path, "/proc/%d/status", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return failed();
  // The whole file: a long Groups: line comes before NSpid:.
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const Read why = failed();
      ::close(fd);
      return why;
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  out = {};
  const std::size_t at = text.find("\nNSpid:");
  if (at == std::string::npos) return Read::kOk;
  const char* p = text.c_str() + at + 7;
  for (;;) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p) break;
    out.innermost = static_cast<pid_t>(v);
    ++out.levels;
    p = end;
  }
  return Read::kOk;
}

// Whether the /proc this process sees is mounted with hidepid (other than
// off), which lists only the processes the reader may trace. Unreadable
// counts as hidden.
bool proc_hides_processes() {
  const int fd = ::open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  // Lines: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS...] - TYPE SOURCE SUPEROPTIONS".
  // The last mount at /proc is the one path lookups reach.
  bool hides = true;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + start, end - start);
    start = end + 1;
    std::size_t field = 0;
    for (int i = 0; i < 4 && field != std::string_view::npos; ++i) field = line.find(' ', field + 1);
    if (field == std::string_view::npos || line.substr(field + 1, 6) != "/proc ") continue;
    const std::size_t dash = line.find(" - proc ");
    if (dash == std::string_view::npos) continue;
    const std::size_t source_end = line.find(' ', dash + 8);
    if (source_end == std::string_view::npos) continue;
    const std::string_view super = line.substr(source_end + 1);
    const std::size_t hidepid = super.find("hidepid=");
    if (hidepid == std::string_view::npos) {
      hides = false;
      continue;
    }
    const std::string_view value = super.substr(hidepid + 8, super.find(',', hidepid) - hidepid - 8);
    hides = value != "0" && value != "off";
  }
  return hides;
}

bool exited(const ProcessStat& stat) { return (stat.state == 'Z' || stat.state == 'X') && stat.threads <= 1; }

// Calls visit(pid) for every process /proc lists, until it returns false.
// False when /proc cannot be read.
template <typename Visit>
bool for_each_process(Visit&& visit) {
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return false;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long n = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || n <= 0) continue;
    if (!visit(static_cast<pid_t>(n))) break;
  }
  ::closedir(dir);
  return true;
}

}  // namespace

bool foreign_pid_namespace(const PidNamespace& ns, const PidNamespace& own) {
  return ns.known() && own.known() && ns != own;
}

PidLookup find_in_pid_namespace(const PidNamespace& ns, pid_t pid, std::uint64_t start_time) {
  if (pid <= 0) return {PidLookup::Result::kGone};
  bool hidden = false;
  bool saw_namespace = false;
  std::optional<pid_t> live, any;  // unconfirmed matches
  std::optional<PidLookup> decided;
  const bool listed = for_each_process([&](pid_t here) {
    PidNamespace its;
    // A zombie's pid namespace is still there (it is its pid's, kept
    // until the zombie is reaped; not its nsproxy's, which exit drops).
    const Read ns_read = read_namespace(here, its);
    if (ns_read == Read::kGone) return true;
    if (ns_read == Read::kOk) {
      if (its != ns) return true;
      saw_namespace = true;
    }
    NsPid nspid;
    const Read status = read_nspid(here, nspid);
    if (status == Read::kGone) return true;
    // No NSpid line: no entry can be matched, the process may be any.
    if (status == Read::kHidden || nspid.levels == 0) {
      hidden = true;
      return true;
    }
    // A process in the namespace /proc belongs to (one level) is in no
    // namespace below it; the caller's, for a /proc of its own.
    if (nspid.innermost != pid || (ns_read != Read::kOk && nspid.levels < 2)) return true;
    const auto stat = read_process_stat(here);
    if (!stat) {
      // Exited since its status was read, or hidden after all.
      if (::kill(here, 0) == 0 || errno != ESRCH) hidden = true;
      return true;
    }
    if (start_time != 0 && stat->start_time != start_time) {
      // Another process of that very namespace has the pid now: the
      // recorded one has exited, whatever else /proc hides.
      if (ns_read == Read::kOk) decided = PidLookup{PidLookup::Result::kGone};
      return !decided;
    }
    if (ns_read == Read::kOk) {
      decided = PidLookup{PidLookup::Result::kFound, here, true};
      return false;
    }
    if (!any) any = here;
    if (!live && !exited(*stat)) live = here;
    return true;
  });
  if (!listed) return {};
  if (decided) return *decided;
  if (live || any) return {PidLookup::Result::kFound, live ? *live : *any, false};
  const bool sees_namespace = saw_namespace || own_pid_namespace().inode == kInitialPidNamespaceInode;
  if (hidden || !sees_namespace || proc_hides_processes()) return {};
  return {PidLookup::Result::kGone};
}

Liveness process_liveness(const ProcessSnapshot& seen, const PidNamespace& own, pid_t* pid_here) {
  pid_t pid = seen.pid;
  if (foreign_pid_namespace(seen.pid_ns, own)) {
    const PidLookup found = find_in_pid_namespace(seen.pid_ns, seen.pid, seen.start_time);
    pid = found.result == PidLookup::Result::kFound ? found.pid : 0;
    if (found.result == PidLookup::Result::kUnknown) {
      if (pid_here != nullptr) *pid_here = 0;
      return Liveness::kUnknown;
    }
  }
  if (pid_here != nullptr) *pid_here = pid;
  return process_liveness(pid, seen.start_time);
}

Liveness daemon_liveness(ProcessSnapshot& seen, const PidNamespace& own, pid_t* pid_here) {
  const Liveness named = liveness_here_too(seen, own, pid_here);
  if (named != Liveness::kDead || seen.pid <= 0 || seen.start_time == 0) return named;
  // Any namespace's process that has the pid, innermost, and the start
  // time: an older daemon in a container under the namespace of the one
  // before it.
  pid_t found = 0;
  for_each_process([&](pid_t here) {
    NsPid nspid;
    if (read_nspid(here, nspid) != Read::kOk || nspid.levels == 0 || nspid.innermost != seen.pid) return true;
    const auto stat = read_process_stat(here);
    if (!stat || stat->start_time != seen.start_time || exited(*stat)) return true;
    found = here;
    return false;
  });
  if (found == 0) return named;
  PidNamespace its;
  if (read_namespace(found, its) == Read::kOk) seen.pid_ns = its;
  if (pid_here != nullptr) *pid_here = found;
  return Liveness::kAlive;
}

Liveness liveness_here_too(ProcessSnapshot& seen, const PidNamespace& own, pid_t* pid_here) {
  const Liveness named = process_liveness(seen, own, pid_here);
  if (named != Liveness::kDead || !foreign_pid_namespace(seen.pid_ns, own) || seen.start_time == 0) return named;
  // Both pid and start time (in clock ticks) of a process of the caller's
  // namespace: not the one gone from the other namespace, whose pid here
  // differs from its pid there, but one that wrote no namespace over the
  // one of the process before it (a daemon of ABI 4.3 or older, a client
  // of 4.2 or older).
  if (process_liveness(seen.pid, seen.start_time) != Liveness::kAlive) return named;
  seen.pid_ns = own;
  if (pid_here != nullptr) *pid_here = seen.pid;
  return Liveness::kAlive;
}

}  // namespace bulkhead::shm
