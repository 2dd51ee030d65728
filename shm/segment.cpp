#include "shm/segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace bip = boost::interprocess;

namespace bulkhead::shm {

struct Segment::Mapping {
  bip::shared_memory_object object;
  bip::mapped_region region;
};

namespace {

std::string describe(const std::string& name) { return "segment /dev/shm/" + name; }

// What a file at /dev/shm/NAME that is not a regular file is, or null when
// it is one (or is not there: opening it says so). Anyone may make a file in
// /dev/shm: opening a FIFO there read-only would block until some writer
// came, and a directory has no segment to map.
const char* not_a_segment_file(const std::string& name) {
  struct stat st {};
  if (::stat(("/dev/shm/" + name).c_str(), &st) != 0 || S_ISREG(st.st_mode)) return nullptr;
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "a device";
}

int native_error(const bip::interprocess_exception& e) {
  const int native = e.get_native_error();
  if (native != 0) return native;
  switch (e.get_error_code()) {
    case bip::not_found_error: return ENOENT;
    case bip::already_exists_error: return EEXIST;
    case bip::security_error: return EACCES;
    default: return EIO;
  }
}

// What a segment under its name with no magic yet is: create() makes one
// whole before it gives it the name. Daemons of ABI 4.4 made before that
// (451bf96) made it in place too: the ABI does not tell them apart.
constexpr std::string_view kMadeByAnOlderDaemon =
    "a bulkheadd older than this build is making it in place, or died doing so";

// Segment::create() makes a segment under a name of its own, NAME@making-
// PID-N, and links it to NAME once whole. '@' is in no segment's name.
constexpr std::string_view kMakingInfix = "@making-";

// Removes what creators killed midway left: files NAME@making-PID-N of a
// process no longer there.
void remove_abandoned_makings(const std::string& name) {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  const std::string prefix = name + std::string(kMakingInfix);
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view file(entry->d_name);
    if (file.substr(0, prefix.size()) != prefix) continue;
    const long pid = std::strtol(entry->d_name + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      bip::shared_memory_object::remove(entry->d_name);
    }
  }
  ::closedir(dir);
}

void check_name(const std::string& name) {
  if (const char* why = check_segment_name(name)) throw SegmentError(EINVAL, name_error("segment name", name, why));
}

// The file's mode (past the umask) and, when given, its group. Only what
// differs is changed: a chown to the group the file has already would fail
// where chown is refused (bulkheadd.service's system call filter, or an
// owner outside the group). A new group gets the file with only the bits
// both modes give (never, for an instant, what the old mode gave the old
// group), and a refused chown leaves the file as it was.
void set_access(int fd, std::uint32_t mode, std::optional<gid_t> group, const std::string& name) {
  const auto chmod_or_throw = [&](std::uint32_t bits) {
    if (::fchmod(fd, bits) != 0) throw SegmentError(errno, describe(name) + ": chmod: " + std::strerror(errno));
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw SegmentError(errno, describe(name) + ": stat: " + std::strerror(errno));
  std::uint32_t bits = st.st_mode & 07777;
  if (group && st.st_gid != *group) {
    const std::uint32_t was = bits;
    bits = was & mode;
    if (bits != was) chmod_or_throw(bits);
    if (::fchown(fd, static_cast<uid_t>(-1), *group) != 0) {
      const int code = errno;
      if (bits != was) (void)::fchmod(fd, was);
      throw SegmentError(code,
                         describe(name) + ": chown to group " + std::to_string(*group) + ": " + std::strerror(code));
    }
  }
  if (bits != mode) chmod_or_throw(mode);
}

void reserve_file(int fd, std::uint64_t size, const std::string& name) {
  int rc;
  do {
    rc = ::fallocate(fd, 0, 0, static_cast<off_t>(size));
  } while (rc != 0 && errno == EINTR);  // tmpfs stops for a signal, having undone its work
  if (rc == 0) return;
  const int code = errno;
  std::string why = describe(name) + ": cannot reserve its " + mebibytes(size) + " in /dev/shm: " + std::strerror(code);
  struct statvfs fs {};
  if (code == ENOSPC && ::fstatvfs(fd, &fs) == 0) {
    why += " (" + mebibytes(std::uint64_t{fs.f_bavail} * fs.f_frsize) + " free)";
  }
  throw SegmentError(code, why);
}

bool capacities_in_range(const Capacities& c) {
  return c.max_dependencies != 0 && c.max_dependencies <= kMaxDependenciesLimit &&
         c.max_processes != 0 && c.max_processes <= kMaxProcessesLimit && c.stats_stripes != 0 &&
         c.stats_stripes <= kMaxStatsStripesLimit && c.queue_slots <= kMaxQueueSlotsLimit;
}

}  // namespace

std::string mebibytes(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

std::string validate_segment(const void* base, std::uint64_t size, int* code) {
  auto fail = [code](int c, std::string why) {
    if (code != nullptr) *code = c;
    return why;
  };
  if (size < sizeof(Header)) {
    return fail(EBADMSG, "truncated: " + std::to_string(size) + " bytes, the header alone needs " +
                             std::to_string(sizeof(Header)));
  }
  const auto& h = *static_cast<const Header*>(base);
  // Pairs with the release store of the magic in Segment::create(): seeing
  // it means the rest of line 0 is written.
  const std::uint64_t magic = h.magic.load(std::memory_order_acquire);
  if (magic == 0) return fail(EAGAIN, "not initialised yet (" + std::string(kMadeByAnOlderDaemon) + ")");
  if (magic != kMagic) return fail(EBADMSG, "wrong magic: not a bulkhead segment");
  if (h.abi_major != kAbiMajor) {
    return fail(EPROTO, "ABI major " + std::to_string(h.abi_major) + ", this build speaks " +
                            std::to_string(kAbiMajor));
  }
  if (h.header_size != sizeof(Header)) {
    return fail(EBADMSG, "header size " + std::to_string(h.header_size) + ", expected " +
                             std::to_string(sizeof(Header)));
  }
  if (h.histogram_buckets != kHistogramBuckets) {
    return fail(EBADMSG, "histogram of " + std::to_string(h.histogram_buckets) +
                             " buckets, expected " + std::to_string(kHistogramBuckets));
  }
  const Capacities c{h.max_dependencies, h.max_processes, h.stats_stripes, h.queue_slots};
  if (!capacities_in_range(c)) {
    return fail(EBADMSG, "capacities out of range: " + std::to_string(c.max_dependencies) +
                             " dependencies, " + std::to_string(c.max_processes) + " processes, " +
                             std::to_string(c.stats_stripes) + " stripes, " +
                             std::to_string(c.queue_slots) + " queue slots");
  }
  const Layout l = segment_layout(c);
  if (h.dependency_slot_size != l.dependency_slot_size ||
      h.process_slot_size != l.process_slot_size ||
      h.dependency_table_offset != l.dependency_table_offset ||
      h.process_table_offset != l.process_table_offset || h.total_size != l.total_size) {
    return fail(EBADMSG, "layout fields disagree with the capacities");
  }
  if (size != l.total_size) {
    return fail(EBADMSG, "size " + std::to_string(size) + " bytes, the header says " +
                             std::to_string(l.total_size));
  }
  return {};
}

Segment::Segment(std::string name, std::unique_ptr<Mapping> mapping, const Capacities& capacities)
    : name_(std::move(name)),
      mapping_(std::move(mapping)),
      base_(static_cast<char*>(mapping_->region.get_address())),
      size_(mapping_->region.get_size()),
      capacities_(capacities),
      layout_(segment_layout(capacities)) {}

Segment::Segment(Segment&&) noexcept = default;
Segment& Segment::operator=(Segment&&) noexcept = default;
Segment::~Segment() = default;

Segment Segment::create(const std::string& name, const CreateOptions& options) {
  check_name(name);
  const Capacities& c = options.capacities;
  if (!capacities_in_range(c)) {
    throw SegmentError(EINVAL, describe(name) + ": capacities out of range");
  }
  if ((options.mode & 0007) != 0) {
    throw SegmentError(EINVAL, describe(name) + ": mode must not grant others any access");
  }
  const Layout l = segment_layout(c);
  // Made whole under a name of this call's, then linked to `name`: a
  // creator killed midway leaves no half-made segment under the name,
  // which every daemon after it, and every client, would refuse for good
  // ("the daemon is creating it"). link() fails with EEXIST where the name
  // exists, as creating it did.
  static std::atomic<unsigned> makings{0};
  remove_abandoned_makings(name);
  const std::string making =
      name + std::string(kMakingInfix) + std::to_string(::getpid()) + "-" + std::to_string(makings++);
  auto mapping = std::make_unique<Mapping>();
  try {
    mapping->object = bip::shared_memory_object(bip::create_only, making.c_str(), bip::read_write,
                                                bip::permissions(options.mode));
  } catch (const bip::interprocess_exception& e) {
    const int code = native_error(e);
    throw SegmentError(code, describe(name) + ": cannot create: " + std::strerror(code));
  }
  try {
    const int fd = mapping->object.get_mapping_handle().handle;
    // shm_open applies the umask; set the mode the config asked for.
    set_access(fd, options.mode, options.group, name);
    mapping->object.truncate(static_cast<bip::offset_t>(l.total_size));
    if (options.reserve) reserve_file(fd, l.total_size, name);
    mapping->region = bip::mapped_region(mapping->object, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(making.c_str());
    const int code = native_error(e);
    throw SegmentError(code, describe(name) + ": cannot size or map: " + std::strerror(code));
  } catch (...) {
    bip::shared_memory_object::remove(making.c_str());
    throw;
  }

  Segment segment(name, std::move(mapping), c);
  // A new object reads as zeros: every slot is free, every counter 0.
  Header& h = segment.header();
  h.abi_major = kAbiMajor;
  h.abi_minor = kAbiMinor;
  h.header_size = sizeof(Header);
  h.total_size = l.total_size;
  h.max_dependencies = c.max_dependencies;
  h.max_processes = c.max_processes;
  h.stats_stripes = c.stats_stripes;
  h.histogram_buckets = kHistogramBuckets;
  h.queue_slots = static_cast<std::uint16_t>(c.queue_slots);
  h.dependency_slot_size = l.dependency_slot_size;
  h.process_slot_size = l.process_slot_size;
  h.dependency_table_offset = l.dependency_table_offset;
  h.process_table_offset = l.process_table_offset;
  for (std::uint32_t d = 0; d < c.max_dependencies; ++d) {
    for (std::uint32_t s = 0; s < c.stats_stripes; ++s) {
      segment.stripe(d, s).rtt_min_ns.store(UINT64_MAX, std::memory_order_relaxed);
    }
  }
  // Pairs with the acquire load in validate_segment(): a reader that sees
  // the magic sees the header above.
  h.magic.store(kMagic, std::memory_order_release);
  const int linked = ::link(("/dev/shm/" + making).c_str(), ("/dev/shm/" + name).c_str());
  const int code = errno;
  bip::shared_memory_object::remove(making.c_str());
  if (linked != 0) throw SegmentError(code, describe(name) + ": cannot create: " + std::strerror(code));
  return segment;
}

int Segment::descriptor() const { return mapping_->object.get_mapping_handle().handle; }

void Segment::reserve() const { reserve_file(descriptor(), size_, name_); }

Segment::FileAccess Segment::file_access() const {
  struct stat st {};
  if (::fstat(descriptor(), &st) != 0) {
    throw SegmentError(errno, describe(name_) + ": stat: " + std::strerror(errno));
  }
  return {static_cast<std::uint32_t>(st.st_mode & 07777), st.st_gid, st.st_uid, st.st_nlink};
}

void Segment::set_file_access(std::uint32_t mode, gid_t group) const {
  set_access(descriptor(), mode, group, name_);
}

std::uint64_t Segment::reserved_bytes() const {
  struct stat st {};
  if (::fstat(descriptor(), &st) != 0) return 0;
  return std::min<std::uint64_t>(static_cast<std::uint64_t>(st.st_blocks) * 512, size_);
}

Segment Segment::attach(const std::string& name, Access access) {
  check_name(name);
  if (const char* what = not_a_segment_file(name)) {
    throw SegmentError(EBADMSG, describe(name) + ": refused: not a regular file but " + what);
  }
  const auto mode = access == Access::kReadOnly ? bip::read_only : bip::read_write;
  auto mapping = std::make_unique<Mapping>();
  bip::offset_t size = 0;
  try {
    mapping->object = bip::shared_memory_object(bip::open_only, name.c_str(), mode);
    mapping->object.get_size(size);
  } catch (const bip::interprocess_exception& e) {
    const int code = native_error(e);
    throw SegmentError(code, describe(name) + ": cannot open: " + std::strerror(code));
  }
  if (static_cast<std::uint64_t>(size) < sizeof(Header)) {
    throw SegmentError(size == 0 ? EAGAIN : EBADMSG,
                       describe(name) + ": refused: " +
                           (size == 0 ? "empty (" + std::string(kMadeByAnOlderDaemon) + ")"
                                      : "truncated: " + std::to_string(size) + " bytes"));
  }
  try {
    mapping->region = bip::mapped_region(mapping->object, mode);
  } catch (const bip::interprocess_exception& e) {
    const int code = native_error(e);
    throw SegmentError(code, describe(name) + ": cannot map: " + std::strerror(code));
  }
  int code = 0;
  const std::string why = validate_segment(mapping->region.get_address(),
                                           mapping->region.get_size(), &code);
  if (!why.empty()) throw SegmentError(code, describe(name) + ": refused: " + why);
  // Read once, just validated; from now on only these are trusted.
  const auto& h = *static_cast<const Header*>(mapping->region.get_address());
  const Capacities capacities{h.max_dependencies, h.max_processes, h.stats_stripes, h.queue_slots};
  return Segment(name, std::move(mapping), capacities);
}

bool Segment::remove(const std::string& name) {
  return bip::shared_memory_object::remove(name.c_str());
}

DependencySlot& Segment::dependency(std::uint32_t index) const {
  return *reinterpret_cast<DependencySlot*>(base_ + layout_.dependency_table_offset +
                                            std::uint64_t{index} * layout_.dependency_slot_size);
}

std::atomic<std::uint64_t>* Segment::queue(std::uint32_t dependency_index) const {
  return reinterpret_cast<std::atomic<std::uint64_t>*>(reinterpret_cast<char*>(&dependency(dependency_index)) +
                                                       sizeof(DependencySlot));
}

StatsStripe& Segment::stripe(std::uint32_t dependency_index, std::uint32_t stripe) const {
  auto* first = reinterpret_cast<char*>(queue(dependency_index)) + queue_bytes(capacities_.queue_slots);
  return *reinterpret_cast<StatsStripe*>(first + std::uint64_t{stripe} * sizeof(StatsStripe));
}

HistogramCounts& Segment::latency_histogram(std::uint32_t dependency_index, std::uint32_t stripe) const {
  return reinterpret_cast<HistogramCounts*>(base_ + layout_.latency_table_offset)
      [std::uint64_t{stripe} * capacities_.max_dependencies + dependency_index];
}

HistogramCounts& Segment::wait_histogram(std::uint32_t dependency_index) const {
  return reinterpret_cast<HistogramCounts*>(base_ + layout_.wait_table_offset)[dependency_index];
}

ProcessSlot& Segment::process(std::uint32_t index) const {
  return *reinterpret_cast<ProcessSlot*>(base_ + layout_.process_table_offset +
                                         std::uint64_t{index} * layout_.process_slot_size);
}

std::atomic<std::uint64_t>& Segment::held(std::uint32_t process_index,
                                          std::uint32_t dependency_index) const {
  auto* first = reinterpret_cast<char*>(&process(process_index)) + sizeof(ProcessSlot);
  return reinterpret_cast<std::atomic<std::uint64_t>*>(first)[dependency_index];
}

// --- The dependency table ------------------------------------------------

namespace {

constexpr std::uint64_t kTagStateMask = 0xff;

constexpr std::uint64_t tag_of(std::uint64_t hash, SlotState state) { return (hash << 8) | state; }

bool holds_name(const DependencyIdentity& id, std::string_view name) {
  return id.name_length == name.size() && std::memcmp(id.name, name.data(), name.size()) == 0;
}

// Waits while `id` is being claimed for a name of `hash` (probably the name
// looked for, by another process this instant), until `give_up_at`; returns
// the tag last read, still claiming when the claim did not finish in time.
// Acquire pairs with the release CAS to kSlotReady in find_or_claim().
std::uint64_t wait_out_claim(const DependencyIdentity& id, std::uint64_t hash, std::uint64_t tag,
                             std::chrono::steady_clock::time_point give_up_at) {
  while (tag == tag_of(hash, kSlotClaiming) && std::chrono::steady_clock::now() < give_up_at) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    tag = id.tag.load(std::memory_order_acquire);
  }
  return tag;
}

}  // namespace

std::uint64_t dependency_name_hash(std::string_view name) {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a 64 offset basis
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;  // FNV-1a 64 prime
  }
  h &= (std::uint64_t{1} << 56) - 1;
  return h == 0 ? 1 : h;
}

std::optional<std::uint32_t> find_dependency(const Segment& segment, std::string_view name,
                                             std::chrono::milliseconds patience) {
  const std::uint64_t hash = dependency_name_hash(name);
  const std::uint32_t capacity = segment.capacities().max_dependencies;
  const auto give_up_at = std::chrono::steady_clock::now() + patience;
  for (std::uint32_t probe = 0; probe < capacity; ++probe) {
    const std::uint32_t index = static_cast<std::uint32_t>((hash + probe) % capacity);
    const DependencyIdentity& id = segment.dependency(index).identity;
    // Pairs with the release store of kSlotReady in find_or_claim_dependency():
    // a ready tag means the name is written. A claim of this hash is waited
    // out: skipped, it would leave a name the daemon is registering this
    // instant not found (a strict client's -ENOENT for a configured name).
    const std::uint64_t tag =
        wait_out_claim(id, hash, id.tag.load(std::memory_order_acquire), give_up_at);
    const auto state = tag & kTagStateMask;
    if (state == kSlotFree) return std::nullopt;  // the probe sequence ends here
    if (state == kSlotReady && (tag >> 8) == hash && holds_name(id, name)) return index;
  }
  return std::nullopt;
}

namespace {

// find_or_claim_dependency() and find_or_claim_pattern(), for a name or a
// pattern already checked.
ClaimResult find_or_claim(Segment& segment, std::string_view name, std::uint32_t initial_limit,
                          std::uint32_t flags, std::chrono::milliseconds patience) {
  const std::uint64_t hash = dependency_name_hash(name);
  const std::uint32_t capacity = segment.capacities().max_dependencies;
  const auto give_up_at = std::chrono::steady_clock::now() + patience;
  for (std::uint32_t probe = 0; probe < capacity; ++probe) {
    const std::uint32_t index = static_cast<std::uint32_t>((hash + probe) % capacity);
    DependencySlot& slot = segment.dependency(index);
    DependencyIdentity& id = slot.identity;
    // Pairs with the release store of kSlotReady below (by another process).
    std::uint64_t tag = id.tag.load(std::memory_order_acquire);
    for (;;) {
      const auto state = tag & kTagStateMask;
      if (state == kSlotFree) {
        const std::uint64_t claiming = tag_of(hash, kSlotClaiming);
        if (!id.tag.compare_exchange_strong(tag, claiming, std::memory_order_acquire)) {
          continue;  // someone else claimed it first: look at what they wrote
        }
        id.name_length = static_cast<std::uint32_t>(name.size());
        std::memcpy(id.name, name.data(), name.size());
        id.name[name.size()] = '\0';
        slot.control.limit.store(initial_limit, std::memory_order_relaxed);
        // No partitions until the daemon publishes some: calls that name
        // none are admitted under the limit itself.
        slot.partitions.admit_limit.store(initial_limit, std::memory_order_relaxed);
        slot.control.flags.store(flags, std::memory_order_relaxed);
        std::uint64_t expected = claiming;
        // Release pairs with the acquire loads of the tag in lookups: the
        // name and limit above are visible to whoever sees kSlotReady.
        if (id.tag.compare_exchange_strong(expected, tag_of(hash, kSlotReady),
                                           std::memory_order_release, std::memory_order_relaxed)) {
          return {index, true};
        }
        // The daemon took our claim for a dead one and abandoned the slot
        // (we were descheduled for over a second). Start again.
        return find_or_claim(segment, name, initial_limit, flags, patience);
      }
      if (state == kSlotReady) {
        if ((tag >> 8) == hash && holds_name(id, name)) return {index, false};
        break;
      }
      if (state == kSlotClaiming && (tag >> 8) == hash) {
        tag = wait_out_claim(id, hash, tag, give_up_at);
        if (tag == tag_of(hash, kSlotClaiming)) {
          throw SegmentError(EAGAIN, "dependency '" + std::string(name) +
                                         "': another process's claim of its slot did not finish");
        }
        continue;
      }
      break;  // another name's claim, or an abandoned slot
    }
  }
  throw SegmentError(ENOSPC, "dependency table full (" + std::to_string(capacity) +
                                 " slots, daemon.max_dependencies): cannot add '" + std::string(name) + "'");
}

// The name a ready slot holds, as far as it fits in the slot.
std::string_view slot_name(const DependencyIdentity& id) {
  return {id.name, std::min<std::size_t>(id.name_length, kMaxNameLength)};
}

}  // namespace

ClaimResult find_or_claim_dependency(Segment& segment, std::string_view name,
                                     std::uint32_t initial_limit, std::uint32_t flags,
                                     std::chrono::milliseconds patience) {
  if (const char* why = check_dependency_name(name)) {
    throw SegmentError(EINVAL, name_error("dependency name", name, why));
  }
  return find_or_claim(segment, name, initial_limit, flags, patience);
}

ClaimResult find_or_claim_pattern(Segment& segment, std::string_view pattern, std::chrono::milliseconds patience) {
  if (const char* why = is_pattern(pattern) ? check_pattern(pattern) : "has none of * ? [") {
    throw SegmentError(EINVAL, "dependency pattern '" + std::string(pattern) + "' " + why);
  }
  return find_or_claim(segment, pattern, 0, kDependencyPattern, patience);
}

std::optional<std::string> slot_pattern(const Segment& segment, std::uint32_t index) {
  const DependencySlot& slot = segment.dependency(index);
  // Pairs with the release CAS to kSlotReady in find_or_claim(): a ready
  // tag means the name is written.
  if ((slot.identity.tag.load(std::memory_order_acquire) & kTagStateMask) != kSlotReady) return std::nullopt;
  // A client can write any of it: only a name no dependency can have that
  // reads as a pattern is one.
  char name[kMaxNameLength + 1] = {};
  const std::string_view written = slot_name(slot.identity);
  std::memcpy(name, written.data(), written.size());
  const std::string_view copy(name, written.size());
  if (!is_pattern(copy) || check_pattern(copy) != nullptr) return std::nullopt;
  return std::string(copy);
}

bool matches_pattern(const Segment& segment, std::string_view name) {
  const std::string target(name);
  for (std::uint32_t i = 0; i < segment.capacities().max_dependencies; ++i) {
    // Relaxed: the daemon's flag word; a reload racing this lookup gives
    // either config's answer.
    if ((segment.dependency(i).control.flags.load(std::memory_order_relaxed) & kDependencyPattern) == 0) continue;
    const auto pattern = slot_pattern(segment, i);
    if (pattern && ::fnmatch(pattern->c_str(), target.c_str(), 0) == 0) return true;
  }
  return false;
}

// --- The process table ---------------------------------------------------

namespace {

// The offset of one clock in /proc/self/timens_offsets ("boottime SECONDS
// NANOSECONDS", "monotonic ..."), in nanoseconds; 0 when the file or the
// line is missing. `format` is the line's sscanf format.
std::int64_t read_timens_offset_ns(const char* format) {
  std::FILE* f = std::fopen("/proc/self/timens_offsets", "re");
  if (f == nullptr) return 0;
  char line[128];
  long long seconds = 0, nanoseconds = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f) != nullptr) {
    found = std::sscanf(line, format, &seconds, &nanoseconds) == 2;
  }
  std::fclose(f);
  return found ? seconds * 1'000'000'000LL + nanoseconds : 0;
}

