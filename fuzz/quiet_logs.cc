// Linked into the fuzzers whose code logs: only errors are printed, so a run's output
// shows libFuzzer's progress, not the daemons' routine lines for every input.
#include "common/log.h"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  drover::SetMinLogLevel(drover::LogLevel::kError);
  return 0;
}
