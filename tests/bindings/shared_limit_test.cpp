// A C++ process (this test) and a Python process (hold_permits.py, through
// bindings/python) share one host-wide limit published by a real bulkheadd:
// whatever one side holds, the other cannot have.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bulkhead/client.hpp"
#include "shm/segment.hpp"
#include "shm/wait_queue.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/temp_segment.hpp"

namespace bulkhead {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::DaemonProcess;
using testing::TempSegmentName;

constexpr long kLimit = 5;  // the fixed limit of "shared"
constexpr int kHeld = 3;    // what one side holds while the other takes

class SharedLimit : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(daemon_.wait_ready(segment_)) << daemon_.log();
    client_.emplace(segment_.str());
    ASSERT_EQ(client_->mode(), Client::Mode::kShared);
    dep_.emplace(client_->dependency("shared"));
    // The daemon publishes the configured limit at its next tick; the
    // client's claim of the slot may have come first, with [defaults].
    for (auto give_up = std::chrono::steady_clock::now() + 10s;
         dep_->limit() != kLimit && std::chrono::steady_clock::now() < give_up;)
      std::this_thread::sleep_for(10ms);
    ASSERT_EQ(dep_->limit(), kLimit);
  }

  // hold_permits.py run with the system python3 on the built library.
  ChildProcess python(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {PYTHON3, SOURCE_DIR "/tests/bindings/hold_permits.py", segment_.str(),
                                     "shared"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = {"PYTHONPATH=" SOURCE_DIR "/bindings/python",
                                    "BULKHEAD_LIBRARY=" BULKHEAD_LIBRARY};
    // A sanitized build's runtime, preloaded: python3 itself is not built with it.
    std::istringstream sanitizer_env(PYTHON_SANITIZER_ENV);
    for (std::string e; sanitizer_env >> e;) env.push_back(e);
    return ChildProcess(argv, dir_ + "/python.log", env);
  }

  // Permits taken from C++ until refused (held in `held`).
  int take_all(std::vector<Permit>& held) {
    int admitted = 0;
    while (Permit p = dep_->try_acquire()) {
      held.push_back(std::move(p));
      ++admitted;
    }
    return admitted;
  }

  // Calls waiting in the queue of "shared", read through a mapping of
  // the segment of the test's own.
  std::uint32_t waiting() {
    if (!view_) view_.emplace(shm::Segment::attach(segment_.str(), shm::Access::kReadOnly));
    return shm::queue_length(view_->queue(*shm::find_dependency(*view_, "shared")), view_->queue_slots());
  }
  // Until a call waits in that queue, `py` exits, or a minute passes.
  void wait_until_one_waits(ChildProcess& py) {
    for (auto give_up = std::chrono::steady_clock::now() + 60s;
         waiting() == 0 && !py.exited() && std::chrono::steady_clock::now() < give_up;)
      std::this_thread::sleep_for(10ms);
  }

  TempSegmentName segment_{"py"};
  testing::TempDir temp_dir_;
  std::string dir_ = temp_dir_.path();
  DaemonProcess daemon_{BULKHEADD_PATH, dir_,
                        "[daemon]\nsegment = \"" + segment_.str() +
                            "\"\ntick_ms = 20\nmetrics_listen = \"\"\nmax_dependencies = 16\n"
                            "max_processes = 16\nstats_stripes = 2\n\n"
                            "[dependency.shared]\npolicy = \"fixed\"\nmin_limit = 1\nmax_limit = 5\n"
                            "initial_limit = 5\nmax_queue = 4\n"};
  std::optional<Client> client_;
  std::optional<Dependency> dep_;
  std::optional<shm::Segment> view_;
};

