/* A C program that uses libbulkhead as an installed library: built by
 * tests/packaging/install_test.sh against a scratch install, with CMake
 * (CMakeLists.txt beside it) and with pkg-config:
 *
 *   cc consumer.c $(pkg-config --cflags --libs bulkhead)
 *
 * It runs without a daemon: with no segment of the name it asks for, the
 * client opens in standalone mode and admits up to its own static limit. */
#include <stdio.h>
#include <string.h>

#include <bulkhead/bulkhead.h>

int main(void) {
  bh_options options;
  memset(&options, 0, sizeof options);
  options.segment = "bulkhead-consumer-example-absent";
  options.static_limit = 2;
  bh_client *client;
  if (bh_client_open_opts(&options, &client) < 0) {
    fprintf(stderr, "consumer: %s\n", bh_last_error());
    return 1;
  }
  bh_dep *payments;
  if (bh_dependency(client, "payments", &payments) < 0) {
    fprintf(stderr, "consumer: %s\n", bh_last_error());
    bh_client_close(client);
    return 1;
  }

  bh_permit permits[3];
  int admitted = 0, rejected = 0;
  for (int i = 0; i < 3; ++i) {
    if (bh_try_acquire(payments, &permits[i]) == 0) {
      ++admitted;
    } else {
      ++rejected; /* BH_REJECT_LIMIT: serve a fallback */
    }
  }
  for (int i = 0; i < 3; ++i) bh_release(&permits[i], BH_SUCCESS); /* an empty permit: no-op */

  const int ok = bh_client_mode(client) == BH_MODE_STANDALONE && admitted == 2 && rejected == 1 &&
                 bh_inflight(payments) == 0;
  printf("consumer (C): %s; admitted %d, rejected %d: %s\n", bh_client_status(client), admitted,
         rejected, ok ? "ok" : "WRONG");
  bh_client_close(client);
  return ok ? 0 : 1;
}
