// libbulkhead for C++: a thin RAII layer over the C ABI in bulkhead.h.
//
//   bulkhead::Client client;                        // once per process
//   bulkhead::Dependency payments = client.dependency("payments");  // once
//   if (bulkhead::Permit permit = payments.try_acquire()) {
//     ...call payments...
//     permit.success();                             // or dropped() / ignore()
//   } else {
//     ...shed the call: permit.reason() == BH_REJECT_LIMIT...
//   }
//
// A Permit that goes out of scope unreleased is released as "ignore": an
// exception or an early return is not a latency sample.
//
// Thread safety: Client and Dependency may be shared by threads; a Permit
// belongs to one thread.
#pragma once

#include <cerrno>
#include <chrono>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "bulkhead/bulkhead.h"

namespace bulkhead {

enum class Outcome : int { kSuccess = BH_SUCCESS, kDropped = BH_DROPPED, kIgnore = BH_IGNORE };

// Thrown by Client and Client::dependency(); code() is the errno value and
// what() says why.
class Error : public std::system_error {
 public:
  explicit Error(int negative_errno)
      : std::system_error(-negative_errno, std::generic_category(), bh_last_error()) {}
};

class Permit {
 public:
  Permit() = default;
  Permit(Permit&& other) noexcept : permit_(std::exchange(other.permit_, {})), reason_(other.reason_) {}
  Permit& operator=(Permit&& other) noexcept {
    if (this != &other) {
      release(Outcome::kIgnore);
      permit_ = std::exchange(other.permit_, {});
      reason_ = other.reason_;
    }
    return *this;
  }
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;
  ~Permit() { release(Outcome::kIgnore); }

  // True while the permit holds an admission.
  explicit operator bool() const { return permit_.dep_ != nullptr; }
  // 0 when admitted, else the BH_REJECT_* reason.
  int reason() const { return reason_; }

  void success() { release(Outcome::kSuccess); }
  void dropped() { release(Outcome::kDropped); }
  void ignore() { release(Outcome::kIgnore); }
  void release(Outcome outcome) { bh_release(&permit_, static_cast<int>(outcome)); }
  // For callers that time their calls already: saves two clock reads.
  void release(Outcome outcome, std::chrono::nanoseconds latency) {
    bh_release_latency(&permit_, static_cast<int>(outcome),
                       static_cast<std::uint64_t>(latency.count() < 0 ? 0 : latency.count()));
  }

 private:
  friend class Dependency;
  bh_permit permit_{};
  int reason_ = 0;
};

class Dependency {
 public:
  explicit Dependency(bh_dep* handle) : handle_(handle) {}

  // Never blocks.
  Permit try_acquire() {
    Permit p;
    const int rc = bh_try_acquire(handle_, &p.permit_);
    if (rc < 0) throw Error(rc);
    p.reason_ = rc;
    return p;
  }
  long limit() const { return bh_limit(handle_); }
  long inflight() const { return bh_inflight(handle_); }
  bh_dep* handle() const { return handle_; }

 private:
  bh_dep* handle_;
};

class Client {
 public:
  enum class Mode { kShared = BH_MODE_SHARED, kStandalone = BH_MODE_STANDALONE };

  // Segment name: $BULKHEAD_SEGMENT, else "bulkhead".
  Client() : Client(bh_options{}) {}
  explicit Client(const bh_options& options) {
    if (const int rc = bh_client_open_opts(&options, &client_); rc < 0) throw Error(rc);
  }
  explicit Client(const std::string& segment) {
    if (const int rc = bh_client_open(segment.c_str(), &client_); rc < 0) throw Error(rc);
  }
  Client(Client&& other) noexcept : client_(std::exchange(other.client_, nullptr)) {}
  Client& operator=(Client&& other) noexcept {
    if (this != &other) {
      bh_client_close(client_);
      client_ = std::exchange(other.client_, nullptr);
    }
    return *this;
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client() { bh_client_close(client_); }

  Dependency dependency(const std::string& name) {
    bh_dep* d = nullptr;
    if (const int rc = bh_dependency(client_, name.c_str(), &d); rc < 0) throw Error(rc);
    return Dependency(d);
  }
  Mode mode() const { return static_cast<Mode>(bh_client_mode(client_)); }
  std::string_view status() const { return bh_client_status(client_); }
  bh_client* handle() const { return client_; }

 private:
  bh_client* client_ = nullptr;
};

}  // namespace bulkhead
