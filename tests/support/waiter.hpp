// A thread that waits for a permit (Dependency::acquire) while the test
// goes on, for tests of the wait queue.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

#include "bulkhead/client.hpp"

namespace bulkhead::testing {

class BackgroundWaiter {
 public:
  // Starts waiting for a permit of `dep` with `budget`; an admitted call is
  // released at once as a success.
  explicit BackgroundWaiter(Dependency dep, std::chrono::nanoseconds budget = std::chrono::seconds(60))
      : thread_([this, dep, budget]() mutable {
          Permit p = dep.acquire(budget);
          result_ = p ? 0 : p.reason();
        }) {}
  ~BackgroundWaiter() {
    if (thread_.joinable()) thread_.join();
  }
  BackgroundWaiter(const BackgroundWaiter&) = delete;
  BackgroundWaiter& operator=(const BackgroundWaiter&) = delete;

  // Waits for it to finish: 0 when it was admitted, else the BH_REJECT_* reason.
  int result() {
    thread_.join();
    return result_.load();
  }

 private:
  std::atomic<int> result_{-1};
  std::thread thread_;
};

}  // namespace bulkhead::testing
