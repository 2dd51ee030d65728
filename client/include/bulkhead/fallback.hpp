// bulkhead::execute: run a call under a permit of its dependency, and a
// fallback, told why, when the call is refused or fails.
//
//   bulkhead::FallbackGuard payments_fallbacks(4);    // per dependency, per process
//   Reply reply = bulkhead::execute(
//       payments, payments_fallbacks,
//       [&] { return call_payments(request); },       // throws on an error reply
//       [&](const bulkhead::FallbackContext& why) {   // refused, or the call failed
//         log_shed(bulkhead::to_string(why.reason));
//         return cached_reply(request);
//       });
//
// The call: admitted with Dependency::try_acquire() (or acquire() with a
// budget, when ExecuteOptions::wait is set, and a cancel, when
// ExecuteOptions::cancel is: a cancelled wait throws WaitCancelled), then run. It may take the
// `const Permit&` it runs under, whose remaining() is its budget. It signals
// failure by throwing: any exception counts as BH_FAILED (the dependency
// answered an error; the circuit breaker counts it), CallDropped as
// BH_DROPPED (a timeout; the breaker counts it too, and the limit policy
// backs off). A call whose library returns error codes throws CallFailed
// (or anything) on an error. A return is BH_SUCCESS, timed by the library.
// The permit is given back before the fallback runs: a fallback never holds
// the dependency's permit.
//
// The fallback: called with a FallbackContext (the reason, and for kFailed
// what the call threw) and returns what the call would have (or throws).
// Fallbacks have their own bound: a FallbackGuard admits at most
// max_concurrent of them at once in this process (default 10, Hystrix's
// fallback.isolation.semaphore.maxConcurrentRequests), so a fallback that
// itself stalls (a slow cache, a second dependency) ties up at most that
// many threads and cannot take the process down. Past the bound, execute()
// does not run the fallback and throws FallbackRefused with the reason.
// The guard is process-local on purpose: a fallback runs no call through
// the segment, and a stalled one stalls this process's threads only.
//
// execute(dep, call, fallback) without a guard uses one per dependency
// handle, created on first use with kDefaultMaxConcurrentFallbacks (looked
// up under a mutex, on the fallback path only, and kept by each thread for
// the next fallbacks it runs; the admitted path takes no lock). These
// guards are never destroyed, so that fallbacks running while the process
// exits still find theirs. They are found by the handle's
// address, and a handle's outlives its client: a later client's handle
// that gets the same address (any dependency) finds it, with the
// fallbacks of the closed client's handle that still run. Close a client
// once its fallbacks have ended, or give execute() guards of your own.
//
// Thread safety: execute() and a FallbackGuard may be used from any number
// of threads at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "bulkhead/client.hpp"

namespace bulkhead {

// Why the fallback runs.
enum class FallbackReason {
  kLimit,        // BH_REJECT_LIMIT: the dependency is at its limit
  kQueueFull,    // BH_REJECT_QUEUE_FULL: at the limit, and its wait queue is full
  kDeadline,     // BH_REJECT_DEADLINE: the budget ran out waiting (or could not be met)
  kOpenCircuit,  // BH_REJECT_OPEN_CIRCUIT: the dependency's circuit breaker is open
  kFailed,       // the call was admitted and threw
  kPartition,    // BH_REJECT_PARTITION: the call's partition is at its share or hard cap
};

inline const char* to_string(FallbackReason reason) {
  switch (reason) {
    case FallbackReason::kLimit:
      return "limit";
    case FallbackReason::kQueueFull:
      return "queue_full";
    case FallbackReason::kDeadline:
      return "deadline";
    case FallbackReason::kOpenCircuit:
      return "open_circuit";
    case FallbackReason::kPartition:
      return "partition";
    case FallbackReason::kFailed:
      break;
  }
  return "failed";
}

// The FallbackReason of a BH_REJECT_* code.
inline FallbackReason fallback_reason(int reject) {
  switch (reject) {
    case BH_REJECT_QUEUE_FULL:
      return FallbackReason::kQueueFull;
    case BH_REJECT_DEADLINE:
      return FallbackReason::kDeadline;
    case BH_REJECT_OPEN_CIRCUIT:
      return FallbackReason::kOpenCircuit;
    case BH_REJECT_PARTITION:
      return FallbackReason::kPartition;
    default:
      return FallbackReason::kLimit;
  }
}

struct FallbackContext {
  FallbackReason reason;
  std::exception_ptr error;  // kFailed: what the call threw; else null
};

// CallDropped and CallFailed, the exceptions a call throws to say how it
// ended, are in bulkhead/client.hpp (Executor tasks use them too).

// Thrown by execute() when the fallback was needed but its guard was full.
class FallbackRefused : public std::runtime_error {
 public:
  FallbackRefused(FallbackReason reason, std::exception_ptr error)
      : std::runtime_error(std::string("bulkhead: fallback refused (too many at once); the call was refused "
                                       "or failed: ") +
                           to_string(reason)),
        reason_(reason),
        error_(std::move(error)) {}
  FallbackReason reason() const { return reason_; }
  // What the call threw, when reason() is kFailed.
  const std::exception_ptr& error() const { return error_; }

