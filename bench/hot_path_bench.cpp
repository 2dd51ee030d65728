// bulkhead-bench: what does admission cost next to the floor the hardware
// sets, and next to what a user would otherwise pick?
//
// Each case is reported in ns per call (real time): one acquire+release
// pair, or for clock_read one clock read. The table then gives two ratios to
// baselines of the same setting measured in the same run: to the raw pair
// (the hardware's floor) and to the compare-and-swap pair (the algorithm's
// floor, the reference issue 7's targets use), and evaluates those targets.
//
//   raw_pair                 fetch_add(1) + fetch_sub(1) on the admission line
//                            of a dependency slot in a real segment: one
//                            locked read-modify-write each way;
//   cas_pair                 the admission algorithm and nothing else: load
//                            the published limit, load the admission word,
//                            check in-flight < limit, compare-and-swap +1;
//                            then one add -1 (kAdmissionRelease, in the
//                            segment's encoding);
//   clock_read               one clock_gettime(CLOCK_MONOTONIC), the read the
//                            library makes twice per call when it times it;
//   acquire_release          bh_try_acquire + bh_release: the library's own
//                            timing;
//   acquire_release_latency  bh_try_acquire_untimed + bh_release_latency: the caller
//                            supplies the latency;
//   reject_at_limit          bh_try_acquire against a published limit of 0.
//                            A rejection must not write the admission line:
//                            the case fails if the line's word changed;
//   sem_t                    a process-shared POSIX semaphore: sem_trywait +
//                            sem_post;
//   semop_undo               a System V semaphore: semop -1 with IPC_NOWAIT
//                            and SEM_UNDO, then semop +1 with SEM_UNDO (what
//                            Semian uses; the kernel gives back a dead
//                            process's units, as bulkheadd does permits);
//   boost_semaphore          boost::interprocess::interprocess_semaphore:
//                            try_wait + post (Boost 1.74 on Linux wraps a
//                            process-shared sem_t);
//   robust_mutex             a robust process-shared pthread mutex guarding
//                            an in-flight count: lock, check < limit, ++,
//                            unlock; lock, --, unlock.
// Every semaphore and counter starts at the same limit as the admission
// cases (kAdmitLimit), never reached.
//
// Settings: one thread; and two processes on two CPUs contending on one
// object, where a forked child spins the same loop (the same function) while
// the parent is measured. The child attaches to the segment by name and opens
// a client of its own; the peers sit in a shared mapping made before the
// fork, each on a line of its own, as they would in a segment of the user's.
//
// The benchmark plays the daemon on a segment of its own,
// /dev/shm/bhbench-<pid>: it creates it, publishes the limits, reclaims the
// process slots of children that are gone, and removes it at exit (and on
// SIGINT, SIGTERM, SIGHUP), as it does the System V semaphore set (created
// IPC_PRIVATE, removed with IPC_RMID).
//
//   bulkhead-bench                           # about 20 s on 2 cores
//   bulkhead-bench --benchmark_min_time=0.2 --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true      # one line
//
// It exits 1 when a case failed its checks (a pair refused below the limit,
// a rejection that wrote the line, calls left in flight), for bench_smoke;
// two-process cases on a machine with fewer than two CPUs are skipped, not
// failed. Figures and targets never decide the exit status.
//
// With repetitions the table takes each case's median. A figure whose real
// time is over 1.25x the parent's CPU time is marked *: the parent was off
// its CPU for part of it (other tenants of a shared machine), and the target
// lines it feeds also give their verdict on CPU time. --benchmark_format is
// not honoured (the table rides on the console reporter); for machine-readable
// figures add --benchmark_out=FILE --benchmark_out_format=json.
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/sem.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <benchmark/benchmark.h>
#include <boost/interprocess/sync/interprocess_semaphore.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/cleanup.hpp"
#include "bench/cpus.hpp"
#include "bulkhead/bulkhead.h"
#include "shm/segment.hpp"

namespace bulkhead::bench {
namespace {

// Each on a slot, and so an admission line, of its own.
constexpr char kRawDependency[] = "bench-raw";        // the raw pairs' line
constexpr char kCasDependency[] = "bench-cas";        // the compare-and-swap pairs'
constexpr char kAdmitDependency[] = "bench-admit";    // the admission cases
constexpr char kRejectDependency[] = "bench-reject";  // published limit 0
// The limit of bench-cas, bench-admit and every peer: never reached (at most
// 2 in flight), so every try-acquire below it must succeed. Within SEMVMX
// (32767) and SEM_VALUE_MAX.
constexpr std::uint32_t kAdmitLimit = 1024;
// What the caller-latency cases report: a plausible downstream call.
constexpr std::uint64_t kCallerLatencyNs = 250'000;
// Pairs the child spins between two looks at its stop flag.
constexpr int kChildBatch = 64;
constexpr auto kChildStartTimeout = std::chrono::seconds(10);
constexpr auto kChildStopTimeout = std::chrono::seconds(5);

// --- The peers' shared objects.

// The peers, in one shared mapping made before any fork (the children
// inherit it), each on a line of its own. Thread safety: each object is
// process-shared and safe to use from any thread of either process.
struct Peers {
  Peers() {
    if (::sem_init(&posix, 1, kAdmitLimit) != 0) {
      throw std::runtime_error(std::string("sem_init: ") + std::strerror(errno));
    }
    pthread_mutexattr_t attr;
    ::pthread_mutexattr_init(&attr);
    ::pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    ::pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    const int rc = ::pthread_mutex_init(&mutex, &attr);
    ::pthread_mutexattr_destroy(&attr);
    if (rc != 0) {
      ::sem_destroy(&posix);
      throw std::runtime_error(std::string("pthread_mutex_init: ") + std::strerror(rc));
    }
  }
  ~Peers() {
    ::pthread_mutex_destroy(&mutex);
    ::sem_destroy(&posix);
  }
  Peers(const Peers&) = delete;
  Peers& operator=(const Peers&) = delete;

