// Runs the real bulkheadd binary (or another server, ChildProcess) for a
// test: a config file of the test's own, a unique segment, metrics on an
// ephemeral loopback port, its log in a file; stopped (SIGTERM, then
// SIGKILL) when the test ends.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "shm/segment.hpp"
#include "tests/support/made_here.hpp"

namespace bulkhead::testing {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

// A fresh directory under $TMPDIR for one test, removed with all the test
// left in it (configs, logs) when it goes: what a failure needs of them,
// its assertions print.
class TempDir {
 public:
  TempDir() {
    path_ = (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + std::string("/bhtest-XXXXXX");
    if (::mkdtemp(path_.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  }
  ~TempDir() {
    if (!made_.here()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  MadeHere made_;
  std::string path_;
};

// execv()'s argument array over `argv`'s strings, for the parent to build
// before fork(): the child then only redirects, sets `env` and executes.
inline std::vector<char*> exec_args(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  return args;
}

// In a forked child: adds `env` ("NAME=value") to the environment and
// runs `args` (exec_args()); exits 127 if it cannot.
[[noreturn]] inline void exec_child(std::vector<char*>& args, const std::vector<std::string>& env) {
  for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
  ::execv(args[0], args.data());
  std::_Exit(127);
}

struct RunResult {
  int exit_code;
  std::string out;  // what it wrote on stdout
  std::string err;  // and on stderr
  std::string output() const { return out + err; }
};

// Runs `argv` to completion with `input` on its stdin and `env`
// ("NAME=value") added to the test's environment, capturing its output.
inline RunResult run_command(const std::vector<std::string>& argv, const std::string& dir,
                             const std::string& input = "", const std::vector<std::string>& env = {}) {
  const std::string in = dir + "/command.in", out = dir + "/command.out", err = dir + "/command.err";
  write_file(in, input);
  std::vector<char*> args = exec_args(argv);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fds[] = {::open(in.c_str(), O_RDONLY), ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600),
                       ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600)};
    for (int i = 0; i < 3; ++i) ::dup2(fds[i], i);
    exec_child(args, env);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read_file(out), read_file(err)};
}

// A child process of a test: argv run with the test's environment plus
// `env` ("NAME=value"), stdout and stderr in `log_path`; stopped (SIGTERM,
// then SIGKILL) when the object goes.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path,
               const std::vector<std::string>& env = {})
      : log_path_(log_path) {
    std::vector<char*> args = exec_args(argv);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Stopped with the test even when the test itself dies (a crash, a
      // ctest timeout), when no destructor runs: a daemon left running
      // keeps its segment and its port. (Cleared where the program
      // changes its credentials, as setpriv does.)
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) std::_Exit(127);
      const int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      exec_child(args, env);
    }
  }
  ~ChildProcess() {
    if (pid_ > 0 && !exited_ && made_.here()) {
      ::kill(pid_, SIGTERM);
      if (!wait_exit(std::chrono::seconds(5))) {
        ::kill(pid_, SIGKILL);
        wait_exit(std::chrono::seconds(5));
      }
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  std::string log() const { return read_file(log_path_); }
  void signal(int sig) const { ::kill(pid_, sig); }

  // Waits for the child to exit; true and its exit code in exit_code().
  bool wait_exit(std::chrono::seconds patience) {
    const auto give_up = std::chrono::steady_clock::now() + patience;
    while (!exited_ && std::chrono::steady_clock::now() < give_up) {
      poll_exit();
      if (!exited_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exited_;
  }
  // True once the child has exited (reaps it).
  bool exited() {
    poll_exit();
    return exited_;
  }
  int exit_code() const { return exit_code_; }

 private:
  void poll_exit() {
    int status = 0;
    if (!exited_ && ::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }

  MadeHere made_;
  std::string log_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
};

// A config for a test's bulkheadd: its own segment, 20 ms ticks, metrics
// off, then `daemon_keys` (more [daemon] keys) and `tables`.
inline std::string test_daemon_config(const std::string& segment, const std::string& daemon_keys,
                                      const std::string& tables) {
  return "[daemon]\nsegment = \"" + segment + "\"\ntick_ms = 20\nmetrics_listen = \"\"\n" + daemon_keys +
         "\n" + tables;
}

// The [daemon] table of a small test config: `segment`, ticks of
// `tick_ms`, metrics on an ephemeral loopback port, 16 dependencies, 16
// processes, 2 stripes.
inline std::string small_daemon_config(const std::string& segment, int tick_ms = 20) {
  return "[daemon]\nsegment = \"" + segment + "\"\ntick_ms = " + std::to_string(tick_ms) +
         "\nmetrics_listen = \"127.0.0.1:0\"\nmax_dependencies = 16\nmax_processes = 16\n"
         "stats_stripes = 2\n";
}

class DaemonProcess {
 public:
  // Starts bulkheadd with `config_text` written to DIR/bulkhead.toml and
  // `env` ("NAME=value") added to its environment.
  DaemonProcess(const std::string& binary, const std::string& dir, const std::string& config_text,
                const std::vector<std::string>& env = {})
      : started_ns_(monotonic_ns()),
        config_path_((write_file(dir + "/bulkhead.toml", config_text), dir + "/bulkhead.toml")),
        process_({binary, "--config", config_path_}, dir + "/bulkheadd.log", env) {}

  pid_t pid() const { return process_.pid(); }
  const std::string& config_path() const { return config_path_; }
  std::string log() const { return process_.log(); }
  void signal(int sig) const { process_.signal(sig); }

  // Attaches to the daemon's segment once it has published it with its pid
  // and made a first tick. nullopt if that does not happen within `patience`.
  // The tick is this daemon's: an adopted segment keeps its predecessor's
  // heartbeat count, and this daemon publishes its pid before it applies
  // its config, so only a heartbeat time after its start says it ticked.
  std::optional<shm::Segment> wait_ready(const std::string& segment,
                                         std::chrono::seconds patience = std::chrono::seconds(20)) {
    const auto give_up = std::chrono::steady_clock::now() + patience;
    while (std::chrono::steady_clock::now() < give_up && !process_.exited()) {
      try {
        shm::Segment s = shm::Segment::attach(segment, shm::Access::kReadOnly);
        if (s.header().daemon_pid.load() == pid() && s.header().heartbeat.load() > 0 &&
            s.header().heartbeat_ns.load() >= started_ns_) {
          return s;
        }
      } catch (const shm::SegmentError&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
  }

  // Waits for the daemon to exit; true and its exit code in exit_code().
  bool wait_exit(std::chrono::seconds patience) { return process_.wait_exit(patience); }
  int exit_code() const { return process_.exit_code(); }

 private:
  // CLOCK_MONOTONIC, the clock of the segment's heartbeat_ns.
  static std::uint64_t monotonic_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
  }

  std::uint64_t started_ns_;  // CLOCK_MONOTONIC just before the daemon started
  std::string config_path_;
  ChildProcess process_;
};

// Waits until the daemon publishing `segment` has made `ticks` more ticks
// (its heartbeat count), however long a loaded machine takes; false if not
// within `patience`. What a test that asserts something still holds after
// a while waits for: the daemon's ticks, not a guessed time.
inline bool wait_ticks(const shm::Segment& segment, std::uint64_t ticks,
                       std::chrono::seconds patience = std::chrono::seconds(60)) {
  const std::uint64_t until = segment.header().heartbeat.load() + ticks;
  for (const auto give_up = std::chrono::steady_clock::now() + patience;
       segment.header().heartbeat.load() < until;) {
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// GET http://127.0.0.1:PORT/PATH; the whole response, headers included.
inline std::string http_get(std::uint16_t port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return {};
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!::write(fd, request.data(), request.size());
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) response.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return response;
}

}  // namespace bulkhead::testing
