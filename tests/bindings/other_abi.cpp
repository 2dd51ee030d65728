// A libbulkhead.so.1 of another ABI, for python_bindings: every function
// the Python binding looks up, in a BULKHEAD_2 version node
// (other_abi.map), none of them doing what libbulkhead.so.0's does. The
// binding must neither pick it from the loader's path nor use it when
// told to.
#include <cstdint>

extern "C" {
int bh_client_open_opts(const void*, void** out) {
  static int client;
  *out = &client;
  return 0;
}
void bh_client_close(void*) {}
int bh_client_mode(const void*) { return 0; }
const char* bh_client_status(const void*) { return "another ABI"; }
int bh_dependency(void*, const char*, void** out) {
  static int dep;
  *out = &dep;
  return 0;
}
int bh_try_acquire(void*, void*) { return 0; }
void bh_release(void*, int) {}
void bh_release_latency(void*, int, std::uint64_t) {}
long bh_limit(const void*) { return 0; }
long bh_inflight(const void*) { return 0; }
const char* bh_last_error(void) { return "another ABI"; }
}