std::int64_t read_boottime_offset_ns() { return read_timens_offset_ns("boottime %lld %lld"); }
std::int64_t read_monotonic_offset_ns() { return read_timens_offset_ns("monotonic %lld %lld"); }

// `read()`'s answer, read once per process, not once: a child forked after
// its parent unshared a time namespace runs in it, its parent does not.
// Forgotten at fork() (a child in new pid and time namespaces, pid 1 there,
// has the pid of a parent that is pid 1 of its own: a container's init),
// and when the pid changes (a child clone() made, which runs no fork
// handler). One instance per clock: each has its own statics.
template <std::int64_t (*read)()>
std::int64_t offset_of_this_process() {
  static std::atomic<pid_t> read_by{0};
  static std::atomic<std::int64_t> offset{0};
  static const bool forgotten_at_fork =
      ::pthread_atfork(nullptr, nullptr, [] { read_by.store(0, std::memory_order_relaxed); }) == 0;
  (void)forgotten_at_fork;
  const pid_t self = ::getpid();
  if (read_by.load(std::memory_order_acquire) != self) {
    offset.store(read(), std::memory_order_relaxed);
    read_by.store(self, std::memory_order_release);
  }
  return offset.load(std::memory_order_relaxed);
}

std::uint64_t tick_ns() {
  const long hz = ::sysconf(_SC_CLK_TCK);
  return 1'000'000'000ULL / static_cast<std::uint64_t>(hz > 0 ? hz : 100);
}

