#include "shm/segment.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "shm/stats.hpp"
#include "tests/support/children.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead::shm {
namespace {

using testing::small_segment;
using testing::TempSegmentName;

int attach_error(const std::string& name, std::string* what = nullptr) {
  try {
    Segment::attach(name, Access::kReadWrite);
  } catch (const SegmentError& e) {
    if (what != nullptr) *what = e.what();
    return e.code();
  }
  return 0;
}

TEST(Segment, CreatedSegmentAttachesWithItsCapacities) {
  TempSegmentName name;
  Segment created = Segment::create(name, small_segment(16, 8, 2));
  Segment attached = Segment::attach(name, Access::kReadOnly);
  EXPECT_EQ(attached.capacities(), (Capacities{16, 8, 2, 8}));
  EXPECT_EQ(attached.size(), segment_layout({16, 8, 2, 8}).total_size);
  EXPECT_EQ(attached.header().abi_major, kAbiMajor);
}

TEST(Segment, CreateIsMode0660WhateverTheUmask) {
  TempSegmentName name;
  const mode_t old = ::umask(0077);
  Segment s = Segment::create(name, small_segment());
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm/" + name.str()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST(Segment, RefusesAWorldAccessibleMode) {
  TempSegmentName name;
  CreateOptions o = small_segment();
  o.mode = 0666;
  try {
    Segment::create(name, o);
    FAIL() << "created a world-writable segment";
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), EINVAL);
  }
}

TEST(Segment, CreateOverAnExistingOneFails) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  try {
    Segment::create(name, small_segment());
    FAIL();
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), EEXIST);
  }
}

TEST(Segment, ANameThatIsNoDependencyNameIsRefusedSayingWhy) {
  for (const char* bad : {"a/b", "no spaces", ""}) {
    for (const bool create : {true, false}) {
      try {
        (void)(create ? Segment::create(bad, small_segment()) : Segment::attach(bad, Access::kReadOnly));
        ADD_FAILURE() << "'" << bad << "'" << (create ? " created" : " attached");
      } catch (const SegmentError& e) {
        EXPECT_EQ(e.code(), EINVAL) << bad;
        EXPECT_NE(std::string(e.what()).find("segment name '" + std::string(bad) + "'"), std::string::npos)
            << e.what();
      }
    }
  }
}

TEST(Segment, ADotNameIsRefused) {
  for (const char* dots : {".", ".."}) {
    try {
      Segment::create(dots, small_segment());
      ADD_FAILURE() << dots;
    } catch (const SegmentError& e) {
      EXPECT_EQ(e.code(), EINVAL) << dots;
      EXPECT_NE(std::string(e.what()).find("names a directory"), std::string::npos) << e.what();
    }
  }
}

TEST(Segment, MissingSegmentIsENOENT) {
  TempSegmentName name;
  EXPECT_EQ(attach_error(name), ENOENT);
}

TEST(Segment, WrongMagicIsRefused) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  s.header().magic.store(0x1234, std::memory_order_relaxed);
  std::string what;
  EXPECT_EQ(attach_error(name, &what), EBADMSG);
  EXPECT_NE(what.find("wrong magic"), std::string::npos) << what;
}

// Another major, newer or older, is refused by name, never misread: a
// client of ABI 1 (before the wait queue) would never wake a waiter; one of
// ABI 3 would add 64-bit histogram counts where ABI 4 has 32-bit ones.
TEST(Segment, OtherAbiMajorIsRefused) {
  for (const unsigned major : {kAbiMajor + 1u, 3u, 2u, 1u}) {
    TempSegmentName name;
    Segment s = Segment::create(name, small_segment());
    s.header().abi_major = static_cast<std::uint16_t>(major);
    std::string what;
    EXPECT_EQ(attach_error(name, &what), EPROTO);
    EXPECT_NE(what.find("ABI major " + std::to_string(major) + ", this build speaks 4"), std::string::npos)
        << what;
  }
}

TEST(Segment, NewerAbiMinorIsAccepted) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  s.header().abi_minor = kAbiMinor + 3;
  EXPECT_EQ(attach_error(name), 0);
}

TEST(Segment, SizesThatContradictTheCapacitiesAreRefused) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  s.header().max_processes += 1;  // the layout no longer matches
  std::string what;
  EXPECT_EQ(attach_error(name, &what), EBADMSG);
  EXPECT_NE(what.find("disagree"), std::string::npos) << what;
}

TEST(Segment, AbsurdCapacitiesAreRefused) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  s.header().max_dependencies = 1u << 30;
  EXPECT_EQ(attach_error(name), EBADMSG);
}

