// A segment name no other test (or test process) uses, removed when done.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "shm/segment.hpp"
#include "tests/support/made_here.hpp"

namespace bulkhead::testing {

class TempSegmentName {
 public:
  explicit TempSegmentName(const std::string& tag = "t") {
    static std::atomic<int> counter{0};
    name_ = "bhtest-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    shm::Segment::remove(name_);
  }
  ~TempSegmentName() {
    if (made_.here()) shm::Segment::remove(name_);
  }
  TempSegmentName(const TempSegmentName&) = delete;
  TempSegmentName& operator=(const TempSegmentName&) = delete;

  const std::string& str() const { return name_; }
  const char* c_str() const { return name_.c_str(); }
  operator const std::string&() const { return name_; }

 private:
  MadeHere made_;
  std::string name_;
};

inline shm::CreateOptions small_segment(std::uint32_t dependencies = 16, std::uint32_t processes = 16,
                                        std::uint32_t stripes = 4, std::uint32_t queue_slots = 8) {
  shm::CreateOptions o;
  o.capacities = {dependencies, processes, stripes, queue_slots};
  return o;
}

// Claims every free process slot of a segment for this process, and frees
// them when it goes: meanwhile the next claim (a forked child's) finds the
// table full.
class FullProcessTable {
 public:
  explicit FullProcessTable(shm::Segment& segment) : segment_(segment) {
    for (;;) {
      try {
        claimed_.push_back(shm::claim_process_slot(segment_));
      } catch (const shm::SegmentError&) {
        return;
      }
    }
  }
  ~FullProcessTable() {
    if (!made_.here()) return;
    for (const shm::ProcessClaim& claim : claimed_) shm::release_process_slot(segment_, claim);
  }
  FullProcessTable(const FullProcessTable&) = delete;
  FullProcessTable& operator=(const FullProcessTable&) = delete;

  std::size_t claimed() const { return claimed_.size(); }

 private:
  MadeHere made_;
  shm::Segment& segment_;
  std::vector<shm::ProcessClaim> claimed_;
};

}  // namespace bulkhead::testing
