// libFuzzer harness: libbulkhead's reading of a segment that other
// processes wrote.
//
// Every process of the segment's group can write all of it, and the
// library runs inside every service that calls a dependency: whatever
// another process left there, a client must not crash, hang, or lose
// count of its own permits. For each input the harness restores the seed
// segment and applies the input's patches to it
// (tests/fuzz/seed_segment.hpp: what it holds, and the input's format),
// then does what a service does: opens a client on the segment by name;
// looks up names, the three configured, one the seed's pattern matches and
// a new one (a header the input made strict refuses the last two unless a
// published pattern matches them; a name whose slot holds a claim that
// never finished is skipped: its lookup waits a second of patience), and
// two partitions of each (payments has both, one with a hard cap); through
// every handle it got, reads the limit, the
// in-flight count and the breaker and makes a call of each kind
// (bh_try_acquire, the untimed pair, bh_acquire and bh_acquire_cancellable
// with a deadline 100 us ahead, and one whose cancel was requested), each
// released with its outcome; then closes the client.
//
// It fails on a crash, a sanitizer report or a hang (libFuzzer's
// -timeout); on a return value outside what bulkhead.h documents for the
// call; on a filled permit with a refusal or an empty one with an
// admission; and when the calls, each released, leave any dependency's
// admission word or any process's held counts other than they found
// them: a permit taken is given back, to the count it was taken from. A
// half-open breaker's trial permits are spent only by calls admitted: no
// trials word may grow, and all of them together may lose at most one
// trial per call admitted.
// Nothing else writes the segment meanwhile, so the words must be equal to
// the bit.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "bulkhead/bulkhead.h"
#include "shm/layout.hpp"
#include "shm/segment.hpp"
#include "tests/fuzz/seed_segment.hpp"

