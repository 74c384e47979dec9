// What a test program (tests/*_program.cc: its own driver and workers) prints for its
// test: "key=value" lines, which DriverRun (driver_program.h) reads, and a "FAIL what:
// got ..." line for each of its own checks that failed (counted by ProgramFailures, so
// the program can exit non-zero).
// Not thread-safe: for the program's main thread.
#ifndef DROVER_TESTS_UTIL_PROGRAM_OUTPUT_H_
#define DROVER_TESTS_UTIL_PROGRAM_OUTPUT_H_

#include <iostream>
#include <string>

namespace drover::testing {

inline int& ProgramFailures() {
  static int failures = 0;
  return failures;
}

template <typename T>
void Expect(bool ok, const std::string& what, const T& got) {
  if (!ok) {
    ++ProgramFailures();
    std::cout << "FAIL " << what << ": got " << got << std::endl;
  }
}

inline void Print(const std::string& key, const std::string& value) {
  std::cout << key << "=" << value << std::endl;
}

}  // namespace drover::testing

#endif  // DROVER_TESTS_UTIL_PROGRAM_OUTPUT_H_
