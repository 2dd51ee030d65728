// bulkhead::Executor when a worker thread cannot be created (EAGAIN: the
// thread or memory limit): the constructor throws std::system_error and
// leaves no thread behind, rather than std::terminate() on the workers it
// had started. pthread_create() is interposed here to fail on demand, so
// this is its own binary (and not built under sanitizers, which interpose
// it themselves).
#include <dlfcn.h>
#include <pthread.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <system_error>

#include "bulkhead/executor.hpp"

namespace {

// pthread_create() calls left to succeed; below zero, EAGAIN.
std::atomic<int> g_creates_left{1 << 30};

}  // namespace

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

}  // namespace
}  // namespace bulkhead