// validate_segment() on a fresh segment with one header field made wrong:
// refused, saying which, with its errno value. The first failed check
// answers, so each case spoils one field and leaves the rest right.
TEST(Segment, EachWrongHeaderFieldIsRefusedByName) {
  struct Case {
    const char* field;
    void (*spoil)(Header&);
    int code;
    const char* says;
  };
  const Case cases[] = {
      {"magic 0", [](Header& h) { h.magic.store(0); }, EAGAIN, "not initialised yet"},
      {"header_size", [](Header& h) { h.header_size += 8; }, EBADMSG, "header size"},
      {"histogram_buckets", [](Header& h) { h.histogram_buckets += 1; }, EBADMSG, "histogram of"},
      {"max_dependencies 0", [](Header& h) { h.max_dependencies = 0; }, EBADMSG, "capacities out of range"},
      {"max_dependencies", [](Header& h) { h.max_dependencies = kMaxDependenciesLimit + 1; }, EBADMSG,
       "capacities out of range"},
      {"max_processes 0", [](Header& h) { h.max_processes = 0; }, EBADMSG, "capacities out of range"},
      {"max_processes", [](Header& h) { h.max_processes = kMaxProcessesLimit + 1; }, EBADMSG,
       "capacities out of range"},
      {"stats_stripes 0", [](Header& h) { h.stats_stripes = 0; }, EBADMSG, "capacities out of range"},
      {"stats_stripes", [](Header& h) { h.stats_stripes = kMaxStatsStripesLimit + 1; }, EBADMSG,
       "capacities out of range"},
      {"dependency_slot_size", [](Header& h) { h.dependency_slot_size += 64; }, EBADMSG, "disagree"},
      {"process_slot_size", [](Header& h) { h.process_slot_size += 64; }, EBADMSG, "disagree"},
      {"dependency_table_offset", [](Header& h) { h.dependency_table_offset += 64; }, EBADMSG, "disagree"},
      {"process_table_offset", [](Header& h) { h.process_table_offset += 64; }, EBADMSG, "disagree"},
  };
  for (const Case& c : cases) {
    TempSegmentName name;
    Segment s = Segment::create(name, small_segment());
    int code = 0;
    ASSERT_EQ(validate_segment(&s.header(), s.size(), &code), "");
    c.spoil(s.header());
    const std::string why = validate_segment(&s.header(), s.size(), &code);
    EXPECT_NE(why.find(c.says), std::string::npos) << c.field << ": " << why;
    EXPECT_EQ(code, c.code) << c.field;
  }
  // Fewer bytes than a header: refused before any field is read.
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  int code = 0;
  EXPECT_NE(validate_segment(&s.header(), sizeof(Header) - 1, &code).find("truncated"), std::string::npos);
  EXPECT_EQ(code, EBADMSG);
}

TEST(Segment, AddressesComeFromTheValidatedLayoutNotTheHeaderAfterIt) {
  TempSegmentName name;
  Segment creator = Segment::create(name, small_segment());
  Segment s = Segment::attach(name, Access::kReadWrite);
  const auto* dependency = &s.dependency(1);
  const auto* process = &s.process(1);
  const auto* stripe = &s.stripe(1, 1);
  const auto* held = &s.held(1, 1);
  const Capacities before = s.capacities();
  // Any process in the group can write the header: scribbling over the
  // layout fields after the attach must not move a table or a capacity.
  s.header().dependency_table_offset = 0x3e3e3e3e3e3e3e3eull;
  s.header().process_table_offset = 7;
  s.header().dependency_slot_size = 1;
  s.header().process_slot_size = 0;
  s.header().max_dependencies = 1u << 30;
  s.header().stats_stripes = 0;
  EXPECT_EQ(&s.dependency(1), dependency);
  EXPECT_EQ(&s.process(1), process);
  EXPECT_EQ(&s.stripe(1, 1), stripe);
  EXPECT_EQ(&s.held(1, 1), held);
  EXPECT_EQ(s.capacities().max_dependencies, before.max_dependencies);
  EXPECT_EQ(s.capacities().stats_stripes, before.stats_stripes);
  EXPECT_EQ(s.stripe_of_process(5), 5 % before.stats_stripes);
  // A new attach validates again, and refuses what it now finds.
  EXPECT_NE(attach_error(name), 0);
}

TEST(Segment, TooManyQueueSlotsAreRefused) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  s.header().queue_slots = kMaxQueueSlotsLimit + 1;
  std::string what;
  EXPECT_EQ(attach_error(name, &what), EBADMSG);
  EXPECT_NE(what.find("queue slots"), std::string::npos) << what;
  CreateOptions too_many = small_segment();
  too_many.capacities.queue_slots = kMaxQueueSlotsLimit + 1;
  TempSegmentName other;
  EXPECT_THROW(Segment::create(other, too_many), SegmentError);
}

TEST(Segment, QueueRecordsLieBetweenTheAdmissionLineAndTheStripes) {
  TempSegmentName name;
  CreateOptions o = small_segment(4, 4, 2);
  o.capacities.queue_slots = 9;  // 72 bytes: two lines
  Segment s = Segment::create(name, o);
  EXPECT_EQ(s.queue_slots(), 9u);
  auto* slot = reinterpret_cast<char*>(&s.dependency(1));
  EXPECT_EQ(reinterpret_cast<char*>(s.queue(1)), slot + sizeof(DependencySlot));
  EXPECT_EQ(reinterpret_cast<char*>(&s.stripe(1, 0)), slot + sizeof(DependencySlot) + 2 * kCacheLine);
  EXPECT_EQ(reinterpret_cast<char*>(&s.dependency(2)),
            slot + sizeof(DependencySlot) + 2 * kCacheLine + 2 * sizeof(StatsStripe));
  for (std::uint32_t i = 0; i < 9; ++i) EXPECT_EQ(s.queue(1)[i].load(), 0u);
}

TEST(Segment, TruncatedSegmentIsRefused) {
  TempSegmentName name;
  {
    Segment s = Segment::create(name, small_segment());
  }
  const int fd = ::shm_open(("/" + name.str()).c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ::close(fd);
  std::string what;
  EXPECT_EQ(attach_error(name, &what), EBADMSG);
  EXPECT_NE(what.find("size 4096"), std::string::npos) << what;
}

TEST(Segment, TinyForeignObjectIsRefused) {
  TempSegmentName name;
  const int fd = ::shm_open(("/" + name.str()).c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "hello", 5), 5);
  ::close(fd);
  EXPECT_EQ(attach_error(name), EBADMSG);
}