// `ns` in clock ticks, to the nearest.
std::uint64_t nearest_ticks(std::uint64_t ns, std::uint64_t tick) {
  return ns / tick + (ns % tick >= tick - tick / 2 ? 1 : 0);
}

// The host's start time of a process whose /proc/<pid>/stat shows `shown`
// to this process. The kernel adds the reader's boottime offset to the start
// in nanoseconds, modulo 2^64, then rounds down to ticks: with a negative
// offset past the start (a process that started before the namespace's
// boot: the host's daemon, seen from a container CRIU restored on a host
// up longer than the one it left) the sum wraps, and the start shows some
// 2^64 ns after boot. The offset (2^64 + offset, when it wrapped) comes off
// rounded to the nearest tick: exact when it is a whole number of ticks,
// else a tick off at times.
std::uint64_t host_start_time(std::uint64_t shown) {
  const std::int64_t offset = boottime_offset_ns();
  if (offset == 0) return shown;
  const std::uint64_t tick = tick_ns();
  const auto added = static_cast<std::uint64_t>(offset);  // 2^64 + offset when negative
  // Unwrapped, a start shows no later than the namespace's uptime; wrapped,
  // no earlier than (2^64 + offset) / tick.
  if (offset < 0 && shown >= added / tick) return shown - nearest_ticks(added, tick);
  if (offset < 0) return shown + nearest_ticks(0 - added, tick);
  return shown - nearest_ticks(added, tick);
}

