// The host's possible CPUs, as the kernel lists them: what a per-CPU
// layout must cover (client/percpu.hpp's stripes, the daemon's choice of
// how many stripes a segment gets).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace bulkhead::shm {

// The last number of /sys/devices/system/cpu/possible ("0-7",
// "0-3,8-11") plus one: above every CPU number the kernel reports, online
// or not, hotplugged later included. 0 when the file cannot be read or
// parsed. Reads the file once.
inline std::uint32_t possible_cpus() {
  static const std::uint32_t cpus = [] {
    std::FILE* f = std::fopen("/sys/devices/system/cpu/possible", "re");
    if (f == nullptr) return 0u;
    char text[512];
    const std::size_t n = std::fread(text, 1, sizeof text, f);
    std::fclose(f);
    if (n == 0 || n == sizeof text) return 0u;  // empty, or longer than any list we trust
    std::size_t end = n;
    while (end > 0 && (text[end - 1] < '0' || text[end - 1] > '9')) --end;
    std::uint32_t last = 0;
    std::uint32_t scale = 1;
    for (std::size_t i = end; i > 0 && text[i - 1] >= '0' && text[i - 1] <= '9'; --i, scale *= 10) {
      if (scale > 100000) return 0u;
      last += static_cast<std::uint32_t>(text[i - 1] - '0') * scale;
    }
    return end > 0 ? last + 1 : 0u;
  }();
  return cpus;
}

}  // namespace bulkhead::shm
