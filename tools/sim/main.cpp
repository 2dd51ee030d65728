// bulkhead-sim: run scenarios through the policies, or replay a trace.
//
//   bulkhead-sim run SCENARIO.toml... [--policy NAME]... [--param POLICY.KEY=VALUE]... [--out DIR] [--json]
//   bulkhead-sim replay --policy NAME [--param KEY=VALUE]... < windows.csv
//
// docs/simulator.md describes the model, the scenario keys and every
// reported metric.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "policies/policy.hpp"
#include "tools/sim/replay.hpp"
#include "tools/sim/report.hpp"
#include "tools/sim/scenario.hpp"

extern char** environ;

namespace {

using bulkhead::sim::ScenarioReport;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string_view rest = path != nullptr ? path : "/usr/bin:/bin";
  while (!rest.empty()) {
    const std::size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
  }
  return false;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  // Why, from the open or the write: a directory in the file's place, no
  // permission, a full disk.
  if (!out) throw Failure("cannot write " + path.string() + ": " + std::strerror(errno));
  out << text;
  out.close();
  if (!out) throw Failure("cannot write " + path.string() + ": " + std::strerror(errno));
}

// Runs gnuplot on `script` in the script's directory: the script names its
// PNG without a directory, so DIR can be moved and the script rerun there.
void run_gnuplot(const std::filesystem::path& script) {
  std::string arg0 = "gnuplot", arg1 = script.filename().string();
  const std::string dir = script.has_parent_path() ? script.parent_path().string() : ".";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  // bulkhead-sim ignores SIGPIPE (see main()); gnuplot gets the default.
  posix_spawnattr_t attributes;
  ::posix_spawnattr_init(&attributes);
  sigset_t pipe_signal;
  ::sigemptyset(&pipe_signal);
  ::sigaddset(&pipe_signal, SIGPIPE);
  ::posix_spawnattr_setsigdefault(&attributes, &pipe_signal);
  ::posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, "gnuplot", &actions, &attributes, argv, environ);
  ::posix_spawnattr_destroy(&attributes);
  ::posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Failure("cannot run gnuplot: " + std::string(std::strerror(rc)));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw Failure("waitpid(gnuplot): " + std::string(std::strerror(errno)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw Failure("gnuplot failed on " + script.string());
  }
}

struct RunArgs {
  std::vector<std::string> scenarios;
  std::vector<std::string> policies;
  std::vector<std::string> params;  // POLICY.KEY=VALUE
  std::string out_dir;
  bool json = false;
  bool no_plot = false;
  unsigned jobs = 1;
};

// Output that did not reach standard output (a full disk, a closed pipe)
// is a failure, not a silent success.
void check_written() {
  std::cout.flush();
  if (!std::cout) throw Failure(std::string("cannot write to standard output: ") + std::strerror(errno));
}

int run(const RunArgs& args) {
  for (auto p = args.policies.begin(); p != args.policies.end(); ++p) {
    if (!bulkhead::policies::builtin_registry().contains(*p)) {
      throw Failure("--policy " + *p + ": unknown policy (known: " + bulkhead::policies::builtin_registry().known() +
                    ")");
    }
    // Two rows of one name in the table, the CSV and the JSON, told apart by nothing.
    if (std::find(args.policies.begin(), p, *p) != p) throw Failure("--policy " + *p + ": given twice");
  }
  std::vector<bulkhead::sim::Scenario> scenarios;
  std::set<std::string> names;
  for (const std::string& file : args.scenarios) {
    scenarios.push_back(bulkhead::sim::load_scenario_file(file));
    for (const std::string& p : args.params) bulkhead::sim::set_policy_param(scenarios.back(), p);
    if (!names.insert(scenarios.back().name).second) {
      throw Failure(file + ": name: \"" + scenarios.back().name +
                    "\" is the name of another scenario given; output files would collide");
    }
  }
  const bool plot = !args.out_dir.empty() && !args.no_plot;
  if (plot && !on_path("gnuplot")) {
    throw Failure("gnuplot not found on PATH; it draws the PNG plots: install Debian's package gnuplot-nox "
                  "(apt-get install gnuplot-nox), or pass --no-plot");
  }
  const std::filesystem::path dir(args.out_dir);
  if (!args.out_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) throw Failure("--out " + args.out_dir + ": cannot create the directory: " + error.message());
  }

  bulkhead::sim::RunOptions options;
  options.policies = args.policies;
  options.jobs = args.jobs;
  std::vector<ScenarioReport> reports;
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    reports.push_back(bulkhead::sim::run_scenario(scenarios[i], options));
    const ScenarioReport& r = reports.back();
    if (!args.json) std::cout << (i ? "\n" : "") << bulkhead::sim::format_table(r) << std::flush;
    if (!args.out_dir.empty()) {
      write_file(dir / (r.scenario.name + ".csv"), bulkhead::sim::format_csv(r));
      if (plot) {
        const std::filesystem::path script = dir / (r.scenario.name + ".gp");
        write_file(script, bulkhead::sim::gnuplot_script(r, r.scenario.name + ".png"));
        run_gnuplot(script);
      }
    }
    // A table that did not get out stops the run now, with this scenario's
    // files written, rather than after simulating the others for nobody.
    if (!args.json) check_written();
  }
  const std::string json = bulkhead::sim::format_json(reports);
  if (!args.out_dir.empty()) write_file(dir / "summary.json", json);
  if (args.json) std::cout << json;
  check_written();
  return 0;
}

