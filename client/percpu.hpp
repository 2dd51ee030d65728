// Per-CPU counter adds without a lock prefix: a restartable sequence.
//
// Source: the Linux rseq ABI (include/uapi/linux/rseq.h, kernel/rseq.c) and
// librseq's rseq_addv() for x86-64 (include/rseq/rseq-x86.h; now
// rseq_load_add_store__ptr() in include/rseq/arch/x86/bits.h), which this
// follows instruction for instruction. Debian 12 packages no librseq,
// and glibc 2.36 registers each thread's rseq area itself, exporting only
// where it is (__rseq_offset from the thread pointer, __rseq_size), so the
// few instructions are written here.
//
// The protocol. A critical section is described by a struct rseq_cs in the
// __rseq_cs section: start_ip, post_commit_offset (its length, ending just
// after the commit instruction) and abort_ip, preceded in the code by the
// 4-byte signature RSEQ_SIG that glibc registered with the kernel. The
// thread enters the section by storing the descriptor's address into
// rseq_cs of its rseq area (thread pointer + __rseq_offset); then it
// compares the area's cpu_id with the CPU it chose the counter for, and
// commits with one instruction, a plain `add` to memory. If the kernel
// preempts the thread, moves it to another CPU or delivers it a signal
// while its instruction pointer is in [start_ip, start_ip +
// post_commit_offset), it resumes it at abort_ip instead, before the
// commit. So an add that completes ran on `cpu` from its comparison to its
// commit with no other thread on that CPU in between, and, across every
// process on the host, the adds that commit on one CPU are serialized by
// that CPU: as exact as a `lock add` for a counter that only code running
// on that CPU writes. A counter that a thread on another CPU may write at
// the same time (with a lock prefix or not) can lose an add: the caller
// must keep such counters apart (client.cpp gives each CPU its own stripe
// and sends everything else to other stripes).
//
// rseq_cs is left pointing at the descriptor after the commit, as librseq
// leaves it: the kernel ignores it once the instruction pointer is outside
// the section, and clears it at the thread's next preemption. The
// descriptors live in libbulkhead itself, which is therefore linked
// -z nodelete: never unmapped while a thread's rseq_cs may point into it.
// (A plugin that links the static archive and is dlclose()d would need the
// same.)
//
// Sanitizers: ASan and TSan instrument compiled accesses, not this asm, so
// they neither check nor see the add (TSan cannot report a race it does
// not see; the counters' readers use atomic loads). The same code runs in
// the sanitized builds, and percpu_test passes in them.
//
// Memory order. The commit is a plain store (the `add`'s write) on x86-64,
// whose stores are seen by every other CPU in program order (TSO): it is a
// release store for the stores before it. The "memory" clobber keeps the
// compiler from moving this thread's loads and stores across it. So a
// caller that adds to two counters in order, each in its own sequence,
// publishes the first with the second, as a release fetch_add would.
#pragma once

#include <sys/rseq.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "shm/cpus.hpp"

