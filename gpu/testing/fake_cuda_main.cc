// main() for tests of CUDA and NCCL call sites without a GPU: points drover's loader at
// the stand-in CUDA and NCCL (fake_cuda.cc, //gpu:libfake_cuda.so, a data dependency of
// the test) with DROVER_CUDA_RUNTIME_LIBRARY and DROVER_NCCL_LIBRARY, and runs the test
// binary again with it preloaded too (LD_PRELOAD must be set before a process starts),
// so that tests find the stand-in's helpers with dlsym; then runs the tests. The
// processes the tests start inherit the variables but not the preload.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

int main(int argc, char** argv) {
  if (std::getenv("DROVER_FAKE_CUDA_PRELOADED") == nullptr) {
    const char* srcdir = std::getenv("TEST_SRCDIR");
    const char* workspace = std::getenv("TEST_WORKSPACE");
    const std::string lib = std::string(srcdir ? srcdir : ".") + "/" +
                            (workspace ? workspace : "drover") + "/gpu/libfake_cuda.so";
    setenv("LD_PRELOAD", lib.c_str(), 1);
    setenv("DROVER_CUDA_RUNTIME_LIBRARY", lib.c_str(), 1);
    setenv("DROVER_NCCL_LIBRARY", lib.c_str(), 1);
    setenv("DROVER_FAKE_CUDA_PRELOADED", "1", 1);
    execv("/proc/self/exe", argv);
    perror("execv /proc/self/exe");
    return 1;
  }
  unsetenv("LD_PRELOAD");
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
