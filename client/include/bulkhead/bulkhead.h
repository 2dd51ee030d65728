/*
 * libbulkhead: host-wide concurrency limits for outgoing calls. C ABI.
 *
 * A process opens a client once, looks up a handle per dependency once, and
 * then brackets every outgoing call with bh_try_acquire() and bh_release().
 * Admission is a compare-and-swap on a counter in shared memory against the
 * limit that bulkheadd publishes there: no lock, no system call, no
 * allocation. When no daemon runs (no segment), the client still works: it
 * admits against a static limit of its own (default: everything).
 *
 * A caller that would rather wait for a permit than be refused uses
 * bh_acquire() with a deadline: it joins the dependency's wait queue, which
 * is host-wide, bounded (max_queue in bulkheadd's config) and ordered (FIFO,
 * or LIFO per dependency), sleeping on a futex in shared memory until a
 * permit is released or the deadline passes.
 *
 * Every function that can fail returns 0 on success, a positive BH_REJECT_*
 * reason when a call is not admitted, or a negative errno value for misuse
 * or a segment that cannot be used; bh_last_error() then says why in words.
 * Nothing here throws or logs; only bh_acquire() blocks.
 *
 * Thread safety: a bh_client and its bh_dep handles may be used from any
 * number of threads at once. A bh_permit belongs to the thread that holds it;
 * one inherited through fork() is the parent's, and releasing it in the
 * child does nothing (it gives nothing back and records no outcome).
 * A forked child takes a process slot of its own at its first call into
 * the library, and keeps it until it exits or execs; one that only execs
 * another program takes none (docs/architecture.md). Do not call the library from a
 * pthread_atfork() handler: the library's own handlers hold its locks from
 * before fork() until the child's handler ends, in an order that depends
 * on which registered first, so such a call can deadlock.
 */
#ifndef BULKHEAD_BULKHEAD_H
#define BULKHEAD_BULKHEAD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define BH_API __attribute__((visibility("default")))
#else
#define BH_API
#endif

typedef struct bh_client bh_client;
typedef struct bh_dep bh_dep;

/* A permit: a value the caller owns (on its stack), filled by a successful
 * bh_try_acquire() or bh_acquire() (left empty by one that refuses, or
 * fails with a negative errno) and emptied by bh_release(). Its fields
 * are private. deadline_ns_ came with bh_acquire(): bh_try_acquire() never
 * writes it, so a caller built against the header without it still passes
 * a permit big enough. */
typedef struct bh_permit {
  bh_dep *dep_;           /* NULL when the permit holds nothing */
  uint64_t start_ns_;     /* CLOCK_MONOTONIC at admission */
  uint64_t deadline_ns_;  /* bh_acquire()'s deadline, when dep_ says so */
} bh_permit;

/* Outcomes, for bh_release(). */
enum {
  BH_SUCCESS = 0, /* the call succeeded: a latency sample */
  BH_DROPPED = 1, /* timed out or met back-pressure: counted, latency not kept;
                     a failure for the circuit breaker (as a timeout in Hystrix) */
  BH_IGNORE = 2,  /* neither (cancelled, client error): not a sample */
  BH_FAILED = 3   /* the dependency answered with an error: a failure for the
                     circuit breaker, and no sample for the limit (an error is
                     often fast and would pull the latency down; it says
                     nothing about overload). A library older than this value
                     counts it as BH_IGNORE. */
};

/* Rejection reasons, returned by bh_try_acquire() and bh_acquire(). */
enum {
  BH_REJECT_LIMIT = 1,      /* the dependency's in-flight count is at its limit */
  BH_REJECT_QUEUE_FULL = 2, /* at the limit, and max_queue calls wait already */
  BH_REJECT_DEADLINE = 3,   /* the deadline passed, or the expected wait exceeds it */
  BH_REJECT_OPEN_CIRCUIT = 4, /* the dependency's circuit breaker is open, or half
                                 open with all of its trial calls out */
  BH_REJECT_PARTITION = 5,  /* a partition handle's call: the dependency is under its
                               limit, but what is left is other partitions' unused
                               guarantee, or this partition is hard-capped at its
                               share (see bh_partition()) */
  BH_REJECT_CANCELLED = 6   /* bh_acquire_cancellable(): its bh_cancel was
                               requested before a permit came */
};