  alignas(64) sem_t posix;
  alignas(64) boost::interprocess::interprocess_semaphore boost{kAdmitLimit};
  // The count sits on the mutex's line, where a user would put it.
  alignas(64) pthread_mutex_t mutex;
  std::uint32_t inflight = 0;  // guarded by mutex
};

// Peers in an anonymous shared mapping, destroyed and unmapped when this
// goes. Thread safety: made and destroyed by main's thread.
class SharedPeers {
 public:
  SharedPeers() {
    void* shared = ::mmap(nullptr, sizeof(Peers), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
    try {
      peers_ = new (shared) Peers();
    } catch (...) {
      ::munmap(shared, sizeof(Peers));
      throw;
    }
  }
  ~SharedPeers() {
    peers_->~Peers();
    ::munmap(peers_, sizeof(Peers));
  }
  SharedPeers(const SharedPeers&) = delete;
  SharedPeers& operator=(const SharedPeers&) = delete;
  Peers* get() const { return peers_; }

 private:
  Peers* peers_ = nullptr;
};

// glibc leaves semctl's fourth argument for the caller to declare.
union SemctlArg {
  int val;
  semid_ds* buf;
  unsigned short* array;
};

// A System V semaphore set of one, at kAdmitLimit, private to this run.
// Thread safety: made and destroyed by main's thread.
class SysvSemaphore {
 public:
  SysvSemaphore() : id_(::semget(IPC_PRIVATE, 1, IPC_CREAT | 0600)) {
    if (id_ < 0) throw std::runtime_error(std::string("semget: ") + std::strerror(errno));
    cleanup::sysv_semid = id_;  // for the signal handler
    SemctlArg arg{};
    arg.val = static_cast<int>(kAdmitLimit);
    if (::semctl(id_, 0, SETVAL, arg) != 0) {
      const int e = errno;
      remove();
      throw std::runtime_error(std::string("semctl SETVAL: ") + std::strerror(e));
    }
  }
  ~SysvSemaphore() { remove(); }
  SysvSemaphore(const SysvSemaphore&) = delete;
  SysvSemaphore& operator=(const SysvSemaphore&) = delete;
  int id() const { return id_; }
  int value() const { return ::semctl(id_, 0, GETVAL); }