 private:
  FallbackReason reason_;
  std::exception_ptr error_;
};

// Hystrix's fallback.isolation.semaphore.maxConcurrentRequests default.
inline constexpr std::size_t kDefaultMaxConcurrentFallbacks = 10;

// A bound on the fallbacks running at once: a counting semaphore that
// never waits.
class FallbackGuard {
 public:
  explicit FallbackGuard(std::size_t max_concurrent = kDefaultMaxConcurrentFallbacks)
      : max_(max_concurrent) {}
  FallbackGuard(const FallbackGuard&) = delete;
  FallbackGuard& operator=(const FallbackGuard&) = delete;

  // True and one place taken, or false (and counted) when max_concurrent
  // fallbacks run already.
  bool try_enter() noexcept {
    // Relaxed: the count alone bounds the fallbacks; it guards no memory.
    std::size_t n = active_.load(std::memory_order_relaxed);
    while (n < max_) {
      if (active_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
    }
    refused_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  void leave() noexcept { active_.fetch_sub(1, std::memory_order_relaxed); }

  std::size_t active() const noexcept { return active_.load(std::memory_order_relaxed); }
  std::size_t max_concurrent() const noexcept { return max_; }
  // Fallbacks refused so far.
  std::uint64_t refused() const noexcept { return refused_.load(std::memory_order_relaxed); }

 private:
  const std::size_t max_;
  std::atomic<std::size_t> active_{0};
  std::atomic<std::uint64_t> refused_{0};
};

// Thrown by execute() when its wait for a permit was cancelled
// (ExecuteOptions::cancel): neither the call nor the fallback runs, since
// a caller that cancels wants no answer. (Polly's fallbacks, likewise, do
// not handle a cancellation.)
class WaitCancelled : public std::runtime_error {
 public:
  WaitCancelled() : std::runtime_error("bulkhead: the wait for a permit was cancelled") {}
};

struct ExecuteOptions {
  // Set: wait up to this budget for a permit (Dependency::acquire), in the
  // dependency's wait queue. Unset: try_acquire(), never waits.
  std::optional<std::chrono::nanoseconds> wait;
  // With `wait`: a request on it (bh_cancel_request()) ends the wait, and
  // execute() throws WaitCancelled. The caller's, as for
  // Dependency::acquire(budget, cancel); null: none. A C++20 caller with a
  // std::stop_token requests it from a std::stop_callback.
  bh_cancel* cancel = nullptr;
};

namespace detail {

template <typename Call>
decltype(auto) invoke_call(Call& call, const Permit& permit) {
  if constexpr (std::is_invocable_v<Call&, const Permit&>) {
    return std::invoke(call, permit);
  } else {
    return std::invoke(call);
  }
}

// What a call returns, taking its permit or not (lazily: only the form the
// call has is looked at).
template <typename Call, bool = std::is_invocable_v<Call&, const Permit&>>
struct call_result {
  using type = std::invoke_result_t<Call&, const Permit&>;
};
template <typename Call>
struct call_result<Call, false> {
  using type = std::invoke_result_t<Call&>;
};
template <typename Call>
using call_result_t = typename call_result<std::remove_reference_t<Call>>::type;

// The guard of a dependency handle for execute() without one. Never
// destroyed (nor the map and its mutex): a fallback may run while the
// process exits, on a thread still serving or in a static's destructor,
// after the statics made later than this map are gone.
// Each thread keeps the last few it found, so that the fallbacks of an
// overload (every refused call runs one) do not all queue on the mutex.
inline FallbackGuard& default_guard(bh_dep* handle) {
  struct Found {
    bh_dep* handle;
    FallbackGuard* guard;
  };
  thread_local Found found[4] = {};
  thread_local unsigned next = 0;
  for (const Found& f : found) {
    if (f.handle == handle && f.guard != nullptr) return *f.guard;
  }
  static auto* const mutex = new std::mutex;
  static auto* const guards = new std::map<bh_dep*, std::unique_ptr<FallbackGuard>>;
  std::lock_guard lock(*mutex);
  auto& guard = (*guards)[handle];
  if (!guard) guard = std::make_unique<FallbackGuard>();
  found[next++ % 4] = {handle, guard.get()};
  return *guard;
}

}  // namespace detail

namespace detail {

// execute() with the guard found by `guard_of()` only when a fallback is
// needed.
template <typename Call, typename Fallback, typename GuardOf>
call_result_t<Call> execute(Dependency& dep, GuardOf&& guard_of, Call& call, Fallback& fallback,
                            const ExecuteOptions& options) {
  using Result = call_result_t<Call>;
  FallbackContext why{FallbackReason::kLimit, nullptr};
  {
    Permit permit = options.wait ? dep.acquire(*options.wait, options.cancel) : dep.try_acquire();
    if (permit) {
      try {
        if constexpr (std::is_void_v<Result>) {
          invoke_call(call, permit);
          permit.success();
          return;
        } else {
          Result result = invoke_call(call, permit);
          permit.success();
          return result;
        }
      } catch (const CallDropped&) {
        permit.dropped();
        why = {FallbackReason::kFailed, std::current_exception()};
      } catch (...) {
        permit.failed();
        why = {FallbackReason::kFailed, std::current_exception()};
      }
    } else if (permit.reason() == BH_REJECT_CANCELLED) {
      throw WaitCancelled();
    } else {
      why.reason = fallback_reason(permit.reason());
    }
  }  // the permit is given back here, before the fallback
  FallbackGuard& guard = guard_of();
  if (!guard.try_enter()) throw FallbackRefused(why.reason, why.error);
  struct Leave {
    FallbackGuard& guard;
    ~Leave() { guard.leave(); }
  } leave{guard};
  return std::invoke(fallback, std::as_const(why));
}

}  // namespace detail

// Runs `call` under a permit of `dep`; on a refusal or a failure, runs
// `fallback` within `guard`'s bound and returns what it returns.
template <typename Call, typename Fallback>
detail::call_result_t<Call> execute(Dependency& dep, FallbackGuard& guard, Call&& call, Fallback&& fallback,
                                    const ExecuteOptions& options = {}) {
  return detail::execute(dep, [&]() -> FallbackGuard& { return guard; }, call, fallback, options);
}

// The same with the dependency's own guard (kDefaultMaxConcurrentFallbacks
// at once, per dependency handle, in this process).
template <typename Call, typename Fallback>
detail::call_result_t<Call> execute(Dependency& dep, Call&& call, Fallback&& fallback,
                                    const ExecuteOptions& options = {}) {
  return detail::execute(dep, [&]() -> FallbackGuard& { return detail::default_guard(dep.handle()); }, call,
                         fallback, options);
}

}  // namespace bulkhead