/* Circuit-breaker states, from bh_breaker_state(). bulkheadd computes the
 * breaker host-wide from the outcomes every process reports (BH_FAILED and
 * BH_DROPPED are failures): it opens when the failure rate over a rolling
 * window passes its threshold, stays open for a sleep window, then half
 * opens: a few trial calls (half_open_calls, host-wide) are admitted, and
 * their outcomes close it or open it again. While it is open, bh_try_acquire()
 * and bh_acquire() refuse at once with BH_REJECT_OPEN_CIRCUIT, without
 * touching the in-flight count and without waiting. In shadow mode
 * (enforce = false) they admit and the refusal is only counted. A
 * standalone client (no segment) has no breaker: always closed. */
enum {
  BH_BREAKER_CLOSED = 0,
  BH_BREAKER_OPEN = 1,
  BH_BREAKER_HALF_OPEN = 2
};

/* A deadline for bh_acquire() that never comes. */
#define BH_NO_DEADLINE UINT64_MAX

/* Client modes, from bh_client_mode(). */
enum {
  BH_MODE_SHARED = 0,    /* attached to bulkheadd's segment */
  BH_MODE_STANDALONE = 1 /* no segment: a static limit of this process's own */
};

/* Flags for bh_options.flags. */
enum {
  BH_OPEN_REQUIRE_SEGMENT = 1 /* fail with -ENOENT instead of standalone mode (and
                                 in a forked child that finds the process table
                                 full at its first call, refuse every call:
                                 BH_REJECT_LIMIT, or from bh_acquire
                                 BH_REJECT_QUEUE_FULL, as no queue is there to
                                 wait in) */
};

typedef struct bh_options {
  const char *segment;  /* NULL: $BULKHEAD_SEGMENT, else "bulkhead" */
  long static_limit;    /* standalone limit; <= 0: $BULKHEAD_STATIC_LIMIT, else no limit */
  unsigned flags;       /* BH_OPEN_* */
} bh_options;

/* Opens a client on the segment (NULL: $BULKHEAD_SEGMENT, else "bulkhead").
 * With no segment present it opens in standalone mode and returns 0. A
 * segment that exists but cannot be used (other ABI, corrupt, no permission)
 * is an error: -EPROTO, -EBADMSG, -EACCES, ...; so is one whose process
 * table is full (-ENOSPC) or that its daemon has not finished making
 * (-EAGAIN), and a bad name, given or from $BULKHEAD_SEGMENT (-EINVAL: 1 to
 * 47 of A-Z a-z 0-9 . _ -, not "." or ".."; "" is no name, not NULL).
 *
 * A client on a segment holds one file descriptor of its own, opened
 * close-on-exec, with a lock by which the daemon tells that the process
 * exec'd: it then frees the process's slot and gives back the permits its
 * threads held. A program that closes descriptors it did not open (every
 * one above 2, say) is taken for one that exec'd, and its permits are
 * given back while it holds them. */
BH_API int bh_client_open(const char *segment, bh_client **out);
BH_API int bh_client_open_opts(const bh_options *options, bh_client **out);
/* Closes the client. Every permit must have been released (the daemon gives
 * back those that were not within ceil(max_processes / 64) + 1 ticks);
 * handles die with it. NULL is ignored. */
BH_API void bh_client_close(bh_client *c);
/* BH_MODE_SHARED or BH_MODE_STANDALONE; -EINVAL for NULL. */
BH_API int bh_client_mode(const bh_client *c);
/* A one-line description of the client's state, e.g. why it is standalone,
 * or, as the client found it at open, the daemon's pid or that no daemon
 * runs (the limits are then the last it published, or, on a segment no
 * daemon has ticked on yet, those it was made with). */
BH_API const char *bh_client_status(const bh_client *c);

