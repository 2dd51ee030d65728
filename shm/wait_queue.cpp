#include "shm/wait_queue.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace bulkhead::shm {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

std::uint32_t queue_length(const std::atomic<std::uint64_t>* records, std::uint32_t slots) {
  std::uint32_t n = 0;
  // seq_cst: a waiter's scan follows its announce_waiter() (see there).
  for (std::uint32_t i = 0; i < slots; ++i) n += records[i].load(std::memory_order_seq_cst) != 0;
  return n;
}

std::uint32_t waiters_ahead(const std::atomic<std::uint64_t>* records, std::uint32_t slots,
                            std::uint64_t ticket, bool lifo) {
  std::uint32_t n = 0;
  for (std::uint32_t i = 0; i < slots; ++i) {
    // seq_cst: as in queue_length().
    const std::uint64_t r = records[i].load(std::memory_order_seq_cst);
    if (r == 0) continue;
    const std::uint64_t t = record_ticket(r);
    n += lifo ? t > ticket : t < ticket;
  }
  return n;
}

std::uint32_t free_records_of(std::atomic<std::uint64_t>* records, std::uint32_t slots,
                              std::uint32_t process) {
  std::uint32_t freed = 0;
  for (std::uint32_t i = 0; i < slots; ++i) {
    std::uint64_t r = records[i].load(std::memory_order_relaxed);
    // Only that exact record: if its owner (alive after all) freed it and
    // another waiter took the place, the CAS fails and the place stays
    // taken. seq_cst: the caller wakes the waiters next (wake_waiters()).
    if (r != 0 && record_process(r) == process &&
        records[i].compare_exchange_strong(r, 0, std::memory_order_seq_cst)) {
      ++freed;
    }
  }
  return freed;
}

void futex_sleep(std::atomic<std::uint32_t>& futex, std::uint32_t seen, std::uint64_t until_ns) {
  timespec until;
  until.tv_sec = static_cast<time_t>(until_ns / 1'000'000'000u);
  until.tv_nsec = static_cast<long>(until_ns % 1'000'000'000u);
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout, so a
  // deadline needs no conversion and a signal restarts nothing. Shared: no
  // FUTEX_PRIVATE_FLAG. The result does not matter: the caller looks again.
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&futex), FUTEX_WAIT_BITSET, seen, &until,
            nullptr, FUTEX_BITSET_MATCH_ANY);
}

void wake_sleepers(std::atomic<std::uint32_t>& futex, std::uint32_t seen) {
  // seen + 1 clears the bit (seen is odd) and counts one wake-up, so that a
  // waiter that read `seen` and has not slept yet finds another value and
  // does not sleep. Of wakers racing, one wins and wakes; the others find
  // the bit clear. seq_cst: as in wake_waiters().
  while ((seen & kFutexSleepers) != 0) {
    if (futex.compare_exchange_weak(seen, seen + 1, std::memory_order_seq_cst)) {
      ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&futex), FUTEX_WAKE, INT_MAX, nullptr,
                nullptr, 0);
      return;
    }
  }
}

}  // namespace bulkhead::shm