TEST_F(SharedLimit, PythonGetsWhatCppLeaves) {
  std::vector<Permit> held;
  for (int i = 0; i < kHeld; ++i) {
    held.push_back(dep_->try_acquire());
    ASSERT_TRUE(held.back());
  }
  ChildProcess py = python({"take-all"});
  ASSERT_TRUE(py.wait_exit(60s));
  EXPECT_EQ(py.exit_code(), 0) << py.log();
  EXPECT_EQ(py.log(), "admitted " + std::to_string(kLimit - kHeld) + "\n");
  // Python gave its permits back when it left its with-blocks; ours stay.
  EXPECT_EQ(dep_->inflight(), kHeld);
  held.clear();
  EXPECT_EQ(dep_->inflight(), 0);
}

TEST_F(SharedLimit, CppGetsWhatPythonLeaves) {
  const std::string release_file = dir_ + "/release";
  ChildProcess py = python({"hold", std::to_string(kHeld), release_file});
  for (auto give_up = std::chrono::steady_clock::now() + 60s;
       py.log().find("holding") == std::string::npos && !py.exited() && std::chrono::steady_clock::now() < give_up;)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(py.log(), "holding " + std::to_string(kHeld) + "\n");

  std::vector<Permit> held;
  EXPECT_EQ(take_all(held), kLimit - kHeld);
  EXPECT_EQ(dep_->inflight(), kLimit);
  held.clear();

  testing::write_file(release_file, "");
  ASSERT_TRUE(py.wait_exit(60s));
  EXPECT_EQ(py.exit_code(), 0) << py.log();
  EXPECT_EQ(py.log(), "holding " + std::to_string(kHeld) + "\nreleased\n");
  // Python's permits came back: the whole limit is C++'s now.
  EXPECT_EQ(dep_->inflight(), 0);
  EXPECT_EQ(take_all(held), kLimit);
}

// A waiting acquire from Python: it joins the host-wide wait queue, and is
// admitted when C++ gives a permit back.
TEST_F(SharedLimit, PythonWaitsInTheQueueForThePermitCppGivesBack) {
  std::vector<Permit> held;
  ASSERT_EQ(take_all(held), kLimit);
  ChildProcess py = python({"wait", "60"});
  wait_until_one_waits(py);
  ASSERT_EQ(waiting(), 1u) << py.log();
  EXPECT_EQ(py.log(), "");  // not admitted while every permit is held

  held.pop_back();
  ASSERT_TRUE(py.wait_exit(60s));
  EXPECT_EQ(py.exit_code(), 0) << py.log();
  EXPECT_EQ(py.log(), "admitted\n");
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(dep_->inflight(), kLimit - 1);
}

// A Python thread waiting in the queue (in bh_acquire(), through ctypes)
// lets the process's other threads run: it let go of the GIL.
TEST_F(SharedLimit, APythonThreadWaitingInTheQueueLetsTheOthersRun) {
  std::vector<Permit> held;
  ASSERT_EQ(take_all(held), kLimit);
  const std::string in_queue = dir_ + "/in_queue";
  ChildProcess py = python({"wait-on-a-thread", "60", in_queue});
  wait_until_one_waits(py);
  ASSERT_EQ(waiting(), 1u) << py.log();

  testing::write_file(in_queue, "");
  for (auto give_up = std::chrono::steady_clock::now() + 30s;
       py.log().find('\n') == std::string::npos && !py.exited() && std::chrono::steady_clock::now() < give_up;)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(py.log(), "running while it waits\n");  // the permit has not come yet
  EXPECT_EQ(waiting(), 1u);

  held.pop_back();
  ASSERT_TRUE(py.wait_exit(60s));
  EXPECT_EQ(py.exit_code(), 0) << py.log();
  EXPECT_EQ(py.log(), "running while it waits\nadmitted\n");
}