std::optional<ProcessStat> read_stat_file(const char* path) {
  // open/read into a buffer on the stack, not an ifstream: the daemon reads
  // this for every attached process every tick, and at 256 processes the
  // stream machinery cost most of a millisecond per tick.
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  std::size_t len = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf + len, sizeof buf - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += static_cast<std::size_t>(n);
    if (len == sizeof buf - 1) break;
  }
  ::close(fd);
  buf[len] = '\0';
  // The command name (field 2) may hold spaces and parentheses: fields are
  // counted from the last ')'. state is field 3, num_threads field 20,
  // starttime field 22.
  const char* close = std::strrchr(buf, ')');
  if (close == nullptr) return std::nullopt;
  const char* p = close + 1;
  ProcessStat out{};
  for (int n = 3; n <= 22; ++n) {
    while (*p == ' ') ++p;
    if (*p == '\0' || *p == '\n') return std::nullopt;
    const char* field = p;
    while (*p != ' ' && *p != '\0' && *p != '\n') ++p;
    if (n == 3) out.state = *field;
    if (n == 20) out.threads = static_cast<std::uint32_t>(std::strtoul(field, nullptr, 10));
    if (n == 22) {
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = std::strtoull(field, &end, 10);
      if (end != p || errno != 0) return std::nullopt;
      out.start_time = host_start_time(v);  // as the host's time namespace shows it
    }
  }
  return out;
}

}  // namespace

