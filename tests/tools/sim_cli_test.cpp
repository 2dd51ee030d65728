// The bulkhead-sim binary itself: what `run` writes and prints, that its
// output does not depend on --jobs, that `replay` answers what the library
// does, and its errors. The library under it has its own tests (sim_test);
// these hold the command the docs quote to what they say it does.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/daemon_process.hpp"
#include "tests/support/json.hpp"
#include "tools/sim/replay.hpp"

namespace bulkhead::sim {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::write_file;

const std::string kScenario = std::string(BULKHEAD_SOURCE_DIR) + "/scenarios/steady-overload.toml";

class SimCli : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(dir_); }

  // Runs bulkhead-sim with `args`, stdin from `input`, and PATH set to
  // `path` when not empty.
  testing::RunResult sim(std::vector<std::string> args, const std::string& input = "",
                         const std::string& path = "") {
    args.insert(args.begin(), BULKHEAD_SIM_PATH);
    return testing::run_command(args, dir_.string(), input,
                                path.empty() ? std::vector<std::string>{} : std::vector<std::string>{"PATH=" + path});
  }

  // An executable `gnuplot` in DIR/bin that exits with `code`.
  std::string fake_gnuplot(int code) {
    const fs::path bin = dir_ / "bin";
    fs::create_directories(bin);
    write_file(bin / "gnuplot", "#!/bin/sh\nexit " + std::to_string(code) + "\n");
    ::chmod((bin / "gnuplot").c_str(), 0755);
    return bin.string();
  }

  testing::TempDir temp_dir_;
  fs::path dir_ = temp_dir_.path();
};

TEST_F(SimCli, RunPrintsTheTableAndWritesCsvPlotAndSummary) {
  const fs::path out = dir_ / "out";
  const auto r = sim({"run", kScenario, "--policy", "balance", "--policy", "aimd", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out.rfind("== steady-overload: ", 0), 0u) << r.out;
  for (const char* row : {"\naimd ", "\nbalance ", "\nnone ", "\nstatic-best(L="}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  }

  const std::string csv = read_file(out / "steady-overload.csv");
  EXPECT_EQ(csv.rfind("t_s,policy,limit,inflight,", 0), 0u) << csv.substr(0, 200);
  EXPECT_NE(csv.find(",balance,"), std::string::npos);
  EXPECT_NE(csv.find(",aimd,"), std::string::npos);
  // The script names its PNG without a directory, and gnuplot drew it.
  EXPECT_NE(read_file(out / "steady-overload.gp").find("'steady-overload.png'"), std::string::npos);
  EXPECT_EQ(read_file(out / "steady-overload.png").substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));

  const auto summary = testing::JsonParser::parse(read_file(out / "summary.json"));
  ASSERT_EQ(summary["scenarios"].array.size(), 1u);
  const auto& scenario = summary["scenarios"][0];
  EXPECT_EQ(scenario["name"].string, "steady-overload");
  // The policies in the order given, then the two references.
  std::vector<std::string> kinds;
  for (const auto& run : scenario["runs"].array) kinds.push_back(run["kind"].string + ":" + run["policy"].string);
  ASSERT_EQ(kinds.size(), 4u);
  EXPECT_EQ(kinds[0], "policy:balance");
  EXPECT_EQ(kinds[1], "policy:aimd");
  EXPECT_EQ(kinds[2], "none:none");
  EXPECT_EQ(kinds[3].rfind("static-best:static-best(L=", 0), 0u) << kinds[3];
}