 private:
  void remove() {
    cleanup::sysv_semid = -1;
    ::semctl(id_, 0, IPC_RMID);
  }
  int id_;
};

// --- One pair of each kind: the parent's measured loop and the child's
// --- spinning loop call the same functions (through with_pair() below).
// --- Each returns non-zero when the pair did not get the answer it expects.

// Relaxed: the floor is the locked read-modify-write itself. On x86-64 every
// memory order compiles to the same lock add / lock sub, as do the library's
// relaxed compare-and-swap and release add.
inline int raw_pair(std::atomic<std::uint64_t>& word) {
  word.fetch_add(1, std::memory_order_relaxed);
  word.fetch_sub(1, std::memory_order_relaxed);
  return 0;
}

// bh_try_acquire's admission decision and give_back()'s add, without the
// held count, the statistics or the clock. Relaxed as in the library (see
// client.cpp): the word protects no other memory.
inline int cas_pair(std::atomic<std::uint64_t>& word, const std::atomic<std::uint32_t>& limit) {
  const std::uint32_t l = limit.load(std::memory_order_relaxed);
  std::uint64_t seen = word.load(std::memory_order_relaxed);
  do {
    if (shm::admission_at_limit(seen, l)) return 1;
  } while (!word.compare_exchange_weak(seen, seen + shm::kAdmissionAcquire, std::memory_order_relaxed));
  word.fetch_add(shm::kAdmissionRelease, std::memory_order_relaxed);
  return 0;
}

inline int clock_read() {
  timespec ts;
  return ::clock_gettime(CLOCK_MONOTONIC, &ts);
}

inline int own_timing_pair(bh_dep* dep) {
  bh_permit permit;
  const int rc = bh_try_acquire(dep, &permit);
  bh_release(&permit, BH_SUCCESS);  // does nothing for an empty permit
  return rc;
}

inline int caller_latency_pair(bh_dep* dep) {
  bh_permit permit;
  const int rc = bh_try_acquire_untimed(dep, &permit);
  bh_release_latency(&permit, BH_SUCCESS, kCallerLatencyNs);
  return rc;
}

// Expects a refusal.
inline int reject_pair(bh_dep* dep) {
  bh_permit permit;
  if (bh_try_acquire(dep, &permit) == BH_REJECT_LIMIT) return 0;
  bh_release(&permit, BH_IGNORE);
  return 1;
}

inline int posix_semaphore_pair(sem_t* sem) {
  if (::sem_trywait(sem) != 0) return 1;
  return ::sem_post(sem);
}

inline int sysv_undo_pair(int semid) {
  sembuf take{0, -1, IPC_NOWAIT | SEM_UNDO};
  if (::semop(semid, &take, 1) != 0) return 1;
  sembuf give{0, +1, SEM_UNDO};
  return ::semop(semid, &give, 1);
}

inline int boost_semaphore_pair(boost::interprocess::interprocess_semaphore& sem) {
  if (!sem.try_wait()) return 1;
  sem.post();
  return 0;
}

// Locks a robust mutex. When its owner died holding it, takes it over and
// marks it consistent, as a user must; the count it guards may then be off
// by that owner's calls (here only a killed child could do that, after a
// failure that is already reported). Non-zero on failure.
inline int lock_robust(pthread_mutex_t* mutex) {
  const int rc = ::pthread_mutex_lock(mutex);
  return rc == EOWNERDEAD ? ::pthread_mutex_consistent(mutex) : rc;
}

inline int robust_mutex_pair(Peers& p) {
  if (lock_robust(&p.mutex) != 0) return 1;
  const bool admitted = p.inflight < kAdmitLimit;
  if (admitted) ++p.inflight;
  ::pthread_mutex_unlock(&p.mutex);
  if (!admitted) return 1;
  if (lock_robust(&p.mutex) != 0) return 1;
  --p.inflight;
  ::pthread_mutex_unlock(&p.mutex);
  return 0;
}

enum class Loop {
  kRawPair,
  kCasPair,
  kClockRead,
  kOwnTiming,
  kCallerLatency,
  kRejectAtLimit,
  kPosixSemaphore,
  kSysvSemaphoreUndo,
  kBoostSemaphore,
  kRobustMutex,
};

// What one process runs the pairs on: in the parent the Fixture's, in the
// child its own attachment and client plus the inherited peers.
struct Handles {
  std::atomic<std::uint64_t>* raw_word;
  std::atomic<std::uint64_t>* cas_word;
  const std::atomic<std::uint32_t>* cas_limit;
  bh_dep* admit;
  bh_dep* reject;
  Peers* peers;
  int sysv_semid;
};

// Calls run(pair), with `pair` the loop's pair bound to `h`, and returns what
// run returns. The one place that maps a loop to its pair, for the parent's
// measured loop and the child's spinning one alike.
template <typename Run>
int with_pair(Loop loop, const Handles& h, Run&& run) {
  switch (loop) {
    case Loop::kRawPair: return run([w = h.raw_word] { return raw_pair(*w); });
    case Loop::kCasPair: return run([w = h.cas_word, l = h.cas_limit] { return cas_pair(*w, *l); });
    case Loop::kClockRead: return run([] { return clock_read(); });
    case Loop::kOwnTiming: return run([d = h.admit] { return own_timing_pair(d); });
    case Loop::kCallerLatency: return run([d = h.admit] { return caller_latency_pair(d); });
    case Loop::kRejectAtLimit: return run([d = h.reject] { return reject_pair(d); });
    case Loop::kPosixSemaphore: return run([p = h.peers] { return posix_semaphore_pair(&p->posix); });
    case Loop::kSysvSemaphoreUndo: return run([id = h.sysv_semid] { return sysv_undo_pair(id); });
    case Loop::kBoostSemaphore: return run([p = h.peers] { return boost_semaphore_pair(p->boost); });
    case Loop::kRobustMutex: return run([p = h.peers] { return robust_mutex_pair(*p); });
  }
  return 1;
}

// The parent's measured loop.
template <typename Pair>
int measure(benchmark::State& state, Pair pair) {
  int failed = 0;
  for (auto _ : state) failed |= pair();
  return failed;
}

// --- CPUs.

struct CpuPair {
  int parent;
  int child;
};

// The first two CPUs this process may run on, or nullopt with fewer.
std::optional<CpuPair> two_cpus() {
  const std::vector<int> cpus = usable_cpus();
  if (cpus.size() < 2) return std::nullopt;
  return CpuPair{cpus[0], cpus[1]};
}

bool pin_to(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return ::sched_setaffinity(0, sizeof one, &one) == 0;
}

// Pins the calling thread to one CPU while it lives, then restores its mask.
class PinnedTo {
 public:
  explicit PinnedTo(int cpu) {
    saved_ok_ = ::sched_getaffinity(0, sizeof saved_, &saved_) == 0;
    pinned_ = saved_ok_ && pin_to(cpu);
  }
  ~PinnedTo() {
    if (saved_ok_) ::sched_setaffinity(0, sizeof saved_, &saved_);
  }
  PinnedTo(const PinnedTo&) = delete;
  PinnedTo& operator=(const PinnedTo&) = delete;
  explicit operator bool() const { return pinned_; }

 private:
  cpu_set_t saved_;
  bool saved_ok_ = false;
  bool pinned_ = false;
};

// --- The segment.

// The segment, its four dependencies, the peers and the parent's client that
// every case runs on. Thread safety: built by main before any benchmark runs;
// the benchmarks run on one thread.
class Fixture {
 public:
  explicit Fixture(const std::string& name)
      : name_(name),
        segment_(shm::Segment::create(name, segment_options())),
        cpus_(two_cpus()) {
    // What the daemon would publish.
    shm::find_or_claim_dependency(segment_, kRawDependency, kAdmitLimit, 0);
    shm::find_or_claim_dependency(segment_, kCasDependency, kAdmitLimit, 0);
    shm::find_or_claim_dependency(segment_, kAdmitDependency, kAdmitLimit, 0);
    shm::find_or_claim_dependency(segment_, kRejectDependency, 0, 0);

    bh_options options{};
    options.segment = name_.str().c_str();
    options.flags = BH_OPEN_REQUIRE_SEGMENT;
    bh_client* client = nullptr;
    if (bh_client_open_opts(&options, &client) != 0) {
      throw std::runtime_error(std::string("bh_client_open: ") + bh_last_error());
    }
    client_.reset(client);
    if (bh_client_mode(client) != BH_MODE_SHARED) {
      throw std::runtime_error(std::string("client is not shared: ") + bh_client_status(client));
    }
    if (bh_dependency(client, kAdmitDependency, &admit_) != 0 ||
        bh_dependency(client, kRejectDependency, &reject_) != 0) {
      throw std::runtime_error(std::string("bh_dependency: ") + bh_last_error());
    }
  }

