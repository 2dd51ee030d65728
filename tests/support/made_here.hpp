// Which process made a test's resource: only that one undoes it.
//
// A forked child whose body throws unwinds the test's locals in the child
// before GoogleTest catches the exception (and child_guard.cpp ends the
// child): their destructors must leave the daemon, the segment, the
// directory and the other children to the test that made them.
#pragma once

#include <unistd.h>

namespace bulkhead::testing {

class MadeHere {
 public:
  // False in a process forked from the one that made it.
  bool here() const { return ::getpid() == pid_; }

 private:
  pid_t pid_ = ::getpid();
};

}  // namespace bulkhead::testing