// Anyone may make a file in /dev/shm. A FIFO at the segment's name is
// refused, read-only too, where opening it would wait for a writer forever
// (each attach runs in a child that an alarm kills: a hang fails the test);
// a directory is refused saying what it is.
TEST(Segment, AFileThatIsNoRegularFileIsRefusedSayingWhat) {
  TempSegmentName fifo;
  ASSERT_EQ(::mkfifo(("/dev/shm/" + fifo.str()).c_str(), 0600), 0);
  testing::run_children(2, [&](int i) {
    ::alarm(10);
    std::string what;
    try {
      Segment::attach(fifo, i == 0 ? Access::kReadOnly : Access::kReadWrite);
    } catch (const SegmentError& e) {
      what = e.what();
      if (e.code() != EBADMSG) return 1;
    }
    return what.find("refused: not a regular file but a FIFO") != std::string::npos ? 0 : 2;
  });

  TempSegmentName directory;
  const std::string path = "/dev/shm/" + directory.str();
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0);
  std::string what;
  EXPECT_EQ(attach_error(directory, &what), EBADMSG);
  EXPECT_NE(what.find("refused: not a regular file but a directory"), std::string::npos) << what;
  ::rmdir(path.c_str());
}

// Bytes of /dev/shm that the segment's file has memory for.
std::uint64_t allocated_bytes(const std::string& name) {
  struct stat st {};
  if (::stat(("/dev/shm/" + name).c_str(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

TEST(Segment, CreateGivesEveryPageItsMemory) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(256, 64, 8));
  EXPECT_GE(allocated_bytes(name), s.size());
}

TEST(Segment, WithoutReserveOnlyThePagesWrittenHaveMemory) {
  TempSegmentName name;
  CreateOptions options = small_segment(256, 64, 8);
  options.reserve = false;
  Segment s = Segment::create(name, options);
  // The header and the slots' stripes (their minimum latencies start at
  // UINT64_MAX); not the histogram tables, most of the segment.
  EXPECT_LT(allocated_bytes(name), s.size() / 2) << allocated_bytes(name) << " of " << s.size();
}

TEST(Segment, ReserveGivesALiveSegmentItsMissingPagesAndKeepsWhatItHolds) {
  TempSegmentName name;
  CreateOptions options = small_segment(256, 64, 8);
  options.reserve = false;
  Segment created = Segment::create(name, options);
  const std::uint32_t pay = find_or_claim_dependency(created, "pay", 7, 0).index;
  Segment adopted = Segment::attach(name, Access::kReadWrite);
  adopted.reserve();
  EXPECT_GE(allocated_bytes(name), adopted.size());
  EXPECT_EQ(find_dependency(adopted, "pay"), pay);
  EXPECT_EQ(adopted.dependency(pay).control.limit.load(), 7u);
  EXPECT_EQ(adopted.header().magic.load(), kMagic);
}

// In a forked child whose /dev/shm is a tmpfs of its own, `bytes` large (a
// private mount namespace: the host's /dev/shm is untouched), runs body()
// and returns the child's wait status; a SIGBUS ends the child with
// kDiedOfSigbus. The child exits kNoSmallDevShm when it cannot mount one.
constexpr int kNoSmallDevShm = 77;
constexpr int kDiedOfSigbus = 78;
int in_small_dev_shm(std::uint64_t bytes, const std::function<int()>& body) {
  const std::string size = "size=" + std::to_string(bytes);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/dev/shm", "tmpfs", 0, size.c_str()) != 0) {
      std::_Exit(kNoSmallDevShm);
    }
    struct sigaction bus {};
    bus.sa_handler = [](int) { ::_exit(kDiedOfSigbus); };
    ::sigaction(SIGBUS, &bus, nullptr);
    std::_Exit(body());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

#define SKIP_WITHOUT_A_SMALL_DEV_SHM(status)                                                   \
  if (WIFEXITED(status) && WEXITSTATUS(status) == kNoSmallDevShm) {                            \
    GTEST_SKIP() << "cannot mount a tmpfs of its own on /dev/shm (needs CAP_SYS_ADMIN)";       \
  }

// Fills /dev/shm to the last byte with a file of its own.
bool fill_dev_shm() {
  const int fd = ::open("/dev/shm/filler", O_WRONLY | O_CREAT, 0600);
  if (fd < 0) return false;
  static const char chunk[4096] = {};
  while (::write(fd, chunk, sizeof chunk) > 0) {
  }
  const int code = errno;
  ::close(fd);
  return code == ENOSPC;
}

// Writes every page of the segment, as the calls and the daemon in time
// would: each page's first byte, with the value it has.
void touch_every_page(const Segment& s) {
  auto* base = reinterpret_cast<volatile char*>(&s.header());
  for (std::uint64_t at = 0; at < s.size(); at += 4096) base[at] = base[at];
}

// 2.2 MiB: far more than the 1 MiB below, less than the 4 MiB after.
CreateOptions larger_than_a_mebibyte(bool reserve) {
  CreateOptions options = small_segment(256, 16, 8);
  options.reserve = reserve;
  return options;
}

TEST(SegmentInAFullDevShm, ASegmentThatCannotHaveItsMemoryIsNotCreated) {
  const int status = in_small_dev_shm(1 << 20, [] {
    try {
      Segment::create("bhtest-big", larger_than_a_mebibyte(true));
      return 1;
    } catch (const SegmentError& e) {
      const std::string what = e.what();
      if (e.code() != ENOSPC) return 2;
      char expected[160];
      std::snprintf(expected, sizeof expected,
                    "segment /dev/shm/bhtest-big: cannot reserve its %.1f MiB in /dev/shm: No space left on "
                    "device (1.0 MiB free)",
                    static_cast<double>(segment_layout(larger_than_a_mebibyte(true).capacities).total_size) /
                        (1 << 20));
      if (what != expected) {
        std::fprintf(stderr, "message: %s\n", what.c_str());
        return 3;
      }
    }
    struct stat st {};
    if (::stat("/dev/shm/bhtest-big", &st) == 0) return 4;  // left behind
    struct statvfs fs {};
    if (::statvfs("/dev/shm", &fs) != 0 || fs.f_bfree != fs.f_blocks) return 5;  // memory kept
    return 0;
  });
  SKIP_WITHOUT_A_SMALL_DEV_SHM(status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// Creates a segment in a 4 MiB /dev/shm, fills the rest of it, then
// writes every page of the segment; the child's wait status.
int first_writes_after_dev_shm_filled(bool reserve) {
  return in_small_dev_shm(4 << 20, [reserve] {
    Segment s = Segment::create("bhtest-big", larger_than_a_mebibyte(reserve));
    if (!fill_dev_shm()) return 1;
    touch_every_page(s);
    return 0;
  });
}

// What reserving is for: once created, the segment takes its first writes
// however full /dev/shm gets.
TEST(SegmentInAFullDevShm, AReservedSegmentTakesEveryFirstWrite) {
  const int status = first_writes_after_dev_shm_filled(true);
  SKIP_WITHOUT_A_SMALL_DEV_SHM(status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// And what it prevents: the same writes to pages left to their first
// touch end the process that makes them.
TEST(SegmentInAFullDevShm, AnUnreservedSegmentsFirstWriteDiesOfSigbus) {
  const int status = first_writes_after_dev_shm_filled(false);
  SKIP_WITHOUT_A_SMALL_DEV_SHM(status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == kDiedOfSigbus) << "status " << status;
}

// A creator killed at any point of making a segment (a daemon killed at
// its start) used to leave a file under the name that has no magic yet,
// or no size: every daemon after it, and every client, refused it for
// good as one "the daemon is creating". The name now shows the segment
// whole or not at all, and the next creation removes what the dead one
// left under its own name.
TEST(Segment, ACreatorKilledMidwayLeavesNothingHalfMade) {
  TempSegmentName name;
  const CreateOptions big = small_segment(4096, 256, 8, 64);  // some milliseconds to make
  for (int round = 0; round < 30; ++round) {
    const pid_t creator = ::fork();
    if (creator == 0) {
      Segment::create(name, big);
      std::_Exit(0);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(300 * round));
    ::kill(creator, SIGKILL);
    ::waitpid(creator, nullptr, 0);
    try {
      Segment::attach(name, Access::kReadOnly);  // made whole before the kill
    } catch (const SegmentError& e) {
      ASSERT_EQ(e.code(), ENOENT) << "round " << round << ": " << e.what();
    }
    Segment::remove(name);
    Segment::create(name, small_segment());
    Segment::remove(name);
  }
  int left = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    left += entry.path().filename().string().rfind(name.str() + "@", 0) == 0;
  }
  EXPECT_EQ(left, 0);
}

TEST(Header, TheDaemonRecordsItsPidStartTimeAndPidNamespace) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  EXPECT_EQ(read_daemon(s.header()).pid, 0);
  publish_daemon(s.header());
  const ProcessSnapshot daemon = read_daemon(s.header());
  EXPECT_EQ(daemon.pid, ::getpid());
  EXPECT_EQ(daemon.start_time, process_start_time(::getpid()));
  EXPECT_EQ(daemon.pid_ns, own_pid_namespace());
  EXPECT_TRUE(daemon.pid_ns.known());
  EXPECT_EQ(process_liveness(daemon.pid, daemon.start_time), Liveness::kAlive);
  withdraw_daemon(s.header());
  EXPECT_EQ(read_daemon(s.header()).pid, 0);
  EXPECT_FALSE(read_daemon(s.header()).pid_ns.known());
}

TEST(DependencyTable, SameNameSameSlot) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  const ClaimResult a = find_or_claim_dependency(s, "payments", 20, 0);
  const ClaimResult b = find_or_claim_dependency(s, "payments", 99, 0);
  EXPECT_TRUE(a.created);
  EXPECT_FALSE(b.created);
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(s.dependency(a.index).control.limit.load(), 20u);
  EXPECT_EQ(find_dependency(s, "payments"), a.index);
  EXPECT_EQ(find_dependency(s, "recs"), std::nullopt);
}

TEST(DependencyTable, FullTableIsENOSPC) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(4));
  std::set<std::uint32_t> slots;
  for (int i = 0; i < 4; ++i) slots.insert(find_or_claim_dependency(s, "d" + std::to_string(i), 1, 0).index);
  EXPECT_EQ(slots.size(), 4u);
  try {
    find_or_claim_dependency(s, "one-too-many", 1, 0);
    FAIL();
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), ENOSPC);
  }
  // The names already there are still found.
  EXPECT_TRUE(find_dependency(s, "d3").has_value());
}