/* The handle of a dependency, valid until bh_client_close(). A name the
 * daemon's config does not list gets a slot, with the settings of the first
 * pattern table that matches it, else its [defaults]; a strict daemon
 * refuses a name that no pattern table matches (-ENOENT). -ENOSPC when the
 * table is full, -EINVAL for a bad name (1 to 47 of A-Z a-z 0-9 . _ -),
 * -EAGAIN when another process's claim of the name's slot has not finished
 * after a second (it died claiming: the daemon abandons such a claim within
 * about 2 s, and a later call gets the name a slot). Call once, not per
 * request. */
BH_API int bh_dependency(bh_client *c, const char *name, bh_dep **out);

/* Admits a call if the dependency is under its limit and its breaker lets
 * it through: 0 and a filled permit; else a BH_REJECT_* reason (LIMIT or
 * OPEN_CIRCUIT) and an empty permit. Never blocks. */
BH_API int bh_try_acquire(bh_dep *d, bh_permit *out);
/* Gives the permit back with the call's outcome; its latency is the time
 * since admission. Releasing an empty permit (or twice) does nothing. */
BH_API void bh_release(bh_permit *p, int outcome);
/* The same with a latency the caller measured itself, in nanoseconds. One
 * of 2^63 or more, a negative difference wrapped by unsigned arithmetic,
 * counts as 0. */
BH_API void bh_release_latency(bh_permit *p, int outcome, uint64_t latency_ns);
/* bh_try_acquire() without its clock read, for callers that time the call
 * themselves and give the latency to bh_release_latency(): a clock read is
 * most of what admission costs (docs/benchmarks.md). bh_release() of such a
 * permit counts a success as BH_IGNORE (there is no latency to keep): the
 * limit policy learns nothing from it, and neither does the breaker, whose
 * trial calls then never close it. Release such permits with
 * bh_release_latency(). */
BH_API int bh_try_acquire_untimed(bh_dep *d, bh_permit *out);

/* Admits a call, waiting for a permit if the dependency is at its limit, up
 * to deadline_ns (absolute, CLOCK_MONOTONIC: bh_now_ns() + budget). Returns
 * 0 and a filled permit, or with an empty permit:
 *   BH_REJECT_QUEUE_FULL  at once: max_queue calls wait already (max_queue
 *                         0, the default, means no one waits);
 *   BH_REJECT_DEADLINE    the deadline passed before a permit came, or had
 *                         passed on entry, or at once when the expected wait
 *                         (calls ahead x recent latency / limit) exceeds what
 *                         is left of it.
 *   BH_REJECT_OPEN_CIRCUIT at once: the breaker is open (never waits).
 * Time spent waiting counts against the deadline. Calls that wait are
 * admitted in the dependency's queue order (FIFO, or LIFO); a call to
 * bh_try_acquire() does not queue and may take a permit first. In shadow
 * mode nothing waits. */
BH_API int bh_acquire(bh_dep *d, uint64_t deadline_ns, bh_permit *out);

/* What is left of the deadline of a permit bh_acquire() filled, in
 * nanoseconds (0 once it has passed): the budget for the call itself.
 * UINT64_MAX for a permit without a deadline (bh_try_acquire(),
 * BH_NO_DEADLINE); 0 for an empty permit. */
BH_API uint64_t bh_permit_remaining_ns(const bh_permit *p);
/* CLOCK_MONOTONIC now, in nanoseconds: the clock of deadlines. */
BH_API uint64_t bh_now_ns(void);

/* A cancellation for waiting calls: bh_acquire_cancellable() with it
 * leaves the wait queue as soon as bh_cancel_request() is called on it,
 * refused with BH_REJECT_CANCELLED. For a caller whose request is abandoned
 * (its client went away, the server shuts down) while its calls wait, and
 * for a thread that must be joined before bh_client_close(): nothing else
 * ends a wait with no deadline.
 *
 * A value the caller owns, like a permit; its fields are private. Zero it
 * ({0}, or bh_cancel_init()) before use. One may serve any number of calls
 * at once, on any threads and dependencies: a request cancels them all,
 * and every call that passes it later is refused at once, until
 * bh_cancel_init() makes it new (with no call using it). Up to 8 waiting
 * calls are woken at once; more notice the request within 10 ms. It works
 * within one process: not in memory shared with others, and a child of
 * fork() makes its copy new with bh_cancel_init() before using it (the
 * copy names the parent's waiting calls). */
