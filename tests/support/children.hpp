// Forked child processes for tests that need more than one process.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <functional>
#include <vector>

namespace bulkhead::testing {

// Forks `n` children, each running body(i) and exiting with its result (0
// for success), and waits for all of them; a child that fails or crashes
// fails the test.
inline void run_children(int n, const std::function<int(int)>& body) {
  std::vector<pid_t> children;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) std::_Exit(body(i));
    ASSERT_GT(pid, 0);
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << pid << " status " << status;
  }
}

}  // namespace bulkhead::testing