TEST(DependencyTable, InvalidNameIsEINVAL) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  for (const char* bad : {"", "has space", "slash/name", "a-name-that-is-much-longer-than-forty-seven-bytes"}) {
    try {
      find_or_claim_dependency(s, bad, 1, 0);
      FAIL() << bad;
    } catch (const SegmentError& e) {
      EXPECT_EQ(e.code(), EINVAL) << bad;
    }
  }
}

// A name may fill the slot's 47 bytes; one more is refused.
TEST(DependencyTable, ANameMayBe47BytesLong) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  const std::string longest(kMaxNameLength, 'n');
  const std::uint32_t index = find_or_claim_dependency(s, longest, 1, 0).index;
  EXPECT_EQ(find_dependency(s, longest), index);
  EXPECT_THROW(find_or_claim_dependency(s, longest + "n", 1, 0), SegmentError);
}

// A strict daemon's pattern takes a slot of its own, flagged, limit 0; a
// name matches it only while the flag is set, and a slot's name is a
// pattern only when it reads as one (a client may write anything there).
TEST(DependencyTable, APatternSlotMatchesNamesWhileItIsFlagged) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment());
  const ClaimResult p = find_or_claim_pattern(s, "db-[0-9]*");
  EXPECT_TRUE(p.created);
  EXPECT_EQ(find_or_claim_pattern(s, "db-[0-9]*").index, p.index);
  EXPECT_EQ(s.dependency(p.index).control.flags.load(), kDependencyPattern);
  EXPECT_EQ(s.dependency(p.index).control.limit.load(), 0u);
  EXPECT_EQ(slot_pattern(s, p.index), "db-[0-9]*");
  EXPECT_TRUE(matches_pattern(s, "db-7"));
  EXPECT_TRUE(matches_pattern(s, "db-12-replica"));
  EXPECT_FALSE(matches_pattern(s, "db-x"));
  EXPECT_FALSE(matches_pattern(s, "kv-1"));
  // Not flagged: published by no daemon.
  s.dependency(p.index).control.flags.store(0);
  EXPECT_FALSE(matches_pattern(s, "db-7"));
  EXPECT_EQ(slot_pattern(s, p.index), "db-[0-9]*");
  // A dependency's name, flagged by a client, is no pattern.
  const ClaimResult d = find_or_claim_dependency(s, "payments", 5, kDependencyPattern);
  EXPECT_EQ(slot_pattern(s, d.index), std::nullopt);
  EXPECT_FALSE(matches_pattern(s, "payments"));
  // Nor is a name no pattern table could have, nor one that fills the name
  // field with no terminating NUL.
  DependencyIdentity& junk = s.dependency(p.index).identity;
  s.dependency(p.index).control.flags.store(kDependencyPattern);
  std::memcpy(junk.name, "db-]*", 6);
  junk.name_length = 5;
  EXPECT_EQ(slot_pattern(s, p.index), std::nullopt);
  EXPECT_FALSE(matches_pattern(s, "db-7"));
  std::memset(junk.name, '*', sizeof junk.name);
  junk.name_length = 1000;
  EXPECT_EQ(slot_pattern(s, p.index), std::string(kMaxNameLength, '*'));
  EXPECT_TRUE(matches_pattern(s, "anything"));
  const std::string too_long(kMaxNameLength + 1, '*');
  for (const char* bad : {"payments", "db-]", "db-[", too_long.c_str()}) {
    try {
      find_or_claim_pattern(s, bad);
      FAIL() << bad;
    } catch (const SegmentError& e) {
      EXPECT_EQ(e.code(), EINVAL) << bad;
    }
  }
}

