// libbulkhead for C++: a thin RAII layer over the C ABI in bulkhead.h.
//
//   bulkhead::Client client;                        // once per process
//   bulkhead::Dependency payments = client.dependency("payments");  // once
//   if (bulkhead::Permit permit = payments.try_acquire()) {
//     ...call payments...
//     permit.success();                             // or failed() / dropped() / ignore()
//   } else {
//     ...shed the call: permit.reason() == BH_REJECT_LIMIT, or
//     BH_REJECT_OPEN_CIRCUIT when the dependency's circuit breaker is open...
//   }
//
// A call that the dependency answers with an error is released with
// permit.failed(): the circuit breaker counts it (bulkhead/fallback.hpp runs
// a call and a fallback this way).
//
// A call of one class of a partitioned dependency (bh_partition()):
//
//   bulkhead::Dependency batch = payments.partition("batch");     // once
//   if (bulkhead::Permit permit = batch.try_acquire()) { ... }
//   // refused: BH_REJECT_LIMIT or BH_REJECT_PARTITION
//
// To wait for a permit rather than be refused, with a deadline that bounds
// the wait and the call together:
//
//   if (bulkhead::Permit permit = payments.acquire(std::chrono::milliseconds(200))) {
//     call_payments(permit.remaining());            // what the wait left over
//     permit.success();
//   } else {
//     ...permit.reason(): BH_REJECT_QUEUE_FULL or BH_REJECT_DEADLINE...
//   }
//
// A wait that a std::stop_token ends (BH_REJECT_CANCELLED), e.g. on a
// std::jthread, in C++20: payments.acquire(deadline, thread_stop_token).
//
// A Permit that goes out of scope unreleased is released as "ignore": an
// exception or an early return is not a latency sample.
//
// Thread safety: Client and Dependency may be shared by threads; a Permit
// belongs to one thread.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#if __cplusplus >= 202002L && __has_include(<stop_token>)
#include <stop_token>  // C++20: acquire() with a std::stop_token
#endif

#include "bulkhead/bulkhead.h"

