#include "tomlread/reader.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace bulkhead::tomlread {

std::string error_message(std::string_view source, std::uint32_t line, std::string_view key,
                          std::string_view reason) {
  std::string message(source);
  if (line != 0) message += ":" + std::to_string(line);
  message += ": ";
  message += key;
  message += ": ";
  message += reason;
  return message;
}

std::string syntax_error_message(std::string_view source, const toml::parse_error& error) {
  const toml::source_position at = error.source().begin;
  return std::string(source) + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) +
         ": syntax error: " + std::string(error.description());
}

std::size_t utf8_length(std::string_view text) {
  if (text.empty()) return 0;
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    n = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3;
    if (lead == 0xe0) lo = 0xa0;
    if (lead == 0xed) hi = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4;
    if (lead == 0xf0) lo = 0x90;
    if (lead == 0xf4) hi = 0x8f;
  }
  if (n == 0 || text.size() < n || byte(1) < lo || byte(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  }
  return n;
}

std::string utf8_error_message(std::string_view text, std::string_view source) {
  std::uint32_t line = 1;
  std::uint32_t column = 1;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_length(text.substr(i));
    if (n == 0) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(text[i])));
      return std::string(source) + ":" + std::to_string(line) + ":" + std::to_string(column) +
             ": syntax error: not UTF-8 (byte " + byte + ")";
    }
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += n;
  }
  return {};
}

bool is_bare_key(std::string_view key) {
  if (key.empty()) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
  });
}

std::string key_path(std::string_view parent, std::string_view key) {
  std::string out(parent);
  if (!out.empty()) out += '.';
  if (is_bare_key(key)) {
    out += key;
    return out;
  }
  out += '"';
  for (char c : key) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out += "\\u00";
      out += kHex[(c >> 4) & 0xf];
      out += kHex[c & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::vector<Entry> in_file_order(const toml::table& table) {
  std::vector<Entry> entries;
  entries.reserve(table.size());
  for (auto&& [key, node] : table) {
    // The key's own position: a value may start on a later line than its key.
    toml::source_position pos = key.source().begin;
    if (pos.line == 0) pos = node.source().begin;
    entries.push_back({key.str(), &node, pos.line, pos.column});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::pair(a.line, a.column) < std::pair(b.line, b.column);
  });
  return entries;
}

std::string out_of_range(Range range, std::int64_t value) {
  std::string rule =
      "must be in [" + std::to_string(range.lo) + ", " + std::to_string(range.hi) + "]";
  if (range.say_value) rule += ", got " + std::to_string(value);
  return rule;
}

}  // namespace bulkhead::tomlread
