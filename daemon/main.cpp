// bulkheadd: learns a concurrency limit per dependency from what every
// process on the host observes, and publishes the limits in shared memory.
//
// main owns the order: config, logging, segment, metrics, control loop,
// then the tick loop; on exit the same in reverse. Signals are blocked and
// taken synchronously with sigtimedwait() between ticks, so no handler runs
// inside the loop: SIGTERM/SIGINT stop, SIGHUP reloads.
//
// systemd (Type=notify, systemd/bulkheadd.service): READY=1 after the first
// tick, WATCHDOG=1 every tick, RELOADING=1 + MONOTONIC_USEC= then READY=1
// around a reload, STOPPING=1 on the way out, STATUS= a one-line summary.
// Without NOTIFY_SOCKET these are no-ops.
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon/config.hpp"
#include "daemon/control_loop.hpp"
#include "daemon/metrics.hpp"
#include "shm/cpus.hpp"
#include "shm/pid_namespace.hpp"
#include "shm/segment.hpp"

namespace {

using bulkhead::daemon::Config;
using bulkhead::daemon::ConfigError;

// The exit status of a wrong config (the file, or a command-line value that
// overrides one of its keys): sysexits' EX_CONFIG, which systemd shows as
// "status=78/CONFIG" and bulkheadd.service's RestartPreventExitStatus= does
// not restart on, since a restart would find the same config (a missing or
// unreadable file included). 1 is any other failure at start-up, which a
// restart may get past (a read that fails with EIO, a group database that
// does not answer).
constexpr int kExitConfig = 78;
using bulkhead::daemon::DaemonConfig;
using bulkhead::daemon::kAutoStripes;
namespace shm = bulkhead::shm;

struct Options {
  std::string config_path;
  std::string check_path;
  std::optional<std::string> segment;
  std::optional<std::string> metrics_listen;
  bool recreate_segment = false;
};

std::uint64_t monotonic_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

// The config file (or the embedded one) with the command line's overrides.
// For a reload, `running` is the config in force: see parse_config().
Config load(const Options& options, const DaemonConfig* running = nullptr) {
  Config config = options.config_path.empty()
                      ? bulkhead::daemon::parse_config(bulkhead::daemon::embedded_default_config(),
                                                       "<embedded default>", running)
                      : bulkhead::daemon::load_config_file(options.config_path, running);
  if (options.segment) {
    if (const char* why = shm::check_segment_name(*options.segment)) {
      throw ConfigError(shm::name_error("--segment:", *options.segment, why));
    }
    config.daemon.segment = *options.segment;
  }
  if (options.metrics_listen) {
    if (const char* why = bulkhead::daemon::check_listen_address(*options.metrics_listen)) {
      throw ConfigError("--metrics-listen: '" + *options.metrics_listen + "': " + why);
    }
    config.daemon.metrics_listen = *options.metrics_listen;
  }
  return config;
}

// Under systemd, standard error is a stream into the journal, which stores
// every line at the unit's SyslogLevel= (info) unless the line starts with
// a syslog priority, "<4>" (systemd.exec(5), SyslogLevelPrefix=): without
// one, `journalctl -p warning` would show none of the daemon's warnings and
// errors. systemd says so through JOURNAL_STREAM, "DEVICE:INODE" of that
// stream; a redirected stderr (a test, a shell) keeps the plain lines.
bool stderr_is_journal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  unsigned long long dev = 0, ino = 0;
  struct stat st {};
  return stream != nullptr && std::sscanf(stream, "%llu:%llu", &dev, &ino) == 2 &&
         ::fstat(STDERR_FILENO, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

// "<N>", the syslog priority of the message's level (%* in the pattern).
class SyslogPriority final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    // trace, debug, info, warn, err, critical, off
    static constexpr char kPriority[] = {'7', '7', '6', '4', '3', '2', '6'};
    const auto level = static_cast<std::size_t>(msg.level);
    dest.push_back('<');
    dest.push_back(level < sizeof kPriority ? kPriority[level] : '6');
    dest.push_back('>');
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<SyslogPriority>(); }
};

