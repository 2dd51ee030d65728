// bulkheadctl: inspect a live bulkhead segment, read-only, with or without
// a running daemon; and force a dependency's circuit breaker (the one
// command that writes, and only one word: the override bulkheadd reads).
//
//   bulkheadctl [--segment NAME] status    [--interval S] [--stale-after S] [--json]
//   bulkheadctl [--segment NAME] top       [--interval S] [-n N]
//   bulkheadctl [--segment NAME] get NAME  [--interval S] [--json]
//   bulkheadctl [--segment NAME] processes [--json]
//   bulkheadctl [--segment NAME] breaker NAME open|closed|auto
//
// Exit status: 0 done, 1 the segment cannot be opened or trusted, 2 usage,
// 3 no dependency of that name. docs/operations.md describes the output and
// the JSON schema. The readings and their rendering live in the bulkhead_ctl
// library (snapshot, render); this file parses the command line, waits, and
// drives the terminal for `top`.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <string>
#include <thread>

#include "tools/ctl/render.hpp"
#include "tools/ctl/snapshot.hpp"

namespace {

namespace ctl = bulkhead::ctl;
namespace shm = bulkhead::shm;

constexpr int kExitSegment = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoDependency = 3;

struct Options {
  std::string segment = ctl::default_segment_name();
  bool json = false;
  double interval_s = 1.0;
  ctl::StatusOptions status;
  std::string dependency;  // get
  unsigned frames = 0;     // top -n; 0: until q or a signal
  std::string force;       // breaker: open, closed, auto
};

void write_all(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// Two readings `interval_s` apart.
ctl::Status sample(const shm::Segment& segment, const Options& o) {
  ctl::Snapshot before = ctl::read_snapshot(segment, ctl::monotonic_now_ns());
  std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
  ctl::Snapshot after = ctl::read_snapshot(segment, ctl::monotonic_now_ns());
  return ctl::derive_status(std::move(before), std::move(after), o.status);
}

int run_status(const shm::Segment& segment, const Options& o) {
  const ctl::Status st = sample(segment, o);
  write_all(o.json ? ctl::status_json(st) : ctl::status_text(st));
  return 0;
}

int run_get(const shm::Segment& segment, const Options& o) {
  if (ctl::read_snapshot(segment, ctl::monotonic_now_ns()).find(o.dependency) == nullptr) {
    std::cerr << "bulkheadctl: no dependency '" << o.dependency << "' in /dev/shm/" << o.segment
              << " (bulkheadctl status lists them)\n";
    return kExitNoDependency;
  }
  const ctl::Status st = sample(segment, o);
  for (const ctl::DependencyStatus& d : st.dependencies) {
    if (d.now.name == o.dependency) {
      write_all(o.json ? ctl::dependency_json(st, d) : ctl::dependency_text(st, d));
      return 0;
    }
  }
  return kExitNoDependency;
}

int run_processes(const shm::Segment& segment, const Options& o) {
  const ctl::Snapshot s = ctl::read_snapshot(segment, ctl::monotonic_now_ns());
  write_all(o.json ? ctl::processes_json(s) : ctl::processes_text(s));
  return 0;
}

// --- breaker ---------------------------------------------------------------

// Writes the breaker override of one dependency: the daemon reads it every
// tick and holds the breaker open or closed until it is set back to auto.
// It lives in the segment, so it outlasts a daemon restart. Needs write
// access to the segment (its group, as clients have).
int run_breaker(const Options& o) {
  shm::Segment segment = [&] {
    try {
      return shm::Segment::attach(o.segment, shm::Access::kReadWrite);
    } catch (const shm::SegmentError& e) {
      if (e.code() == EACCES) {
        throw shm::SegmentError(e.code(), std::string(e.what()) +
                                              " (forcing a breaker writes to the segment: run as a member of "
                                              "its group, as clients do)");
      }
      throw;
    }
  }();
  const auto index = shm::find_dependency(segment, o.dependency);
  if (!index) {
    std::cerr << "bulkheadctl: no dependency '" << o.dependency << "' in /dev/shm/" << o.segment
              << " (bulkheadctl status lists them)\n";
    return kExitNoDependency;
  }
  const std::uint32_t value = o.force == "open" ? shm::kOverrideOpen
                              : o.force == "closed" ? shm::kOverrideClosed
                                                    : shm::kOverrideAuto;
  shm::DependencyControl& control = segment.dependency(*index).control;
  // Relaxed: a lone value the daemon reads each tick.
  control.breaker_override.store(value, std::memory_order_relaxed);
  std::cout << "breaker of " << o.dependency << ": override " << o.force
            << (value == shm::kOverrideAuto ? " (the config's force, else the outcomes, decide)" : "")
            << "; bulkheadd applies it at its next tick\n";
  return 0;
}

// --- top ------------------------------------------------------------------

volatile sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int) { g_stop = 1; }

// Puts the terminal in "top" mode (alternate screen, no cursor, keys
// without Enter or echo; Ctrl-C still signals) and restores it when it goes.
class TerminalGuard {
 public:
  TerminalGuard() {
    if (::isatty(STDIN_FILENO) && ::tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      restore_termios_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    write_all("\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J");
  }
  ~TerminalGuard() {
    write_all("\x1b[?25h\x1b[?1049l");
    if (restore_termios_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  TerminalGuard(const TerminalGuard&) = delete;
  TerminalGuard& operator=(const TerminalGuard&) = delete;

 private:
  termios saved_{};
  bool restore_termios_ = false;
};

// Waits up to `seconds`; true if the user asked to quit (q, Ctrl-C, a
// termination signal).
bool wait_or_quit(double seconds, bool keys) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!g_stop) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd fd{STDIN_FILENO, POLLIN, 0};
    const int n = ::poll(keys ? &fd : nullptr, keys ? 1 : 0, static_cast<int>(left.count()));
    if (n > 0 && (fd.revents & POLLIN) != 0) {
      char c = 0;
      while (::read(STDIN_FILENO, &c, 1) == 1) {
        if (c == 'q' || c == 'Q') return true;
      }
    }
  }
  return true;
}

std::string clock_utc() {
  const time_t t = ::time(nullptr);
  tm utc{};
  ::gmtime_r(&t, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S UTC", &utc);
  return buf;
}

// Cuts a frame to the terminal: each line to `columns`, at most `rows`
// lines, each ending in erase-to-end-of-line; then erase below.
std::string fit_to_screen(const std::string& frame) {
  winsize ws{};
  const bool known = ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0;
  const std::size_t columns = known ? ws.ws_col : 1000, rows = known ? ws.ws_row : 1000;
  std::string out = "\x1b[H";
  std::size_t start = 0, row = 0;
  while (start < frame.size() && row < rows) {
    std::size_t end = frame.find('\n', start);
    if (end == std::string::npos) end = frame.size();
    out += frame.substr(start, std::min(end - start, columns)) + "\x1b[K";
    if (++row < rows) out += "\n";  // the terminal adds the carriage return (ONLCR)
    start = end + 1;
  }
  return out + "\x1b[J";
}

int run_top(const shm::Segment& segment, const Options& o) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(s, &sa, nullptr);  // no SA_RESTART: poll returns

  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  std::optional<TerminalGuard> terminal;
  if (tty) {
    terminal.emplace();
    write_all(fit_to_screen("bulkheadctl top: /dev/shm/" + o.segment + ": sampling for " +
                            std::to_string(o.interval_s).substr(0, 4) + " s ..."));
  }
  const bool keys = tty && ::isatty(STDIN_FILENO) != 0;
  ctl::Snapshot previous = ctl::read_snapshot(segment, ctl::monotonic_now_ns());
  for (unsigned frame = 0; o.frames == 0 || frame < o.frames; ++frame) {
    if (wait_or_quit(o.interval_s, keys)) break;
    ctl::Snapshot now = ctl::read_snapshot(segment, ctl::monotonic_now_ns());
    ctl::Snapshot next = now;
    const ctl::Status st = ctl::derive_status(std::move(previous), std::move(now), o.status);
    previous = std::move(next);
    const std::string title = "bulkheadctl top - " + clock_utc() + (tty ? " - q quits" : "") + "\n";
    write_all(tty ? fit_to_screen(title + ctl::status_text(st)) : title + ctl::status_text(st) + "\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "bulkheadctl: inspect a live bulkhead segment (read-only; works with bulkheadd down),\n"
      "and force a dependency's circuit breaker (`breaker`: writes one word the daemon reads)."};
  app.footer(
      "Exit status: 0 done; 1 the segment is missing, unreadable or not a valid segment;\n"
      "2 usage; 3 get, breaker: no dependency of that name. Output and JSON schema:\n"
      "docs/operations.md, \"bulkheadctl\".");
  app.require_subcommand(1);
  app.fallthrough();
  app.add_option("--segment", o.segment,
                 "segment name, /dev/shm/NAME (default: $BULKHEAD_SEGMENT, else \"bulkhead\")");
  app.set_version_flag("--version", BULKHEAD_VERSION);

  auto add_interval = [&](CLI::App* sub) {
    sub->add_option("--interval,-i", o.interval_s,
                    "seconds between the two readings that rates and latency come from")
        ->check(CLI::Range(0.05, 3600.0))
        ->capture_default_str();
    sub->add_option("--stale-after", o.status.stale_after_s,
                    "call the daemon's heartbeat stale when older than this, in seconds")
        ->check(CLI::Range(0.01, 86400.0))
        ->capture_default_str();
  };
  CLI::App* status = app.add_subcommand(
      "status", "limits, in-flight, latency and rates of every dependency; the daemon's health");
  add_interval(status);
  status->add_flag("--json", o.json, "JSON for scripts (schema in docs/operations.md)");

  CLI::App* top = app.add_subcommand("top", "status, redrawn every interval; q or Ctrl-C quits");
  add_interval(top);
  top->add_option("-n,--iterations", o.frames, "stop after N frames (default: run until q)");

  CLI::App* get = app.add_subcommand("get", "one dependency in detail: counters, percentiles, holders");
  get->add_option("name", o.dependency, "dependency name")->required();
  add_interval(get);
  get->add_flag("--json", o.json, "JSON for scripts (schema in docs/operations.md)");

  CLI::App* processes = app.add_subcommand(
      "processes", "the process table: pid, start time, alive or dead, permits held");
  processes->add_flag("--json", o.json, "JSON for scripts (schema in docs/operations.md)");

  CLI::App* breaker = app.add_subcommand(
      "breaker", "force a dependency's circuit breaker open or closed, or hand it back to the daemon (auto)");
  breaker->add_option("name", o.dependency, "dependency name")->required();
  breaker->add_option("state", o.force, "open, closed, or auto")
      ->required()
      ->check(CLI::IsMember({"open", "closed", "auto"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }

  try {
    if (*breaker) return run_breaker(o);
    const shm::Segment segment = ctl::open_read_only(o.segment);
    if (*status) return run_status(segment, o);
    if (*top) return run_top(segment, o);
    if (*get) return run_get(segment, o);
    return run_processes(segment, o);
  } catch (const shm::SegmentError& e) {
    std::cerr << "bulkheadctl: " << e.what() << "\n";
    return kExitSegment;
  }
}
