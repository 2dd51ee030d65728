// What reading a TOML file with toml++ takes, shared by bulkheadd's config
// (daemon/config.cpp) and the simulator's scenarios (tools/sim/scenario.cpp):
// errors "FILE:LINE: KEY: REASON" thrown as the caller's own exception type,
// a table's keys in file order (so that the first error reported is the first
// in the file), key paths, and the typed readers both use.
//
// Thread safety: the functions here share no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <toml++/toml.h>
#include <vector>

namespace bulkhead::tomlread {

// "FILE:LINE: KEY: REASON"; LINE left out when it is 0 (no place).
std::string error_message(std::string_view source, std::uint32_t line, std::string_view key,
                          std::string_view reason);

// Builds errors that name the source, thrown as Error (constructible from a
// std::string). Every error leaves through here.
template <typename Error>
class Reporter {
 public:
  explicit Reporter(std::string_view source) : source_(source) {}

  [[noreturn]] void fail(std::uint32_t line, std::string_view key, std::string_view reason) const {
    throw Error(error_message(source_, line, key, reason));
  }

 private:
  std::string source_;
};

// "FILE:LINE:COLUMN: syntax error: DESCRIPTION" for text toml++ cannot parse.
std::string syntax_error_message(std::string_view source, const toml::parse_error& error);

// The length of the UTF-8 sequence at the start of `text`, or 0 when it is
// not one (a stray or truncated byte, an overlong form, a surrogate).
std::size_t utf8_length(std::string_view text);

// "FILE:LINE:COLUMN: syntax error: not UTF-8 (byte 0xE9)" for the first
// byte of `text` that is not part of a UTF-8 sequence, COLUMN counted in
// characters; empty when all of it is UTF-8. toml++ finds such a byte too,
// but places one that starts a line at the end of the line before.
std::string utf8_error_message(std::string_view text, std::string_view source);

// The parsed text; a syntax error is thrown as Error.
template <typename Error>
toml::table parse(std::string_view text, std::string_view source) {
  if (std::string message = utf8_error_message(text, source); !message.empty()) throw Error(message);
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& error) {
    throw Error(syntax_error_message(source, error));
  }
}

// A key as TOML would need it written: bare when it can be, else quoted.
bool is_bare_key(std::string_view key);

// The dotted path of `key` inside `parent`, e.g. dependency."search.v2".backoff.
std::string key_path(std::string_view parent, std::string_view key);

// One key of a table, with where it is written.
struct Entry {
  std::string_view key;
  const toml::node* node;
  std::uint32_t line;
  std::uint32_t column;
};

// A table's keys in the order they are written (toml++ keeps them sorted by
// name), so that the first error reported is the first in the file.
std::vector<Entry> in_file_order(const toml::table& table);

// An integer's bounds, both included. With say_value an error also tells
// the value written: "must be in [1, 10], got 0".
struct Range {
  std::int64_t lo;
  std::int64_t hi;
  bool say_value = false;
};

// "must be in [LO, HI]", and ", got VALUE" when range.say_value.
std::string out_of_range(Range range, std::int64_t value);

// Typed readers: each returns the value or fails at the entry's line.
template <typename Error>
std::int64_t read_integer(const Reporter<Error>& report, const Entry& e, const std::string& path,
                          Range range, std::string_view not_integer = "must be an integer") {
  const auto* value = e.node->as_integer();
  if (value == nullptr) report.fail(e.line, path, not_integer);
  const std::int64_t v = value->get();
  if (v < range.lo || v > range.hi) report.fail(e.line, path, out_of_range(range, v));
  return v;
}

template <typename Error>
const std::string& read_string(const Reporter<Error>& report, const Entry& e,
                               const std::string& path) {
  const auto* value = e.node->as_string();
  if (value == nullptr) report.fail(e.line, path, "must be a string");
  return value->get();
}

template <typename Error>
const toml::table& read_table(const Reporter<Error>& report, const Entry& e,
                              const std::string& path) {
  const auto* table = e.node->as_table();
  if (table == nullptr) report.fail(e.line, path, "must be a table");
  return *table;
}

// A key or table the reader does not know.
template <typename Error>
[[noreturn]] void unknown(const Reporter<Error>& report, const Entry& e, const std::string& path) {
  report.fail(e.line, path, e.node->is_table() ? "unknown table" : "unknown key");
}

}  // namespace bulkhead::tomlread