  const std::string& name() const { return name_.str(); }
  std::optional<CpuPair> cpus() const { return cpus_; }
  Peers* peers() const { return peers_.get(); }
  int sysv_semid() const { return sysv_.id(); }

  Handles handles() const {
    shm::DependencySlot& cas = slot(segment_, kCasDependency);
    return Handles{&slot(segment_, kRawDependency).admission.word,
                   &cas.admission.word,
                   &cas.control.limit,
                   admit_,
                   reject_,
                   peers_.get(),
                   sysv_.id()};
  }

  // What a case must leave as it found it once every process has stopped:
  // the in-flight count of its line, all of the word for a rejection (whose
  // point is never writing it), or the peer's count. Relaxed loads: the
  // child, if any, is reaped.
  std::optional<std::uint64_t> balance(Loop loop) const {
    auto inflight = [this](const char* dependency) -> std::uint64_t {
      return shm::admission_inflight(
          slot(segment_, dependency).admission.word.load(std::memory_order_relaxed));
    };
    switch (loop) {
      case Loop::kRawPair: return inflight(kRawDependency);
      case Loop::kCasPair: return inflight(kCasDependency);
      case Loop::kOwnTiming:
      case Loop::kCallerLatency: return inflight(kAdmitDependency);
      case Loop::kRejectAtLimit:
        return slot(segment_, kRejectDependency).admission.word.load(std::memory_order_relaxed);
      case Loop::kPosixSemaphore: {
        int value = 0;
        ::sem_getvalue(&peers_.get()->posix, &value);
        return static_cast<std::uint64_t>(value);
      }
      case Loop::kSysvSemaphoreUndo: return static_cast<std::uint64_t>(sysv_.value());
      case Loop::kRobustMutex: return peers_.get()->inflight;
      case Loop::kClockRead:
      case Loop::kBoostSemaphore: return std::nullopt;  // nothing to look at
    }
    return std::nullopt;
  }

  // Gives back the process slots of a reaped child, and any permits they
  // still hold, as the daemon's reclaim would: the slot the fork handler gave
  // the client it inherited, and its own client's if it was killed.
  void reclaim(pid_t child) {
    const shm::Capacities caps = segment_.capacities();
    for (std::uint32_t p = 0; p < caps.max_processes; ++p) {
      // The child is reaped: waitpid() ordered all its writes before these
      // reads.
      const auto seen = shm::read_process_slot(segment_, p);
      if (!seen || seen->pid != child || !shm::take_process_slot(segment_, *seen)) continue;
      for (std::uint32_t d = 0; d < caps.max_dependencies; ++d) {
        for (auto n = segment_.held(p, d).exchange(0, std::memory_order_relaxed); n > 0; --n) {
          segment_.dependency(d).admission.word.fetch_add(shm::kAdmissionRelease,
                                                          std::memory_order_relaxed);
        }
      }
      shm::free_process_slot(segment_, p);
    }
  }

  // A dependency this fixture published, in `segment` (the parent's mapping
  // or a child's).
  static shm::DependencySlot& slot(const shm::Segment& segment, const char* dependency) {
    const std::optional<std::uint32_t> index = shm::find_dependency(segment, dependency);
    if (!index) throw std::runtime_error(std::string("no dependency ") + dependency);
    return segment.dependency(*index);
  }

 private:
  static shm::CreateOptions segment_options() {
    shm::CreateOptions o;
    // Room for the parent and a child with two clients; 8 stripes, so that
    // the child never shares the parent's statistics stripe (each records
    // on its CPU's, or without rseq on its slot's).
    o.capacities = {16, 16, 8};
    o.mode = 0600;
    return o;
  }

  struct CloseClient {
    void operator()(bh_client* c) const { bh_client_close(c); }
  };

  cleanup::SegmentName name_;  // first: removed last, even when the constructor throws
  shm::Segment segment_;
  std::optional<CpuPair> cpus_;
  SharedPeers peers_;
  SysvSemaphore sysv_;
  std::unique_ptr<bh_client, CloseClient> client_;
  bh_dep* admit_ = nullptr;
  bh_dep* reject_ = nullptr;
};

// --- The contending child.

// What parent and child share, in an anonymous shared mapping made before
// the fork.
struct Control {
  alignas(64) std::atomic<int> spinning{0};  // set once by the child
  alignas(64) std::atomic<int> stop{0};      // set once by the parent
  alignas(64) char error[256];               // why the child failed
};

[[noreturn]] void child_fail(Control* control, const std::string& why) {
  std::snprintf(control->error, sizeof control->error, "%s", why.c_str());
  ::_exit(2);
}

// The child's handles: the segment attached by name and a client of its own,
// as an unrelated process would have them, and the peers it inherited.
// Thread safety: the child's one thread.
class ChildHandles {
 public:
  explicit ChildHandles(const Fixture& fixture)
      : segment_(shm::Segment::attach(fixture.name(), shm::Access::kReadWrite)) {
    bh_options options{};
    options.segment = fixture.name().c_str();
    options.flags = BH_OPEN_REQUIRE_SEGMENT;
    if (bh_client_open_opts(&options, &client_) != 0) {
      throw std::runtime_error(std::string("bh_client_open: ") + bh_last_error());
    }
    shm::DependencySlot& cas = Fixture::slot(segment_, kCasDependency);
    handles_ = Handles{&Fixture::slot(segment_, kRawDependency).admission.word,
                       &cas.admission.word,
                       &cas.control.limit,
                       nullptr,
                       nullptr,
                       fixture.peers(),
                       fixture.sysv_semid()};
    if (bh_dependency(client_, kAdmitDependency, &handles_.admit) != 0 ||
        bh_dependency(client_, kRejectDependency, &handles_.reject) != 0) {
      throw std::runtime_error(std::string("bh_dependency: ") + bh_last_error());
    }
  }
  ~ChildHandles() { bh_client_close(client_); }
  ChildHandles(const ChildHandles&) = delete;
  ChildHandles& operator=(const ChildHandles&) = delete;
  const Handles& get() const { return handles_; }

