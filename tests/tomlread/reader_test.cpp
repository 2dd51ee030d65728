// tomlread's helpers on their own: the config and scenario tests cover them
// as their readers use them.
#include "tomlread/reader.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace bulkhead::tomlread {
namespace {

class TestError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using TestReporter = Reporter<TestError>;

// The message `call` throws as TestError, or "" when it throws nothing.
template <typename Call>
std::string error_of(Call call) {
  try {
    call();
  } catch (const TestError& error) {
    return error.what();
  }
  return "";
}

TEST(InFileOrder, ReturnsKeysInTheOrderWritten) {
  const toml::table table = toml::parse("zeta = 1\nalpha = 2\n\"m id\" = 3\n[beta]\nx = 4\n");
  std::vector<std::string> keys;
  std::vector<std::uint32_t> lines;
  for (const Entry& e : in_file_order(table)) {
    keys.emplace_back(e.key);
    lines.push_back(e.line);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"zeta", "alpha", "m id", "beta"}));
  EXPECT_EQ(lines, (std::vector<std::uint32_t>{1, 2, 3, 4}));
}

// A table named first by a header of one of its subtables stands where
// that header names it, not at its own later header (toml++ puts the
// table node's source there): an error about it points at its first line.
TEST(InFileOrder, ATableStandsWhereItsNameFirstDoes) {
  const toml::table table = toml::parse("x = 1\n[a.b]\n[y]\n[a]\nd = 2\n");
  std::vector<std::string> keys;
  std::vector<std::uint32_t> lines;
  for (const Entry& e : in_file_order(table)) {
    keys.emplace_back(e.key);
    lines.push_back(e.line);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"x", "a", "y"}));
  EXPECT_EQ(lines, (std::vector<std::uint32_t>{1, 2, 3}));
}

TEST(KeyPath, BareKeysAsWritten) {
  EXPECT_EQ(key_path("", "daemon"), "daemon");
  EXPECT_EQ(key_path("dependency", "search-v2_x"), "dependency.search-v2_x");
}

TEST(KeyPath, QuotesKeysThatAreNotBare) {
  EXPECT_EQ(key_path("dependency", "search.v2"), "dependency.\"search.v2\"");
  EXPECT_EQ(key_path("", ""), "\"\"");
  EXPECT_EQ(key_path("a", "say \"hi\"\\"), "a.\"say \\\"hi\\\"\\\\\"");
  EXPECT_EQ(key_path("a", std::string("tab\there\x7f", 9)), "a.\"tab\\u0009here\\u007F\"");
}

TEST(Reporter, MessageWithALine) {
  const TestReporter report("conf.toml");
  EXPECT_EQ(error_of([&] { report.fail(12, "daemon.tick_ms", "must be an integer"); }),
            "conf.toml:12: daemon.tick_ms: must be an integer");
}

TEST(Reporter, MessageWithoutALine) {
  const TestReporter report("conf.toml");
  EXPECT_EQ(error_of([&] { report.fail(0, "duration_s", "is required"); }),
            "conf.toml: duration_s: is required");
}

TEST(Parse, SyntaxErrorNamesLineAndColumn) {
  const std::string message = error_of([] { parse<TestError>("a = 1\nb = \n", "x.toml"); });
  EXPECT_EQ(message.rfind("x.toml:2:", 0), 0u) << message;
  EXPECT_NE(message.find(": syntax error: "), std::string::npos) << message;
}

TEST(Parse, ABytePastUtf8IsPlacedOnItsOwnLineAndColumn) {
  // toml++ places a stray byte that starts a line at the end of the line
  // before ("x.toml:2:7"), which sends the reader to the wrong line.
  EXPECT_EQ(error_of([] { parse<TestError>("a = 1\nb = 22\n\xff\nc = 3\n", "x.toml"); }),
            "x.toml:3:1: syntax error: not UTF-8 (byte 0xFF)");
  // Columns count characters: "é" is two bytes, one column.
  EXPECT_EQ(error_of([] { parse<TestError>("a = 1\n# caf\xc3\xa9 \xe9\n", "x.toml"); }),
            "x.toml:2:8: syntax error: not UTF-8 (byte 0xE9)");
  // A sequence cut short by the end of the text.
  EXPECT_EQ(error_of([] { parse<TestError>("s = \"\xe2\x82", "x.toml"); }),
            "x.toml:1:6: syntax error: not UTF-8 (byte 0xE2)");
  EXPECT_EQ(parse<TestError>("s = \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"\n", "x.toml")["s"].value<std::string>(),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
}

TEST(Utf8Length, TakesWholeSequencesAndRefusesTheRest) {
  EXPECT_EQ(utf8_length("a"), 1u);
  EXPECT_EQ(utf8_length("\xc3\xa9"), 2u);
  EXPECT_EQ(utf8_length("\xe2\x82\xac"), 3u);
  EXPECT_EQ(utf8_length("\xf4\x8f\xbf\xbf"), 4u);  // U+10FFFF, the last
  EXPECT_EQ(utf8_length(""), 0u);
  EXPECT_EQ(utf8_length("\x80"), 0u);              // a continuation byte alone
  EXPECT_EQ(utf8_length("\xc0\x80"), 0u);          // an overlong NUL
  EXPECT_EQ(utf8_length("\xe0\x80\x80"), 0u);      // overlong
  EXPECT_EQ(utf8_length("\xed\xa0\x80"), 0u);      // a surrogate, U+D800
  EXPECT_EQ(utf8_length("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(utf8_length("\xe2\x82"), 0u);          // cut short
  EXPECT_EQ(utf8_length("\xe2\x28\xa1"), 0u);      // a second byte that is none
}

TEST(ReadInteger, ReturnsTheValueInRange) {
  const TestReporter report("s.toml");
  const toml::table table = toml::parse("n = 7\n");
  const std::vector<Entry> entries = in_file_order(table);
  EXPECT_EQ(read_integer(report, entries.at(0), "n", {1, 10}), 7);
}

TEST(ReadInteger, RangeErrorText) {
  const TestReporter report("s.toml");
  const toml::table table = toml::parse("\nn = 0\nf = 1.5\n");
  const std::vector<Entry> entries = in_file_order(table);
  EXPECT_EQ(error_of([&] { read_integer(report, entries.at(0), "n", {1, 10}); }),
            "s.toml:2: n: must be in [1, 10]");
  EXPECT_EQ(error_of([&] { read_integer(report, entries.at(0), "n", {1, 10, true}); }),
            "s.toml:2: n: must be in [1, 10], got 0");
  EXPECT_EQ(error_of([&] { read_integer(report, entries.at(1), "f", {1, 10}); }),
            "s.toml:3: f: must be an integer");
  EXPECT_EQ(error_of([&] { read_integer(report, entries.at(1), "f", {1, 10}, "must be a count"); }),
            "s.toml:3: f: must be a count");
}

TEST(Unknown, SaysKeyOrTable) {
  const TestReporter report("s.toml");
  const toml::table table = toml::parse("k = 1\n[t]\n");
  const std::vector<Entry> entries = in_file_order(table);
  EXPECT_EQ(error_of([&] { unknown(report, entries.at(0), "k"); }), "s.toml:1: k: unknown key");
  EXPECT_EQ(error_of([&] { unknown(report, entries.at(1), "t"); }), "s.toml:2: t: unknown table");
}

}  // namespace
}  // namespace bulkhead::tomlread
