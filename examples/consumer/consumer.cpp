// A C++ program that uses libbulkhead as an installed library: built by
// tests/packaging/install_test.sh against a scratch install, with CMake
// (CMakeLists.txt beside it) and with pkg-config:
//
//   c++ -std=c++17 consumer.cpp $(pkg-config --cflags --libs bulkhead)
//
// It runs without a daemon: with no segment of the name it asks for, the
// client opens in standalone mode and admits up to its own static limit.
// It uses every public header, built as C++17: the headers promise no more.
#include <bulkhead/client.hpp>
#include <bulkhead/executor.hpp>
#include <bulkhead/fallback.hpp>

#include <cstdio>
#include <exception>
#include <vector>

int main() try {
  bh_options options{};
  options.segment = "bulkhead-consumer-example-absent";
  options.static_limit = 2;
  bulkhead::Client client(options);
  bulkhead::Dependency payments = client.dependency("payments");

  std::vector<bulkhead::Permit> held;
  int rejected = 0;
  for (int i = 0; i < 3; ++i) {
    if (bulkhead::Permit permit = payments.try_acquire()) {
      held.push_back(std::move(permit));
    } else {
      ++rejected;  // permit.reason() == BH_REJECT_LIMIT: serve a fallback
    }
  }
  const auto admitted = held.size();
  for (auto& permit : held) permit.success();

  // The thread-pool bulkhead, and a call with a fallback.
  bulkhead::ExecutorOptions pool_options;
  pool_options.threads = 1;
  bulkhead::Executor pool(payments, pool_options);
  auto submitted = pool.submit([](const bulkhead::Permit&) { return 40; });
  const int pooled = submitted ? submitted.future().get() : -1;
  const int served = bulkhead::execute(
      payments, [] { return 2; }, [](const bulkhead::FallbackContext&) { return -1; });

  const bool ok = client.mode() == bulkhead::Client::Mode::kStandalone && admitted == 2 &&
                  rejected == 1 && pooled + served == 42 && payments.inflight() == 0;
  std::printf("consumer (C++): %.*s; admitted %zu, rejected %d: %s\n",
              static_cast<int>(client.status().size()), client.status().data(), admitted, rejected,
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
