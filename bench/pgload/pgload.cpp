// bulkhead-pgload: open-loop load on a real PostgreSQL server, through
// bulkhead or not (issue 7, item 4; scripts/pg-overload.sh runs it).
//
//   bulkhead-pgload setup --conninfo C [--rows N]
//       creates the table the queries read (N rows, a primary key).
//   bulkhead-pgload calibrate --conninfo C [--step-seconds S] [--max-concurrency M]
//       closed-loop sweep: c = 1, 2, 3, ... connections each sending the
//       next query as soon as the last one answers; prints throughput and
//       latency per c, then one line "capacity_qps=... knee=... ..." with
//       the peak throughput and the smallest c that reaches 95% of it.
//   bulkhead-pgload run --conninfo C --capacity QPS --out PREFIX [options]
//       forked processes send Poisson arrivals at profile(t) x QPS, each on
//       an idle connection of its own pool, with a deadline; writes
//       PREFIX.csv (one line a second) and prints a summary.
//
// The query: a group-by over a range of 15000 rows found through the
// primary key (a few ms of one core). "The server made slower" is a plan
// regression done to the server, not to the client: ALTER SYSTEM turns
// index and bitmap scans off and the server reloads its config, so every
// query reads the whole table (about 4x the cost), until ALTER SYSTEM
// RESET puts the index back.
//
// A query that has no answer at its deadline (--timeout-ms after its
// arrival) is a timeout: the caller gives up at once (its bulkhead permit
// is released as dropped) and the server stops it by itself, since every
// connection runs with statement_timeout at the same value; the work it
// did is wasted. Its connection returns to the pool when the server's
// cancellation arrives.
#include <libpq-fe.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bulkhead/bulkhead.h"

namespace {

constexpr int kRangeRows = 15000;  // rows one query aggregates
constexpr const char* kQuery =
    "SELECT g, count(*), sum(v) FROM items WHERE k BETWEEN $1 AND $1 + 15000 "
    "GROUP BY g ORDER BY 3 DESC LIMIT 5";

std::int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bulkhead-pgload: %s\n", what.c_str());
  std::exit(2);
}

// --key value arguments.
class Args {
 public:
  Args(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) {
      std::string key = argv[i];
      if (key.rfind("--", 0) != 0 || i + 1 >= argc) die("expected --key value, got '" + key + "'");
      values_.emplace(key.substr(2), argv[++i]);
    }
  }
  // A required option.
  std::string str(const std::string& key) {
    auto it = values_.find(key);
    if (it == values_.end()) die("missing --" + key);
    used_.push_back(key);
    return it->second;
  }
  std::string str(const std::string& key, const std::string& fallback) {
    return values_.count(key) ? str(key) : fallback;
  }
  double num(const std::string& key, double fallback) {
    auto it = values_.find(key);
    if (it == values_.end()) return fallback;
    used_.push_back(key);
    char* end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end != '\0') die("--" + key + ": not a number: '" + it->second + "'");
    return v;
  }
  std::vector<std::string> all(const std::string& key) {
    std::vector<std::string> out;
    for (auto [it, end] = values_.equal_range(key); it != end; ++it) out.push_back(it->second);
    used_.push_back(key);
    return out;
  }
  void check_all_used() {
    for (const auto& [k, v] : values_)
      if (std::find(used_.begin(), used_.end(), k) == used_.end()) die("unknown option --" + k);
  }

 private:
  std::multimap<std::string, std::string> values_;
  std::vector<std::string> used_;
};

PGconn* connect_or_die(const std::string& conninfo) {
  PGconn* c = PQconnectdb(conninfo.c_str());
  if (PQstatus(c) != CONNECTION_OK) die("cannot connect (" + conninfo + "): " + PQerrorMessage(c));
  return c;
}

void exec_or_die(PGconn* c, const std::string& sql) {
  PGresult* r = PQexec(c, sql.c_str());
  const auto st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) die(sql + ": " + PQresultErrorMessage(r));
  PQclear(r);
}

// ---------------------------------------------------------------- setup