// A SIGTERM handler that closes the client runs while the main thread
// waits, that thread's: its close() must not wait for that very call. The
// call, cancelled by it (or admitted first), raises ValueError, nothing kept.
TEST_F(SharedLimit, APythonSignalHandlerClosesTheClientItsThreadWaitsIn) {
  std::vector<Permit> held;
  ASSERT_EQ(take_all(held), kLimit);
  ChildProcess py = python({"close-on-sigterm", "60"});
  wait_until_one_waits(py);
  ASSERT_EQ(waiting(), 1u) << py.log();
  ASSERT_EQ(py.log(), "handler set\n");

  py.signal(SIGTERM);
  held.pop_back();  // a permit its wait may take before the handler's close() cancels it
  ASSERT_TRUE(py.wait_exit(60s)) << py.log();
  EXPECT_EQ(py.exit_code(), 0) << py.log();
  EXPECT_EQ(py.log(), "handler set\nclosed by the handler\nValueError\n");
  EXPECT_EQ(dep_->inflight(), kLimit - 1);  // its permit came back
}

// Ctrl-C ends a Python main thread's wait with no timeout, which would
// otherwise run Python's handler only once a permit came: the wait leaves
// the queue and KeyboardInterrupt propagates, with nothing taken.
TEST_F(SharedLimit, ACtrlCEndsAPythonMainThreadsWaitInTheQueue) {
  std::vector<Permit> held;
  ASSERT_EQ(take_all(held), kLimit);
  ChildProcess py = python({"interrupt"});
  wait_until_one_waits(py);
  ASSERT_EQ(waiting(), 1u) << py.log();

  py.signal(SIGINT);
  ASSERT_TRUE(py.wait_exit(60s)) << py.log();
  EXPECT_EQ(py.exit_code(), 0) << py.log();
  EXPECT_EQ(py.log(), "KeyboardInterrupt\n");
  EXPECT_EQ(waiting(), 0u);
  held.pop_back();
  EXPECT_EQ(dep_->inflight(), kLimit - 1);  // none of the process's
}

// A Python signal handler that returns runs while the main thread waits,
// and the wait goes on in its place in the queue, admitted when C++ gives
// a permit back.
TEST_F(SharedLimit, APythonSignalHandlerRunsWhileTheMainThreadWaitsInTheQueue) {
  std::vector<Permit> held;
  ASSERT_EQ(take_all(held), kLimit);
  ChildProcess py = python({"handler-during-wait"});
  wait_until_one_waits(py);
  ASSERT_EQ(waiting(), 1u) << py.log();

  py.signal(SIGUSR1);
  testing::eventually([&] { return py.log().find('\n') != std::string::npos || py.exited(); }, 60s);
  ASSERT_EQ(py.log(), "handler ran\n");
  EXPECT_EQ(waiting(), 1u);

  held.pop_back();
  ASSERT_TRUE(py.wait_exit(60s)) << py.log();
  EXPECT_EQ(py.exit_code(), 0) << py.log();
  EXPECT_EQ(py.log(), "handler ran\nadmitted\n");
  EXPECT_EQ(dep_->inflight(), kLimit - 1);  // its permit came back as it exited
}

// close() on one thread cancels another's wait with no timeout, which
// nothing else would end while every permit stays taken: the wait raises
// ValueError and the client closes, with nothing held.
TEST_F(SharedLimit, APythonCloseCancelsAnotherThreadsWait) {
  std::vector<Permit> held;
  ASSERT_EQ(take_all(held), kLimit);
  const std::string in_queue = dir_ + "/in_queue";
  ChildProcess py = python({"close-beside-a-waiter", in_queue});
  wait_until_one_waits(py);
  ASSERT_EQ(waiting(), 1u) << py.log();
  testing::write_file(in_queue, "");
  ASSERT_TRUE(py.wait_exit(60s)) << py.log();
  EXPECT_EQ(py.exit_code(), 0) << py.log();
  EXPECT_EQ(py.log(), "ValueError\nclosed\n");
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(dep_->inflight(), kLimit);  // only this process's
}

