// What the code under test logs through spdlog's default logger, for tests
// of the warnings operators read. While a LogCapture lives, the default
// logger writes to it (every level) instead of the console.
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cstddef>
#include <memory>
#include <sstream>
#include <string>

namespace bulkhead::testing {

class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("%l %v");
    auto logger = std::make_shared<spdlog::logger>("capture", sink);
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Everything logged so far, a line each: "LEVEL message".
  std::string text() const { return out_.str(); }
  // How many lines logged so far contain `part`.
  std::size_t count(const std::string& part) const {
    std::size_t n = 0;
    std::istringstream lines(out_.str());
    for (std::string line; std::getline(lines, line);) n += line.find(part) != std::string::npos;
    return n;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace bulkhead::testing