int cmd_setup(Args& args) {
  const std::string conninfo = args.str("conninfo");
  const long rows = static_cast<long>(args.num("rows", 100000));
  args.check_all_used();
  if (rows < 2 * kRangeRows) die("--rows must be at least " + std::to_string(2 * kRangeRows));
  PGconn* c = connect_or_die(conninfo);
  exec_or_die(c, "SET client_min_messages = warning");
  exec_or_die(c, "DROP TABLE IF EXISTS items");
  exec_or_die(c, "CREATE TABLE items AS SELECT i AS k, i % 97 AS g, random() AS v FROM generate_series(1, " +
                     std::to_string(rows) + ") i");
  exec_or_die(c, "ALTER TABLE items ADD PRIMARY KEY (k)");
  exec_or_die(c, "VACUUM ANALYZE items");
  PQfinish(c);
  return 0;
}

// ------------------------------------------------------- one query slot

// A connection of a pool and the query it carries, if any.
struct Slot {
  PGconn* conn = nullptr;
  bool busy = false;
  bool abandoned = false;   // its caller gave up at the deadline
  std::int64_t arrival_ns = 0;
  bh_permit permit{};
};

enum class Outcome : std::uint8_t { kOk, kTimeout, kError, kRejected, kNoConnection };

struct Record {
  std::int64_t at_ns;       // when the outcome was known, since the run's start
  std::int64_t latency_ns;  // arrival to outcome
  Outcome outcome;
};

bool send_query(Slot& s, std::mt19937_64& rng, long rows) {
  std::uniform_int_distribution<long> start(1, rows - kRangeRows);
  const std::string k = std::to_string(start(rng));
  const char* values[1] = {k.c_str()};
  return PQsendQueryParams(s.conn, kQuery, 1, nullptr, values, nullptr, nullptr, 0) == 1;
}

long table_rows(PGconn* c) {
  PGresult* r = PQexec(c, "SELECT max(k) FROM items");
  if (PQresultStatus(r) != PGRES_TUPLES_OK || PQgetisnull(r, 0, 0))
    die(std::string("no table items (run 'bulkhead-pgload setup' first): ") + PQresultErrorMessage(r));
  const long rows = std::atol(PQgetvalue(r, 0, 0));
  PQclear(r);
  return rows;
}

// Reads what arrived on a busy slot. Returns true when the query is over,
// with `status` its last result's status and `sqlstate` its error code;
// false while more is to come. A broken connection ends it as an error.
bool collect(Slot& s, ExecStatusType& status, std::string& sqlstate, bool& broken) {
  broken = false;
  if (PQconsumeInput(s.conn) == 0) {
    broken = true;
    status = PGRES_FATAL_ERROR;
    return true;
  }
  while (PQisBusy(s.conn) == 0) {
    PGresult* r = PQgetResult(s.conn);
    if (r == nullptr) return true;
    status = PQresultStatus(r);
    const char* code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    sqlstate = code ? code : "";
    PQclear(r);
  }
  return false;
}

// ------------------------------------------------------------ calibrate

struct StepResult {
  int concurrency;
  double qps;
  double p50_ms;
  double p99_ms;
};

double percentile(std::vector<std::int64_t>& v, double q) {
  if (v.empty()) return 0;
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return static_cast<double>(v[i]) / 1e6;
}

// c connections, each sending its next query as soon as the last answers,
// for `seconds`; the first 20% is warm-up and not counted.
StepResult closed_loop(const std::string& conninfo, int c, double seconds, long rows, std::mt19937_64& rng) {
  std::vector<Slot> slots(static_cast<std::size_t>(c));
  for (auto& s : slots) s.conn = connect_or_die(conninfo);
  const std::int64_t start = now_ns();
  const std::int64_t count_from = start + static_cast<std::int64_t>(seconds * 0.2e9);
  const std::int64_t end = start + static_cast<std::int64_t>(seconds * 1e9);
  std::vector<std::int64_t> latencies;
  for (auto& s : slots) {
    s.arrival_ns = now_ns();
    if (!send_query(s, rng, rows)) die(std::string("send: ") + PQerrorMessage(s.conn));
    s.busy = true;
  }
  std::vector<pollfd> fds(slots.size());
  while (true) {
    const std::int64_t now = now_ns();
    if (now >= end) break;
    for (std::size_t i = 0; i < slots.size(); ++i) fds[i] = {PQsocket(slots[i].conn), POLLIN, 0};
    ::poll(fds.data(), fds.size(), 50);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLERR | POLLHUP))) continue;
      ExecStatusType st{};
      std::string code;
      bool broken = false;
      if (!collect(slots[i], st, code, broken)) continue;
      if (broken || st != PGRES_TUPLES_OK) {
        die("calibration query failed: " + std::string(PQerrorMessage(slots[i].conn)));
      }
      const std::int64_t t = now_ns();
      if (slots[i].arrival_ns >= count_from) latencies.push_back(t - slots[i].arrival_ns);
      slots[i].arrival_ns = t;
      if (!send_query(slots[i], rng, rows)) die(std::string("send: ") + PQerrorMessage(slots[i].conn));
    }
  }
  for (auto& s : slots) PQfinish(s.conn);  // abandons the queries in flight
  StepResult r{c, static_cast<double>(latencies.size()) / (static_cast<double>(end - count_from) / 1e9), 0, 0};
  r.p50_ms = percentile(latencies, 0.50);
  r.p99_ms = percentile(latencies, 0.99);
  return r;
}

