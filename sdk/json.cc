#include "drover/json.h"

#include "google/protobuf/util/json_util.h"
#include "sdk/internal/convert.h"

namespace drover {
namespace {

std::string Print(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  return out;
}

}  // namespace

std::string ToJson(const JobInfo& job) { return Print(internal::ToProto(job)); }

std::string ToJson(const ClusterStatus& status) { return Print(internal::ToProto(status)); }

std::string JobsToJson(const std::vector<JobInfo>& jobs) {
  proto::ListJobsReply reply;
  for (const auto& j : jobs) *reply.add_jobs() = internal::ToProto(j);
  return Print(reply);
}

}  // namespace drover
