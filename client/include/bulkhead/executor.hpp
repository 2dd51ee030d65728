// bulkhead::Executor: a thread-pool bulkhead for one dependency, for client
// libraries that block and cannot be called asynchronously.
//
//   bulkhead::Executor payments_pool(client.dependency("payments"), {.threads = 8, .queue_capacity = 32});
//   auto s = payments_pool.submit([] { return blocking_payments_call(); }, std::chrono::milliseconds(300));
//   if (!s) return shed(s.reason());          // refused at once: BH_REJECT_QUEUE_FULL, ...
//   Reply reply = s.future().get();           // or bulkhead::Rejected with its reason
//
// (Designated initializers are C++20; this header, like the others, needs
// only C++17, where the ExecutorOptions' fields are set one by one.)
//
// Algorithm: submit() puts the task in a bounded queue of this executor and
// returns its future, or refuses at once: the queue is full
// (BH_REJECT_QUEUE_FULL), the deadline has passed (BH_REJECT_DEADLINE), or
// the executor is stopped (kExecutorStopped). A fixed set of worker threads
// takes tasks in order. A worker first drops a task whose deadline passed
// while it was queued (the future gets Rejected(BH_REJECT_DEADLINE); the
// task never runs); such a task holds no place either: a submit() that
// finds the queue full drops them first. (So its future is refused when a
// worker or a submit() comes to it, not at the deadline itself: a caller
// that must not wait past the deadline waits with wait_until().) Then the
// worker admits the task through the dependency's host-wide
// permits with Dependency::acquire(deadline), which waits in the
// dependency's wait queue when the daemon configures one, and refuses
// (Rejected with the reason) otherwise. So an executor bounds what this
// process runs at once by its threads, and the host-wide limit bounds what
// every process runs together. The executor's own refusals, of a full
// queue and of a deadline passed before a worker took the task, are
// counted as the dependency's (bh_record_refusal()): the host's metrics
// show them beside the wait queue's.
//
// A task is called with no argument, or with the `const Permit&` it runs
// under, whose remaining() is its budget. Its return is a success; an
// exception it throws reaches the future and counts as failed (BH_FAILED:
// the circuit breaker counts it), or as dropped if it is a CallDropped (a
// timeout: the breaker counts it, and the limit policy backs off), as with
// bulkhead::execute().
//
// Thread safety: submit(), queued() and shutdown() may be called from any
// thread; the destructor must not run while a thread other than its
// workers submits (its tasks may: see ~Executor()). Under
// ThreadSanitizer with Debian's (uninstrumented) libstdc++, reading a
// Rejected from a future may be reported as a race in
// std::exception_ptr::_M_release; tests/tsan.supp says why and suppresses it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "bulkhead/client.hpp"

namespace bulkhead {

// The reason of a task refused because its executor is stopping.
inline constexpr int kExecutorStopped = -ECANCELED;

// What a refused task's future holds: the BH_REJECT_* reason, or
// kExecutorStopped.
class Rejected : public std::runtime_error {
 public:
  explicit Rejected(int reason)
      : std::runtime_error("bulkhead: task not run (" + describe(reason) + ")"), reason_(reason) {}
  int reason() const { return reason_; }

 private:
  static std::string describe(int reason) {
    switch (reason) {
      case BH_REJECT_LIMIT: return "dependency at its limit";
      case BH_REJECT_QUEUE_FULL: return "queue full";
      case BH_REJECT_DEADLINE: return "deadline";
      case BH_REJECT_OPEN_CIRCUIT: return "circuit breaker open";
      case BH_REJECT_PARTITION: return "partition at its share";
      case kExecutorStopped: return "executor stopped";
      default: return "reason " + std::to_string(reason);
    }
  }
  int reason_;
};

// What submit() returns: a future, or the reason the task was refused at once.
template <typename T>
class Submission {
 public:
  explicit Submission(std::future<T> future) : future_(std::move(future)) {}
  explicit Submission(int reason) : reason_(reason) {}

  // True when the task was queued; its future then tells the rest.
  explicit operator bool() const { return reason_ == 0; }
  // 0 when queued, else the BH_REJECT_* reason or kExecutorStopped.
  int reason() const { return reason_; }
  std::future<T>& future() { return future_; }