TEST(DependencyTable, AbandonedSlotIsSkipped) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(8));
  const std::uint64_t hash = dependency_name_hash("orders");
  const std::uint32_t home = static_cast<std::uint32_t>(hash % 8);
  s.dependency(home).identity.tag.store((hash << 8) | kSlotAbandoned);
  const ClaimResult r = find_or_claim_dependency(s, "orders", 5, 0);
  EXPECT_NE(r.index, home);
  EXPECT_EQ(find_dependency(s, "orders"), r.index);
}

// Writes `name` into a slot claimed for it and publishes it, as the
// claimer in find_or_claim() does.
void finish_claim(DependencySlot& slot, std::uint64_t hash, std::string_view name, std::uint32_t limit) {
  slot.identity.name_length = static_cast<std::uint32_t>(name.size());
  std::memcpy(slot.identity.name, name.data(), name.size());
  slot.control.limit.store(limit);
  slot.identity.tag.store((hash << 8) | kSlotReady, std::memory_order_release);
}

// A lookup that met the claim of the name it looks for used to skip it and
// say "no such name": a strict client then got -ENOENT for a name the
// daemon was registering that instant.
TEST(DependencyTable, LookupWaitsOutAClaimOfItsName) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(8));
  const std::uint64_t hash = dependency_name_hash("orders");
  const std::uint32_t home = static_cast<std::uint32_t>(hash % 8);
  s.dependency(home).identity.tag.store((hash << 8) | kSlotClaiming);
  EXPECT_EQ(find_dependency(s, "orders", std::chrono::milliseconds(0)), std::nullopt);  // no patience: not yet
  std::thread claimer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    finish_claim(s.dependency(home), hash, "orders", 7);
  });
  EXPECT_EQ(find_dependency(s, "orders"), home);
  claimer.join();
  EXPECT_EQ(s.dependency(home).control.limit.load(), 7u);
}

