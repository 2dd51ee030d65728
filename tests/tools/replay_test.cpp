// Replay: hand-worked windows through AIMD, and the errors.
#include "tools/sim/replay.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <sstream>

#include "policies/params.hpp"

namespace bulkhead::sim {
namespace {

std::string replay_text(const std::string& csv, ReplayOptions options) {
  std::istringstream in(csv);
  std::ostringstream out;
  replay(in, out, options);
  return out.str();
}

ReplayOptions aimd() {
  ReplayOptions o;
  o.policy = "aimd";  // backoff 0.9, timeout 5000 ms; bounds 1..1000, from 20
  return o;
}

TEST(SimReplay, AimdByHand) {
  const std::string csv =
      "rtt_ns,inflight,dropped\n"
      "1000000,20,0\n"     // limit used (2 x 20 >= 20): 20 + 1 = 21
      "1000000,5,0\n"      // 2 x 5 < 21: hold 21
      "1000000,21,1\n"     // a drop: floor(21 x 0.9) = 18
      "1000000,18,0\n"     // 19
      "6000000000,19,0\n"  // mean rtt 6 s > timeout 5 s: floor(19 x 0.9) = 17
      "\n"                 // blank lines and comments are skipped
      "# a comment\n"
      "1000000,17,3\n";    // floor(17 x 0.9) = 15
  EXPECT_EQ(replay_text(csv, aimd()), "21\n21\n18\n19\n17\n15\n");
}

// Output nobody reads (a closed pipe) ends the replay: its input may be
// endless (`yes 1000000,20,0 | bulkhead-sim replay ... | head -1`).
TEST(SimReplay, AFailedWriteEndsTheReplay) {
  std::string csv;
  for (int i = 0; i < 1000; ++i) csv += "1000000,20,0\n";
  std::istringstream in(csv);
  std::ostringstream out;
  out.setstate(std::ios::badbit);
  EXPECT_EQ(replay(in, out, aimd()), 1u);
}

// CSV saved as UTF-8 by a spreadsheet starts with a byte order mark: the
// header after it is still the header (CRLF line ends too).
TEST(SimReplay, AByteOrderMarkBeforeTheHeaderIsSkipped) {
  EXPECT_EQ(replay_text("\xef\xbb\xbfrtt_ns,inflight,dropped\r\n1000000,20,0\r\n", aimd()), "21\n");
  EXPECT_EQ(replay_text("\xef\xbb\xbf" "1000000,20,0\n", aimd()), "21\n");
}

TEST(SimReplay, ParamsAndBoundsApply) {
  ReplayOptions o = aimd();
  o.params["backoff"] = 0.5;
  o.bounds = {8, 22, 20};
  // 20 -> 21 -> 22 (the max) -> 11 -> 8 (the min) -> 8.
  EXPECT_EQ(replay_text("1,20,0\n1,21,0\n1,22,0\n1,22,1\n1,11,1\n1,8,1\n", o), "21\n22\n22\n11\n8\n8\n");
}

TEST(SimReplay, EveryPolicyReplays) {
  for (const std::string& name : policies::builtin_registry().names()) {
    ReplayOptions o;
    o.policy = name;
    const std::string out = replay_text("2000000,20,0\n2000000,20,0\n4000000,20,1\n", o);
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << name;
  }
}

TEST(SimReplay, BadLinesNameTheirNumber) {
  const char* bad[] = {"1,2\n", "1,2,3,4\n", "x,2,3\n", "1,-2,3\n", "1,2,3.5\n", ",2,3\n"};
  for (const char* line : bad) {
    try {
      replay_text(std::string("5,5,0\n") + line, aimd());
      ADD_FAILURE() << "accepted: " << line;
    } catch (const ReplayError& e) {
      EXPECT_EQ(std::string(e.what()).substr(0, 10), "<stdin>:2:") << e.what();
    }
  }
}

TEST(SimReplay, ABadFieldIsNamedWithWhy) {
  const auto message = [](const std::string& line) {
    try {
      replay_text(line, aimd());
    } catch (const ReplayError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("1000000,99999999999,0\n"), "<stdin>:1: inflight \"99999999999\": more than 4294967295");
  EXPECT_EQ(message("1000000,20,x\n"), "<stdin>:1: dropped \"x\": not an unsigned integer");
  EXPECT_EQ(message("-1,20,0\n"), "<stdin>:1: rtt_ns \"-1\": not an unsigned integer");
  EXPECT_EQ(message(",20,0\n"), "<stdin>:1: rtt_ns \"\": not an unsigned integer");
  EXPECT_EQ(message("1,2\n"), "<stdin>:1: expected rtt_ns,inflight,dropped (three unsigned integers), got \"1,2\"");
}

// More drops than a window could hold would wrap its 64-bit sample count
// (with its one ok call) to nothing, and the window would look empty.
TEST(SimReplay, MoreDropsThanAWindowHoldsAreRefused) {
  EXPECT_EQ(replay_text("1000000,20,4294967295\n", aimd()), "18\n");
  try {
    replay_text("1000000,20,4294967296\n", aimd());
    ADD_FAILURE() << "accepted";
  } catch (const ReplayError& e) {
    EXPECT_EQ(std::string(e.what()), "<stdin>:1: dropped 4294967296: at most 4294967295 a window");
  }
}

TEST(SimReplay, EachWindowLastsWindowMs) {
  // balance, unsmoothed and without drains, steps by its share of a round
  // trip: windows of 10 ms take a tenth of the step a 100-ms call makes
  // per round trip, windows of a second all of it. The first line sets the
  // baseline (app-limited), the others use the limit with no queue.
  ReplayOptions o;
  o.policy = "balance";
  o.params = {{"latency_samples", 0}, {"probe_interval_ms", 0}};
  const std::string trace = "100000000,5,0\n100000000,20,0\n100000000,21,0\n100000000,22,0\n";
  const auto last = [&](double window_ms) {
    o.window_ms = window_ms;
    const std::string out = replay_text(trace, o);
    return std::stod(out.substr(out.rfind('\n', out.size() - 2) + 1));
  };
  const double short_windows = last(10), long_windows = last(1000);
  EXPECT_GT(short_windows, 20);
  EXPECT_GT(long_windows, short_windows);
  o.window_ms = 0;
  EXPECT_THROW(replay_text(trace, o), ReplayError);
  // Beyond an hour, and past what nanoseconds can count: refused, not a
  // window length that overflowed.
  o.window_ms = 3'600'000;
  EXPECT_NO_THROW(replay_text(trace, o));
  for (const double bad : {3'600'001.0, 1e30, std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()}) {
    o.window_ms = bad;
    try {
      replay_text(trace, o);
      ADD_FAILURE() << bad;
    } catch (const ReplayError& e) {
      EXPECT_NE(std::string(e.what()).find(": must be a positive number of ms, at most 3600000 (an hour)"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(SimReplay, BadPolicyOrParamIsAParamError) {
  ReplayOptions o = aimd();
  o.params["backoff"] = 2;
  EXPECT_THROW(replay_text("1,1,0\n", o), policies::ParamError);
  o = aimd();
  o.policy = "nope";
  EXPECT_THROW(replay_text("1,1,0\n", o), policies::ParamError);
}

TEST(SimReplay, BadBoundsAreNamedByTheirFlags) {
  const auto message = [](policies::Bounds bounds) {
    ReplayOptions o = aimd();
    o.bounds = bounds;
    try {
      replay_text("1,1,0\n", o);
    } catch (const ReplayError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({10, 5, 10}), "--max-limit 5: must be >= --min-limit (10)");
  EXPECT_EQ(message({0, 5, 1}), "--min-limit 0: must be >= 1");
  EXPECT_EQ(message({1, 5, 7.5}), "--initial-limit 7.5: must be in [--min-limit, --max-limit] = [1, 5]");
  // Past 2^32 the limit a window carries would not fit its 32-bit field.
  EXPECT_EQ(message({1e10, 1e10, 1e10}), "--max-limit 1e+10: must be <= 1000000, as bulkheadd's max_limit");
  EXPECT_EQ(message({1, 1000001, 20}), "--max-limit 1000001: must be <= 1000000, as bulkheadd's max_limit");
  EXPECT_EQ(message({1, 1000000, 1000000}), "no error");
}

}  // namespace
}  // namespace bulkhead::sim