 private:
  shm::Segment segment_;
  bh_client* client_ = nullptr;
  Handles handles_{};
};

// The child's whole life. It never returns into the parent's code.
[[noreturn]] void child_main(const Fixture& fixture, Loop loop, const char* failure, int cpu,
                             pid_t parent, Control* control) {
  try {
    // Die with the parent, whatever kills it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    cleanup::keep_on_signal();
    if (!pin_to(cpu)) child_fail(control, "cannot pin the child to CPU " + std::to_string(cpu));
    // The client inherited from the parent is left alone: the fork handler
    // gave it a process slot of its own, which the parent reclaims.
    const ChildHandles handles(fixture);
    // Relaxed loads and stores of the flags: each is a lone value that
    // publishes no other memory.
    const int failed = with_pair(loop, handles.get(), [control](auto pair) {
      control->spinning.store(1, std::memory_order_relaxed);
      int any = 0;
      while (control->stop.load(std::memory_order_relaxed) == 0) {
        for (int i = 0; i < kChildBatch; ++i) any |= pair();
      }
      return any;
    });
    if (failed != 0) child_fail(control, std::string("child: ") + failure);
  } catch (const std::exception& e) {
    child_fail(control, std::string("child: ") + e.what());
  } catch (...) {
    child_fail(control, "child: unknown exception");
  }
  ::_exit(0);
}

pid_t reap(pid_t pid, int* status) {
  pid_t r;
  do {
    r = ::waitpid(pid, status, 0);
  } while (r < 0 && errno == EINTR);
  return r;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by ") + ::strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// A forked child that attaches to the segment and spins one loop on one
// object (a dependency's line, or a peer) until stopped. However the parent leaves, the child is stopped
// (killed if need be), reaped and its slots reclaimed before this object
// goes. Thread safety: one thread, the one that made it.
class Child {
 public:
  Child(Fixture& fixture, Loop loop, const char* failure, int cpu) : fixture_(fixture) {
    void* shared = ::mmap(nullptr, sizeof(Control), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
      error_ = std::string("mmap: ") + std::strerror(errno);
      return;
    }
    control_ = new (shared) Control();
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) child_main(fixture, loop, failure, cpu, parent, control_);
    if (pid_ < 0) error_ = std::string("fork: ") + std::strerror(errno);
  }

  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      reap(pid_, &status);
      fixture_.reclaim(pid_);
    }
    if (control_ != nullptr) {
      control_->~Control();
      ::munmap(control_, sizeof(Control));
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Waits until the child spins: "" then, else why not (and it is reaped).
  std::string wait_until_spinning() {
    if (pid_ <= 0) return error_;
    const auto give_up_at = std::chrono::steady_clock::now() + kChildStartTimeout;
    while (control_->spinning.load(std::memory_order_relaxed) == 0) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        fixture_.reclaim(std::exchange(pid_, -1));
        return "the child exited before it spun (" + describe_exit(status) + "): " + control_->error;
      }
      if (std::chrono::steady_clock::now() > give_up_at) return "the child did not start in time";
      const timespec pause{0, 100'000};
      ::nanosleep(&pause, nullptr);
    }
    return {};
  }

  // Stops the child and reaps it: "" when it exited cleanly.
  std::string stop() {
    if (pid_ <= 0) return error_;
    control_->stop.store(1, std::memory_order_relaxed);
    const auto give_up_at = std::chrono::steady_clock::now() + kChildStopTimeout;
    int status = 0;
    std::string why;
    while (::waitpid(pid_, &status, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() > give_up_at) {
        ::kill(pid_, SIGKILL);
        reap(pid_, &status);
        why = "the child did not stop in time; killed";
        break;
      }
      const timespec pause{0, 100'000};
      ::nanosleep(&pause, nullptr);
    }
    fixture_.reclaim(std::exchange(pid_, -1));
    if (!why.empty()) return why;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return "the child failed (" + describe_exit(status) + "): " + control_->error;
    }
    return {};
  }