TEST(DependencyTable, ThreadsRacingForOneNewNameMeetOnOneSlot) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(64));
  for (int round = 0; round < 50; ++round) {
    const std::string dep = "race-" + std::to_string(round);
    std::vector<std::uint32_t> got(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] { got[t] = find_or_claim_dependency(s, dep, 1, 0).index; });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(std::set<std::uint32_t>(got.begin(), got.end()).size(), 1u) << dep;
  }
}

TEST(DependencyTable, ProcessesRacingForOneNewNameMeetOnOneSlot) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(64));
  testing::run_children(4, [&](int) {
    Segment mine = Segment::attach(name, Access::kReadWrite);
    for (int i = 0; i < 40; ++i) find_or_claim_dependency(mine, "shared-" + std::to_string(i), 1, 0);
    return 0;
  });
  int ready = 0;
  for (std::uint32_t i = 0; i < 64; ++i) {
    ready += (s.dependency(i).identity.tag.load() & 0xff) == kSlotReady;
  }
  EXPECT_EQ(ready, 40);  // one slot per name, none twice
}

TEST(ProcessTable, ClaimRecordsPidStartTimeAndNamespaceAndReleaseFrees) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(4, 2));
  const ProcessClaim a = claim_process_slot(s);
  const ProcessClaim b = claim_process_slot(s);
  EXPECT_NE(a.index, b.index);
  EXPECT_EQ(s.process(a.index).identity.pid.load(), ::getpid());
  EXPECT_EQ(s.process(a.index).identity.start_time.load(), process_start_time(::getpid()).value());
  EXPECT_EQ(own_start_time(), process_start_time(::getpid()));
  const PidNamespace ns = own_pid_namespace();
  EXPECT_TRUE(ns.known());
  EXPECT_EQ(s.process(a.index).identity.pid_ns_device.load(), ns.device);
  EXPECT_EQ(s.process(a.index).identity.pid_ns_inode.load(), ns.inode);
  EXPECT_EQ(read_process_slot(s, a.index)->pid_ns, ns);
  try {
    claim_process_slot(s);
    FAIL();
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), ENOSPC);
  }
  release_process_slot(s, a);
  EXPECT_EQ(s.process(a.index).identity.state.load(), kSlotFree);
  EXPECT_EQ(s.process(a.index).identity.pid.load(), 0);  // no stale pid for the reclaim scan to read
  EXPECT_EQ(s.process(a.index).identity.start_time.load(), 0u);
  EXPECT_EQ(s.process(a.index).identity.pid_ns_inode.load(), 0u);  // a client of ABI 4.2 writes none
  EXPECT_EQ(s.process(a.index).identity.pid_ns_device.load(), 0u);
  const ProcessClaim again = claim_process_slot(s);
  EXPECT_EQ(again.index, a.index);
  EXPECT_EQ(again.claims, a.claims + 1);  // each claim counted
}

// The liveness lock: held while its owner keeps it, dropped with it (as
// exec closes it), and read only for the claim that recorded it.
TEST(ProcessTable, ALivenessLockIsDroppedWithItsDescriptorAndReadForItsClaimOnly) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(4, 2));
  const ProcessClaim claim = claim_process_slot(s);
  EXPECT_FALSE(liveness_lock_dropped(s, *read_process_slot(s, claim.index)));  // none recorded
  std::optional<LivenessLock> lock(std::in_place, s, claim);
  ASSERT_TRUE(lock->held());
  const ProcessSnapshot seen = *read_process_slot(s, claim.index);
  EXPECT_EQ(seen.lock_claim >> 32, claim.claims);
  EXPECT_FALSE(liveness_lock_dropped(s, seen));
  // Another slot's byte is not this one's.
  const ProcessClaim other = claim_process_slot(s);
  const LivenessLock other_lock(s, other);
  lock.reset();
  EXPECT_TRUE(liveness_lock_dropped(s, seen));
  EXPECT_FALSE(liveness_lock_dropped(s, *read_process_slot(s, other.index)));
  // A claim since that recorded no lock (a client of ABI 4.4) is not
  // taken for the one that did, nor is a record of another pid.
  ProcessSnapshot later = seen;
  ++later.claim.claims;
  EXPECT_FALSE(liveness_lock_dropped(s, later));
  ProcessSnapshot elsewhere = seen;
  ++elsewhere.pid;
  EXPECT_FALSE(liveness_lock_dropped(s, elsewhere));
  // Nor a process of the same pid started at another time: a client of
  // ABI 4.2, which counts no claim, in the slot of a record left behind
  // (an abandoned claim, a daemon of 4.4 that freed the slot).
  ProcessSnapshot restarted = seen;
  ++restarted.start_time;
  EXPECT_FALSE(liveness_lock_dropped(s, restarted));
  // A release clears the record.
  release_process_slot(s, claim);
  EXPECT_EQ(s.process(claim.index).identity.lock_claim.load(), 0u);
}

// A process that opens its client with standard input closed, then
// redirects it (dup2 onto 0), must not close the lock's descriptor.
TEST(ProcessTable, ALivenessLockIsNotHeldOnAStandardStream) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(4, 2));
  const ProcessClaim claim = claim_process_slot(s);
  const int saved = ::dup(STDIN_FILENO);
  ASSERT_GE(saved, 0);
  ::close(STDIN_FILENO);
  const LivenessLock lock(s, claim);
  ASSERT_EQ(::dup2(saved, STDIN_FILENO), STDIN_FILENO);  // standard input back
  ::close(saved);
  ASSERT_TRUE(lock.held());
  EXPECT_FALSE(liveness_lock_dropped(s, *read_process_slot(s, claim.index)));
}

