// Dependency names and patterns: what the segment can hold, checked in one
// place for the daemon's config and the client alike.
#pragma once

#include <cstddef>
#include <string>
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

// Whether a [dependency."KEY"] key is a pattern (fnmatch(3)): it has one of
// * ? [, which no dependency name has.
constexpr bool is_pattern(std::string_view key) { return key.find_first_of("*?[") != std::string_view::npos; }

// nullptr when `pattern` may be a pattern table's key; otherwise why not.
// The characters of names and * ? [ ] !, at most as long as a name, its
// brackets read as fnmatch(3) reads them: a ! first in [...] negates it,
// and a ] right after [ or [! is one of its characters. What fnmatch would
// take for a literal [ ] or ! outside a bracket is refused: no name has
// one, so the pattern would match nothing.
constexpr const char* check_pattern(std::string_view pattern) {
  if (pattern.size() > kMaxNameLength) return "is longer than 47 bytes";
  const auto name_character = [](char c) { return check_dependency_name(std::string_view(&c, 1)) == nullptr; };
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '[') {
      std::size_t j = i + 1;
      if (j < pattern.size() && pattern[j] == '!') ++j;
      const std::size_t first = j;
      for (; j < pattern.size() && (pattern[j] != ']' || j == first); ++j) {
        if (pattern[j] == '[') return "has a [ inside [...]";
        if (pattern[j] == '!') return "has a ! inside [...] other than first";
        if (pattern[j] != ']' && !name_character(pattern[j])) {
          return "has a character other than A-Z a-z 0-9 . _ - inside [...]";
        }
      }
      if (j == pattern.size()) return "has a [ without its ] (a ] right after [ or [! is one of its characters)";
      i = j;
    } else if (c == ']') {
      return "has a ] without its [";
    } else if (c == '!') {
      return "has a ! outside [...] (write [!...] for any character but those)";
    } else if (c != '*' && c != '?' && !name_character(c)) {
      return "has a character other than A-Z a-z 0-9 . _ - and * ? [ ] !";
    }
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

// The message for a name that check_dependency_name(), check_segment_name()
// or check_partition_name() refused with `why`: "WHAT 'NAME' WHY", the name
// with every byte but printable ASCII written \xNN (a newline or an escape
// in it must not garble the line), and which byte was refused and where, or
// how long the name is: "dependency name 'pay\x0aments' has a character
// other than A-Z a-z 0-9 . _ -: '\x0a' at byte 3".
inline std::string name_error(std::string_view what, std::string_view name, const char* why) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto quoted = [](std::string_view text) {
    std::string out = "'";
    for (const char c : text) {
      const auto byte = static_cast<unsigned char>(c);
      if (byte >= 0x20 && byte < 0x7f) {
        out += c;
      } else {
        out += "\\x";
        out += kHex[byte >> 4];
        out += kHex[byte & 0xf];
      }
    }
    return out + "'";
  };
  std::string out = std::string(what) + " " + quoted(name) + " " + why;
  if (std::string_view(why).starts_with("has a character")) {
    for (std::size_t i = 0; i < name.size(); ++i) {
      if (check_dependency_name(name.substr(i, 1)) != nullptr) {
        out += ": " + quoted(name.substr(i, 1)) + " at byte " + std::to_string(i);
        break;
      }
    }
  } else if (std::string_view(why).starts_with("is longer")) {
    out += ": it has " + std::to_string(name.size());
  }
  return out;
}

}  // namespace bulkhead::shm
