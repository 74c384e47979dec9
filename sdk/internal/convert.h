// Conversions between the SDK's value types (drover/types.h) and the wire messages
// (proto/). Internal to the SDK: only sdk/*.cc (and tests) include it, so the public
// headers never name a generated type.
//
// Round trip: FromProto(ToProto(x)) == x for every value, and ToProto(FromProto(m))
// equals m field for field for every message whose enums hold known values (times in
// whole milliseconds, as on the wire). sdk/types_test checks this on messages with
// every field set.
#ifndef DROVER_SDK_INTERNAL_CONVERT_H_
#define DROVER_SDK_INTERNAL_CONVERT_H_

#include "drover/types.h"
#include "proto/common.pb.h"
#include "proto/node_agent.pb.h"
#include "proto/scheduler.pb.h"

namespace drover::internal {

proto::JobState ToProto(JobState state);
JobState FromProto(proto::JobState state);

proto::JobSpec ToProto(const JobSpec& spec);
JobSpec FromProto(const proto::JobSpec& spec);

proto::JobInfo ToProto(const JobInfo& job);
JobInfo FromProto(const proto::JobInfo& job);

proto::NodeInfo ToProto(const NodeInfo& node);
NodeInfo FromProto(const proto::NodeInfo& node);

proto::GetClusterStatusReply ToProto(const ClusterStatus& status);
ClusterStatus FromProto(const proto::GetClusterStatusReply& status);

proto::GetJobTimelineReply ToProto(const JobTimeline& timeline);
JobTimeline FromProto(const proto::GetJobTimelineReply& timeline);

proto::LogOffset ToProto(const LogOffset& offset);
LogChunk FromProto(const proto::LogChunk& chunk);

}  // namespace drover::internal

#endif  // DROVER_SDK_INTERNAL_CONVERT_H_
