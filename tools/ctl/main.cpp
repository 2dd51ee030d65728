// bulkheadctl: inspect a live bulkhead segment, read-only, with or without
// a running daemon; force a dependency's circuit breaker, or pin its limit
// for a while (the two commands that write, each one word that bulkheadd
// reads).
//
//   bulkheadctl [--segment NAME] status    [PATTERN...] [--sort ORDER] [--interval S]
//                                          [--stale-after S] [--json]
//   bulkheadctl [--segment NAME] top       [PATTERN...] [--sort ORDER] [--interval S] [-n N]
//   bulkheadctl [--segment NAME] get NAME  [--interval S] [--json]
//   bulkheadctl [--segment NAME] processes [--json]
//   bulkheadctl [--segment NAME] breaker NAME open|closed|auto
//   bulkheadctl [--segment NAME] pin NAME LIMIT|off [--for DURATION]
//
// Exit status: 0 done, 1 the segment cannot be opened or trusted (or the
// output not written), 2 usage, 3 no dependency of that name.
// docs/operations.md describes the output and the JSON schema. The readings
// and their rendering live in the bulkhead_ctl library (snapshot, render);
// this file parses the command line, waits, and drives the terminal for `top`.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <thread>

#include "shm/pid_namespace.hpp"
#include "tools/ctl/render.hpp"
#include "tools/ctl/snapshot.hpp"

namespace {

namespace ctl = bulkhead::ctl;
namespace shm = bulkhead::shm;

constexpr int kExitSegment = 1;
constexpr int kExitOutput = 1;  // the output could not be written
constexpr int kExitUsage = 2;
constexpr int kExitNoDependency = 3;

// CLI::Range lets NaN through (every comparison with it is false): a number
// option is checked with this first. It reads the text as the option's own
// conversion does (CLI11's: std::strtold, the whole text), which takes "+nan"
// and " nan" as much as "nan". A value that is no number at all is left to
// that conversion, which names it.
const CLI::Validator kFinite(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const long double value = std::strtold(text.c_str(), &end);
      return !text.empty() && end == text.c_str() + text.size() && !std::isfinite(value)
                 ? "must be a finite number, got " + text
                 : "";
    },
    "", "FINITE");

// A dependency name as the segment holds them: one that no client could
// claim is a usage error (exit 2) naming what is wrong, not "no dependency".
const CLI::Validator kDependencyName(
    [](std::string& name) -> std::string {
      const char* why = shm::check_dependency_name(name);
      return why != nullptr ? "'" + name + "' " + why : "";
    },
    "", "NAME");

struct Options {
  std::string segment = ctl::default_segment_name();
  bool json = false;
  double interval_s = 1.0;
  ctl::StatusOptions status;
  std::string dependency;  // get
  unsigned frames = 0;     // top -n; 0: until q or a signal
  std::string force;       // breaker: open, closed, auto
  std::string pin;         // pin: a limit, or "off"
  double pin_for_s = 600;  // pin --for
};

// The first error writing the output (an errno value); 0 while all of it
// went out.
int g_output_error = 0;

void write_all(const std::string& text) {
  if ((std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) &&
      g_output_error == 0) {
    g_output_error = errno != 0 ? errno : EIO;
  }
}

// `code`, or kExitOutput when the output could not all be written (a full
// disk): a script must not take a missing or cut-off document, or a
// breaker's or a pin's lost confirmation, for bulkheadctl's answer.
int finish(int code) {
  if ((std::fflush(stdout) != 0 || std::ferror(stdout) != 0) && g_output_error == 0) {
    g_output_error = errno != 0 ? errno : EIO;
  }
  if (g_output_error == 0) return code;
  std::cerr << "bulkheadctl: cannot write the output: " << std::strerror(g_output_error) << "\n";
  return code == 0 ? kExitOutput : code;
}

