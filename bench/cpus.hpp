// The CPUs a bench may pin its processes and threads to.
#pragma once

#include <sched.h>

#include <vector>

namespace bulkhead::bench {

// The CPUs this process may run on (its affinity mask), in order; {0} when
// the mask cannot be read.
inline std::vector<int> usable_cpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return {0};
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

}  // namespace bulkhead::bench