namespace bulkhead::percpu {

#if defined(__x86_64__) && defined(RSEQ_SIG)
inline constexpr bool kBuilt = true;
#else
inline constexpr bool kBuilt = false;  // every add takes the caller's fallback
#endif

// Whether glibc registered an rseq area for the threads of this process
// (glibc 2.35 and later, unless the tunable glibc.pthread.rseq=0 is set).
inline bool registered() { return __rseq_size > 0; }

// The CPU the calling thread ran on when it last entered user space, from
// its rseq area: one load, always a valid CPU number (0 before a
// registration). Only meaningful when registered().
inline std::uint32_t cpu_start() {
  const auto* area = reinterpret_cast<const volatile struct rseq*>(
      static_cast<const char*>(__builtin_thread_pointer()) + __rseq_offset);
  return area->cpu_id_start;
}

// The CPUs the host may ever have (shm/cpus.hpp): above every CPU number
// the kernel reports, the same for every process on the host (sysfs is not
// namespaced); 0 when unknown.
using shm::possible_cpus;

#define BULKHEAD_PERCPU_STR2(x) #x
#define BULKHEAD_PERCPU_STR(x) BULKHEAD_PERCPU_STR2(x)

// Adds `value` to `*counter` in a restartable sequence that commits only on
// CPU `cpu` (which the caller read with cpu_start() and chose the counter
// for). True when it added; false when it did not: the thread was not on
// `cpu`, or was preempted, moved or signalled before the commit, or has no
// rseq area (its cpu_id is negative). A false is rare; the caller then adds
// some other way to a counter that no CPU owns. Only for counters that
// nothing running on another CPU writes (see above). 32- or 64-bit.
template <typename T>
[[gnu::always_inline]] inline bool add_on_cpu(std::atomic<T>* counter, T value, std::uint32_t cpu) {
  static_assert(std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
  static_assert(sizeof(std::atomic<T>) == sizeof(T) && std::atomic<T>::is_always_lock_free);
#if defined(__x86_64__) && defined(RSEQ_SIG)
  // The plain counter under the atomic (same size, lock-free: the same
  // representation).
  T* plain = reinterpret_cast<T*>(counter);
  // 3: the descriptor (version 0, flags 0: abort on preemption, migration
  // and signal); 1: start; 2: just after the commit; 4: abort handler, out
  // of line, after the signature (bytes 0f b9 3d make it disassemble as
  // `ud1 RSEQ_SIG(%rip), %edi`, as glibc and librseq write it).
#define BULKHEAD_PERCPU_SEQUENCE(add)                                         \
  ".pushsection __rseq_cs, \"aw\"\n\t"                                        \
  ".balign 32\n\t"                                                            \
  "3:\n\t"                                                                    \
  ".long 0x0, 0x0\n\t"                                                        \
  ".quad 1f, (2f - 1f), 4f\n\t"                                               \
  ".popsection\n\t"                                                           \
  "leaq 3b(%%rip), %%rax\n\t"                                                 \
  "movq %%rax, %%fs:8(%[offset])\n\t" /* rseq_cs */                         \
  "1:\n\t"                                                                    \
  "cmpl %[cpu], %%fs:4(%[offset])\n\t" /* cpu_id */                         \
  "jnz 4f\n\t"                                                                \
  add " %[value], %[counter]\n\t" /* the commit */                           \
  "2:\n\t"                                                                    \
  ".pushsection __rseq_failure, \"ax\"\n\t"                                   \
  ".byte 0x0f, 0xb9, 0x3d\n\t"                                                \
  ".long " BULKHEAD_PERCPU_STR(RSEQ_SIG) "\n\t"                               \
  "4:\n\t"                                                                    \
  "jmp %l[aborted]\n\t"                                                       \
  ".popsection\n\t"
  static_assert(offsetof(struct rseq, cpu_id) == 4 && offsetof(struct rseq, rseq_cs) == 8);
  if constexpr (sizeof(T) == 8) {
    asm goto(BULKHEAD_PERCPU_SEQUENCE("addq")
             :
             : [cpu] "r"(cpu), [offset] "r"(__rseq_offset), [counter] "m"(*plain), [value] "er"(value)
             : "memory", "cc", "rax"
             : aborted);
  } else {
    asm goto(BULKHEAD_PERCPU_SEQUENCE("addl")
             :
             : [cpu] "r"(cpu), [offset] "r"(__rseq_offset), [counter] "m"(*plain), [value] "ir"(value)
             : "memory", "cc", "rax"
             : aborted);
  }
#undef BULKHEAD_PERCPU_SEQUENCE
  // librseq's rseq_after_asm_goto(): a compiler barrier after each exit of
  // an asm goto (works around clang miscompiling code after one).
  asm volatile("" ::: "memory");
  return true;
aborted:
  asm volatile("" ::: "memory");
  return false;
#else
  (void)counter, (void)value, (void)cpu;
  return false;
#endif
}

#undef BULKHEAD_PERCPU_STR
#undef BULKHEAD_PERCPU_STR2

}  // namespace bulkhead::percpu