// A run in which no call succeeds (each takes 2 s, the timeout is 0.5 s)
// has no latency to plot: the PNG says so, and summary.json is written.
TEST_F(SimCli, ARunWithoutASuccessStillPlotsAndSummarizes) {
  const fs::path scenario = dir_ / "all-time-out.toml";
  write_file(scenario,
             "duration_s = 3\n[dependency]\nworkers = 4\nbase_latency_ms = 2000\nservice = \"constant\"\n"
             "[clients]\nrate = 50\ntimeout_ms = 500\n");
  const fs::path out = dir_ / "out";
  const auto r = sim({"run", scenario.string(), "--policy", "aimd", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(read_file(out / "all-time-out.gp").find("no call succeeded"), std::string::npos);
  EXPECT_EQ(read_file(out / "all-time-out.png").substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const auto summary = testing::JsonParser::parse(read_file(out / "summary.json"));
  EXPECT_EQ(summary["scenarios"][0]["runs"][0]["goodput_per_s"].number, 0);
}

// Output that cannot be written is an error, not a silent success.
TEST_F(SimCli, AnUnwritableStandardOutputIsAnError) {
  for (const std::string& command :
       {"exec " + std::string(BULKHEAD_SIM_PATH) + " run " + kScenario + " --policy aimd --json > /dev/full",
        "echo 1000000,20,0 | " + std::string(BULKHEAD_SIM_PATH) + " replay --policy aimd > /dev/full"}) {
    const auto r = testing::run_command({"/bin/sh", "-c", command}, dir_.string());
    EXPECT_EQ(r.exit_code, 1) << command;
    EXPECT_NE(r.err.find("bulkhead-sim: cannot write to standard output: No space left on device"),
              std::string::npos)
        << r.err;
  }
}

// A reader that went away (`bulkhead-sim run ... | head -1`) is an error that
// says so, exit 1, as a full disk is: not a death by SIGPIPE with no word,
// after which a pipeline without pipefail reports success.
TEST_F(SimCli, AClosedPipeOnStandardOutputIsAnError) {
  const std::string sim_path = BULKHEAD_SIM_PATH, out = (dir_ / "out").string();
  const std::string input = (dir_ / "windows.csv").string(), err = (dir_ / "err").string();
  write_file(input, "1000000,20,0\n1000000,21,1\n");
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{sim_path, "run", kScenario, "--policy", "aimd", "--out", out, "--no-plot"},
        std::vector<std::string>{sim_path, "replay", "--policy", "aimd"}}) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    ::close(fds[0]);  // no reader: the first write fails
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::signal(SIGPIPE, SIG_DFL);  // as a shell leaves it, whatever the test runner does
      ::dup2(::open(input.c_str(), O_RDONLY), 0);
      ::dup2(fds[1], 1);
      ::dup2(::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), 2);
      ::execv(args[0], args.data());
      std::_Exit(127);
    }
    ::close(fds[1]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status)) << argv[1] << ": killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 1) << argv[1];
    EXPECT_NE(read_file(err).find("bulkhead-sim: cannot write to standard output: Broken pipe"), std::string::npos)
        << argv[1] << ": " << read_file(err);
  }
  // The scenario's files were written before the table's failure was told.
  EXPECT_TRUE(fs::exists(fs::path(out) / "steady-overload.csv"));
}

// The static sweep runs ~45 limits here (100000 workers) and reports one:
// only that one's series is kept. A 10-min run of 10-ms ticks has 60000
// ticks a run, 4 MB of series; all of the sweep's took 186 MB, the run
// without them 22 MB.
TEST_F(SimCli, TheSweepKeepsOnlyTheSeriesItReports) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's shadow memory and quarantine are no measure of what the run holds";
#endif
  const fs::path scenario = dir_ / "long.toml";
  write_file(scenario,
             "duration_s = 600\ntick_ms = 10\n[dependency]\nworkers = 100000\nbase_latency_ms = 10\n"
             "[clients]\nrate = 10\n");
  const std::string sim_path = BULKHEAD_SIM_PATH, out = (dir_ / "out.json").string();
  const std::vector<std::string> argv{sim_path, "run", scenario.string(), "--policy", "aimd", "--json"};
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), 1);
    ::execv(args[0], args.data());
    std::_Exit(127);
  }
  int status = 0;
  struct rusage usage {};
  ASSERT_EQ(::wait4(pid, &status, 0, &usage), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The run, with its static-best series, in the JSON.
  EXPECT_NE(read_file(out).find("\"kind\": \"static-best\""), std::string::npos);
  EXPECT_LT(usage.ru_maxrss, 100 * 1024) << "KB at the peak";
}