// A forked child shares the lock's open file description: its copy keeps
// the lock held until dropped (what the client's fork handler does).
TEST(ProcessTable, AForkedChildsCopyOfALivenessLockKeepsItUntilDropped) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(4, 2));
  const ProcessClaim claim = claim_process_slot(s);
  std::optional<LivenessLock> lock(std::in_place, s, claim);
  const ProcessSnapshot seen = *read_process_slot(s, claim.index);
  for (const bool drop : {false, true}) {
    testing::PausedChild child([&] {
      if (drop) lock->drop_copy();
      return true;
    });
    ASSERT_TRUE(child.ok());
    if (drop) {
      EXPECT_FALSE(liveness_lock_dropped(s, seen));  // the parent's stays
    }
    lock.reset();  // as the parent's exec would
    EXPECT_EQ(liveness_lock_dropped(s, seen), drop) << (drop ? "dropped" : "kept by the child");
    child.kill();
    EXPECT_TRUE(liveness_lock_dropped(s, seen));
    lock.emplace(s, claim);  // again, for the next round
  }
}

// The race the claim count closes: the daemon reads a ready slot, its
// process exits (releasing it) and another process claims the slot, and
// then the daemon's check of the process it read finds it dead.
TEST(ProcessTable, ASlotClaimedAgainSinceTheSnapshotIsNotTaken) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(4, 2));
  const ProcessClaim first = claim_process_slot(s);
  const std::optional<ProcessSnapshot> seen = read_process_slot(s, first.index);
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->pid, ::getpid());
  EXPECT_EQ(seen->claim.claims, first.claims);
  release_process_slot(s, first);
  EXPECT_FALSE(read_process_slot(s, first.index));  // free: nothing to check
  const ProcessClaim second = claim_process_slot(s);
  ASSERT_EQ(second.index, first.index);
  EXPECT_FALSE(take_process_slot(s, *seen));
  // Left as it was, for the process that holds it now.
  EXPECT_EQ(s.process(second.index).identity.state.load(), kSlotReady);
  EXPECT_EQ(s.process(second.index).identity.pid.load(), ::getpid());
  // Its own release still frees it.
  release_process_slot(s, second);
  EXPECT_EQ(s.process(second.index).identity.state.load(), kSlotFree);
}

TEST(ProcessTable, ASlotReleasedSinceTheSnapshotIsNotTaken) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(4, 2));
  const ProcessClaim claim = claim_process_slot(s);
  const std::optional<ProcessSnapshot> seen = read_process_slot(s, claim.index);
  ASSERT_TRUE(seen);
  release_process_slot(s, claim);
  EXPECT_FALSE(take_process_slot(s, *seen));
  EXPECT_EQ(s.process(claim.index).identity.state.load(), kSlotFree);
}

TEST(ProcessTable, ASlotTheDaemonTookIsLeftAloneByItsOldClaim) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(4, 2));
  const ProcessClaim claim = claim_process_slot(s);
  const std::optional<ProcessSnapshot> seen = read_process_slot(s, claim.index);
  ASSERT_TRUE(seen);
  ASSERT_TRUE(take_process_slot(s, *seen));
  EXPECT_EQ(s.process(claim.index).identity.state.load(), kSlotClaiming);  // the daemon clears it meanwhile
  EXPECT_FALSE(read_process_slot(s, claim.index));
  free_process_slot(s, claim.index);
  EXPECT_EQ(s.process(claim.index).identity.state.load(), kSlotFree);
  // Claimed by another process since: the old claim's release leaves it.
  const ProcessClaim other = claim_process_slot(s);
  ASSERT_EQ(other.index, claim.index);
  release_process_slot(s, claim);
  EXPECT_EQ(s.process(other.index).identity.state.load(), kSlotReady);
  EXPECT_EQ(s.process(other.index).identity.pid.load(), ::getpid());
}

TEST(ProcessTable, AClaimThatFinishesIsNotFreedAsAbandoned) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(4, 2));
  const ProcessClaim claim = claim_process_slot(s);
  abandon_process_claim(s, claim.index);  // the daemon, having seen it claiming a tick too long
  EXPECT_EQ(s.process(claim.index).identity.state.load(), kSlotReady);
  EXPECT_EQ(s.process(claim.index).identity.pid.load(), ::getpid());
}

TEST(ProcessTable, StartTimeOfAMissingProcessIsNothing) {
  pid_t pid = ::fork();
  if (pid == 0) std::_Exit(0);
  ::waitpid(pid, nullptr, 0);
  EXPECT_EQ(process_start_time(pid), std::nullopt);
  EXPECT_TRUE(process_start_time(::getpid()).has_value());
}

TEST(ProcessTable, LivenessTellsAliveDeadZombieAndReusedPids) {
  const pid_t self = ::getpid();
  const std::uint64_t start = process_start_time(self).value();
  EXPECT_EQ(process_liveness(self, start), Liveness::kAlive);
  EXPECT_EQ(process_liveness(self, 0), Liveness::kAlive);          // start time not recorded
  EXPECT_EQ(process_liveness(self, start + 1), Liveness::kDead);   // the pid was reused
  EXPECT_EQ(process_liveness(0, 0), Liveness::kDead);
  const pid_t child = ::fork();
  if (child == 0) std::_Exit(0);
  // Exited, not reaped: a zombie has run its last instruction.
  ASSERT_TRUE(testing::wait_until_exited(child));
  ASSERT_EQ(read_process_stat(child).value_or(ProcessStat{'R', 0}).state, 'Z');
  EXPECT_EQ(process_liveness(child, 0), Liveness::kDead);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(process_liveness(child, 0), Liveness::kDead);
}