 private:
  std::future<T> future_;
  int reason_ = 0;
};

struct ExecutorOptions {
  unsigned threads = 4;             // worker threads: calls this executor makes at once, at most (0: 1)
  // Tasks waiting for a worker, at most. A task an idle worker takes at
  // once waits for none: with 0, a task runs if a worker is idle, and is
  // refused (BH_REJECT_QUEUE_FULL) otherwise. SIZE_MAX: no bound.
  std::size_t queue_capacity = 64;
};

class Executor {
 public:
  using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC, as bh_acquire()'s deadlines

  explicit Executor(Dependency dependency, ExecutorOptions options = {})
      : dependency_(dependency), capacity_(options.queue_capacity) {
    const unsigned threads = options.threads == 0 ? 1 : options.threads;
    workers_.reserve(threads);
    try {
      for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
    } catch (...) {
      // A worker that cannot start (std::system_error): stop and join those
      // that did, or their std::thread would terminate the process.
      shutdown();
      for (std::thread& t : workers_) t.join();
      throw;
    }
    // Ready when every worker is: a task submitted now finds them idle.
    std::unique_lock lock(mutex_);
    idle_changed_.wait(lock, [&] { return idle_ == threads; });
  }
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  // Stops (see shutdown()) and waits for the workers, that is for the
  // tasks that run. Its own tasks may submit meanwhile (refused:
  // kExecutorStopped); none may destroy it (a thread cannot join itself:
  // std::terminate).
  ~Executor() {
    shutdown();
    for (std::thread& t : workers_) t.join();
  }

  // Queues `task` to run before `deadline` (time_point::max(): none).
  template <typename F>
  auto submit(F&& task, Clock::time_point deadline = Clock::time_point::max()) {
    using R = Result<F>;
    auto queued = std::make_unique<Task<std::decay_t<F>, R>>(std::forward<F>(task), deadline);
    std::future<R> future = queued->promise.get_future();
    if (deadline != Clock::time_point::max() && Clock::now() >= deadline) {
      bh_record_refusal(dependency_.handle(), BH_REJECT_DEADLINE);
      return Submission<R>(BH_REJECT_DEADLINE);
    }
    // Tasks whose deadline passed in the queue hold no place: a full queue
    // gives them up, refused (outside the lock, as they are destroyed)
    // now rather than when a worker reaches them.
    std::vector<std::unique_ptr<TaskBase>> expired;
    int reason = 0;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return Submission<R>(kExecutorStopped);
      if (full()) take_expired(expired);
      if (full()) {
        reason = BH_REJECT_QUEUE_FULL;
      } else {
        queue_.push_back(std::move(queued));
      }
    }
    for (auto& late : expired) {
      bh_record_refusal(dependency_.handle(), BH_REJECT_DEADLINE);
      late->reject(BH_REJECT_DEADLINE);
    }
    if (reason != 0) {
      bh_record_refusal(dependency_.handle(), reason);
      return Submission<R>(reason);
    }
    ready_.notify_one();
    return Submission<R>(std::move(future));
  }
  // The same with a budget from now.
  template <typename F>
  auto submit(F&& task, std::chrono::nanoseconds budget) {
    const auto now = Clock::now();
    return submit(std::forward<F>(task),
                  budget >= Clock::time_point::max() - now ? Clock::time_point::max() : now + budget);
  }

  // Tasks waiting for a worker (not those an idle worker is taking).
  std::size_t queued() const {
    std::lock_guard lock(mutex_);
    return queue_.size() > idle_ ? queue_.size() - idle_ : 0;
  }

  // Refuses new tasks and every queued one (Rejected(kExecutorStopped)),
  // and a task whose worker still waits for its permit: the wait is
  // cancelled (bh_acquire_cancellable()), or, admitted in the same
  // instant, the permit is given back unused. The tasks that run finish.
  // Does not wait for them (the destructor does).
  // Never throws: out of memory, a refused task's future holds
  // std::bad_alloc rather than Rejected.
  void shutdown() noexcept {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;  // the workers take no more tasks
    }
    ready_.notify_all();
    bh_cancel_request(&cancel_);  // the workers waiting for a permit leave
    // One at a time, outside the lock: a deque to take them all at once
    // would allocate, even empty.
    for (;;) {
      std::unique_ptr<TaskBase> task;
      {
        std::lock_guard lock(mutex_);
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task->reject(kExecutorStopped);
    }
  }

 private:
  template <typename F>
  using Result = typename std::conditional_t<std::is_invocable_v<F&, const Permit&>,
                                             std::invoke_result<F&, const Permit&>, std::invoke_result<F&>>::type;

