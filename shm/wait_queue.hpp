// The wait queue of one dependency, shared by every process on the host:
// its records, their order, and the futex that waiters sleep on.
//
// Algorithm (docs/architecture.md, "The wait queue", tells it whole):
//   - A waiter takes a ticket (DependencyAdmission::tickets, arrival order)
//     and claims a free record among the first max_queue ones with one
//     compare-and-swap from 0 to queue_record(ticket, process slot). No free
//     record: the queue is full. The records are the count: there is no
//     separate counter that a killed waiter could leave wrong.
//   - A waiter may take a permit when fewer waiters come before it
//     (waiters_ahead(): older tickets for FIFO, newer for LIFO) than there
//     are free permits. So order across processes needs no lock: every
//     waiter sees the same records and only the first ones try.
//   - Before it looks at the admission word and the records, a waiter sets
//     kFutexSleepers in DependencyAdmission::futex; it sleeps (futex_sleep)
//     only while the word still holds the value it saw. Whoever may let a
//     waiter in (a release, a waiter leaving, the daemon) changes the word
//     first and then calls wake_waiters(), which pays a system call only
//     when the bit is set, clears it and wakes every sleeper. The two sides
//     are sequentially consistent (Dekker): either the waiter sees the
//     change, or the waker sees the bit.
//   - Every sleep has a timeout (kWaitPollNs at most), since a process may
//     die between freeing a permit and waking anyone.
//
// Locking: none; every shared field is an atomic in the segment.
#pragma once

#include <atomic>
#include <cstdint>

#include "shm/layout.hpp"

namespace bulkhead::shm {

// A waiter re-checks at least this often even if no one wakes it, in ns.
inline constexpr std::uint64_t kWaitPollNs = 50'000'000;  // 50 ms

// A record: the ticket in the high 48 bits, process slot + 1 in the low 16
// (so that a taken record is never 0).
static_assert(kMaxProcessesLimit < 0xffff);
constexpr std::uint64_t queue_record(std::uint64_t ticket, std::uint32_t process) {
  return (ticket << 16) | (process + 1);
}
constexpr std::uint64_t record_ticket(std::uint64_t record) { return record >> 16; }
constexpr std::uint32_t record_process(std::uint64_t record) {
  return static_cast<std::uint32_t>(record & 0xffff) - 1;
}

// Records taken among `slots`.
std::uint32_t queue_length(const std::atomic<std::uint64_t>* records, std::uint32_t slots);

// Records among `slots` that come before `ticket`: older tickets (FIFO) or
// newer ones (LIFO).
std::uint32_t waiters_ahead(const std::atomic<std::uint64_t>* records, std::uint32_t slots,
                            std::uint64_t ticket, bool lifo);

// Frees the records that process slot `process` holds (it died waiting);
// returns how many.
std::uint32_t free_records_of(std::atomic<std::uint64_t>* records, std::uint32_t slots,
                              std::uint32_t process);

// Sleeps while `futex` holds `seen`, until woken or until `until_ns` on
// CLOCK_MONOTONIC: the raw futex system call, shared (no
// FUTEX_PRIVATE_FLAG), since the word is in a segment other processes map.
// Returns on a wake, a changed word, the timeout or a signal alike; the
// caller looks again.
void futex_sleep(std::atomic<std::uint32_t>& futex, std::uint32_t seen, std::uint64_t until_ns);

// Clears kFutexSleepers and wakes every sleeper; see wake_waiters().
void wake_sleepers(std::atomic<std::uint32_t>& futex, std::uint32_t seen);

// Wakes the waiters of a dependency if one may be asleep. Call after a
// change that may let a waiter in (its admission word, the records, the
// limit). A load when no one waits, a system call otherwise.
inline void wake_waiters(std::atomic<std::uint32_t>& futex) {
  // seq_cst: with the seq_cst change the caller made before, pairs with
  // the waiter's fetch_or of kFutexSleepers and its loads after it in
  // announce_waiter(): either the waiter sees the change or this sees the
  // bit.
  const std::uint32_t seen = futex.load(std::memory_order_seq_cst);
  if ((seen & kFutexSleepers) != 0) wake_sleepers(futex, seen);
}

// A waiter says it may sleep; returns the value to sleep on. Load the
// admission word and the records only after this.
inline std::uint32_t announce_waiter(std::atomic<std::uint32_t>& futex) {
  // seq_cst: pairs with the load in wake_waiters() (see there).
  return futex.fetch_or(kFutexSleepers, std::memory_order_seq_cst) | kFutexSleepers;
}

}  // namespace bulkhead::shm