void set_log_format() {
  if (!stderr_is_journal()) {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    return;
  }
  // The journal adds its own timestamp.
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<SyslogPriority>('*').set_pattern("%*%l %v");
  spdlog::set_formatter(std::move(formatter));
}

void set_log_level(const std::string& level) {
  spdlog::set_level(spdlog::level::from_str(level));
}

// No such group is the config's fault; a lookup that failed (the group
// database unreachable: LDAP, sssd) is the machine's, and a restart may
// get past it.
std::optional<gid_t> segment_group(const Config& config) {
  const std::string& name = config.daemon.segment_group;
  if (name.empty()) return std::nullopt;
  group entry{};
  group* found = nullptr;
  std::vector<char> buffer(16 * 1024);
  int error = 0;
  while ((error = ::getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found)) == ERANGE) {
    buffer.resize(buffer.size() * 2);
  }
  // Some NSS modules say "no such group" with ENOENT or ESRCH
  // (getgrnam(3)), where glibc's files module returns 0 and no entry.
  const bool not_found = error == ENOENT || error == ESRCH;
  const std::string where =
      config.source +
      (config.daemon.segment_group_line != 0 ? ":" + std::to_string(config.daemon.segment_group_line) : "");
  if (error != 0 && !not_found) {
    throw std::system_error(error, std::generic_category(),
                            where + ": daemon.segment_group: cannot look up group '" + name + "'");
  }
  if (not_found || found == nullptr) {
    throw ConfigError(where + ": daemon.segment_group: no group named '" + name + "'");
  }
  return found->gr_gid;
}

// Reserves an adopted segment's memory, which a daemon with segment_reserve
// = false (or of a version before it) may have left to first touches. Its
// clients already run on it, so a segment that cannot be reserved is still
// adopted: without a daemon they would run on stale limits, and the risk
// is the same.
void reserve_adopted(const shm::Segment& segment, const Config& config) {
  if (!config.daemon.segment_reserve) return;
  try {
    segment.reserve();
  } catch (const shm::SegmentError& e) {
    spdlog::error("{}; adopted as it is: a process whose first write to one of its untouched pages meets the "
                  "full /dev/shm dies of SIGBUS; free space there and restart bulkheadd",
                  e.what());
  }
}

// A group's name for logs, or its number.
std::string group_name(gid_t gid) {
  const group* g = ::getgrgid(gid);
  return g != nullptr ? g->gr_name : std::to_string(gid);
}

// Gives an adopted segment the config's mode and group (the daemon's own
// when segment_group is unset), which a new one gets at creation: a restart
// with a new segment_mode, segment_group or systemd Group= applies them. A
// change this process may not make (under bulkheadd.service, any change of
// group: its filter refuses chown) is logged, and the segment adopted as it
// is; or, with `recreate` and a segment this process owns (and so may
// remove), false is returned and the segment is made anew.
bool apply_access_adopted(const shm::Segment& segment, const shm::CreateOptions& create, bool recreate) {
  const shm::Segment::FileAccess was = segment.file_access();
  const gid_t group = create.group.value_or(::getegid());
  if (was.mode == create.mode && was.group == group) return true;
  const std::string change = fmt::format("mode {:04o} -> {:04o}, group {} -> {}", was.mode, create.mode,
                                         group_name(was.group), group_name(group));
  try {
    segment.set_file_access(create.mode, group);
    spdlog::info("segment /dev/shm/{}: {} (the config's)", segment.name(), change);
  } catch (const shm::SegmentError& e) {
    const bool owner = was.owner == ::geteuid();
    if (recreate && owner) {
      spdlog::warn("{}; cannot give it {}", e.what(), change);
      return false;
    }
    // Only the owner (or root) may remove it from /dev/shm, which is sticky.
    const std::string remedy =
        owner ? fmt::format("run with --recreate-segment (under systemd: stop it, remove /dev/shm/{}, start it)",
                            segment.name())
              : fmt::format("run bulkheadd as the segment's owner (uid {}), or have root remove /dev/shm/{} "
                            "while no client uses it",
                            was.owner, segment.name());
    spdlog::warn("{}; kept {:04o} and group {} rather than {}: {}", e.what(), was.mode, group_name(was.group), change,
                 remedy);
  }
  return true;
}