 private:
  Fixture& fixture_;
  Control* control_ = nullptr;
  pid_t pid_ = -1;
  std::string error_;
};

// --- The cases.

constexpr char kRefusedBelowLimit[] = "a try-acquire was refused below the limit";
constexpr char kLeftInFlight[] = "calls left in flight after every process stopped";
// The one failure that is the machine's, not the code's.
constexpr char kNeedTwoCpus[] = "two-process cases need two CPUs";

struct Subject {
  Loop loop;
  const char* key;         // the benchmark's name after the setting's
  const char* label;       // the table's
  const char* failure;     // what a pair that returned non-zero means
  const char* unbalanced;  // what Fixture::balance() changing means
};

constexpr Subject kSubjects[] = {
    {Loop::kRawPair, "raw_pair", "raw fetch_add+fetch_sub pair (hardware floor)", "", kLeftInFlight},
    {Loop::kCasPair, "cas_pair", "compare-and-swap pair (algorithm floor)", kRefusedBelowLimit,
     kLeftInFlight},
    {Loop::kClockRead, "clock_read", "one clock_gettime(CLOCK_MONOTONIC)", "clock_gettime failed", ""},
    {Loop::kOwnTiming, "acquire_release", "bh_try_acquire+bh_release (own timing)", kRefusedBelowLimit,
     kLeftInFlight},
    {Loop::kCallerLatency, "acquire_release_latency",
     "bh_try_acquire_untimed+bh_release_latency (caller's latency)", kRefusedBelowLimit, kLeftInFlight},
    {Loop::kRejectAtLimit, "reject_at_limit", "rejection at the limit (bh_try_acquire refused)",
     "a try_acquire was admitted at a limit of 0", "a rejection wrote the admission line"},
    {Loop::kPosixSemaphore, "sem_t", "process-shared sem_t: sem_trywait+sem_post",
     "sem_trywait or sem_post failed below the limit", kLeftInFlight},
    {Loop::kSysvSemaphoreUndo, "semop_undo", "System V semop -1, +1 with SEM_UNDO",
     "semop failed below the limit", kLeftInFlight},
    {Loop::kBoostSemaphore, "boost_semaphore", "Boost interprocess_semaphore: try_wait+post",
     "try_wait failed below the limit", ""},
    {Loop::kRobustMutex, "robust_mutex", "robust pthread mutex + count: lock,++; lock,--",
     "the mutex failed or the count was at the limit", kLeftInFlight},
};

enum class Setting { kOneThread, kTwoProcesses };
constexpr Setting kSettings[] = {Setting::kOneThread, Setting::kTwoProcesses};

const char* prefix(Setting setting) {
  return setting == Setting::kOneThread ? "1thread" : "2proc";
}

std::string case_name(Setting setting, const char* key) {
  return std::string(prefix(setting)) + "/" + key;
}

// The parent pinned to one CPU runs the loop under the timer while a child
// pinned to the other spins the same loop on the same object. Returns why
// the case failed, or "" (and *failed as the parent's pairs left it).
std::string two_processes(benchmark::State& state, Fixture& f, const Subject& s, int* failed) {
  const std::optional<CpuPair> cpus = f.cpus();
  if (!cpus) return kNeedTwoCpus;
  const PinnedTo pinned(cpus->parent);
  if (!pinned) return "cannot pin the parent to its CPU";
  Child child(f, s.loop, s.failure, cpus->child);
  if (std::string why = child.wait_until_spinning(); !why.empty()) return why;
  *failed = with_pair(s.loop, f.handles(), [&state](auto pair) { return measure(state, pair); });
  return child.stop();
}

void run_case(benchmark::State& state, Fixture& f, const Subject& s, Setting setting) {
  const std::optional<std::uint64_t> before = f.balance(s.loop);
  int failed = 0;
  std::string why;
  if (setting == Setting::kOneThread) {
    failed = with_pair(s.loop, f.handles(), [&state](auto pair) { return measure(state, pair); });
  } else {
    why = two_processes(state, f, s, &failed);
  }
  if (!why.empty()) {
    state.SkipWithError(why.c_str());
  } else if (failed != 0) {
    state.SkipWithError(s.failure);
  } else if (f.balance(s.loop) != before) {
    state.SkipWithError(s.unbalanced);
  }
}

// --- The report.

double ns_per(benchmark::TimeUnit unit) {
  switch (unit) {
    case benchmark::kNanosecond: return 1;
    case benchmark::kMicrosecond: return 1e3;
    case benchmark::kMillisecond: return 1e6;
    case benchmark::kSecond: return 1e9;
  }
  return 1;
}

// A case's figures per call: real time, which the table and targets use,
// and the parent's CPU time, which shows when it was off its CPU.
struct Timing {
  double real_ns;
  double cpu_ns;
};

// Real time this much above CPU time: the parent spent part of the case off
// its CPU (another tenant's work on this shared machine, or the hypervisor),
// and the real-time figure is inflated by that, not by the code.
constexpr double kOffCpuRatio = 1.25;

bool off_cpu(const Timing& t) { return t.real_ns > kOffCpuRatio * t.cpu_ns; }

// The console report, keeping each case's figures, or its error, for the
// ratio table. Thread safety: called by Google Benchmark on the thread that
// runs it.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  using ConsoleReporter::ConsoleReporter;

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      const std::string& name = run.run_name.function_name;
      if (run.error_occurred) {
        errors_[name] = run.error_message;
        continue;
      }
      const double unit_ns = ns_per(run.time_unit);
      const Timing t{run.GetAdjustedRealTime() * unit_ns, run.GetAdjustedCPUTime() * unit_ns};
      if (run.run_type == Run::RT_Aggregate) {
        if (run.aggregate_name == "median") medians_[name] = t;
      } else {
        samples_[name].push_back(t);
      }
    }
  }

  // Whether any case ran (not so under --benchmark_list_tests).
  bool any() const { return !medians_.empty() || !samples_.empty() || !errors_.empty(); }

  // The case's medians over its repetitions; nullopt when it did not run or
  // failed.
  std::optional<Timing> timing(const std::string& name) const {
    if (errors_.count(name) != 0) return std::nullopt;
    if (auto it = medians_.find(name); it != medians_.end()) return it->second;
    auto it = samples_.find(name);
    if (it == samples_.end() || it->second.empty()) return std::nullopt;
    return Timing{median(it->second, &Timing::real_ns), median(it->second, &Timing::cpu_ns)};
  }

  // Whether a case failed for a reason other than the machine having fewer
  // than two CPUs.
  bool any_failed() const {
    return std::any_of(errors_.begin(), errors_.end(),
                       [](const auto& e) { return e.second != kNeedTwoCpus; });
  }

  // Why the case failed; nullopt when it did not fail.
  std::optional<std::string> error(const std::string& name) const {
    auto it = errors_.find(name);
    return it == errors_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }

 private:
  static double median(const std::vector<Timing>& samples, double Timing::*field) {
    std::vector<double> v;
    for (const Timing& t : samples) v.push_back(t.*field);
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }

  std::map<std::string, Timing> medians_;
  std::map<std::string, std::vector<Timing>> samples_;
  std::map<std::string, std::string> errors_;
};