std::optional<ProcessStat> read_process_stat(pid_t pid) {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  return read_stat_file(path);
}

std::int64_t boottime_offset_ns() { return offset_of_this_process<read_boottime_offset_ns>(); }

std::int64_t monotonic_offset_ns() { return offset_of_this_process<read_monotonic_offset_ns>(); }

std::optional<std::uint64_t> own_start_time() {
  const auto stat = read_stat_file("/proc/self/stat");
  if (!stat) return std::nullopt;
  return stat->start_time;
}

std::optional<std::uint64_t> process_start_time(pid_t pid) {
  const auto stat = read_process_stat(pid);
  if (!stat) return std::nullopt;
  return stat->start_time;
}

Liveness process_liveness(pid_t pid, std::uint64_t start_time) {
  if (pid <= 0) return Liveness::kDead;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return Liveness::kDead;
  const auto stat = read_process_stat(pid);
  if (!stat) return Liveness::kUnknown;
  // A zombie has run its last instruction; its parent just has not reaped
  // it. Unless other threads run on: a main thread that called
  // pthread_exit() shows as a zombie while they still hold permits.
  if ((stat->state == 'Z' || stat->state == 'X') && stat->threads <= 1) return Liveness::kDead;
  return start_time == 0 || stat->start_time == start_time ? Liveness::kAlive : Liveness::kDead;
}

