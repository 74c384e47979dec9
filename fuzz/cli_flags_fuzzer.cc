// Fuzzes the CLI's parsers of what a user types: sizes (ParseBytes: "512M", "1.5GiB"),
// durations (--time-limit), NAME=AMOUNT resources, KEY=VALUE env and the process
// counts, through BuildSpec (cli/job_spec.h) as `drover run` and `submit` call it.
// Whatever the flags, BuildSpec returns a spec or INVALID_ARGUMENT, and a spec it
// returns holds only values in range.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "cli/job_spec.h"
#include "fuzz/fuzz_check.h"

namespace {

std::optional<int> MaybeInt(FuzzedDataProvider& in) {
  if (!in.ConsumeBool()) return std::nullopt;
  return in.ConsumeBool() ? in.ConsumeIntegralInRange(-2, 9) : in.ConsumeIntegral<int>();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace drover;
  FuzzedDataProvider in(data, size);
  const std::string size_text = in.ConsumeRandomLengthString(24);
  absl::StatusOr<int64_t> bytes = cli::ParseBytes(size_text);
  if (bytes.ok()) {
    FUZZ_CHECK(*bytes >= 0);
  } else {
    FUZZ_CHECK(bytes.status().code() == absl::StatusCode::kInvalidArgument);
  }

  cli::JobFlags f;
  f.name = in.ConsumeRandomLengthString(16);
  f.nproc = MaybeInt(in);
  f.nodes = MaybeInt(in);
  f.nproc_per_node = MaybeInt(in);
  f.cpus_per_proc = in.ConsumeBool() ? in.ConsumeFloatingPoint<double>()
                                     : in.ConsumeIntegralInRange(0, 4) / 2.0;
  f.gpus_per_proc = in.ConsumeIntegralInRange(-1, 8);
  f.memory_per_proc = size_text;
  const int n_resources = in.ConsumeIntegralInRange(0, 3);
  for (int i = 0; i < n_resources; ++i) f.resources.push_back(in.ConsumeRandomLengthString(16));
  f.strategy = in.ConsumeBool() ? "spread" : in.ConsumeRandomLengthString(8);
  f.max_restarts = in.ConsumeIntegralInRange(-1, 3);
  f.time_limit = in.ConsumeRandomLengthString(16);
  const int n_env = in.ConsumeIntegralInRange(0, 3);
  for (int i = 0; i < n_env; ++i) f.env.push_back(in.ConsumeRandomLengthString(16));
  f.cwd = "/";
  std::vector<std::string> cmd;
  if (in.ConsumeBool()) cmd.push_back(in.ConsumeRemainingBytesAsString());

  absl::StatusOr<JobSpec> spec = cli::BuildSpec(f, cmd);
  if (!spec.ok()) {
    FUZZ_CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(!spec.status().message().empty());
    return 0;
  }
  FUZZ_CHECK(!spec->command.empty());
  FUZZ_CHECK(spec->nproc >= 1);
  FUZZ_CHECK(spec->nproc_per_node >= 0);
  FUZZ_CHECK(spec->nproc_per_node == 0 || spec->nproc % spec->nproc_per_node == 0);
  FUZZ_CHECK(std::isfinite(spec->per_process.cpus) && spec->per_process.cpus >= 0);
  FUZZ_CHECK(spec->per_process.gpus >= 0);
  FUZZ_CHECK(spec->per_process.memory_bytes >= 0);
  for (const auto& [name, amount] : spec->per_process.custom) {
    FUZZ_CHECK(!name.empty() && std::isfinite(amount) && amount >= 0);
  }
  FUZZ_CHECK(spec->max_restarts >= 0);
  FUZZ_CHECK(spec->time_limit >= absl::ZeroDuration() && spec->time_limit != absl::InfiniteDuration());
  for (const auto& [key, value] : spec->env) FUZZ_CHECK(!key.empty());
  return 0;
}
