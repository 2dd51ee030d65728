#include "policies/params.hpp"

#include <limits>

#include <gtest/gtest.h>

#include "tests/policies/window_builder.hpp"

namespace bulkhead::policies {
namespace {

using test::param_error_of;

TEST(Range, DescribesItselfAsErrorsSayIt) {
  EXPECT_EQ(Range::closed(0, 1).describe(), "in [0, 1]");
  EXPECT_EQ(Range::closed_open(0.5, 1).describe(), "in [0.5, 1)");
  EXPECT_EQ(Range::open_closed(0, 1).describe(), "in (0, 1]");
  EXPECT_EQ(Range::at_least(1).describe(), ">= 1");
  EXPECT_EQ(Range::above(0).describe(), "> 0");
  EXPECT_EQ(Range::at_least(1).integers().describe(), "an integer >= 1");
}

TEST(Range, HonoursOpenAndClosedEnds) {
  EXPECT_TRUE(Range::closed_open(0.5, 1).contains(0.5));
  EXPECT_FALSE(Range::closed_open(0.5, 1).contains(1));
  EXPECT_FALSE(Range::open_closed(0, 1).contains(0));
  EXPECT_TRUE(Range::open_closed(0, 1).contains(1));
  EXPECT_FALSE(Range::above(0).contains(0));
  EXPECT_TRUE(Range::at_least(0).contains(0));
}

TEST(Range, RefusesNonFiniteAndNonIntegers) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(Range::at_least(1).contains(inf));
  EXPECT_FALSE(Range::at_least(1).contains(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_FALSE(Range::at_least(1).integers().contains(1.5));
  EXPECT_TRUE(Range::at_least(1).integers().contains(600));
}

TEST(CheckParam, NamesKeyValueAndRule) {
  EXPECT_EQ(param_error_of([] { check_param("backoff", 1.2, Range::closed_open(0.5, 1)); }),
            "backoff = 1.2: must be in [0.5, 1)");
  EXPECT_EQ(param_error_of([] {
              check_param("tolerance", std::numeric_limits<double>::infinity(), Range::at_least(1));
            }),
            "tolerance = inf: must be finite");
  EXPECT_EQ(param_error_of([] { check_param("x", 0.5, Range::closed(0, 1)); }),
            "<no ParamError thrown>");
}

TEST(ParamReader, TakesGivenValueOrFallback) {
  ParamReader reader("p", {{"a", 2}});
  EXPECT_EQ(reader.take("a", 1, Range::at_least(0)), 2);
  EXPECT_EQ(reader.take("b", 7, Range::at_least(0)), 7);
  EXPECT_NO_THROW(reader.finish());
}

TEST(ParamReader, DoesNotRangeCheckTheFallback) {
  // The fallback is the policy's own default, checked by its tests instead.
  ParamReader reader("p", {});
  EXPECT_EQ(reader.take("a", -1, Range::at_least(0)), -1);
}

TEST(ParamReader, RefusesLeftOverKeyListingKnownOnesSorted) {
  ParamReader reader("aimd", {{"backoff", 0.9}, {"foo", 1}, {"zzz", 2}});
  reader.take("timeout_ms", 5000, Range::above(0));
  reader.take("backoff", 0.9, Range::closed_open(0.5, 1));
  EXPECT_EQ(param_error_of([&] { reader.finish(); }),
            "unknown parameter 'foo' for policy 'aimd' (known: backoff, timeout_ms)");
}

TEST(ParamReader, SaysNoneAreKnownForPolicyWithoutParameters) {
  ParamReader reader("fixed", {{"limit", 10}});
  EXPECT_EQ(param_error_of([&] { reader.finish(); }),
            "unknown parameter 'limit' for policy 'fixed' (known: none)");
}

TEST(FormatNumber, IsShortestRoundTrip) {
  EXPECT_EQ(format_number(1.2), "1.2");
  EXPECT_EQ(format_number(5000), "5000");
  EXPECT_EQ(format_number(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(format_number(-std::numeric_limits<double>::infinity()), "-inf");
}

}  // namespace
}  // namespace bulkhead::policies