ProcessSnapshot read_daemon(const Header& header) {
  ProcessSnapshot seen;
  seen.pid = header.daemon_pid.load(std::memory_order_relaxed);
  seen.start_time = header.daemon_start_time.load(std::memory_order_relaxed);
  seen.pid_ns = {header.daemon_pid_ns_device.load(std::memory_order_relaxed),
                 header.daemon_pid_ns_inode.load(std::memory_order_relaxed)};
  return seen;
}

void publish_daemon(Header& header) {
  // As claim_process_slot(): the pid in this process's namespace, with the
  // namespace, and the start time of /proc/self (in a container sharing
  // the host's /proc, /proc/<getpid()> is another process).
  const PidNamespace ns = own_pid_namespace();
  header.daemon_pid_ns_device.store(ns.device, std::memory_order_relaxed);
  header.daemon_pid_ns_inode.store(ns.inode, std::memory_order_relaxed);
  header.daemon_start_time.store(own_start_time().value_or(0), std::memory_order_relaxed);
  header.daemon_pid.store(::getpid(), std::memory_order_relaxed);
}

void withdraw_daemon(Header& header) {
  header.daemon_pid.store(0, std::memory_order_relaxed);
  header.daemon_pid_ns_device.store(0, std::memory_order_relaxed);
  header.daemon_pid_ns_inode.store(0, std::memory_order_relaxed);
}

