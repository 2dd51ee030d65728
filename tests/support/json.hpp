// A small JSON reader for tests that check machine-readable output: parses
// a whole document into a tree and throws std::runtime_error on anything
// that is not JSON, so a test fails on malformed output as well as on a
// wrong value.
#pragma once

#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace bulkhead::testing {

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object;

  bool is_null() const { return type == Type::kNull; }
  // The member `key` of an object; throws when there is none.
  const Json& operator[](const std::string& key) const {
    auto it = object.find(key);
    if (type != Type::kObject || it == object.end()) throw std::runtime_error("no key '" + key + "'");
    return it->second;
  }
  const Json& operator[](std::size_t i) const {
    if (type != Type::kArray || i >= array.size()) throw std::runtime_error("no element " + std::to_string(i));
    return array[i];
  }
  bool has(const std::string& key) const { return type == Type::kObject && object.count(key) != 0; }
};

class JsonParser {
 public:
  static Json parse(std::string_view text) {
    JsonParser p(text);
    Json v = p.value();
    p.skip_space();
    if (p.pos_ != text.size()) p.fail("trailing characters");
    return v;
  }

 private:
  explicit JsonParser(std::string_view text) : text_(text) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("JSON: " + why + " at offset " + std::to_string(pos_));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c == '\\') {
        if (pos_ >= text_.size()) fail("unterminated escape");
        const char e = text_[pos_++];
        switch (e) {
          case '"': case '\\': case '/': out += e; break;
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'u': {
            if (pos_ + 4 > text_.size()) fail("short \\u escape");
            const unsigned code = static_cast<unsigned>(std::stoul(std::string(text_.substr(pos_, 4)), nullptr, 16));
            pos_ += 4;
            if (code >= 0x80) fail("non-ASCII \\u escape (not needed by these tests)");
            out += static_cast<char>(code);
            break;
          }
          default: fail("bad escape");
        }
      } else {
        out += c;
      }
    }
    if (pos_ >= text_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }
  Json value() {
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end");
    Json v;
    const char c = text_[pos_];
    if (c == '{') {
      ++pos_;
      v.type = Json::Type::kObject;
      if (eat('}')) return v;
      do {
        skip_space();
        std::string k = string();
        expect(':');
        if (!v.object.emplace(k, value()).second) fail("duplicate key '" + k + "'");
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++pos_;
      v.type = Json::Type::kArray;
      if (eat(']')) return v;
      do v.array.push_back(value());
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.type = Json::Type::kString;
      v.string = string();
    } else if (literal("true")) {
      v.type = Json::Type::kBool;
      v.boolean = true;
    } else if (literal("false")) {
      v.type = Json::Type::kBool;
    } else if (literal("null")) {
    } else {
      const std::string rest(text_.substr(pos_, 64));
      char* end = nullptr;
      v.number = std::strtod(rest.c_str(), &end);
      if (end == rest.c_str()) fail("not a value");
      v.type = Json::Type::kNumber;
      pos_ += static_cast<std::size_t>(end - rest.c_str());
    }
    return v;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace bulkhead::testing