int cmd_calibrate(Args& args) {
  const std::string conninfo = args.str("conninfo");
  const double step_seconds = args.num("step-seconds", 2);
  const int max_c = static_cast<int>(args.num("max-concurrency", 12));
  args.check_all_used();
  PGconn* admin = connect_or_die(conninfo);
  const long rows = table_rows(admin);
  PQfinish(admin);
  std::mt19937_64 rng(1);
  std::vector<StepResult> steps;
  std::fprintf(stderr, "calibrate: closed loop, %.1f s per step\n  conc      q/s   p50 ms   p99 ms\n", step_seconds);
  for (int c = 1; c <= max_c; c = c < 4 ? c + 1 : c * 3 / 2) {
    steps.push_back(closed_loop(conninfo, c, step_seconds, rows, rng));
    const auto& s = steps.back();
    std::fprintf(stderr, "  %4d %8.1f %8.2f %8.2f\n", s.concurrency, s.qps, s.p50_ms, s.p99_ms);
  }
  double peak = 0;
  for (const auto& s : steps) peak = std::max(peak, s.qps);
  int knee = steps.back().concurrency;
  for (const auto& s : steps)
    if (s.qps >= 0.95 * peak) {
      knee = s.concurrency;
      break;
    }
  // One connection with the plan the slow phase forces, for its cost.
  const StepResult slowed = closed_loop(conninfo + " options='-c enable_indexscan=off -c enable_bitmapscan=off'",
                                        1, step_seconds, rows, rng);
  std::fprintf(stderr, "  slowed plan, 1 connection: %.1f q/s, p50 %.2f ms\n", slowed.qps, slowed.p50_ms);
  std::printf("capacity_qps=%.1f knee=%d base_p50_ms=%.3f slow_p50_ms=%.3f slow_factor=%.2f\n", peak, knee,
              steps.front().p50_ms, slowed.p50_ms, slowed.p50_ms / steps.front().p50_ms);
  return 0;
}

// ------------------------------------------------------------------ run

struct Profile {
  std::vector<std::pair<double, double>> points;  // (seconds, multiple of capacity)
  double at(double t) const {
    if (t <= points.front().first) return points.front().second;
    for (std::size_t i = 1; i < points.size(); ++i)
      if (t <= points[i].first) {
        const auto [t0, m0] = points[i - 1];
        const auto [t1, m1] = points[i];
        return t1 == t0 ? m1 : m0 + (m1 - m0) * (t - t0) / (t1 - t0);
      }
    return points.back().second;
  }
};

Profile parse_profile(const std::string& text) {
  Profile p;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const std::size_t colon = item.find(':');
    if (colon == std::string::npos) die("--profile: expected SECONDS:MULTIPLE, got '" + item + "'");
    const double t = std::atof(item.substr(0, colon).c_str());
    const double m = std::atof(item.substr(colon + 1).c_str());
    if (m < 0 || (!p.points.empty() && t < p.points.back().first))
      die("--profile: times must not decrease and multiples must be >= 0: '" + item + "'");
    p.points.emplace_back(t, m);
    pos = comma + 1;
  }
  if (p.points.empty()) die("--profile is empty");
  return p;
}

struct RunConfig {
  std::string conninfo;
  std::string segment;     // empty: no bulkhead
  std::string dependency;
  double capacity_qps;
  Profile profile;
  double duration_s;
  int processes;
  int connections;          // per process
  double timeout_ms;
  double slow_from_s = -1, slow_to_s = -1;
  std::string out;
  long rows;
};

