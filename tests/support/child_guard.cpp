// Linked into every test binary: a forked child never runs on as a copy
// of the test that forked it.
//
// A child's body that throws, or fails an assertion, hands control back to
// GoogleTest in the child: without this, the child would run the rest of
// the test (its destructors stop daemons, remove segments) and then every
// test after it, beside the real ones. So the moment a forked child
// records a result, or reaches the end of a test, it leaves with
// kChildLeftItsBody, having printed what went wrong.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "tests/support/children.hpp"

namespace bulkhead::testing {
namespace {

// The test binary's own pid, from before any test forks.
const pid_t test_process = ::getpid();

void leave_if_forked(const char* why) {
  if (::getpid() == test_process) return;
  std::fprintf(stderr, "forked child %d: %s; it exits with %d rather than run on as the test\n",
               static_cast<int>(::getpid()), why, kChildLeftItsBody);
  std::fflush(nullptr);
  std::_Exit(kChildLeftItsBody);
}

class ChildGuard : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    leave_if_forked(result.failed() ? "an assertion failed, or its body threw" : "it recorded a result");
  }
  void OnTestEnd(const ::testing::TestInfo&) override { leave_if_forked("it reached the end of the test"); }
};

// Appended after GoogleTest's printer, which has printed the failure first.
const bool registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new ChildGuard);
  return true;
}();

}  // namespace
}  // namespace bulkhead::testing