// acquire_async() waits on a thread, the event loop running meanwhile, and
// is admitted when C++ gives a permit back.
TEST_F(SharedLimit, PythonAsyncioWaitsInTheQueueWhileItsLoopRuns) {
  std::vector<Permit> held;
  ASSERT_EQ(take_all(held), kLimit);
  ChildProcess py = python({"async-wait"});
  wait_until_one_waits(py);
  ASSERT_EQ(waiting(), 1u) << py.log();
  held.pop_back();
  ASSERT_TRUE(py.wait_exit(60s)) << py.log();
  EXPECT_EQ(py.exit_code(), 0) << py.log();
  EXPECT_EQ(py.log(), "running while it waits\nadmitted\n");
  EXPECT_EQ(dep_->inflight(), kLimit - 1);
}

// Cancelling the task that awaits acquire_async() gives up its place in
// the queue at once, and a permit freed later is not taken for it.
TEST_F(SharedLimit, CancellingAPythonAsyncioWaitLeavesTheQueue) {
  std::vector<Permit> held;
  ASSERT_EQ(take_all(held), kLimit);
  const std::string in_queue = dir_ + "/in_queue", done = dir_ + "/done";
  ChildProcess py = python({"async-cancel", in_queue, done});
  wait_until_one_waits(py);
  ASSERT_EQ(waiting(), 1u) << py.log();
  testing::write_file(in_queue, "");
  for (auto give_up = std::chrono::steady_clock::now() + 60s;
       py.log().find('\n') == std::string::npos && !py.exited() && std::chrono::steady_clock::now() < give_up;)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(py.log(), "cancelled\n");
  // Given up at once: with no timeout, nothing else would end the wait.
  for (auto give_up = std::chrono::steady_clock::now() + 60s;
       waiting() != 0 && std::chrono::steady_clock::now() < give_up;)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(waiting(), 0u);
  held.pop_back();
  testing::write_file(done, "");
  ASSERT_TRUE(py.wait_exit(60s)) << py.log();
  EXPECT_EQ(py.exit_code(), 0) << py.log();
  EXPECT_EQ(dep_->inflight(), kLimit - 1);
}

// acquire_async()'s waits take no thread of the loop's default executor,
// which the rest of the loop shares (getaddrinfo, to_thread): a call that
// holds a permit and needs one of those threads would wait for the waits,
// which wait for its permit.
TEST_F(SharedLimit, PythonAsyncioWaitsLeaveTheLoopsExecutorFree) {
  std::vector<Permit> held;
  ASSERT_EQ(take_all(held), kLimit);
  ChildProcess py = python({"async-beside-the-executor"});
  ASSERT_TRUE(py.wait_exit(120s)) << py.log();
  EXPECT_EQ(py.exit_code(), 0) << py.log();
  EXPECT_EQ(py.log(), "the loop's executor ran\n2 still waiting\n");
  EXPECT_EQ(waiting(), 0u);
  EXPECT_EQ(dep_->inflight(), kLimit);
}

// A look-up of a name whose slot another process's claim holds (it died
// claiming: bh_dependency() waits up to a second for the claim to finish)
// holds up no other thread's calls on the client.
TEST_F(SharedLimit, APythonLookUpWaitingForAStuckClaimHoldsUpNoOtherCall) {
  const std::string name = "stuck";
  {
    shm::Segment segment = shm::Segment::attach(segment_.str(), shm::Access::kReadWrite);
    const std::uint64_t hash = shm::dependency_name_hash(name);
    shm::DependencyIdentity& id = segment.dependency(hash % segment.capacities().max_dependencies).identity;
    std::uint64_t free = shm::kSlotFree;
    ASSERT_TRUE(id.tag.compare_exchange_strong(free, (hash << 8) | shm::kSlotClaiming));
  }
  ChildProcess py = python({"beside-a-stuck-claim", name});
  ASSERT_TRUE(py.wait_exit(60s));
  EXPECT_EQ(py.exit_code(), 0) << py.log();
  EXPECT_EQ(py.log(), "others went on\n");
}

}  // namespace
}  // namespace bulkhead