// One setting's cell: ns per call, marked * when the parent was off its CPU,
// and the two ratios.
std::string cell(const RatioReporter& r, Setting setting, const char* key) {
  char text[96];
  const std::string name = case_name(setting, key);
  const std::optional<Timing> t = r.timing(name);
  if (!t) {
    std::snprintf(text, sizeof text, "%27s", r.error(name) ? "failed" : "not run");
    return text;
  }
  auto ratio = [&](const char* baseline) -> std::string {
    const std::optional<Timing> base = r.timing(case_name(setting, baseline));
    if (!base || base->real_ns <= 0) return "     -";
    char out[16];
    std::snprintf(out, sizeof out, "%5.1fx", t->real_ns / base->real_ns);
    return out;
  };
  std::snprintf(text, sizeof text, "%9.1f ns%s %s %s", t->real_ns, off_cpu(*t) ? "*" : " ",
                ratio("raw_pair").c_str(), ratio("cas_pair").c_str());
  return text;
}

void print_table(const RatioReporter& r, const std::string& command, std::optional<CpuPair> cpus) {
  std::printf("\nAdmission beside its peers: ns per call (real time; a call is one acquire+release\n"
              "pair, or one clock read) and the ratios to the raw atomic pair (x raw) and to the\n"
              "compare-and-swap pair (x CAS, the targets' reference) of the same setting, all\n"
              "measured in this run.\n");
  std::printf("command: %s\n", command.c_str());
  if (cpus) std::printf("2 processes: parent on CPU %d, child on CPU %d\n", cpus->parent, cpus->child);
  int width = 0;
  for (const Subject& s : kSubjects) width = std::max(width, static_cast<int>(std::strlen(s.label)));
  std::printf("\n  %-*s  %27s  %27s\n", width, "", "1 thread", "2 processes");
  std::printf("  %-*s  %12s  %6s %6s  %12s  %6s %6s\n", width, "", "ns/call", "x raw", "x CAS",
              "ns/call", "x raw", "x CAS");
  for (const Subject& s : kSubjects) {
    std::printf("  %-*s  %s  %s\n", width, s.label, cell(r, Setting::kOneThread, s.key).c_str(),
                cell(r, Setting::kTwoProcesses, s.key).c_str());
  }
  bool footnote = false;
  for (const Setting setting : kSettings) {
    for (const Subject& s : kSubjects) {
      const std::string name = case_name(setting, s.key);
      if (const auto why = r.error(name)) std::printf("  %s failed: %s\n", name.c_str(), why->c_str());
      if (const auto t = r.timing(name); t && off_cpu(*t)) {
        if (!footnote) {
          std::printf("  * real time over %.2fx the parent's CPU time: it was off its CPU for part\n"
                      "    of the case (other load on the machine), which inflates the figure; a\n"
                      "    two-process case then also contended only part of the time, so its CPU\n"
                      "    time understates contention. Rerun on a quiet machine. CPU time:\n",
                      kOffCpuRatio);
          footnote = true;
        }
        std::printf("      %-40s %9.1f ns\n", name.c_str(), t->cpu_ns);
      }
    }
  }
}

// --- The targets (issue 7, item 1).

// The figures a target needs, real or CPU time, noting the first case it
// needs that has none and whether any was taken off its CPU.
class Figures {
 public:
  Figures(const RatioReporter& r, Setting setting, bool cpu_time = false)
      : r_(r), setting_(setting), cpu_time_(cpu_time) {}
  double operator()(const char* key) {
    const std::string name = case_name(setting_, key);
    const std::optional<Timing> t = r_.timing(name);
    if (!t) {
      if (missing_.empty()) missing_ = name;
      return 0;
    }
    off_cpu_ |= off_cpu(*t);
    return cpu_time_ ? t->cpu_ns : t->real_ns;
  }
  const std::string& missing() const { return missing_; }
  bool any_off_cpu() const { return off_cpu_; }

 private:
  const RatioReporter& r_;
  Setting setting_;
  bool cpu_time_;
  std::string missing_;
  bool off_cpu_ = false;
};

std::string format(const char* fmt, double a, double b = 0, double c = 0, double d = 0, double e = 0) {
  char text[160];
  std::snprintf(text, sizeof text, fmt, a, b, c, d, e);
  return text;
}