shm::Segment create_segment(const std::string& name, const shm::CreateOptions& options) {
  try {
    return shm::Segment::create(name, options);
  } catch (const shm::SegmentError& e) {
    if (e.code() != ENOSPC) throw;
    throw std::runtime_error(std::string(e.what()) +
                             "; free space there, or set daemon.segment_reserve = false to leave each page to its "
                             "first touch (a process that then finds /dev/shm full dies of SIGBUS)");
  }
}

// Creates the segment, or adopts the one a previous daemon left after
// checking that it is sound, has the configured capacities and that no
// other daemon runs on it. With stats_stripes = "auto", any stripe count
// is the configured one for a segment to adopt (the host's CPUs may have
// changed, or the segment come from a daemon configured otherwise); a new
// segment gets stripes_for() the host.
shm::Segment open_segment(const Config& config, bool recreate) {
  const std::string& name = config.daemon.segment;
  shm::Capacities wanted{config.daemon.max_dependencies, config.daemon.max_processes,
                         bulkhead::daemon::stripes_for(config.daemon, shm::possible_cpus()),
                         config.daemon.queue_slots};
  const shm::CreateOptions create{wanted, config.daemon.segment_mode, segment_group(config),
                                  config.daemon.segment_reserve};
  try {
    shm::Segment segment = shm::Segment::attach(name, shm::Access::kReadWrite);
    const shm::Header& h = segment.header();
    // The daemon it names, found in its pid namespace when that is
    // another than this one's (a daemon in a container, or this one), or
    // in this one when an older daemon left another's namespace there.
    shm::ProcessSnapshot before = shm::read_daemon(h);
    const std::int32_t pid = before.pid;
    const shm::PidNamespace own = shm::own_pid_namespace();
    pid_t here = 0;
    const shm::Liveness other = pid > 0 ? shm::daemon_liveness(before, own, &here) : shm::Liveness::kDead;
    const bool foreign = shm::foreign_pid_namespace(before.pid_ns, own);
    const std::string who = foreign ? std::to_string(pid) + " in pid:[" + std::to_string(before.pid_ns.inode) + "]"
                                    : std::to_string(pid);
    if (other == shm::Liveness::kAlive && here != ::getpid()) {
      throw std::runtime_error("segment /dev/shm/" + name + ": another bulkheadd (pid " + who +
                               (foreign ? ", " + std::to_string(here) + " here" : std::string()) +
                               ") is running on it");
    }
    if (other == shm::Liveness::kUnknown) {
      spdlog::warn("segment /dev/shm/{}: cannot tell whether its daemon, pid {}, still runs (/proc hides it); "
                   "adopting it",
                   name, who);
    }
    if (config.daemon.stats_stripes == kAutoStripes) {
      wanted.stats_stripes = segment.capacities().stats_stripes;
    }
    if (segment.capacities() == wanted) {
      spdlog::info("adopted segment /dev/shm/{} left by {} (heartbeat {})", name,
                   pid > 0 ? "pid " + who : std::string("a daemon that stopped cleanly"),
                   h.heartbeat.load(std::memory_order_relaxed));
      // One an older minor made: this daemon reads the fields the newer
      // minors added, in space the older one left zero, so the segment now
      // has this minor (bulkheadctl checks it before it writes a limit pin).
      if (h.abi_minor < shm::kAbiMinor) {
        spdlog::info("segment /dev/shm/{}: ABI {}.{} raised to {}.{}", name, h.abi_major, h.abi_minor,
                     shm::kAbiMajor, shm::kAbiMinor);
        segment.header().abi_minor = shm::kAbiMinor;
      }
      if (apply_access_adopted(segment, create, recreate)) {
        reserve_adopted(segment, config);
        return segment;
      }
    } else if (!recreate) {
      throw std::runtime_error(
          "segment /dev/shm/" + name + " has other capacities than the config (" +
          std::to_string(h.max_dependencies) + " dependencies, " + std::to_string(h.max_processes) +
          " processes, " + std::to_string(h.stats_stripes) + " stripes, " +
          std::to_string(h.queue_slots) + " queue slots): stop its clients and run with --recreate-segment");
    }
  } catch (const shm::SegmentError& e) {
    if (e.code() == ENOENT) return create_segment(name, create);
    if (!recreate) {
      throw std::runtime_error(std::string(e.what()) +
                               "; not touching it (run with --recreate-segment to replace it)");
    }
  }
  spdlog::warn("replacing segment /dev/shm/{} (--recreate-segment)", name);
  shm::Segment::remove(name);
  return create_segment(name, create);
}

