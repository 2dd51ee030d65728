/* The C header compiles as C11 and its whole ABI works from C. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bulkhead/bulkhead.h"

static int failures = 0;
#define CHECK(cond)                                              \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                \
    }                                                            \
  } while (0)

int main(void) {
  bh_options options;
  memset(&options, 0, sizeof options);
  options.segment = "bhtest-c-api-no-such-segment";
  options.static_limit = 2;
  bh_client *client = NULL;
  CHECK(bh_client_open_opts(&options, &client) == 0);
  CHECK(bh_client_mode(client) == BH_MODE_STANDALONE);
  CHECK(strstr(bh_client_status(client), "standalone") != NULL);

  bh_dep *dep = NULL;
  CHECK(bh_dependency(client, "payments", &dep) == 0);
  CHECK(bh_limit(dep) == 2);
  bh_permit a, b, c;
  CHECK(bh_try_acquire(dep, &a) == 0);
  CHECK(bh_try_acquire(dep, &b) == 0);
  CHECK(bh_try_acquire(dep, &c) == BH_REJECT_LIMIT);
  CHECK(bh_inflight(dep) == 2);
  bh_release(&a, BH_SUCCESS);
  bh_release(&a, BH_SUCCESS); /* twice: harmless */
  bh_release_latency(&b, BH_DROPPED, 1000);
  bh_release(&c, BH_SUCCESS); /* never admitted: harmless */
  CHECK(bh_inflight(dep) == 0);

  /* The circuit breaker: standalone has none, so it is always closed. */
  CHECK(bh_breaker_state(dep) == BH_BREAKER_CLOSED);
  CHECK(bh_breaker_state(NULL) == -EINVAL);
  CHECK(bh_try_acquire(dep, &a) == 0);
  bh_release(&a, BH_FAILED);
  CHECK(bh_inflight(dep) == 0);
  CHECK(BH_REJECT_OPEN_CIRCUIT == 4 && BH_FAILED == 3);

  /* Waiting: standalone has no queue, so at the limit it is refused. */
  CHECK(bh_acquire(dep, BH_NO_DEADLINE, &a) == 0);
  CHECK(bh_permit_remaining_ns(&a) == UINT64_MAX);
  CHECK(bh_acquire(dep, bh_now_ns() + 1000000000u, &b) == 0);
  CHECK(bh_permit_remaining_ns(&b) > 0);
  CHECK(bh_acquire(dep, BH_NO_DEADLINE, &c) == BH_REJECT_QUEUE_FULL);
  CHECK(bh_acquire(dep, 0, &c) == BH_REJECT_DEADLINE);
  CHECK(bh_permit_remaining_ns(&c) == 0);
  bh_release(&a, BH_SUCCESS);
  bh_release(&b, BH_IGNORE);
  CHECK(bh_inflight(dep) == 0);
  CHECK(bh_acquire(NULL, 0, &a) == -EINVAL);

  /* Cancellable waits: a zeroed bh_cancel is a fresh one. */
  {
    bh_cancel cancel = {0};
    CHECK(bh_acquire_cancellable(dep, BH_NO_DEADLINE, &cancel, &a) == 0);
    CHECK(bh_cancel_requested(&cancel) == 0);
    bh_cancel_request(&cancel);
    CHECK(bh_cancel_requested(&cancel) == 1);
    CHECK(bh_acquire_cancellable(dep, BH_NO_DEADLINE, &cancel, &b) == BH_REJECT_CANCELLED);
    bh_cancel_init(&cancel);
    CHECK(bh_acquire_cancellable(dep, BH_NO_DEADLINE, &cancel, &b) == 0);
    CHECK(bh_acquire_cancellable(dep, BH_NO_DEADLINE, NULL, &c) == BH_REJECT_QUEUE_FULL);
    bh_release(&a, BH_SUCCESS);
    bh_release(&b, BH_SUCCESS);
    CHECK(BH_REJECT_CANCELLED == 6);
  }

  /* A refusal of the caller's own queue, counted as the dependency's. */
  CHECK(bh_record_refusal(dep, BH_REJECT_QUEUE_FULL) == 0);
  CHECK(bh_record_refusal(dep, BH_REJECT_DEADLINE) == 0);
  CHECK(bh_record_refusal(dep, BH_REJECT_LIMIT) == -EINVAL);
  CHECK(strstr(bh_last_error(), "BH_REJECT_QUEUE_FULL") != NULL);
  CHECK(bh_record_refusal(NULL, BH_REJECT_DEADLINE) == -EINVAL);

  /* Partitions: standalone knows none, so a partition is the dependency. */
  bh_dep *critical = NULL;
  CHECK(bh_partition(dep, "critical", &critical) == 0);
  CHECK(critical == dep);
  CHECK(bh_partition(dep, "no good", &critical) == -EINVAL);
  CHECK(bh_partition(NULL, "critical", &critical) == -EINVAL);
  CHECK(BH_REJECT_PARTITION == 5);

  CHECK(bh_dependency(client, "bad name", &dep) == -EINVAL);
  CHECK(strlen(bh_last_error()) > 0);
  /* Misuse leaves an empty permit too: releasing it is harmless. */
  memset(&a, 0xab, sizeof a);
  CHECK(bh_try_acquire(NULL, &a) == -EINVAL);
  CHECK(a.dep_ == NULL);
  CHECK(bh_try_acquire(dep, NULL) == -EINVAL);
  memset(&a, 0xab, sizeof a);
  CHECK(bh_try_acquire_untimed(NULL, &a) == -EINVAL);
  CHECK(a.dep_ == NULL);
  memset(&a, 0xab, sizeof a);
  CHECK(bh_acquire(NULL, BH_NO_DEADLINE, &a) == -EINVAL);
  CHECK(a.dep_ == NULL);
  bh_release(&a, BH_SUCCESS);
  CHECK(bh_try_acquire_untimed(dep, NULL) == -EINVAL);
  CHECK(strstr(bh_last_error(), "bh_try_acquire_untimed") != NULL);
  CHECK(bh_limit(NULL) == -EINVAL);
  CHECK(bh_inflight(NULL) == -EINVAL);
  CHECK(bh_client_mode(NULL) == -EINVAL);
  CHECK(strstr(bh_last_error(), "bh_client_mode") != NULL);
  CHECK(bh_client_open(options.segment, NULL) == -EINVAL);
  CHECK(strstr(bh_last_error(), "bh_client_open") != NULL);
  bh_client_close(client);
  bh_client_close(NULL);

  /* A bad segment name is refused, never taken for the default. */
  bh_client *none = NULL;
  CHECK(bh_client_open("", &none) == -EINVAL);
  CHECK(none == NULL);
  CHECK(bh_client_open("no/slash", &none) == -EINVAL);
  CHECK(strstr(bh_last_error(), "segment name") != NULL);
  CHECK(bh_client_open("..", &none) == -EINVAL);

  options.flags = BH_OPEN_REQUIRE_SEGMENT;
  CHECK(bh_client_open_opts(&options, &none) == -ENOENT);
  CHECK(none == NULL);

  printf("c_api_test: %s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
