// The console report of a Google Benchmark run that also keeps each case's
// real time per iteration, by name, for the ratios a bench prints after
// it (bulkhead-fallback-bench, bulkhead-liveness-bench).
//
// Thread safety: called by Google Benchmark on the thread that runs it.
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bulkhead::bench {

class TimingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (!run.error_occurred && run.iterations > 0) ns_[run.benchmark_name()] = run.GetAdjustedRealTime();
    }
  }
  // The real time per iteration of the case named `name` (e.g.
  // "held/256/real_time"), in its time unit (ns unless the case set
  // another); nullopt when it did not run or failed.
  std::optional<double> real_time(const std::string& name) const {
    const auto it = ns_.find(name);
    return it == ns_.end() ? std::nullopt : std::optional<double>(it->second);
  }

 private:
  std::map<std::string, double> ns_;
};

}  // namespace bulkhead::bench