// The segment and the metrics endpoint live as long as the process: a
// reload keeps their running settings, and says so when it asked for others.
// A capacity takes more than a restart: the next start finds the segment
// with the running ones and refuses to adopt it (exit 1, which systemd
// retries to no avail), so the warning says what does change it.
void keep_process_lifetime_settings(const Config& running, Config& next, std::uint32_t segment_stripes) {
  auto keep = [](const char* key, auto& wanted, const auto& current, const std::string& then = {}) {
    if (wanted != current) {
      spdlog::warn("reload: daemon.{} changes only on restart; keeping the running value{}", key, then);
    }
    wanted = current;
  };
  // Unless the file names another segment too: the restart makes that one,
  // with the file's capacities.
  const std::string remake =
      next.daemon.segment != running.daemon.segment
          ? std::string()
          : "; a restart refuses the segment, made with the running capacities: stop its clients and restart with "
            "--recreate-segment (under systemd: stop bulkheadd, remove /dev/shm/" + running.daemon.segment +
                ", start it)";
  keep("segment", next.daemon.segment, running.daemon.segment);
  keep("max_dependencies", next.daemon.max_dependencies, running.daemon.max_dependencies, remake);
  keep("max_processes", next.daemon.max_processes, running.daemon.max_processes, remake);
  // "auto" adopts a segment of any stripes.
  const std::uint32_t stripes = next.daemon.stats_stripes;
  keep("stats_stripes", next.daemon.stats_stripes, running.daemon.stats_stripes,
       stripes == kAutoStripes || stripes == segment_stripes ? std::string() : remake);
  keep("queue_slots", next.daemon.queue_slots, running.daemon.queue_slots, remake);
  keep("segment_group", next.daemon.segment_group, running.daemon.segment_group);
  keep("segment_mode", next.daemon.segment_mode, running.daemon.segment_mode);
  keep("segment_reserve", next.daemon.segment_reserve, running.daemon.segment_reserve);
  keep("metrics_listen", next.daemon.metrics_listen, running.daemon.metrics_listen);
}

// The one line `systemctl status` shows: what the daemon publishes, and a
// rejected reload until a good one replaces it.
std::string status_line(const bulkhead::daemon::ControlLoop& loop, const Config& config,
                        const shm::Header& header, const std::string& reload_problem) {
  std::uint64_t inflight = 0;
  std::size_t pinned = 0;
  const auto view = loop.view();
  for (const auto& d : view) {
    inflight += d.inflight;
    pinned += d.pinned != 0;
  }
  std::string line = std::to_string(view.size()) + " dependencies, " + std::to_string(inflight) +
                     " calls in flight on /dev/shm/" + config.daemon.segment + ", config generation " +
                     std::to_string(header.config_generation.load(std::memory_order_relaxed));
  if (pinned != 0) {
    line += "; " + std::to_string(pinned) + (pinned == 1 ? " limit" : " limits") +
            " pinned by an operator (bulkheadctl pin)";
  }
  // What a full table refuses happens in the clients: say it here too.
  const auto tables = loop.occupancy();
  if (tables.dependencies == tables.max_dependencies) {
    line += "; dependency table full (" + std::to_string(tables.max_dependencies) + "): new names refused";
  }
  if (tables.processes == tables.max_processes) {
    line += "; process table full (" + std::to_string(tables.max_processes) + "): new processes refused";
  }
  if (!reload_problem.empty()) {
    line += "; reload rejected: " + reload_problem.substr(0, reload_problem.find('\n'));
  }
  return line;
}

// WatchdogSec= must leave room for a few ticks: systemd kills a daemon
// whose WATCHDOG=1 is late.
void warn_if_watchdog_too_short(const Config& config) {
  std::uint64_t watchdog_us = 0;
  if (sd_watchdog_enabled(0, &watchdog_us) <= 0) return;
  const auto tick_us = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(config.daemon.tick).count());
  if (tick_us * 3 > watchdog_us) {
    spdlog::warn("WatchdogSec= ({} ms) is less than three ticks ({} ms each): raise it",
                 watchdog_us / 1000, tick_us / 1000);
  }
}