PidNamespace own_pid_namespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return {};
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

ProcessClaim claim_process_slot(Segment& segment) {
  // getpid() is this process's number in its own pid namespace: a daemon
  // in another (this process in a container) finds it through the
  // namespace. Whose number it is in /proc depends on the namespace /proc
  // was mounted for (in a container sharing the host's /proc, /proc/1 is
  // the host's init): /proc/self is this process in any.
  const pid_t pid = ::getpid();
  const auto start = own_start_time();
  const PidNamespace ns = own_pid_namespace();
  const std::uint32_t capacity = segment.capacities().max_processes;
  for (std::uint32_t i = 0; i < capacity; ++i) {
    ProcessIdentity& id = segment.process(i).identity;
    std::uint32_t state = id.state.load(std::memory_order_relaxed);
    if (state != kSlotFree ||
        !id.state.compare_exchange_strong(state, kSlotClaiming, std::memory_order_acquire)) {
      continue;
    }
    // Counted before the fields are filled: a daemon that read the count
    // before this claim sees it changed (take_process_slot()). Release: a
    // daemon whose acquire load sees this count then reads the state this
    // claim set or a later one, never the ready state of the claim before
    // it (with this count, which would pass for that claim's).
    const std::uint32_t claims = id.claims.fetch_add(1, std::memory_order_release) + 1;
    id.pid.store(pid, std::memory_order_relaxed);
    id.start_time.store(start.value_or(0), std::memory_order_relaxed);
    id.pid_ns_device.store(ns.device, std::memory_order_relaxed);
    id.pid_ns_inode.store(ns.inode, std::memory_order_relaxed);
    // Pairs with the daemon's acquire load of the state in its reclaim
    // scan: a ready slot has its count, pid, start time and namespace
    // written.
    id.state.store(kSlotReady, std::memory_order_release);
    return {i, claims};
  }
  throw SegmentError(ENOSPC, "process table full (" + std::to_string(capacity) + " slots, daemon.max_processes)");
}

void release_process_slot(Segment& segment, const ProcessClaim& claim) {
  // Taken first, as the daemon takes a dead process's (the same checks):
  // its scan then skips the slot while the fields are cleared. A slot no
  // longer ready, or ready for another claim, was freed already (the
  // daemon took this process for dead).
  ProcessSnapshot mine;
  mine.claim = claim;
  if (take_process_slot(segment, mine)) free_process_slot(segment, claim.index);
}

namespace {

// The slot's fields after its count of claims was read. The lock's record
// with acquire: it pairs with the release store that follows the lock.
ProcessSnapshot fields_of(const ProcessIdentity& id, std::uint32_t index, std::uint32_t claims) {
  return ProcessSnapshot{{index, claims},
                         id.pid.load(std::memory_order_relaxed),
                         id.start_time.load(std::memory_order_relaxed),
                         {id.pid_ns_device.load(std::memory_order_relaxed),
                          id.pid_ns_inode.load(std::memory_order_relaxed)},
                         id.lock_claim.load(std::memory_order_acquire)};
}

// What a claim's lock records in its slot: the claim's count, with its
// pid and start time mixed, so that a later claim that records no lock is
// not taken for this one: a client of ABI 4.4 counts its claim, and one of
// 4.2 or older, which does not, is another process (its pid, or the start
// time of a process of the same pid, differs) unless it started in the
// same clock tick with the same pid (two containers' pid 1).
std::uint64_t lock_record(std::uint32_t claims, std::int32_t pid, std::uint64_t start_time) {
  const auto mixed = static_cast<std::uint32_t>(pid) ^ static_cast<std::uint32_t>(start_time * 0x9E3779B97F4A7C15ull);
  return static_cast<std::uint64_t>(claims) << 32 | mixed;
}

struct flock slot_byte(short type, std::uint32_t index) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = static_cast<off_t>(kLivenessLockBase + index);
  lock.l_len = 1;
  return lock;
}

}  // namespace

std::optional<ProcessSnapshot> read_process_slot(const Segment& segment, std::uint32_t index) {
  const ProcessIdentity& id = segment.process(index).identity;
  // The count before the state (both acquire, so in that order): a claim
  // made after this load changes the count that take_process_slot()
  // compares, whichever claim's fields the loads below see.
  const std::uint32_t claims = id.claims.load(std::memory_order_acquire);
  // Pairs with the release store of kSlotReady in claim_process_slot().
  if (id.state.load(std::memory_order_acquire) != kSlotReady) return std::nullopt;
  return fields_of(id, index, claims);
}