typedef struct bh_cancel {
  void *waiting_[8];  /* the futex words of the calls waiting with it */
  uint32_t state_;    /* 1: requested */
  uint32_t busy_;     /* bh_cancel_request() calls waking those calls */
} bh_cancel;
BH_API void bh_cancel_init(bh_cancel *c);
/* Cancels every call waiting with `c` and every later one. Lock-free and
 * async-signal-safe: it may be called from a signal handler. NULL is
 * ignored. */
BH_API void bh_cancel_request(bh_cancel *c);
/* 1 once bh_cancel_request() was called on `c`, else 0 (NULL: 0). */
BH_API int bh_cancel_requested(const bh_cancel *c);
/* bh_acquire() that bh_cancel_request(cancel) ends: BH_REJECT_CANCELLED,
 * at once when the request came before the call, else as soon as the
 * waiting call sees it, even past its deadline (a call that ran again only
 * after both is cancelled, not refused). A cancelled call's wait counts in the
 * dependency's wait time, and not as a rejection: it says nothing of the
 * dependency. NULL `cancel`: bh_acquire(). */
BH_API int bh_acquire_cancellable(bh_dep *d, uint64_t deadline_ns, bh_cancel *cancel, bh_permit *out);

/* Counts a call the caller refused itself on its way to bh_acquire(): a
 * queue of its own was full (BH_REJECT_QUEUE_FULL), or the call's deadline
 * passed while it waited there (BH_REJECT_DEADLINE). bulkheadd counts
 * them with the wait queue's own refusals (bulkhead_queue_rejections_total),
 * so that the host's metrics show every call the dependency shed, those of
 * a thread pool in front of it included (bulkhead::Executor calls it). Not
 * a refusal at the limit: the limit policy does not see it. 0, or -EINVAL
 * for another reason or NULL. */
BH_API int bh_record_refusal(bh_dep *d, int reason);

/* The dependency's breaker state, BH_BREAKER_*, as last published by the
 * daemon; -EINVAL for NULL. */
BH_API int bh_breaker_state(const bh_dep *d);

/* The handle of one partition of a dependency, for calls of that class
 * (e.g. "critical", "batch"). bulkheadd's config may split a dependency's
 * limit L into up to three partitions with guaranteed shares
 * ([dependency.NAME.partitions] in docs/config.md): partition p is
 * guaranteed floor(share_p x L) calls in flight whenever it asks, may borrow
 * capacity that no other partition's unused guarantee reserves, and with
 * hard_cap never goes past its share. Calls through the dependency's own
 * handle (and every caller that never heard of partitions) belong to the
 * partition "default", which has a share only if the config gives it one.
 *
 * The returned handle works with bh_try_acquire(), bh_try_acquire_untimed(),
 * bh_acquire(), bh_limit() and bh_inflight() (the dependency's values);
 * valid until bh_client_close(). Its rejections are BH_REJECT_LIMIT (the
 * dependency is at its limit) or BH_REJECT_PARTITION; a call through the
 * dependency's own handle is only ever refused with the reasons it always
 * had. Partitions have no wait queue: bh_acquire() with a partitioned
 * dependency admits or refuses at once, like bh_try_acquire() (a deadline
 * already passed is still BH_REJECT_DEADLINE).
 *
 * -ENOENT when the dependency has no partition of that name (bh_last_error()
 * lists those it has), -EINVAL for a bad name (1 to 15 of A-Z a-z 0-9 . _ -)
 * or a handle that is a partition's already. "default" gives back `d`
 * itself; so does any name in standalone mode, where no partitions are
 * known. A partition that a later reload removes goes on admitting its
 * calls as "default" ones. Call once, not per request. */
BH_API int bh_partition(bh_dep *d, const char *name, bh_dep **out);

/* The limit in force and the host-wide in-flight count, -EINVAL for NULL. */
BH_API long bh_limit(const bh_dep *d);
BH_API long bh_inflight(const bh_dep *d);

/* The reason for the last negative return on this thread, in words. */
BH_API const char *bh_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* BULKHEAD_BULKHEAD_H */
