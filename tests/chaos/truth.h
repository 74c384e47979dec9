// Ground truth for the chaos campaign: what each workload process really did, written
// by the process itself next to its output and read by the campaign's checks.
//
// A process appends records to its own file, <truth dir>/<job>/<name>.truth (name:
// "g<generation>-r<rank>" for a rank, or any word for a driver), one per line:
//   start PID            written when the process opens its file (a second one: the
//                        same rank of the same generation ran again)
//   out MS TEXT          TEXT went to stdout at Unix time MS (recorded after its write
//                        returned, so the line is in the log file the agent serves)
//   exit CODE WHY        the process is about to exit with CODE
//   put ID SIZE          object ID (SIZE bytes, Content(ID, SIZE)) was put
//   put-failed ID CODE MESSAGE
//   deleted ID           the putter deleted its copy of ID
//   got ID ok | got ID error CODE MESSAGE | got ID MISMATCH DETAIL
//   check ok WHAT | check error WHAT: MESSAGE | check WRONG WHAT: DETAIL   (tasks)
// A record is one write(2) with O_APPEND: a killed process leaves whole lines.
//
// Thread safety: TruthLog may be used from several threads (each record is one write).
#ifndef DROVER_TESTS_CHAOS_TRUTH_H_
#define DROVER_TESTS_CHAOS_TRUTH_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace drover::chaos {

class TruthLog {
 public:
  // Opens (creating directories) <dir>/<job>/<name>.truth for appending; on failure
  // the process cannot be checked, so it says so on stderr and exits 3.
  TruthLog(const std::string& dir, const std::string& job, const std::string& name);
  ~TruthLog();
  TruthLog(const TruthLog&) = delete;
  TruthLog& operator=(const TruthLog&) = delete;

  // Writes `text` and a newline to stdout (whole, retrying short writes), then
  // records "out MS TEXT".
  void Say(const std::string& text);
  // Appends one record (a line without its newline).
  void Record(const std::string& record);
  // Records "exit CODE WHY" and exits with CODE (std::_Exit after flushing nothing:
  // every record is already written).
  [[noreturn]] void Exit(int code, const std::string& why);

 private:
  int fd_ = -1;
};

// The bytes of object `id` with `size` bytes: a function of both, so a reader that
// knows the id and size can check every byte.
std::string ObjectContent(const std::string& id, size_t size);

// Whether a failed object operation said clearly what went wrong: a canonical code
// other than UNKNOWN and a message that is not empty.
bool ClearError(const absl::Status& s);
// "CODE message" with newlines flattened, for a record.
std::string Flat(const absl::Status& s);

// What one truth file says.
struct ProcessTruth {
  std::string job;
  std::string name;  // "g0-r1", ...
  int generation = -1;
  int rank = -1;
  std::vector<std::string> out;   // lines written to stdout, in order
  std::vector<int64_t> out_ms;     // when each was written (Unix milliseconds)
  int starts = 0;  // "start" records: more than one, the process ran more than once
  std::optional<int> exit_code;
  std::string exit_why;
  // Object records, by id: "put SIZE", "put-failed ...", "got ok", ...
  std::vector<std::pair<std::string, std::string>> puts;  // id -> rest of the record
  std::vector<std::pair<std::string, std::string>> gets;  // id -> rest of the record
  std::vector<std::string> deleted;                       // ids
  std::vector<std::string> checks;                        // "ok WHAT" / "error ..." / "WRONG ..."
};

// Every truth file of `job` under `dir` (empty if none was written).
std::vector<ProcessTruth> ReadJobTruth(const std::string& dir, const std::string& job);
// One file.
ProcessTruth ParseTruth(const std::string& job, const std::string& name, absl::string_view text);

}  // namespace drover::chaos

#endif  // DROVER_TESTS_CHAOS_TRUTH_H_
