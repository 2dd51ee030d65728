// Waiting for what a real daemon does in its own time: tests against the
// built bulkheadd poll for the effect rather than sleep a guessed while.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace bulkhead::testing {

// Calls `done` every `poll` until it returns true or `patience` runs out (a
// loaded CI machine is slow, not wrong); true if it came.
inline bool eventually(const std::function<bool()>& done,
                       std::chrono::milliseconds patience = std::chrono::seconds(20),
                       std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  for (const auto give_up = std::chrono::steady_clock::now() + patience; std::chrono::steady_clock::now() < give_up;
       std::this_thread::sleep_for(poll)) {
    if (done()) return true;
  }
  return done();
}

}  // namespace bulkhead::testing
