// A segment name no other test (or test process) uses, removed when done.
#pragma once

#include <unistd.h>

#include <atomic>
#include <string>

#include "shm/segment.hpp"

namespace bulkhead::testing {

class TempSegmentName {
 public:
  explicit TempSegmentName(const std::string& tag = "t") {
    static std::atomic<int> counter{0};
    name_ = "bhtest-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    shm::Segment::remove(name_);
  }
  ~TempSegmentName() { shm::Segment::remove(name_); }
  TempSegmentName(const TempSegmentName&) = delete;
  TempSegmentName& operator=(const TempSegmentName&) = delete;

  const std::string& str() const { return name_; }
  const char* c_str() const { return name_.c_str(); }
  operator const std::string&() const { return name_; }

 private:
  std::string name_;
};

inline shm::CreateOptions small_segment(std::uint32_t dependencies = 16, std::uint32_t processes = 16,
                                        std::uint32_t stripes = 4, std::uint32_t queue_slots = 8) {
  shm::CreateOptions o;
  o.capacities = {dependencies, processes, stripes, queue_slots};
  return o;
}

}  // namespace bulkhead::testing