// Two readings `interval_s` apart, of the segment under its name then
// (ctl::sample()).
ctl::Status sample(shm::Segment& segment, const Options& o) {
  return ctl::sample(
      segment, [&o] { std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s)); }, o.status);
}

int no_dependency(const Options& o) {
  std::cerr << "bulkheadctl: no dependency '" << o.dependency << "' in /dev/shm/" << o.segment
            << " (bulkheadctl status lists them)\n";
  return kExitNoDependency;
}

int run_status(shm::Segment& segment, const Options& o) {
  const ctl::Status st = sample(segment, o);
  write_all(o.json ? ctl::status_json(st) : ctl::status_text(st));
  // Patterns that match nothing are as a name get does not know.
  return !o.status.names.empty() && st.dependencies.empty() ? kExitNoDependency : 0;
}

int run_get(shm::Segment& segment, const Options& o) {
  if (ctl::read_snapshot(segment, ctl::monotonic_now_ns()).find(o.dependency) == nullptr) return no_dependency(o);
  const ctl::Status st = sample(segment, o);
  for (const ctl::DependencyStatus& d : st.dependencies) {
    if (d.now.name == o.dependency) {
      write_all(o.json ? ctl::dependency_json(st, d) : ctl::dependency_text(st, d));
      return 0;
    }
  }
  return no_dependency(o);  // not in a segment made anew meanwhile
}

int run_processes(const shm::Segment& segment, const Options& o) {
  const ctl::Snapshot s = ctl::read_snapshot(segment, ctl::monotonic_now_ns());
  write_all(o.json ? ctl::processes_json(s) : ctl::processes_text(s));
  return 0;
}

// --- breaker, pin -----------------------------------------------------------

// Attaches to write one word of a dependency's control line, `what` saying
// why in the error when the segment's permissions refuse.
shm::Segment attach_to_write(const Options& o, const std::string& what) {
  try {
    return shm::Segment::attach(o.segment, shm::Access::kReadWrite);
  } catch (const shm::SegmentError& e) {
    if (e.code() == EACCES) {
      throw shm::SegmentError(e.code(), std::string(e.what()) + " (" + what +
                                            " writes to the segment: run as a member of its group, as clients do)");
    }
    throw;
  }
}

// The control line of the dependency named in `o`, or null (said on stderr).
shm::DependencyControl* control_of(shm::Segment& segment, const Options& o) {
  const auto index = shm::find_dependency(segment, o.dependency);
  if (!index) {
    no_dependency(o);
    return nullptr;
  }
  return &segment.dependency(*index).control;
}

// When what bulkheadctl wrote takes effect: at the daemon's next tick, or
// when a daemon next starts if none runs on the segment now. A daemon that
// lives but has not ticked for longer than status calls stale (stopped,
// hung) is said to be so: its next tick may not come.
std::string when_applied(const shm::Segment& segment) {
  shm::ProcessSnapshot daemon = shm::read_daemon(segment.header());
  if (daemon.pid > 0 && shm::daemon_liveness(daemon, shm::own_pid_namespace()) != shm::Liveness::kDead) {
    // Relaxed: lone values; a tick an instant ago or not changes nothing.
    const shm::Header& h = segment.header();
    const std::optional<double> age_s =
        ctl::heartbeat_age_s(h.heartbeat.load(std::memory_order_relaxed),
                             h.heartbeat_ns.load(std::memory_order_relaxed), ctl::monotonic_now_ns());
    if (age_s && *age_s > ctl::StatusOptions{}.stale_after_s) {
      return "bulkheadd (pid " + std::to_string(daemon.pid) + ") has not ticked for " +
             std::to_string(static_cast<std::uint64_t>(*age_s)) + " s (stopped or hung?): it applies it at its " +
             "next tick";
    }
    return "bulkheadd applies it at its next tick";
  }
  return "no bulkheadd runs on /dev/shm/" + segment.name() + " now: the next one to start applies it";
}