namespace bulkhead {

enum class Outcome : int {
  kSuccess = BH_SUCCESS,
  kDropped = BH_DROPPED,
  kIgnore = BH_IGNORE,
  kFailed = BH_FAILED,  // the dependency answered an error: counts for the circuit breaker
};

enum class BreakerState : int {
  kClosed = BH_BREAKER_CLOSED,
  kOpen = BH_BREAKER_OPEN,
  kHalfOpen = BH_BREAKER_HALF_OPEN,
};

// Thrown by Client and Client::dependency(); code() is the errno value and
// what() says why.
class Error : public std::system_error {
 public:
  explicit Error(int negative_errno)
      : std::system_error(-negative_errno, std::generic_category(), bh_last_error()) {}
};

// Thrown by a call run for you (bulkhead::execute(), an Executor task), or
// anything it calls, to report a timeout: its permit goes back BH_DROPPED.
class CallDropped : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A plain failure such a call may throw for an error reply: BH_FAILED (any
// other exception counts the same).
class CallFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Permit {
 public:
  Permit() = default;
  Permit(Permit&& other) noexcept : permit_(std::exchange(other.permit_, {})), reason_(other.reason_) {}
  Permit& operator=(Permit&& other) noexcept {
    if (this != &other) {
      release(Outcome::kIgnore);
      permit_ = std::exchange(other.permit_, {});
      reason_ = other.reason_;
    }
    return *this;
  }
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;
  ~Permit() { release(Outcome::kIgnore); }

  // True while the permit holds an admission.
  explicit operator bool() const { return permit_.dep_ != nullptr; }
  // 0 when admitted, else the BH_REJECT_* reason.
  int reason() const { return reason_; }
  // What is left of the deadline acquire() was given (zero once passed):
  // the budget for the call. nanoseconds::max() without a deadline
  // (try_acquire()), zero for an empty permit.
  std::chrono::nanoseconds remaining() const {
    const std::uint64_t ns = bh_permit_remaining_ns(&permit_);
    return ns > static_cast<std::uint64_t>(std::chrono::nanoseconds::max().count())
               ? std::chrono::nanoseconds::max()
               : std::chrono::nanoseconds(static_cast<std::chrono::nanoseconds::rep>(ns));
  }

  void success() { release(Outcome::kSuccess); }
  void dropped() { release(Outcome::kDropped); }
  void ignore() { release(Outcome::kIgnore); }
  void failed() { release(Outcome::kFailed); }
  void release(Outcome outcome) { bh_release(&permit_, static_cast<int>(outcome)); }
  // For callers that time their calls already: saves two clock reads.
  void release(Outcome outcome, std::chrono::nanoseconds latency) {
    // A negative latency wraps to 2^63 or more, which bh_release_latency() counts as 0.
    bh_release_latency(&permit_, static_cast<int>(outcome), static_cast<std::uint64_t>(latency.count()));
  }

 private:
  friend class Dependency;
  bh_permit permit_{};
  int reason_ = 0;
};

class Dependency {
 public:
  explicit Dependency(bh_dep* handle) : handle_(handle) {}

  // Never blocks.
  Permit try_acquire() { return admit(bh_try_acquire); }
  // The same without a clock read, for a caller that times the call and
  // releases with release(outcome, latency) (see bh_try_acquire_untimed()).
  Permit try_acquire_untimed() { return admit(bh_try_acquire_untimed); }
  // Waits for a permit until `deadline` if the dependency is at its limit
  // (see bh_acquire()). std::chrono::steady_clock is CLOCK_MONOTONIC, the
  // clock of bh_acquire()'s deadlines; time_point::max() never comes.
  Permit acquire(std::chrono::steady_clock::time_point deadline) { return wait(deadline, nullptr); }
  // The same with a budget from now.
  Permit acquire(std::chrono::nanoseconds budget) { return acquire(deadline_in(budget)); }
  // The same, ended by bh_cancel_request(cancel) (see
  // bh_acquire_cancellable()); nullptr: acquire(deadline).
  Permit acquire(std::chrono::steady_clock::time_point deadline, bh_cancel* cancel) { return wait(deadline, cancel); }
  Permit acquire(std::chrono::nanoseconds budget, bh_cancel* cancel) { return wait(deadline_in(budget), cancel); }
#if defined(__cpp_lib_jthread)
  // The same, ended by a stop request on `stop` (std::jthread's, or a
  // std::stop_source's), refused then with BH_REJECT_CANCELLED (see
  // bh_acquire_cancellable()): a request abandoned while its calls wait,
  // or a thread to join before the Client closes.
  Permit acquire(std::chrono::steady_clock::time_point deadline, std::stop_token stop) {
    bh_cancel cancel{};
    // Runs at once if stop was requested already; else on the thread that
    // requests it, or never.
    std::stop_callback on_stop(stop, [&cancel] { bh_cancel_request(&cancel); });
    return wait(deadline, &cancel);
  }
  Permit acquire(std::chrono::nanoseconds budget, std::stop_token stop) {
    return acquire(deadline_in(budget), std::move(stop));
  }
#endif
  // The handle of one of the dependency's partitions (see bh_partition()):
  //   bulkhead::Dependency critical = payments.partition("critical");
  // Throws Error (ENOENT) when the config gives the dependency no such
  // partition.
  Dependency partition(const std::string& name) const {
    bh_dep* p = nullptr;
    if (const int rc = bh_partition(handle_, name.c_str(), &p); rc < 0) throw Error(rc);
    return Dependency(p);
  }
  long limit() const { return bh_limit(handle_); }
  long inflight() const { return bh_inflight(handle_); }
  BreakerState breaker() const { return static_cast<BreakerState>(bh_breaker_state(handle_)); }
  bh_dep* handle() const { return handle_; }

 private:
  static std::chrono::steady_clock::time_point deadline_in(std::chrono::nanoseconds budget) {
    const auto now = std::chrono::steady_clock::now();
    return budget >= std::chrono::steady_clock::time_point::max() - now ? std::chrono::steady_clock::time_point::max()
                                                                         : now + budget;
  }
  Permit wait(std::chrono::steady_clock::time_point deadline, bh_cancel* cancel) {
    const auto since_epoch = deadline.time_since_epoch();
    std::uint64_t deadline_ns = BH_NO_DEADLINE;
    if (deadline != std::chrono::steady_clock::time_point::max()) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count();
      deadline_ns = ns < 0 ? 0 : static_cast<std::uint64_t>(ns);
    }
    Permit p;
    // bh_acquire() without a cancel: a program that never cancels runs on
    // a libbulkhead older than bh_acquire_cancellable() too.
    const int rc = cancel == nullptr ? bh_acquire(handle_, deadline_ns, &p.permit_)
                                     : bh_acquire_cancellable(handle_, deadline_ns, cancel, &p.permit_);
    if (rc < 0) throw Error(rc);
    p.reason_ = rc;
    return p;
  }
  Permit admit(int (*admission)(bh_dep*, bh_permit*)) {
    Permit p;
    const int rc = admission(handle_, &p.permit_);
    if (rc < 0) throw Error(rc);
    p.reason_ = rc;
    return p;
  }

  bh_dep* handle_;
};

class Client {
 public:
  enum class Mode { kShared = BH_MODE_SHARED, kStandalone = BH_MODE_STANDALONE };

  // Segment name: $BULKHEAD_SEGMENT, else "bulkhead".
  Client() : Client(bh_options{}) {}
  explicit Client(const bh_options& options) {
    if (const int rc = bh_client_open_opts(&options, &client_); rc < 0) throw Error(rc);
  }
  explicit Client(const std::string& segment) {
    if (const int rc = bh_client_open(segment.c_str(), &client_); rc < 0) throw Error(rc);
  }
  Client(Client&& other) noexcept : client_(std::exchange(other.client_, nullptr)) {}
  Client& operator=(Client&& other) noexcept {
    if (this != &other) {
      bh_client_close(client_);
      client_ = std::exchange(other.client_, nullptr);
    }
    return *this;
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client() { bh_client_close(client_); }

  Dependency dependency(const std::string& name) {
    bh_dep* d = nullptr;
    if (const int rc = bh_dependency(client_, name.c_str(), &d); rc < 0) throw Error(rc);
    return Dependency(d);
  }
  // Throws Error (EINVAL) for a Client moved from, which has no client.
  Mode mode() const {
    const int mode = bh_client_mode(client_);
    if (mode < 0) throw Error(mode);
    return static_cast<Mode>(mode);
  }
  std::string_view status() const { return bh_client_status(client_); }
  bh_client* handle() const { return client_; }

 private:
  bh_client* client_ = nullptr;
};

}  // namespace bulkhead
