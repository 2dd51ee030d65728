// bulkhead::Executor when a worker thread cannot be created (EAGAIN: the
// thread or memory limit): the constructor throws std::system_error and
// leaves no thread behind, rather than std::terminate() on the workers it
// had started. And when memory runs out as a task is refused: its future
// holds std::bad_alloc, rather than std::terminate() on the worker or in
// shutdown(). pthread_create() and operator new are replaced here to fail
// on demand, so this is its own binary (and not built under sanitizers,
// which interpose them themselves).
#include <dlfcn.h>
#include <pthread.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <new>
#include <system_error>
#include <thread>

#include "bulkhead/executor.hpp"

namespace {

// pthread_create() calls left to succeed; below zero, EAGAIN.
std::atomic<int> g_creates_left{1 << 30};
// Set: every operator new throws std::bad_alloc.
std::atomic<bool> g_out_of_memory{false};

}  // namespace

void* operator new(std::size_t size) {
  if (!g_out_of_memory.load()) {
    if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  }
  throw std::bad_alloc();
}
// Their pair: GCC, inlining both, takes free() for a mismatch.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*), void* arg) {
  using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const Create real = reinterpret_cast<Create>(::dlsym(RTLD_NEXT, "pthread_create"));
  if (g_creates_left.fetch_sub(1) <= 0) return EAGAIN;
  return real(thread, attr, start, arg);
}

namespace bulkhead {
namespace {

TEST(ExecutorThreads, AWorkerThatCannotStartIsAnExceptionNotATermination) {
  bh_options options{};
  options.segment = "bhtest-executor-threads-no-such-segment";
  Client client(options);
  Dependency dep = client.dependency("legacy");
  g_creates_left = 2;  // the third worker fails
  EXPECT_THROW(Executor(dep, {.threads = 4, .queue_capacity = 4}), std::system_error);
  g_creates_left = 1 << 30;
  Executor pool(dep, {.threads = 2, .queue_capacity = 4});
  auto s = pool.submit([] { return 7; });
  ASSERT_TRUE(s);
  EXPECT_EQ(s.future().get(), 7);
}

// A task refused when no memory is left to say why (Rejected holds a
// message): the worker that drops it, past its deadline, and shutdown(),
// which refuses a queued one. Nothing else allocates meanwhile: the test
// waits on futures made before, and the workers only take tasks.
TEST(ExecutorThreads, ATaskRefusedOutOfMemoryHoldsBadAlloc) {
  bh_options options{};
  options.segment = "bhtest-executor-threads-no-such-segment";
  Client client(options);
  Dependency dep = client.dependency("legacy");
  Executor pool(dep, {.threads = 1, .queue_capacity = 4});
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  auto hold = [&] {
    started = true;
    while (!release.load()) std::this_thread::yield();
    return 1;
  };
  auto busy = pool.submit(hold);
  ASSERT_TRUE(busy);
  while (!started.load()) std::this_thread::yield();
  // A deadline that passes in the queue (doubled until submit() queues it).
  auto budget = std::chrono::milliseconds(1);
  auto late = pool.submit([] { return 2; }, budget);
  while (!late && late.reason() == BH_REJECT_DEADLINE) late = pool.submit([] { return 2; }, budget *= 2);
  ASSERT_TRUE(late);
  const auto deadline = Executor::Clock::now() + budget;
  while (Executor::Clock::now() <= deadline) std::this_thread::yield();
  g_out_of_memory = true;
  release = true;
  late.future().wait();
  g_out_of_memory = false;
  EXPECT_THROW(late.future().get(), std::bad_alloc);
  EXPECT_EQ(busy.future().get(), 1);

  started = false;
  release = false;
  busy = pool.submit(hold);
  ASSERT_TRUE(busy);
  while (!started.load()) std::this_thread::yield();
  auto queued = pool.submit([] { return 3; });
  ASSERT_TRUE(queued);
  g_out_of_memory = true;
  pool.shutdown();
  g_out_of_memory = false;
  EXPECT_THROW(queued.future().get(), std::bad_alloc);
  release = true;
  EXPECT_EQ(busy.future().get(), 1);
}

}  // namespace
}  // namespace bulkhead