// A main thread that calls pthread_exit() leaves a zombie in /proc while
// the process's other threads run on (and may hold permits): alive until
// the last of them exits.
TEST(ProcessTable, AZombieMainThreadWithThreadsRunningIsAlive) {
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    pthread_t worker;
    // Waits for the parent's word, then ends the process (exit_group: not
    // a return, which under ThreadSanitizer would wait on the main thread
    // it no longer has).
    const auto wait_for_parent = [](void* fd) -> void* {
      char c;
      while (::read(*static_cast<int*>(fd), &c, 1) < 0 && errno == EINTR) {
      }
      std::_Exit(0);
    };
    if (::pthread_create(&worker, nullptr, wait_for_parent, &go[0]) != 0) std::_Exit(1);
    // What pthread_exit() does to the kernel's view: the main thread alone
    // exits. (pthread_exit() itself would unwind through the test
    // framework's catch-all.)
    ::syscall(SYS_exit, 0);
  }
  ::close(go[0]);
  const std::uint64_t start = process_start_time(child).value();
  auto stat = read_process_stat(child);
  for (int i = 0; i < 1000 && (!stat || stat->state != 'Z'); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stat = read_process_stat(child);
  }
  ASSERT_TRUE(stat.has_value());
  ASSERT_EQ(stat->state, 'Z') << "the main thread did not exit";
  EXPECT_GE(stat->threads, 2u);  // the worker (and a sanitizer's own threads)
  EXPECT_EQ(process_liveness(child, start), Liveness::kAlive);
  ASSERT_EQ(::write(go[1], "x", 1), 1);  // the worker returns: the process exits
  ::close(go[1]);
  for (int i = 0; i < 1000 && process_liveness(child, start) != Liveness::kDead; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(process_liveness(child, start), Liveness::kDead);  // exited, not reaped yet
  ::kill(child, SIGKILL);  // in case it did not: never wait forever
  ::waitpid(child, nullptr, 0);
}

TEST(Stats, ReadingsSumStripesAndDeltasSubtract) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(4, 4, 3));
  const DependencyCounters before = read_counters(s, 1);
  // As clients record: a success's bucket, then its latency on the sum.
  s.latency_histogram(1, 0).bucket[histogram_bucket(1'000'000)].fetch_add(2);
  s.stripe(1, 0).rtt_sum_ns.fetch_add(2'000'000);
  s.latency_histogram(1, 2).bucket[histogram_bucket(3'000'000)].fetch_add(1);
  s.stripe(1, 2).rtt_sum_ns.fetch_add(3'000'000);
  s.stripe(1, 1).dropped.fetch_add(5);
  const DependencyCounters d = read_counters(s, 1).since(before);
  EXPECT_EQ(d.ok, 3u);
  EXPECT_EQ(d.dropped, 5u);
  EXPECT_EQ(d.rtt_sum_ns, 5'000'000u);
  EXPECT_EQ(read_counters(s, 0).ok, 0u);  // other dependencies untouched
}

TEST(Stats, QueueCountersAndWaitHistogramAreSummed) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(4, 4, 2));
  const DependencyCounters before = read_counters(s, 2);
  s.stripe(2, 0).queue_full.fetch_add(3);
  s.stripe(2, 1).deadline_rejected.fetch_add(2);
  s.wait_histogram(2).bucket[histogram_bucket(5'000'000)].fetch_add(1);
  s.wait_histogram(2).bucket[histogram_bucket(7'000'000)].fetch_add(1);
  s.dependency(2).waits.wait_sum_ns.fetch_add(12'000'000);
  const DependencyCounters d = read_counters(s, 2).since(before);
  EXPECT_EQ(d.queue_full, 3u);
  EXPECT_EQ(d.deadline_rejected, 2u);
  EXPECT_EQ(d.waited, 2u);
  EXPECT_EQ(d.wait_sum_ns, 12'000'000u);
  EXPECT_EQ(d.ok, 0u);  // waits are not latency samples
  EXPECT_EQ(d.wait_histogram[histogram_bucket(5'000'000)], 1u);
}

TEST(Stats, WindowExtremesAreTakenOnce) {
  TempSegmentName name;
  Segment s = Segment::create(name, small_segment(4, 4, 2));
  s.stripe(0, 0).rtt_min_ns.store(300);
  s.stripe(0, 1).rtt_min_ns.store(200);
  s.stripe(0, 1).rtt_max_ns.store(900);
  s.stripe(0, 0).max_inflight.store(7);
  const WindowExtremes first = take_window_extremes(s, 0);
  EXPECT_EQ(first.rtt_min_ns, 200u);
  EXPECT_EQ(first.rtt_max_ns, 900u);
  EXPECT_EQ(first.max_inflight, 7u);
  const WindowExtremes second = take_window_extremes(s, 0);
  EXPECT_EQ(second.rtt_min_ns, UINT64_MAX);
  EXPECT_EQ(second.max_inflight, 0u);
}

}  // namespace
}  // namespace bulkhead::shm