namespace {

using namespace bulkhead;
using fuzz::claim_unfinished;
using fuzz::SeedSegment;

SeedSegment& seed() {
  static SeedSegment f(true);
  return f;
}

// Every admission word and held count of the segment, in slot order.
std::vector<std::uint64_t> permit_words(const shm::Segment& s) {
  const shm::Capacities c = s.capacities();
  std::vector<std::uint64_t> words;
  for (std::uint32_t d = 0; d < c.max_dependencies; ++d) words.push_back(s.dependency(d).admission.word.load());
  for (std::uint32_t p = 0; p < c.max_processes; ++p) {
    for (std::uint32_t d = 0; d < c.max_dependencies; ++d) words.push_back(s.held(p, d).load());
  }
  return words;
}

// Every dependency's trials word, in slot order.
std::vector<std::uint64_t> trial_words(const shm::Segment& s) {
  std::vector<std::uint64_t> words;
  for (std::uint32_t d = 0; d < s.capacities().max_dependencies; ++d) {
    words.push_back(s.dependency(d).control.trials.load());
  }
  return words;
}

// Whether bh_try_acquire()'s `result` admitted the call; aborts on a
// reason it does not give (BH_REJECT_PARTITION: a partition's handle only)
// or a permit that says otherwise.
bool admitted(int result, const bh_permit& permit, bool partition) {
  if (result != 0 && result != BH_REJECT_LIMIT && result != BH_REJECT_OPEN_CIRCUIT &&
      (result != BH_REJECT_PARTITION || !partition)) {
    std::abort();
  }
  if ((result == 0) != (permit.dep_ != nullptr)) std::abort();
  return result == 0;
}

// A call of each kind through `d`, each given back with `outcome`; returns
// how many were admitted.
int calls(bh_dep* d, int outcome, bool partition) {
  // Read for the sanitizers: both are unsigned words of the segment, so
  // any value is one the call may return.
  (void)bh_limit(d);
  (void)bh_inflight(d);
  const int state = bh_breaker_state(d);
  if (state != BH_BREAKER_CLOSED && state != BH_BREAKER_OPEN && state != BH_BREAKER_HALF_OPEN) std::abort();

  int n = 0;
  bh_permit permit{};
  if (admitted(bh_try_acquire(d, &permit), permit, partition)) {
    if (bh_permit_remaining_ns(&permit) != UINT64_MAX) std::abort();  // no deadline
    ++n;
  }
  bh_release(&permit, outcome);
  if (permit.dep_ != nullptr) std::abort();
  bh_release(&permit, outcome);  // twice: does nothing

  n += admitted(bh_try_acquire_untimed(d, &permit), permit, partition);
  bh_release_latency(&permit, outcome, 12'000'000);

  // Any reason but BH_REJECT_PARTITION, which only a partition's handle gets.
  const int waited = bh_acquire(d, bh_now_ns() + 100'000, &permit);
  if (waited < 0 || waited > (partition ? BH_REJECT_PARTITION : BH_REJECT_OPEN_CIRCUIT) ||
      (waited == 0) != (permit.dep_ != nullptr)) {
    std::abort();
  }
  n += waited == 0;
  bh_release(&permit, outcome);

  // The same with a cancel: one not requested waits as bh_acquire() (its
  // entry cleared as it leaves), one requested refuses at once.
  bh_cancel cancel{};
  const int cancellable = bh_acquire_cancellable(d, bh_now_ns() + 100'000, &cancel, &permit);
  if (cancellable < 0 || cancellable > (partition ? BH_REJECT_PARTITION : BH_REJECT_OPEN_CIRCUIT) ||
      (cancellable == 0) != (permit.dep_ != nullptr)) {
    std::abort();
  }
  for (void* entry : cancel.waiting_) {
    if (entry != nullptr) std::abort();
  }
  n += cancellable == 0;
  bh_release(&permit, outcome);
  bh_cancel_request(&cancel);
  if (bh_acquire_cancellable(d, BH_NO_DEADLINE, &cancel, &permit) != BH_REJECT_CANCELLED ||
      permit.dep_ != nullptr) {
    std::abort();
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  SeedSegment& f = seed();
  f.patch(data, size);

  bh_options options{};
  options.segment = f.name.c_str();
  options.flags = BH_OPEN_REQUIRE_SEGMENT;
  bh_client* client = nullptr;
  if (const int r = bh_client_open_opts(&options, &client); r != 0) {
    if (r > 0 || client != nullptr) std::abort();
    return 0;  // refused: a segment the validation rejects, or a full process table
  }
  if (bh_client_mode(client) != BH_MODE_SHARED) std::abort();

  std::vector<std::pair<bh_dep*, bool>> handles;  // and whether it is a partition's
  for (const char* name : {"payments", "recs", "search", "db-shard-12", "fuzz-new"}) {
    // Its lookup would wait out a second of patience, then -EAGAIN.
    if (claim_unfinished(*f.segment, name)) continue;
    bh_dep* d = nullptr;
    if (const int r = bh_dependency(client, name, &d); r != 0) {
      if (r > 0 || d != nullptr) std::abort();
      continue;  // refused: strict, or the table full
    }
    handles.emplace_back(d, false);
    for (const char* partition : {"critical", "batch"}) {
      bh_dep* p = nullptr;
      if (const int r = bh_partition(d, partition, &p); r == 0) {
        if (p != d) handles.emplace_back(p, true);
      } else if (r != -ENOENT || p != nullptr) {
        std::abort();
      }
    }
  }

  const std::vector<std::uint64_t> before = permit_words(*f.segment);
  const std::vector<std::uint64_t> trials_before = trial_words(*f.segment);
  int outcome = 0;
  std::uint64_t admissions = 0;
  for (const auto& [d, partition] : handles) admissions += calls(d, outcome++ % 4, partition);
  if (permit_words(*f.segment) != before) std::abort();
  const std::vector<std::uint64_t> trials_after = trial_words(*f.segment);
  std::uint64_t trials_spent = 0;
  for (std::size_t i = 0; i < trials_before.size(); ++i) {
    if (trials_after[i] > trials_before[i]) std::abort();
    trials_spent += trials_before[i] - trials_after[i];
  }
  if (trials_spent > admissions) std::abort();
  bh_client_close(client);
  return 0;
}