struct ReplayArgs {
  std::string policy;
  std::vector<std::string> params;
  double min_limit = 1, max_limit = 1000, initial_limit = 20;
  double window_ms = 100;
};

int replay(const ReplayArgs& args) {
  bulkhead::sim::ReplayOptions options;
  options.policy = args.policy;
  options.bounds = {args.min_limit, args.max_limit, args.initial_limit};
  options.window_ms = args.window_ms;
  for (const std::string& p : args.params) {
    const auto param = bulkhead::sim::parse_param(p);
    if (!param) throw Failure("--param " + p + ": must be KEY=NUMBER, e.g. backoff=0.9");
    options.params.insert_or_assign(param->first, param->second);
  }
  std::cout.sync_with_stdio(false);
  bulkhead::sim::replay(std::cin, std::cout, options);
  check_written();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bulkhead-sim: simulate the limit policies on scenarios, or replay a trace through one"};
  app.require_subcommand(1);

  RunArgs run_args;
  CLI::App* run_cmd = app.add_subcommand("run", "run scenarios for every policy and the two references");
  run_cmd->add_option("scenarios", run_args.scenarios, "scenario TOML files")->required()->type_name("FILE");
  // One value per --policy: a greedy vector would take the scenario files.
  run_cmd
      ->add_option("--policy", run_args.policies,
                   "a policy to run (repeatable; default: every registered policy but fixed)")
      ->allow_extra_args(false)
      ->type_name("NAME");
  run_cmd
      ->add_option("--param", run_args.params,
                   "a policy parameter over the scenarios' own (repeatable)")
      ->allow_extra_args(false)
      ->type_name("POLICY.KEY=VALUE");
  // "" would mean "not given": nothing written, and exit 0.
  run_cmd->add_option("--out", run_args.out_dir, "write DIR/<scenario>.csv, .gp, .png and DIR/summary.json")
      ->type_name("DIR")
      ->check(CLI::Validator([](std::string& dir) { return dir.empty() ? "must not be empty" : ""; }, "",
                             "NOT_EMPTY"));
  run_cmd->add_flag("--json", run_args.json, "print the summary as JSON instead of tables");
  run_cmd->add_flag("--no-plot", run_args.no_plot, "with --out: skip gnuplot (no .gp, no .png)");
  run_cmd->add_option("--jobs,-j", run_args.jobs, "runs at once (threads, 1 to 64); the output does not depend on it")
      ->check(CLI::Range(1u, 64u).description(""))
      ->type_name("N");

  ReplayArgs replay_args;
  CLI::App* replay_cmd = app.add_subcommand(
      "replay", "read windows as CSV rtt_ns,inflight,dropped on stdin; print the limit after each");
  replay_cmd->add_option("--policy", replay_args.policy, "the policy")->required()->type_name("NAME");
  replay_cmd->add_option("--param", replay_args.params, "a policy parameter (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  replay_cmd->add_option("--min-limit", replay_args.min_limit, "lower bound (default 1)")->type_name("N");
  replay_cmd->add_option("--max-limit", replay_args.max_limit, "upper bound (default 1000)")->type_name("N");
  replay_cmd->add_option("--initial-limit", replay_args.initial_limit, "the limit before any window (default 20)")
      ->type_name("N");
  replay_cmd->add_option("--window-ms", replay_args.window_ms,
                         "how long each window lasted, in ms (default 100, the daemon's tick)")
      ->type_name("MS");

  // A reader that goes away (`| head`) makes a write fail with EPIPE, told
  // as any failed write to stdout is (check_written: exit 1), rather than
  // kill the run with no word, which a pipeline without pipefail reports as
  // a success, and which leaves --out DIR half written.
  std::signal(SIGPIPE, SIG_IGN);
  CLI11_PARSE(app, argc, argv);
  try {
    if (run_cmd->parsed()) return run(run_args);
    return replay(replay_args);
  } catch (const std::exception& e) {
    std::cerr << "bulkhead-sim: " << e.what() << "\n";
    return 1;
  }
}