TEST_F(SimCli, TheSameBytesWhateverTheJobsAndOnEveryRun) {
  const auto json = [&](const char* jobs) {
    return sim({"run", kScenario, "--policy", "balance", "--policy", "vegas", "--json", "--jobs", jobs});
  };
  const auto one = json("1"), two = json("2"), again = json("2");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(testing::JsonParser::parse(one.out)["scenarios"][0]["name"].string, "steady-overload");
  EXPECT_EQ(one.out, two.out);
  EXPECT_EQ(two.out, again.out);
}

TEST_F(SimCli, ReplayAnswersWhatTheLibraryDoes) {
  std::string csv = "rtt_ns,inflight,dropped\n";
  for (int i = 0; i < 40; ++i) {
    csv += std::to_string(10'000'000 + 1'000'000 * (i % 7)) + "," + std::to_string(15 + i % 9) + "," +
           std::to_string(i % 13 == 12 ? 2 : 0) + "\n";
  }
  ReplayOptions options;
  options.policy = "gradient2";
  options.params.insert_or_assign("smoothing", 0.5);
  std::istringstream in(csv);
  std::ostringstream expected;
  replay(in, expected, options);

  const auto r = sim({"replay", "--policy", "gradient2", "--param", "smoothing=0.5"}, csv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected.str());
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 40);
}

TEST_F(SimCli, BadArgumentsSayWhatWasWrongAndWriteNothing) {
  const fs::path out = dir_ / "out";
  auto r = sim({"run", kScenario, "--policy", "nonesuch", "--out", out.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("bulkhead-sim: --policy nonesuch: unknown policy (known: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("balance"), std::string::npos) << r.err;

  r = sim({"run", kScenario, kScenario});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("steady-overload.toml: name: \"steady-overload\" is the name of another scenario given"),
            std::string::npos)
      << r.err;

  r = sim({"run", kScenario, "--policy", "aimd", "--policy", "balance", "--policy", "aimd"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "bulkhead-sim: --policy aimd: given twice\n");

  r = sim({"run", kScenario, "--out", ""});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--out: must not be empty"), std::string::npos) << r.err;

  r = sim({"replay", "--policy", "aimd", "--param", "backoff"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--param backoff: must be KEY=NUMBER"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

// --out DIR that cannot be made, or a file in it that cannot be written,
// is an error naming it and why.
TEST_F(SimCli, AnOutDirectoryThatCannotBeWrittenSaysWhy) {
  const fs::path file = dir_ / "file";
  write_file(file, "");
  auto r = sim({"run", kScenario, "--policy", "aimd", "--out", file.string(), "--no-plot"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "bulkhead-sim: --out " + file.string() + ": cannot create the directory: Not a directory\n");
  EXPECT_EQ(r.out, "");  // before any run

  const fs::path out = dir_ / "out";
  fs::create_directories(out / "steady-overload.csv");  // a directory where the CSV goes
  r = sim({"run", kScenario, "--policy", "aimd", "--out", out.string(), "--no-plot"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "bulkhead-sim: cannot write " + (out / "steady-overload.csv").string() + ": Is a directory\n");
}

TEST_F(SimCli, PlotsNeedGnuplotUnlessToldNot) {
  const fs::path out = dir_ / "out";
  const std::string empty = (dir_ / "empty").string();
  fs::create_directories(empty);
  auto r = sim({"run", kScenario, "--policy", "balance", "--out", out.string()}, "", empty);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("gnuplot not found on PATH"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gnuplot-nox"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));

  r = sim({"run", kScenario, "--policy", "balance", "--out", out.string(), "--no-plot"}, "", empty);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(out / "steady-overload.csv"));
  EXPECT_TRUE(fs::exists(out / "summary.json"));
  EXPECT_FALSE(fs::exists(out / "steady-overload.gp"));
  EXPECT_FALSE(fs::exists(out / "steady-overload.png"));

  // A gnuplot that fails is an error, naming the script.
  r = sim({"run", kScenario, "--policy", "balance", "--out", out.string()}, "", fake_gnuplot(3));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("gnuplot failed on " + (out / "steady-overload.gp").string()), std::string::npos) << r.err;
  r = sim({"run", kScenario, "--policy", "balance", "--out", out.string()}, "", fake_gnuplot(0));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace bulkhead::sim