// A target's verdict and figures, from real time or CPU time.
using Judge = std::pair<bool, std::string> (*)(Figures&, Setting);

// Prints the target's line: the verdict on real time, and when a figure it
// used was inflated by time off the CPU, the verdict on CPU time as well.
void print_target(const RatioReporter& r, Setting setting, const std::string& target, Judge judge) {
  const char* where = setting == Setting::kOneThread ? "1 thread" : "2 processes";
  Figures real(r, setting);
  const auto [met, detail] = judge(real, setting);
  if (!real.missing().empty()) {
    std::printf("  %s, %s: not evaluated (%s did not run)\n", target.c_str(), where,
                real.missing().c_str());
    return;
  }
  std::printf("  %s, %s: %s (%s)\n", target.c_str(), where, met ? "met" : "MISSED", detail.c_str());
  if (real.any_off_cpu()) {
    Figures cpu(r, setting, true);
    const auto [cpu_met, cpu_detail] = judge(cpu, setting);
    std::printf("      * on CPU time: %s (%s)\n", cpu_met ? "met" : "MISSED", cpu_detail.c_str());
  }
}

std::pair<bool, std::string> caller_latency_near_floor(Figures& f, Setting setting) {
  const double limit = setting == Setting::kOneThread ? 1.3 : 1.5;
  const double lat = f("acquire_release_latency"), cas = f("cas_pair");
  return {lat <= limit * cas,
          format("%.1f ns = %.2fx of %.1f ns; at most %.1f ns", lat, lat / cas, cas, limit * cas)};
}

std::pair<bool, std::string> own_timing_near_floor(Figures& f, Setting setting) {
  const double slack_ns = setting == Setting::kOneThread ? 10 : 15;
  const double own = f("acquire_release"), cas = f("cas_pair"), clock = f("clock_read");
  const double bound = cas + 2 * clock + slack_ns;
  return {own <= bound, format("%.1f ns; at most %.1f + 2 x %.1f + %.0f = %.1f ns", own, cas, clock,
                               slack_ns, bound)};
}

// The case itself fails when a rejection changes the admission word.
std::pair<bool, std::string> rejection_writes_nothing(Figures& f, Setting) {
  return {true, format("word unchanged over every rejection; %.1f ns each", f("reject_at_limit"))};
}

std::pair<bool, std::string> own_timing_below_semop(Figures& f, Setting) {
  const double own = f("acquire_release"), semop = f("semop_undo");
  return {semop >= 20 * own, format("%.1f ns vs %.1f ns: %.1fx", own, semop, semop / own)};
}

std::pair<bool, std::string> caller_latency_below_semop(Figures& f, Setting) {
  const double lat = f("acquire_release_latency"), semop = f("semop_undo");
  return {semop >= 20 * lat, format("%.1f ns vs %.1f ns: %.1fx", lat, semop, semop / lat)};
}

void print_targets(const RatioReporter& r) {
  std::printf("\nTargets of issue 7, item 1, on the medians above (real time):\n");
  for (const Setting setting : kSettings) {
    const bool one = setting == Setting::kOneThread;
    print_target(r, setting,
                 one ? "caller's latency within 1.3x of the CAS floor"
                     : "caller's latency within 1.5x of the CAS floor",
                 caller_latency_near_floor);
    print_target(r, setting,
                 one ? "own timing within the CAS floor + 2 clock reads + 10 ns"
                     : "own timing within the CAS floor + 2 clock reads + 15 ns",
                 own_timing_near_floor);
    print_target(r, setting, "a rejection writes nothing to the admission line",
                 rejection_writes_nothing);
    print_target(r, setting, "own timing at least 20x cheaper than semop with SEM_UNDO",
                 own_timing_below_semop);
    print_target(r, setting, "caller's latency at least 20x cheaper than semop with SEM_UNDO",
                 caller_latency_below_semop);
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace bulkhead::bench

int main(int argc, char** argv) {
  using namespace bulkhead::bench;
  // Before Initialize() takes the benchmark flags out of argv.
  std::string command = argv[0];
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  const std::string name = "bhbench-" + std::to_string(::getpid());
  // The run loop belongs to Google Benchmark, so there is no loop of ours
  // to look at a flag: a signal removes the segment (cleanup::SegmentName)
  // and the System V set.
  std::optional<Fixture> fixture;
  try {
    fixture.emplace(name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bulkhead-bench: %s\n", e.what());
    return 1;
  }
  const std::optional<CpuPair> cpus = fixture->cpus();
  benchmark::AddCustomContext("segment", "/dev/shm/" + name);
  benchmark::AddCustomContext(
      "two-process cases", cpus ? "parent on CPU " + std::to_string(cpus->parent) + ", child on CPU " +
                                      std::to_string(cpus->child)
                                : std::string("skipped: fewer than two CPUs"));
  for (const Setting setting : kSettings) {
    for (const Subject& s : kSubjects) {
      benchmark::RegisterBenchmark(case_name(setting, s.key).c_str(),
                                   [&f = *fixture, &s, setting](benchmark::State& state) {
                                     run_case(state, f, s, setting);
                                   })
          ->Unit(benchmark::kNanosecond)
          ->UseRealTime();
    }
  }

  RatioReporter reporter(::isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_ColorTabular
                                                 : benchmark::ConsoleReporter::OO_Tabular);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  if (reporter.any()) {
    print_table(reporter, command, cpus);
    print_targets(reporter);
  }
  benchmark::Shutdown();
  return reporter.any_failed() ? 1 : 0;
}
