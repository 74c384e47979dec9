// FUZZ_CHECK(cond): a fuzz target's invariant. If it does not hold, prints where and
// what, and aborts, which libFuzzer reports as a crash with the input that caused it.
#ifndef DROVER_FUZZ_FUZZ_CHECK_H_
#define DROVER_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

#endif  // DROVER_FUZZ_FUZZ_CHECK_H_