// Shared by the parent and its children (MAP_SHARED before fork).
struct Shared {
  std::atomic<int> ready{0};
  std::atomic<int> failed{0};
  std::atomic<std::int64_t> start_ns{0};
};

// The run's dependency on bulkheadd's segment, or null (and no client) for
// the run with no limiter. Dies when the segment cannot be used.
bh_dep* open_dependency(const RunConfig& cfg, bh_client** client) {
  *client = nullptr;
  if (cfg.segment.empty()) return nullptr;
  bh_options opts{};
  opts.segment = cfg.segment.c_str();
  opts.flags = BH_OPEN_REQUIRE_SEGMENT;
  if (bh_client_open_opts(&opts, client) < 0) die(std::string("bh_client_open: ") + bh_last_error());
  bh_dep* dep = nullptr;
  if (bh_dependency(*client, cfg.dependency.c_str(), &dep) < 0) die(std::string("bh_dependency: ") + bh_last_error());
  return dep;
}

// One load process: its pool, its arrivals, its records (written to
// OUT.proc-N.bin when done).
int load_process(const RunConfig& cfg, int index, Shared* shared) {
  bh_client* client = nullptr;
  bh_dep* dep = open_dependency(cfg, &client);
  const std::string conninfo = cfg.conninfo + " options='-c statement_timeout=" +
                               std::to_string(static_cast<long>(cfg.timeout_ms)) + "'";
  std::vector<Slot> slots(static_cast<std::size_t>(cfg.connections));
  for (auto& s : slots) {
    s.conn = PQconnectdb(conninfo.c_str());
    if (PQstatus(s.conn) != CONNECTION_OK) {
      std::fprintf(stderr, "bulkhead-pgload: process %d: cannot connect: %s", index, PQerrorMessage(s.conn));
      shared->failed.fetch_add(1);
      return 1;
    }
    PQsetnonblocking(s.conn, 1);
  }
  std::vector<std::size_t> idle;
  for (std::size_t i = 0; i < slots.size(); ++i) idle.push_back(i);
  shared->ready.fetch_add(1);
  while (shared->start_ns.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::int64_t start = shared->start_ns.load();
  const std::int64_t end = start + static_cast<std::int64_t>(cfg.duration_s * 1e9);
  const std::int64_t timeout_ns = static_cast<std::int64_t>(cfg.timeout_ms * 1e6);

  std::mt19937_64 rng(0x9e3779b97f4a7c15ull * static_cast<unsigned>(index + 1));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<Record> records;
  records.reserve(1 << 16);
  // Poisson arrivals at this process's share of profile(t) x capacity; the
  // rate is re-read at each arrival (the profile moves slowly).
  auto next_gap = [&](std::int64_t t) {
    const double rate = cfg.profile.at(static_cast<double>(t - start) / 1e9) * cfg.capacity_qps / cfg.processes;
    if (rate <= 0) return static_cast<std::int64_t>(1e8);
    return static_cast<std::int64_t>(-std::log(1.0 - unit(rng)) / rate * 1e9);
  };
  std::int64_t next_arrival = start + next_gap(start);
  std::size_t busy = 0;
  std::vector<pollfd> fds;
  std::vector<std::size_t> fd_slot;

  auto record = [&](std::int64_t at, std::int64_t latency, Outcome o) { records.push_back({at - start, latency, o}); };
  auto finish = [&](Slot& s, Outcome o, std::int64_t at) {
    // An empty permit (no bulkhead) makes this a no-op.
    const int bh_outcome = o == Outcome::kOk ? BH_SUCCESS : o == Outcome::kTimeout ? BH_DROPPED : BH_IGNORE;
    bh_release_latency(&s.permit, bh_outcome, static_cast<std::uint64_t>(at - s.arrival_ns));
    record(at, at - s.arrival_ns, o);
  };

  while (true) {
    std::int64_t now = now_ns();
    // Arrivals due.
    while (next_arrival <= now && next_arrival < end) {
      const std::int64_t arrival = next_arrival;
      next_arrival += next_gap(arrival);
      bh_permit permit{};
      if (dep != nullptr) {
        const int rc = bh_try_acquire(dep, &permit);
        if (rc < 0) die(std::string("bh_try_acquire: ") + bh_last_error());
        if (rc > 0) {
          record(now, now - arrival, Outcome::kRejected);
          continue;
        }
      }
      if (idle.empty()) {
        bh_release(&permit, BH_IGNORE);
        record(now, now - arrival, Outcome::kNoConnection);
        continue;
      }
      Slot& s = slots[idle.back()];
      idle.pop_back();
      s.arrival_ns = arrival;
      s.permit = permit;
      s.abandoned = false;
      s.busy = true;
      ++busy;
      if (!send_query(s, rng, cfg.rows)) {
        finish(s, Outcome::kError, now);
        s.permit = {};
        s.abandoned = true;  // the connection is broken: keep it out of the pool
      }
    }
    // Deadlines.
    std::int64_t wake = next_arrival < end ? next_arrival : now + 10'000'000;
    for (auto& s : slots) {
      if (!s.busy || s.abandoned) continue;
      const std::int64_t deadline = s.arrival_ns + timeout_ns;
      if (deadline <= now) {
        finish(s, Outcome::kTimeout, now);
        s.permit = {};
        s.abandoned = true;
      } else {
        wake = std::min(wake, deadline);
      }
    }
    if (now >= end && busy == 0) break;
    if (now >= end + timeout_ns + 5'000'000'000) break;  // a server that never answers
    // Answers.
    fds.clear();
    fd_slot.clear();
    for (std::size_t i = 0; i < slots.size(); ++i)
      if (slots[i].busy && PQstatus(slots[i].conn) == CONNECTION_OK) {
        fds.push_back({PQsocket(slots[i].conn), POLLIN, 0});
        fd_slot.push_back(i);
      }
    const std::int64_t wait = std::max<std::int64_t>(0, wake - now_ns());
    const timespec ts{static_cast<time_t>(wait / 1'000'000'000), static_cast<long>(wait % 1'000'000'000)};
    ::ppoll(fds.data(), fds.size(), &ts, nullptr);
    for (std::size_t j = 0; j < fds.size(); ++j) {
      if (!(fds[j].revents & (POLLIN | POLLERR | POLLHUP))) continue;
      Slot& s = slots[fd_slot[j]];
      ExecStatusType st{};
      std::string code;
      bool broken = false;
      if (!collect(s, st, code, broken)) continue;
      const std::int64_t t = now_ns();
      if (!s.abandoned) {
        Outcome o = Outcome::kError;
        if (st == PGRES_TUPLES_OK) o = t - s.arrival_ns <= timeout_ns ? Outcome::kOk : Outcome::kTimeout;
        else if (code == "57014") o = Outcome::kTimeout;  // query_canceled: statement_timeout
        finish(s, o, t);
        s.permit = {};
      }
      s.busy = false;
      --busy;
      if (broken) {
        std::fprintf(stderr, "bulkhead-pgload: process %d: connection lost: %s", index, PQerrorMessage(s.conn));
      } else {
        idle.push_back(fd_slot[j]);
      }
    }
    // A broken connection's slot that is still marked busy never answers.
    for (std::size_t i = 0; i < slots.size(); ++i)
      if (slots[i].busy && PQstatus(slots[i].conn) != CONNECTION_OK) {
        if (!slots[i].abandoned) {
          finish(slots[i], Outcome::kError, now_ns());
          slots[i].permit = {};
        }
        slots[i].busy = false;
        --busy;
      }
  }
  for (auto& s : slots) PQfinish(s.conn);
  bh_client_close(client);
  const std::string path = cfg.out + ".proc-" + std::to_string(index) + ".bin";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(records.data(), sizeof(Record), records.size(), f) != records.size())
    die("cannot write " + path);
  std::fclose(f);
  return 0;
}

struct Bin {
  long offered = 0, ok = 0, timeout = 0, error = 0, rejected = 0, noconn = 0;
  std::vector<std::int64_t> latencies;  // of ok calls
  double limit_sum = 0;
  int limit_samples = 0;
  long inflight_max = 0;
};

struct Totals {
  long ok = 0, timeout = 0, error = 0, rejected = 0, noconn = 0, offered = 0;
  std::vector<std::int64_t> latencies;
};

void print_totals(std::FILE* f, const std::string& label, Totals& t, double seconds) {
  std::fprintf(f, "%s offered_qps=%.1f goodput_qps=%.1f p50_ms=%.2f p99_ms=%.2f ok=%ld timeouts=%ld errors=%ld "
               "rejected=%ld no_connection=%ld\n",
               label.c_str(), static_cast<double>(t.offered) / seconds, static_cast<double>(t.ok) / seconds,
               percentile(t.latencies, 0.50), percentile(t.latencies, 0.99), t.ok, t.timeout, t.error, t.rejected,
               t.noconn);
}

int cmd_run(Args& args) {
  RunConfig cfg;
  cfg.conninfo = args.str("conninfo");
  cfg.segment = args.str("segment", "");
  cfg.dependency = args.str("dependency", "postgres");
  cfg.capacity_qps = args.num("capacity", 0);
  cfg.profile = parse_profile(args.str("profile", "0:0.5,10:0.5,60:3"));
  cfg.duration_s = args.num("duration", 60);
  cfg.processes = static_cast<int>(args.num("processes", 4));
  cfg.connections = static_cast<int>(args.num("connections", 64));
  cfg.timeout_ms = args.num("timeout-ms", 100);
  const std::string slow = args.str("slow", "");
  cfg.out = args.str("out");
  const std::string label = args.str("label", "run");
  const std::vector<std::string> phases = args.all("phase");
  args.check_all_used();
  if (cfg.capacity_qps <= 0) die("--capacity must be > 0 (queries per second; see 'calibrate')");
  if (cfg.processes < 1 || cfg.connections < 1) die("--processes and --connections must be >= 1");
  if (!(cfg.duration_s > 0 && cfg.duration_s <= 86400)) die("--duration must be in (0, 86400] seconds");
  if (!(cfg.timeout_ms > 0 && cfg.timeout_ms <= 3.6e6)) die("--timeout-ms must be in (0, 3600000]");
  if (!slow.empty() && std::sscanf(slow.c_str(), "%lf:%lf", &cfg.slow_from_s, &cfg.slow_to_s) != 2)
    die("--slow: expected FROM:TO in seconds, got '" + slow + "'");

  PGconn* admin = connect_or_die(cfg.conninfo);
  cfg.rows = table_rows(admin);
  auto set_slow = [&](bool on) {
    exec_or_die(admin, on ? "ALTER SYSTEM SET enable_indexscan = off" : "ALTER SYSTEM RESET enable_indexscan");
    exec_or_die(admin, on ? "ALTER SYSTEM SET enable_bitmapscan = off" : "ALTER SYSTEM RESET enable_bitmapscan");
    exec_or_die(admin, "SELECT pg_reload_conf()");
  };
  set_slow(false);

  bh_client* client = nullptr;
  bh_dep* dep = open_dependency(cfg, &client);

  void* mem = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) die("mmap failed");
  auto* shared = new (mem) Shared;
  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (int i = 0; i < cfg.processes; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) die("fork failed");
    if (pid == 0) std::_Exit(load_process(cfg, i, shared));
    children.push_back(pid);
  }
  while (shared->ready.load() + shared->failed.load() < cfg.processes)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (shared->failed.load() > 0) {
    for (pid_t p : children) ::kill(p, SIGKILL);
    die("a load process could not connect (is max_connections >= processes x connections + 2?)");
  }
  const std::int64_t start = now_ns() + 100'000'000;
  shared->start_ns.store(start);

  // The parent: the slow phase and, with bulkhead, the limit every 100 ms.
  const int seconds = static_cast<int>(std::ceil(cfg.duration_s));
  std::vector<Bin> bins(static_cast<std::size_t>(seconds) + 1);
  bool slowed = false;
  for (std::int64_t tick = start;; tick += 100'000'000) {
    const std::int64_t now = now_ns();
    if (tick > now) std::this_thread::sleep_for(std::chrono::nanoseconds(tick - now));
    const double t = static_cast<double>(tick - start) / 1e9;
    if (t >= cfg.duration_s) break;
    const bool want_slow = t >= cfg.slow_from_s && t < cfg.slow_to_s;
    if (want_slow != slowed) {
      set_slow(want_slow);
      slowed = want_slow;
    }
    if (dep != nullptr && t >= 0) {
      Bin& b = bins[static_cast<std::size_t>(t)];
      b.limit_sum += static_cast<double>(bh_limit(dep));
      b.limit_samples += 1;
      b.inflight_max = std::max(b.inflight_max, bh_inflight(dep));
    }
  }
  if (slowed) set_slow(false);
  int failures = 0;
  for (pid_t p : children) {
    int status = 0;
    ::waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  if (failures > 0) die(std::to_string(failures) + " load process(es) failed");
  bh_client_close(client);
  PQfinish(admin);

  // Per second by when the outcome was known; totals over the run and over
  // each --phase NAME:FROM:TO.
  struct Phase {
    std::string name;
    double from, to;
    Totals totals;
  };
  std::vector<Phase> windows{{"all", 0, cfg.duration_s, {}}};
  for (const auto& p : phases) {
    char name[64];
    double from = 0, to = 0;
    if (std::sscanf(p.c_str(), "%63[^:]:%lf:%lf", name, &from, &to) != 3 || to <= from)
      die("--phase: expected NAME:FROM:TO, got '" + p + "'");
    windows.push_back({name, from, to, {}});
  }
  for (int i = 0; i < cfg.processes; ++i) {
    const std::string path = cfg.out + ".proc-" + std::to_string(i) + ".bin";
    std::ifstream in(path, std::ios::binary);
    Record r{};
    while (in.read(reinterpret_cast<char*>(&r), sizeof r)) {
      const double at = static_cast<double>(r.at_ns) / 1e9;
      const std::size_t sec = std::min(bins.size() - 1, static_cast<std::size_t>(std::max(0.0, at)));
      Bin& b = bins[sec];
      const double arrival = static_cast<double>(r.at_ns - r.latency_ns) / 1e9;
      const std::size_t asec = std::min(bins.size() - 1, static_cast<std::size_t>(std::max(0.0, arrival)));
      bins[asec].offered++;
      for (auto& w : windows) {
        if (at < w.from || at >= w.to) continue;
        Totals& t = w.totals;
        if (arrival >= w.from) t.offered++;
        switch (r.outcome) {
          case Outcome::kOk: t.ok++; t.latencies.push_back(r.latency_ns); break;
          case Outcome::kTimeout: t.timeout++; break;
          case Outcome::kError: t.error++; break;
          case Outcome::kRejected: t.rejected++; break;
          case Outcome::kNoConnection: t.noconn++; break;
        }
      }
      switch (r.outcome) {
        case Outcome::kOk: b.ok++; b.latencies.push_back(r.latency_ns); break;
        case Outcome::kTimeout: b.timeout++; break;
        case Outcome::kError: b.error++; break;
        case Outcome::kRejected: b.rejected++; break;
        case Outcome::kNoConnection: b.noconn++; break;
      }
    }
    std::remove(path.c_str());
  }
  const std::string csv = cfg.out + ".csv";
  std::FILE* f = std::fopen(csv.c_str(), "w");
  if (f == nullptr) die("cannot write " + csv);
  // NaN where there is nothing to show (no successful query, no limit):
  // gnuplot leaves a gap.
  std::fprintf(f, "# t_s offered_qps target_qps goodput_qps timeouts errors rejected no_connection p50_ms p99_ms limit "
               "inflight_max slowed\n");
  auto ms = [](std::vector<std::int64_t>& v, double q) {
    return v.empty() ? std::string("NaN") : std::to_string(percentile(v, q));
  };
  for (int s = 0; s < seconds; ++s) {
    Bin& b = bins[static_cast<std::size_t>(s)];
    const double mid = s + 0.5;
    std::fprintf(f, "%d %ld %.1f %ld %ld %ld %ld %ld %s %s %s %ld %d\n", s, b.offered,
                 cfg.profile.at(mid) * cfg.capacity_qps, b.ok, b.timeout, b.error, b.rejected, b.noconn,
                 ms(b.latencies, 0.5).c_str(), ms(b.latencies, 0.99).c_str(),
                 b.limit_samples ? std::to_string(b.limit_sum / b.limit_samples).c_str() : "NaN", b.inflight_max,
                 mid >= cfg.slow_from_s && mid < cfg.slow_to_s ? 1 : 0);
  }
  std::fclose(f);
  for (auto& w : windows) print_totals(stdout, label + " " + w.name, w.totals, w.to - w.from);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bulkhead-pgload setup|calibrate|run --key value ... (see bench/pgload/pgload.cpp)\n");
    return 2;
  }
  const std::string cmd = argv[1];
  Args args(argc, argv, 2);
  if (cmd == "setup") return cmd_setup(args);
  if (cmd == "calibrate") return cmd_calibrate(args);
  if (cmd == "run") return cmd_run(args);
  die("unknown command '" + cmd + "' (setup, calibrate, run)");
}
