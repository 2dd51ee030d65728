// Dependency names: what the segment can hold, checked in one place for the
// daemon's config and the client alike.
#pragma once

#include <cstddef>
#include <string_view>

namespace bulkhead::shm {

// Longest name a dependency slot holds, in bytes, without the NUL.
inline constexpr std::size_t kMaxNameLength = 47;

// nullptr when `name` may name a dependency; otherwise why not, e.g.
// "is empty", "is longer than 47 bytes", "has a character other than
// A-Z a-z 0-9 . _ -".
constexpr const char* check_dependency_name(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > kMaxNameLength) return "is longer than 47 bytes";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return "has a character other than A-Z a-z 0-9 . _ -";
  }
  return nullptr;
}

// nullptr when `name` may name a segment, /dev/shm/NAME: a dependency name
// other than "." and "..", which are directories there; otherwise why not.
constexpr const char* check_segment_name(std::string_view name) {
  if (const char* why = check_dependency_name(name)) return why;
  if (name == "." || name == "..") return "names a directory";
  return nullptr;
}

}  // namespace bulkhead::shm
