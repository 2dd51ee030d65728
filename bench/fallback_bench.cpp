// bulkhead-fallback-bench: what does bulkhead::execute cost a refused call,
// the one that runs a fallback? Under overload every call is one, so the
// fallback path is the hot path then.
//
// A standalone client with a static limit of 1 whose one permit the bench
// holds: every call is refused and falls back. Cases, in ns per call (real
// time), on 1 and 2 threads:
//
//   default_guard  execute(dep, call, fallback): the dependency's default
//                  FallbackGuard, found by its handle;
//   own_guard      execute(dep, guard, call, fallback): a guard of the
//                  caller's, the baseline;
//
// then default_guard over own_guard for each thread count. Both take and
// give back a place in their guard (one contended compare-and-swap and one
// add); what is left is the finding of the default guard.
//
//   bulkhead-fallback-bench                          # about 4 s
//   bulkhead-fallback-bench --benchmark_min_time=0.5
//
// It exits 1 if a call was admitted or a fallback refused.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <optional>
#include <string>

#include "bench/timings.hpp"
#include "bulkhead/fallback.hpp"

namespace bulkhead::bench {
namespace {

std::optional<Client> g_client;
std::optional<Dependency> g_dep;
FallbackGuard g_own(1000);
bool g_failed = false;

int call() { return 1; }
int fallback(const FallbackContext&) { return 2; }

template <bool kDefault>
void fall_back(benchmark::State& state) {
  long sum = 0;
  long calls = 0;
  try {
    for (auto _ : state) {
      sum += kDefault ? execute(*g_dep, call, fallback) : execute(*g_dep, g_own, call, fallback);
      ++calls;
    }
  } catch (const FallbackRefused&) {
    state.SkipWithError("a fallback was refused");
    g_failed = true;
    return;
  }
  if (sum != 2 * calls) {
    state.SkipWithError("a call was admitted");
    g_failed = true;
  }
}
BENCHMARK_TEMPLATE(fall_back, true)->Name("default_guard")->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK_TEMPLATE(fall_back, false)->Name("own_guard")->Threads(1)->Threads(2)->UseRealTime();

void print_ratios(const TimingReporter& timings) {
  std::printf("\ndefault guard over own guard (ns per call, real time, this run):\n");
  for (const char* threads : {"threads:1", "threads:2"}) {
    const auto d = timings.real_time(std::string("default_guard/real_time/") + threads);
    const auto o = timings.real_time(std::string("own_guard/real_time/") + threads);
    if (!d || !o) continue;
    std::printf("  %s  %7.1f / %7.1f = %.2fx\n", threads, *d, *o, *d / *o);
  }
}

}  // namespace
}  // namespace bulkhead::bench

int main(int argc, char** argv) {
  using namespace bulkhead::bench;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  bh_options options{};
  options.segment = "bhfallback-absent";  // no such segment: standalone
  options.static_limit = 1;
  g_client.emplace(options);
  g_dep.emplace(g_client->dependency("payments"));
  bulkhead::Permit held = g_dep->try_acquire();  // the limit reached: every call falls back
  if (!held) {
    std::fprintf(stderr, "bulkhead-fallback-bench: the first permit was refused\n");
    return 1;
  }
  TimingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_ratios(reporter);
  held.ignore();
  return g_failed ? 1 : 0;
}