int run(const Options& options) {
  Config config = load(options);
  set_log_level(config.daemon.log_level);

  // Block the signals we take synchronously before any thread starts (the
  // metrics server's threads inherit the mask).
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  shm::Segment segment = open_segment(config, options.recreate_segment);
  {
    // What the capacities cost, for capacity planning (docs/operations.md).
    const shm::Capacities c = segment.capacities();
    const bool automatic = config.daemon.stats_stripes == kAutoStripes;
    const std::uint64_t reserved = segment.reserved_bytes();
    spdlog::info("segment /dev/shm/{}: {} ({}) for {} dependencies ({} statistics stripes{}, {} queue "
                 "places each) and {} processes",
                 config.daemon.segment, shm::mebibytes(segment.size()),
                 reserved >= segment.size() ? "reserved in /dev/shm"
                                            : "not reserved: " + shm::mebibytes(reserved) + " in memory",
                 c.max_dependencies, c.stats_stripes,
                 automatic ? " (\"auto\": " + std::to_string(shm::possible_cpus()) + " possible CPUs)"
                           : std::string(),
                 c.queue_slots, c.max_processes);
  }
  shm::Header& header = segment.header();
  shm::publish_daemon(header);

  std::unique_ptr<bulkhead::daemon::Metrics> metrics;
  if (!config.daemon.metrics_listen.empty()) {
    try {
      metrics = std::make_unique<bulkhead::daemon::Metrics>(config.daemon.metrics_listen);
    } catch (const std::exception& e) {
      throw std::runtime_error("metrics: cannot listen on " + config.daemon.metrics_listen + ": " +
                               e.what());
    }
    header.metrics_port.store(metrics->port(), std::memory_order_relaxed);
    spdlog::info("metrics on http://{}:{}/metrics",
                 config.daemon.metrics_listen.substr(0, config.daemon.metrics_listen.rfind(':')),
                 metrics->port());
  } else {
    header.metrics_port.store(0, std::memory_order_relaxed);
  }

  bulkhead::daemon::ControlLoop loop(segment, config, metrics.get());
  spdlog::info("bulkheadd {} on /dev/shm/{}: {} configured dependencies, {} patterns, tick {} ms", BULKHEAD_VERSION,
               config.daemon.segment, config.dependencies.size(), config.patterns.size(), config.daemon.tick.count());
  warn_if_watchdog_too_short(config);
  for (const std::string& warning : config.warnings) spdlog::warn("{}", warning);

  bool ready = false;
  std::string reload_problem;  // the last rejected reload's reason, until one applies
  std::uint64_t next_status_ns = 0;
  std::uint64_t next_tick = monotonic_ns();
  for (;;) {
    // Signals first, with no wait when a tick is due: on a host whose ticks
    // take longer than tick_ms, a wait only between ticks would never come,
    // and SIGTERM and SIGHUP would wait for it (while WATCHDOG=1 went on).
    const std::uint64_t before = monotonic_ns();
    const std::uint64_t wait = next_tick > before ? next_tick - before : 0;
    const timespec timeout{static_cast<time_t>(wait / 1'000'000'000u),
                           static_cast<long>(wait % 1'000'000'000u)};
    const int sig = sigtimedwait(&signals, nullptr, &timeout);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("{}: stopping", strsignal(sig));
      break;
    }
    if (sig == SIGHUP) {
      // systemd >= 253 wants the time the reload started with RELOADING=1.
      sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading %s",
                 static_cast<unsigned long long>(monotonic_ns() / 1000u), config.source.c_str());
      try {
        Config next = load(options, &config.daemon);
        keep_process_lifetime_settings(config, next, segment.capacities().stats_stripes);
        loop.apply(next);
        config = std::move(next);
        set_log_level(config.daemon.log_level);
        for (const std::string& warning : config.warnings) spdlog::warn("{}", warning);
        if (metrics) metrics->count_reload(true);
        reload_problem.clear();
        spdlog::info("reloaded {} (generation {})", config.source,
                     header.config_generation.load(std::memory_order_relaxed));
      } catch (const std::exception& e) {
        if (metrics) metrics->count_reload(false);
        reload_problem = e.what();
        spdlog::error("reload rejected, keeping the running config: {}", e.what());
      }
      sd_notifyf(0, "READY=1\nSTATUS=%s", status_line(loop, config, header, reload_problem).c_str());
    }
    const std::uint64_t now = monotonic_ns();
    if (now >= next_tick) {
      loop.tick(now);
      const std::uint64_t spent = monotonic_ns() - now;
      if (metrics) {
        metrics->observe_tick(static_cast<double>(spent) / 1e9);
        metrics->trim_after_scrape(now + spent);
      }
      // READY=1 once the segment carries the first tick's limits and
      // heartbeat; then WATCHDOG=1 every tick, with a fresh STATUS= line at
      // most once a second.
      if (now >= next_status_ns) {
        const std::string status = status_line(loop, config, header, reload_problem);
        sd_notifyf(0, "%sWATCHDOG=1\nSTATUS=%s", ready ? "" : "READY=1\n", status.c_str());
        ready = true;
        next_status_ns = now + 1'000'000'000u;
      } else {
        sd_notify(0, "WATCHDOG=1");
      }
      const auto tick_ns = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(config.daemon.tick).count());
      next_tick += tick_ns;
      if (next_tick <= now) next_tick = now + tick_ns;  // fell behind: do not burst
    }
  }

  sd_notify(0, "STOPPING=1\nSTATUS=stopping");
  shm::withdraw_daemon(header);
  // The segment stays: clients keep the last limits, and the next daemon
  // adopts it.
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bulkheadd: host-wide adaptive concurrency limits"};
  Options options;
  // An empty path would mean "not given": the embedded config, or no check
  // but a daemon started. A script's empty variable is refused instead.
  const CLI::Validator not_empty([](std::string& path) { return path.empty() ? "must not be empty" : ""; },
                                 "", "NOT_EMPTY");
  app.add_option("--config,-c", options.config_path, "TOML config file (default: the embedded one)")
      ->type_name("FILE")
      ->check(not_empty);
  app.add_option("--check-config", options.check_path, "validate a config file and exit")
      ->type_name("FILE")
      ->check(not_empty);
  app.add_option("--segment", options.segment, "segment name, /dev/shm/NAME, overriding daemon.segment")
      ->type_name("NAME");
  app.add_option("--metrics-listen", options.metrics_listen,
                 "where /metrics listens, overriding daemon.metrics_listen (\"\" turns it off)")
      ->type_name("HOST:PORT");
  app.add_flag("--recreate-segment", options.recreate_segment,
               "replace a segment that cannot be adopted (corrupt, other ABI or capacities) or be given the "
               "configured mode and group");
  app.set_version_flag("--version", BULKHEAD_VERSION);
  CLI11_PARSE(app, argc, argv);

  auto logger = spdlog::stderr_color_mt("bulkheadd");
  spdlog::set_default_logger(logger);
  set_log_format();

  if (!options.check_path.empty()) {
    try {
      // With the command line's overrides, as a start would take them.
      Options checked = options;
      checked.config_path = options.check_path;
      const Config c = load(checked);
      segment_group(c);  // a group the start would not find
      const auto count = [](std::size_t n, const char* one, const char* many) {
        return std::to_string(n) + " " + (n == 1 ? one : many);
      };
      for (const std::string& warning : c.warnings) std::cerr << "warning: " << warning << "\n";
      std::cout << c.source << ": ok (" << count(c.dependencies.size(), "dependency", "dependencies")
                << (c.patterns.empty() ? "" : ", " + count(c.patterns.size(), "pattern", "patterns")) << ")\n";
      return 0;
    } catch (const ConfigError& e) {
      std::cerr << e.what() << "\n";
      return kExitConfig;
    } catch (const std::exception& e) {
      std::cerr << e.what() << "\n";
      return 1;
    }
  }
  try {
    return run(options);
  } catch (const ConfigError& e) {
    spdlog::critical("{}", e.what());
    return kExitConfig;
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
    return 1;
  }
}
