// A minimal streaming JSON writer for bulkheadctl's --json output: objects,
// arrays, strings, integers, doubles (finite; NaN and infinities become
// null) and null. Keys keep the order they are written in, so the output
// of one schema version always reads the same.
//
// Thread safety: one writer per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bulkhead::ctl {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  // The key of the next value (inside an object).
  JsonWriter& key(std::string_view k);

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b);
  JsonWriter& value(std::int64_t n);
  JsonWriter& value(std::uint64_t n);
  JsonWriter& value(std::uint32_t n) { return value(std::uint64_t{n}); }
  JsonWriter& value(std::int32_t n) { return value(std::int64_t{n}); }
  // Rounded to `decimals` places (trailing zeros dropped).
  JsonWriter& value(double d, int decimals = 3);
  JsonWriter& value(std::optional<double> d, int decimals = 3);
  JsonWriter& null();

  // The document, with a final newline.
  std::string str() const { return out_ + "\n"; }

 private:
  void before_value();
  void open(char bracket);
  void close(char bracket);
  std::string out_;
  // Per open container: whether it has a member yet.
  std::vector<bool> has_member_;
  bool after_key_ = false;
};

}  // namespace bulkhead::ctl
