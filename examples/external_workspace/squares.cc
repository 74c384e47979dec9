// A task program in a workspace of its own, built against @drover//sdk:drover.
//
//   squares N [EXIT_CODE]
//
// Squares 1..N in N tasks on the cluster and prints their sum (and, if set,
// $SQUARES_GREETING and where the tasks ran); exits with EXIT_CODE (default 0) so a
// test can see the code come back through `drover run`.
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "drover/drover.h"

int64_t Square(int64_t x) { return x * x; }

std::string Node() { return drover::NodeId(); }

DROVER_REMOTE(Square, Node);

int main(int argc, char** argv) {
  if (absl::Status s = drover::Init(argc, argv); !s.ok()) {
    std::cerr << "drover::Init: " << s << "\n";
    return 1;
  }
  int64_t n = 0;
  int exit_code = 0;
  if (argc < 2 || !absl::SimpleAtoi(argv[1], &n) || n < 1 ||
      (argc > 2 && !absl::SimpleAtoi(argv[2], &exit_code))) {
    std::cerr << "usage: squares N [EXIT_CODE] (N >= 1)\n";
    return 2;
  }
  std::vector<drover::ObjectRef<int64_t>> squares;
  for (int64_t i = 1; i <= n; ++i) squares.push_back(drover::Task(Square).Remote(i));
  absl::StatusOr<std::vector<int64_t>> values = drover::Get(squares);
  absl::StatusOr<std::string> node = drover::Get(drover::Task(Node).Remote());
  if (!values.ok() || !node.ok()) {
    std::cerr << "squares: " << (values.ok() ? node.status() : values.status()) << "\n";
    return 1;
  }
  int64_t sum = 0;
  for (int64_t v : *values) sum += v;
  if (const char* greeting = std::getenv("SQUARES_GREETING")) std::cout << greeting << "\n";
  std::cout << "sum of squares 1.." << n << " = " << sum << " (a task ran on " << *node
            << ")\n";
  return exit_code;
}