ProcessSnapshot read_process_fields(const Segment& segment, std::uint32_t index) {
  const ProcessIdentity& id = segment.process(index).identity;
  return fields_of(id, index, id.claims.load(std::memory_order_acquire));
}

bool take_process_slot(Segment& segment, const ProcessSnapshot& seen) {
  ProcessIdentity& id = segment.process(seen.claim.index).identity;
  std::uint32_t ready = kSlotReady;
  // Acquire pairs with the release store of kSlotReady of whichever claim
  // holds the slot now: its count is visible below.
  if (!id.state.compare_exchange_strong(ready, kSlotClaiming, std::memory_order_acq_rel,
                                        std::memory_order_relaxed)) {
    return false;
  }
  if (id.claims.load(std::memory_order_acquire) != seen.claim.claims) {
    // Released and claimed again since the snapshot: the process there now
    // is not the one checked. Its own release, if it came meanwhile, found
    // the slot taken and left it; the scan frees it when that process is
    // gone.
    id.state.store(kSlotReady, std::memory_order_release);
    return false;
  }
  return true;
}

void free_process_slot(Segment& segment, std::uint32_t index) {
  ProcessIdentity& id = segment.process(index).identity;
  id.pid.store(0, std::memory_order_relaxed);
  id.start_time.store(0, std::memory_order_relaxed);
  // Cleared too, though every claim of ABI 4.3 writes them: a client of an
  // older minor that takes the slot next does not, and would inherit them.
  id.pid_ns_device.store(0, std::memory_order_relaxed);
  id.pid_ns_inode.store(0, std::memory_order_relaxed);
  id.lock_claim.store(0, std::memory_order_relaxed);
  // Pairs with the acquire CAS in claim_process_slot(): the next owner sees
  // the cleared fields.
  id.state.store(kSlotFree, std::memory_order_release);
}

void abandon_process_claim(Segment& segment, std::uint32_t index) {
  std::uint32_t claiming = kSlotClaiming;
  // Only the state: the claim, unfinished, may still write the fields.
  segment.process(index).identity.state.compare_exchange_strong(claiming, kSlotFree, std::memory_order_relaxed);
}

LivenessLock::LivenessLock(Segment& segment, const ProcessClaim& claim) noexcept {
  // Opened anew, not dup()ed: a duplicate shares the mapping's open file
  // description, which a forked child's copy of it keeps open. The path is
  // built on the stack: the client takes the lock outside its handler of
  // exceptions (at open, and at a forked child's first call), and nothing
  // may be thrown (std::bad_alloc) out through the C ABI.
  char path[PATH_MAX];
  const int length = std::snprintf(path, sizeof path, "/dev/shm/%s", segment.name().c_str());
  if (length < 0 || static_cast<std::size_t>(length) >= sizeof path) return;
  int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  if (fd <= STDERR_FILENO) {
    // A process that opened the client with standard streams closed would
    // get 0, 1 or 2, and close it the moment it redirects them (dup2): its
    // permits given back while it runs. Above them, as libraries do.
    const int above = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    ::close(fd);
    if (above < 0) return;
    fd = above;
  }
  struct stat opened {}, mapped {};
  struct flock lock = slot_byte(F_RDLCK, claim.index);
  if (::fstat(fd, &opened) != 0 || ::fstat(segment.descriptor(), &mapped) != 0 || opened.st_dev != mapped.st_dev ||
      opened.st_ino != mapped.st_ino || ::fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    ::close(fd);
    return;
  }
  fd_ = fd;
  // Of the pid and start time this claim wrote, as the daemon reads them.
  // Release: a daemon that reads the record finds the lock taken.
  ProcessIdentity& id = segment.process(claim.index).identity;
  id.lock_claim.store(lock_record(claim.claims, id.pid.load(std::memory_order_relaxed),
                                  id.start_time.load(std::memory_order_relaxed)),
                      std::memory_order_release);
}

LivenessLock& LivenessLock::operator=(LivenessLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

LivenessLock::~LivenessLock() {
  if (fd_ >= 0) ::close(fd_);
}

void LivenessLock::drop_copy() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

LockState liveness_lock_state(const Segment& segment, const ProcessSnapshot& seen) {
  if (seen.lock_claim == 0 || seen.lock_claim != lock_record(seen.claim.claims, seen.pid, seen.start_time)) {
    return LockState::kNone;
  }
  // Asks whether a write lock could be taken: only when no one holds the
  // read lock. The reader's own description holds none; a read-only one
  // may ask.
  struct flock test = slot_byte(F_WRLCK, seen.claim.index);
  if (::fcntl(segment.descriptor(), F_OFD_GETLK, &test) != 0) return LockState::kNone;
  return test.l_type == F_UNLCK ? LockState::kDropped : LockState::kHeld;
}

bool liveness_lock_dropped(const Segment& segment, const ProcessSnapshot& seen) {
  return liveness_lock_state(segment, seen) == LockState::kDropped;
}

}  // namespace bulkhead::shm