// Writes the breaker override of one dependency: the daemon reads it every
// tick and holds the breaker open or closed until it is set back to auto.
// It lives in the segment, so it outlasts a daemon restart. Needs write
// access to the segment (its group, as clients have).
int run_breaker(const Options& o) {
  shm::Segment segment = attach_to_write(o, "forcing a breaker");
  shm::DependencyControl* control = control_of(segment, o);
  if (control == nullptr) return kExitNoDependency;
  const std::uint32_t value = o.force == "open" ? shm::kOverrideOpen
                              : o.force == "closed" ? shm::kOverrideClosed
                                                    : shm::kOverrideAuto;
  // Relaxed: a lone value the daemon reads each tick.
  control->breaker_override.store(value, std::memory_order_relaxed);
  std::cout << "breaker of " << o.dependency << ": override " << o.force
            << (value == shm::kOverrideAuto ? " (the config's force, else the outcomes, decide)" : "")
            << "; " << when_applied(segment) << "\n";
  return 0;
}

// Writes the limit pin of one dependency (shm::pin_word): the daemon
// publishes the pinned limit from its next tick until the pin ends, then
// clears it and hands the limit back to the policy. Like the
// breaker override it outlasts a daemon restart, and needs write access.
int run_pin(const Options& o) {
  std::uint32_t limit = 0;
  if (o.pin != "off") {
    const auto [end, ec] = std::from_chars(o.pin.data(), o.pin.data() + o.pin.size(), limit);
    if (ec != std::errc{} || end != o.pin.data() + o.pin.size() || limit < 1 || limit > shm::kMaxLimit) {
      std::cerr << "bulkheadctl pin: limit '" << o.pin << "': must be a number of calls in [1, " << shm::kMaxLimit
                << "], or off\n";
      return kExitUsage;
    }
  }
  shm::Segment segment = attach_to_write(o, "pinning a limit");
  if (segment.header().abi_minor < shm::kPinAbiMinor) {
    std::cerr << "bulkheadctl pin: /dev/shm/" << o.segment << " has segment ABI " << segment.header().abi_major
              << "." << segment.header().abi_minor
              << ", whose daemon does not read pins (4.1 and later do): upgrade bulkheadd\n";
    return kExitSegment;
  }
  shm::DependencyControl* control = control_of(segment, o);
  if (control == nullptr) return kExitNoDependency;
  // Relaxed: the daemon's flag word; it holds a pin past this to the most
  // too, should a reload give the dependency partitions later.
  if (limit > shm::kPartitionFieldMax &&
      (control->flags.load(std::memory_order_relaxed) & shm::kDependencyPartitioned) != 0) {
    std::cerr << "bulkheadctl pin: limit " << limit << ": " << o.dependency
              << " has partitions, whose limit is at most " << shm::kPartitionFieldMax << "\n";
    return kExitUsage;
  }
  if (limit == 0) {
    // Relaxed: a lone value the daemon reads each tick.
    control->limit_pin.store(0, std::memory_order_relaxed);
    std::cout << "limit of " << o.dependency
              << ": unpinned; bulkheadd hands it back to the policy at its next tick\n";
    return 0;
  }
  const auto seconds = static_cast<std::uint64_t>(std::ceil(o.pin_for_s));
  // Rounded up: the pin holds at least as long as asked, at most a second more.
  const std::uint64_t until_s = (ctl::monotonic_now_ns() + seconds * 1'000'000'000 + 999'999'999) / 1'000'000'000;
  control->limit_pin.store(shm::pin_word(limit, static_cast<std::uint32_t>(until_s)), std::memory_order_relaxed);
  std::cout << "limit of " << o.dependency << ": pinned at " << limit << " for " << ctl::describe_duration(seconds)
            << "; " << when_applied(segment) << " and hands the limit back to the policy when it ends"
            << " (`" << ctl::unpin_command(o.segment, o.segment == ctl::default_segment_name(), o.dependency)
            << "` ends it sooner)\n";
  return 0;
}

// --- top ------------------------------------------------------------------

volatile sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int) { g_stop = 1; }
// The terminal changed size (SIGWINCH): what is on the screen is redrawn
// to it at once, not at the next frame, an --interval away.
volatile sig_atomic_t g_resized = 0;
extern "C" void on_resize_signal(int) { g_resized = 1; }
// Ctrl-Z (SIGTSTP): the terminal is given back before top stops.
volatile sig_atomic_t g_suspended = 0;
extern "C" void on_suspend_signal(int) { g_suspended = 1; }

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
// termination signal). Calls `redraw` when the terminal changed size, and
// `suspend` at Ctrl-Z.
bool wait_or_quit(double seconds, bool keys, const std::function<void()>& redraw,
                  const std::function<void()>& suspend) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!g_stop) {
    if (g_suspended) {
      g_suspended = 0;
      suspend();
    }
    if (g_resized) {
      g_resized = 0;
      redraw();
    }
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
// lines, each ending in erase-to-end-of-line; then erase below. When the
// frame has more lines, the last row says how many are not shown.
std::string fit_to_screen(const std::string& frame) {
  winsize ws{};
  const bool known = ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0;
  const std::size_t columns = known ? ws.ws_col : 1000, rows = known ? ws.ws_row : 1000;
  std::size_t lines = static_cast<std::size_t>(std::count(frame.begin(), frame.end(), '\n'));
  if (!frame.empty() && frame.back() != '\n') ++lines;
  const bool cut = lines > rows && rows > 1;  // one row says so; a screen of one row has no room
  const std::size_t shown = cut ? rows - 1 : rows;
  std::string out = "\x1b[H";
  std::size_t start = 0, row = 0;
  const auto put = [&](std::string_view line) {
    out += std::string(line.substr(0, columns)) + "\x1b[K";
    if (++row < rows) out += "\n";  // the terminal adds the carriage return (ONLCR)
  };
  while (start < frame.size() && row < shown) {
    std::size_t end = frame.find('\n', start);
    if (end == std::string::npos) end = frame.size();
    put(std::string_view(frame).substr(start, end - start));
    start = end + 1;
  }
  if (cut) {
    put("... " + std::to_string(lines - shown) + " more lines: name PATTERNs, or --sort, choose what shows");
  }
  return out + "\x1b[J";
}

int run_top(shm::Segment segment, const Options& o) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(s, &sa, nullptr);  // no SA_RESTART: poll returns

  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  std::optional<TerminalGuard> terminal;
  std::string screen;  // what is shown, before fit_to_screen()
  if (tty) {
    sa.sa_handler = on_resize_signal;
    ::sigaction(SIGWINCH, &sa, nullptr);
    terminal.emplace();
    char interval[32];
    std::snprintf(interval, sizeof interval, "%g", o.interval_s);  // 100, not "100."
    screen = "bulkheadctl top: /dev/shm/" + o.segment + ": sampling for " + interval + " s ...";
    write_all(fit_to_screen(screen));
  }
  const auto redraw = [&] { write_all(fit_to_screen(screen)); };
  // Ctrl-Z: the shell gets its screen and the terminal's modes back while
  // top is stopped, and top takes them again, and redraws, when continued.
  const auto suspend = [&] {
    terminal.reset();
    struct sigaction stop {};
    stop.sa_handler = SIG_DFL;
    sigemptyset(&stop.sa_mask);
    ::sigaction(SIGTSTP, &stop, nullptr);
    ::raise(SIGTSTP);  // stops here until SIGCONT (the kernel drops it in an orphaned process group)
    sa.sa_handler = on_suspend_signal;
    ::sigaction(SIGTSTP, &sa, nullptr);
    terminal.emplace();
    redraw();
  };
  if (tty) {
    sa.sa_handler = on_suspend_signal;
    ::sigaction(SIGTSTP, &sa, nullptr);
  }
  const bool keys = tty && ::isatty(STDIN_FILENO) != 0;
  ctl::Snapshot previous = ctl::read_snapshot(segment, ctl::monotonic_now_ns());
  // Until q, a signal or -n frames; or until the output fails (no terminal
  // to quit from).
  for (unsigned frame = 0; (o.frames == 0 || frame < o.frames) && g_output_error == 0; ++frame) {
    if (wait_or_quit(o.interval_s, keys, redraw, suspend)) break;
    if (ctl::segment_replaced(segment)) {
      // Rates start over on the segment under the name, if there is one.
      const std::string title = "bulkheadctl top - " + clock_utc() + (tty ? " - q quits" : "") + "\n";
      try {
        segment = ctl::open_read_only(o.segment);
        previous = ctl::read_snapshot(segment, ctl::monotonic_now_ns());
        screen = title + "/dev/shm/" + o.segment + " was made anew: sampling it\n";
      } catch (const shm::SegmentError& e) {
        screen = title + "bulkheadctl: " + e.what() + " (removed since top began; it looks again each interval)\n";
      }
      write_all(tty ? fit_to_screen(screen) : screen + "\n");
      continue;
    }
    ctl::Snapshot now = ctl::read_snapshot(segment, ctl::monotonic_now_ns());
    ctl::Snapshot next = now;
    const ctl::Status st = ctl::derive_status(std::move(previous), std::move(now), o.status);
    previous = std::move(next);
    const std::string title = "bulkheadctl top - " + clock_utc() + (tty ? " - q quits" : "") + "\n";
    screen = title + ctl::status_text(st);
    write_all(tty ? fit_to_screen(screen) : screen + "\n");
  }
  return 0;
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app{
      "bulkheadctl: inspect a live bulkhead segment (read-only; works with bulkheadd down);\n"
      "force a dependency's circuit breaker (`breaker`) or pin its limit for a while (`pin`):\n"
      "each writes one word the daemon reads."};
  app.footer(
      "Exit status: 0 done; 1 the segment is missing, unreadable or not a valid segment, or the output\n"
      "could not be written; 2 usage; 3 get, breaker, pin: no dependency of that name (status: none\n"
      "matches). Output and JSON schema: docs/operations.md, \"bulkheadctl\".");
  app.require_subcommand(1);
  app.fallthrough();
  app.add_option("--segment", o.segment,
                 "segment name, /dev/shm/NAME (default: $BULKHEAD_SEGMENT, else \"bulkhead\")")
      ->type_name("NAME");
  app.set_version_flag("--version", BULKHEAD_VERSION);

  auto add_interval = [&](CLI::App* sub) {
    sub->add_option("--interval,-i", o.interval_s,
                    "seconds between the two readings that rates and latency come from (0.05 to 3600)")
        ->check(kFinite)
        ->check(CLI::Range(0.05, 3600.0).description(""))
        ->type_name("SECONDS")
        ->capture_default_str();
    sub->add_option("--stale-after", o.status.stale_after_s,
                    "call the daemon's heartbeat stale when older than this, in seconds (0.01 to 86400)")
        ->check(kFinite)
        ->check(CLI::Range(0.01, 86400.0).description(""))
        ->type_name("SECONDS")
        ->capture_default_str();
  };
  // Which dependencies, in which order: status and top.
  auto add_selection = [&](CLI::App* sub, ctl::StatusOrder default_order) {
    sub->add_option("pattern", o.status.names,
                    "only the dependencies whose name one of these shell patterns matches (* ? [...]; quote them)")
        ->type_name("PATTERN");
    // The subcommand's own default, set as it starts to parse: status and
    // top share o.status.
    sub->preparse_callback([&o, default_order](std::size_t) { o.status.order = default_order; });
    sub->add_option_function<std::string>(
           "--sort", [&o](const std::string& name) { o.status.order = *ctl::parse_status_order(name); },
           "order of the rows: slot (as claimed), name, or a column, largest first: limit, inflight, "
           "admitted, rejected (every refusal), p99")
        ->check(CLI::IsMember(ctl::status_order_names()).description(""))
        ->type_name("ORDER")
        ->default_str(ctl::status_order_name(default_order));
  };
  CLI::App* status = app.add_subcommand(
      "status", "limits, in-flight, latency and rates of every dependency; the daemon's health");
  add_interval(status);
  add_selection(status, ctl::StatusOrder::kSlot);
  status->add_flag("--json", o.json, "JSON for scripts (schema in docs/operations.md)");

  CLI::App* top = app.add_subcommand("top", "status, redrawn every interval; q or Ctrl-C quits");
  add_interval(top);
  add_selection(top, ctl::StatusOrder::kInflight);
  top->add_option("-n,--iterations", o.frames, "stop after N frames (default: run until q)")->type_name("N");

  CLI::App* get = app.add_subcommand("get", "one dependency in detail: counters, percentiles, holders");
  get->add_option("name", o.dependency, "dependency name")->required()->type_name("NAME")->check(kDependencyName);
  add_interval(get);
  get->add_flag("--json", o.json, "JSON for scripts (schema in docs/operations.md)");

  CLI::App* processes = app.add_subcommand(
      "processes", "the process table: pid, start time, liveness lock, alive or dead, permits held");
  processes->add_flag("--json", o.json, "JSON for scripts (schema in docs/operations.md)");

  CLI::App* breaker = app.add_subcommand(
      "breaker", "force a dependency's circuit breaker open or closed, or hand it back to the daemon (auto)");
  breaker->add_option("name", o.dependency, "dependency name")->required()->type_name("NAME")->check(kDependencyName);
  breaker->add_option("state", o.force, "open, closed, or auto")
      ->required()
      ->check(CLI::IsMember({"open", "closed", "auto"}).description(""))
      ->type_name("STATE");

  CLI::App* pin = app.add_subcommand(
      "pin", "hold a dependency's limit at LIMIT for a while, whatever its policy says; off hands it back");
  pin->add_option("name", o.dependency, "dependency name")->required()->type_name("NAME")->check(kDependencyName);
  pin->add_option("limit", o.pin, "calls admitted at once, host-wide (1 to 1000000), or off")
      ->required()
      ->type_name("LIMIT|off");
  pin->add_option("--for", o.pin_for_s, "how long the pin holds: 90s, 15m, 2h, 1d (plain: seconds; at most 7d)")
      ->transform(CLI::AsNumberWithUnit(std::map<std::string, double>{{"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}},
                                        CLI::AsNumberWithUnit::CASE_SENSITIVE)
                      .description(""))
      ->check(kFinite)  // "nan s" is NaN seconds
      ->check(CLI::Range(1.0, static_cast<double>(shm::kMaxPinSeconds)).description(""))
      ->type_name("DURATION")
      ->default_str("10m");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  // Checked here rather than by --segment's validator: the name may come
  // from the environment.
  if (const char* why = shm::check_segment_name(o.segment)) {
    std::cerr << "bulkheadctl: " << shm::name_error("segment name", o.segment, why)
              << (app.count("--segment") == 0 ? " (from $BULKHEAD_SEGMENT)" : "") << "\n";
    return kExitUsage;
  }

  try {
    if (*breaker) return run_breaker(o);
    if (*pin) return run_pin(o);
    shm::Segment segment = ctl::open_read_only(o.segment);
    if (*status) return run_status(segment, o);
    if (*top) return run_top(std::move(segment), o);
    if (*get) return run_get(segment, o);
    return run_processes(segment, o);
  } catch (const shm::SegmentError& e) {
    std::cerr << "bulkheadctl: " << e.what() << "\n";
    return kExitSegment;
  }
}

}  // namespace

int main(int argc, char** argv) { return finish(run(argc, argv)); }