  struct TaskBase {
    explicit TaskBase(Clock::time_point until) : deadline(until) {}
    virtual ~TaskBase() = default;
    virtual void run(Dependency& dependency, bh_cancel* stopping) = 0;
    virtual void reject(int reason) noexcept = 0;
    const Clock::time_point deadline;
  };

  template <typename F, typename R>
  struct Task final : TaskBase {
    Task(F&& f, Clock::time_point until) : TaskBase(until), fn(std::move(f)) {}
    Task(const F& f, Clock::time_point until) : TaskBase(until), fn(f) {}

    void run(Dependency& dependency, bh_cancel* stopping) override {
      // A task whose deadline passed in the queue is not run.
      if (deadline != Clock::time_point::max() && Clock::now() >= deadline) {
        bh_record_refusal(dependency.handle(), BH_REJECT_DEADLINE);
        reject(BH_REJECT_DEADLINE);
        return;
      }
      Permit permit;
      try {
        permit = dependency.acquire(deadline, stopping);
      } catch (...) {
        promise.set_exception(std::current_exception());
        return;
      }
      if (!permit) {
        reject(permit.reason() == BH_REJECT_CANCELLED ? kExecutorStopped : permit.reason());
        return;
      }
      // Stopped as it was admitted: not started, so refused as a queued
      // task is. shutdown() an instant later lets it run, as one that had
      // started.
      if (bh_cancel_requested(stopping) != 0) {
        permit.ignore();
        reject(kExecutorStopped);
        return;
      }
      try {
        if constexpr (std::is_void_v<R>) {
          call(permit);
          permit.success();
          promise.set_value();
        } else {
          R result = call(permit);
          permit.success();
          promise.set_value(std::forward<R>(result));  // moved, or a reference passed on
        }
      } catch (const CallDropped&) {
        permit.dropped();
        promise.set_exception(std::current_exception());
      } catch (...) {
        permit.failed();
        promise.set_exception(std::current_exception());
      }
    }
    // Rejected(reason), or the std::bad_alloc of making it: never throws,
    // since a worker or shutdown() has no one to throw to.
    void reject(int reason) noexcept override {
      try {
        promise.set_exception(std::make_exception_ptr(Rejected(reason)));
      } catch (...) {
        promise.set_exception(std::current_exception());
      }
    }

    R call(const Permit& permit) {
      if constexpr (std::is_invocable_v<F&, const Permit&>) {
        return std::invoke(fn, permit);
      } else {
        return std::invoke(fn);
      }
    }

    F fn;
    std::promise<R> promise;
  };

  // Under mutex_. The first idle_ tasks in the queue are the idle workers'
  // already. Counted off the queue, not added to the capacity, which may be
  // SIZE_MAX (no bound) and would wrap.
  bool full() const { return queue_.size() >= idle_ && queue_.size() - idle_ >= capacity_; }
  // Under mutex_: moves the queued tasks whose deadline has passed to
  // `out` (std::bad_alloc, before any is moved, is submit()'s to throw).
  void take_expired(std::vector<std::unique_ptr<TaskBase>>& out) {
    const Clock::time_point now = Clock::now();
    const auto passed = [now](const std::unique_ptr<TaskBase>& task) {
      return task->deadline != Clock::time_point::max() && now >= task->deadline;
    };
    out.reserve(static_cast<std::size_t>(std::count_if(queue_.begin(), queue_.end(), passed)));
    auto kept = queue_.begin();
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (passed(*it)) {
        out.push_back(std::move(*it));
      } else {
        if (kept != it) *kept = std::move(*it);
        ++kept;
      }
    }
    queue_.erase(kept, queue_.end());
  }

  void work() {
    for (;;) {
      std::unique_ptr<TaskBase> task;
      {
        std::unique_lock lock(mutex_);
        ++idle_;
        idle_changed_.notify_all();
        ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        --idle_;
        if (stopping_) return;  // shutdown() refuses what is queued
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task->run(dependency_, &cancel_);
    }
  }

  Dependency dependency_;
  const std::size_t capacity_;
  mutable std::mutex mutex_;  // guards queue_, idle_ and stopping_
  std::condition_variable ready_;
  std::condition_variable idle_changed_;  // for the constructor: every worker ready
  std::size_t idle_ = 0;                  // workers waiting for a task
  std::deque<std::unique_ptr<TaskBase>> queue_;
  bool stopping_ = false;
  bh_cancel cancel_{};  // requested by shutdown(): ends the workers' waits for a permit
  std::vector<std::thread> workers_;
};

}  // namespace bulkhead
