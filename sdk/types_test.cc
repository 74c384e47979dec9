// The SDK's value types against the wire messages: every field of every message the
// SDK converts survives proto -> SDK -> proto (the messages are filled by reflection,
// so a field added to proto/ and forgotten in sdk/convert.cc fails here), the JSON the
// CLI prints, and the state helpers.
#include <string>

#include "common/job_state.h"
#include "drover/json.h"
#include "drover/types.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "sdk/internal/convert.h"

namespace drover {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Sets every field of `m` (recursively) to a value that is not its default; repeated
// fields and maps get two entries. Enums take their last value; the job_counts map gets
// JobState names as keys (the SDK keys it by JobState).
void FillAll(Message* m, int* counter) {
  const auto* d = m->GetDescriptor();
  const Reflection* r = m->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const int n = f->is_repeated() ? 2 : 1;
    for (int k = 0; k < n; ++k) {
      const int v = ++*counter;
      if (f->is_map()) {
        Message* entry = r->AddMessage(m, f);
        FillAll(entry, counter);
        if (f->name() == "job_counts") {
          entry->GetReflection()->SetString(entry, entry->GetDescriptor()->field(0),
                                            k == 0 ? "RUNNING" : "FAILED");
        }
        continue;
      }
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32:
          f->is_repeated() ? r->AddInt32(m, f, v) : r->SetInt32(m, f, v);
          break;
        case FieldDescriptor::CPPTYPE_INT64:
          f->is_repeated() ? r->AddInt64(m, f, 1000 * v) : r->SetInt64(m, f, 1000 * v);
          break;
        case FieldDescriptor::CPPTYPE_DOUBLE:
          f->is_repeated() ? r->AddDouble(m, f, v + 0.5) : r->SetDouble(m, f, v + 0.5);
          break;
        case FieldDescriptor::CPPTYPE_BOOL:
          ASSERT_FALSE(f->is_repeated()) << f->full_name();
          r->SetBool(m, f, true);
          break;
        case FieldDescriptor::CPPTYPE_STRING: {
          std::string s = f->name() + "-" + std::to_string(v);
          f->is_repeated() ? r->AddString(m, f, s) : r->SetString(m, f, s);
          break;
        }
        case FieldDescriptor::CPPTYPE_ENUM: {
          const auto* e = f->enum_type();
          const auto* value = e->value(e->value_count() - 1);
          f->is_repeated() ? r->AddEnum(m, f, value) : r->SetEnum(m, f, value);
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE:
          FillAll(f->is_repeated() ? r->AddMessage(m, f) : r->MutableMessage(m, f), counter);
          break;
        default:
          FAIL() << "no filler for " << f->full_name();
      }
    }
  }
}

template <typename M>
M Filled() {
  M m;
  int counter = 0;
  FillAll(&m, &counter);
  return m;
}

void ExpectSame(const Message& want, const Message& got) {
  std::string diff;
  google::protobuf::util::MessageDifferencer d;
  d.ReportDifferencesToString(&diff);
  EXPECT_TRUE(d.Compare(want, got)) << diff;
}

TEST(ConvertTest, JobInfoWithEveryFieldSetSurvivesTheRoundTrip) {
  const proto::JobInfo m = Filled<proto::JobInfo>();
  ASSERT_TRUE(m.has_root_cause());
  ASSERT_GT(m.spec().per_process().custom_size(), 0);
  JobInfo j = internal::FromProto(m);
  EXPECT_EQ(j.state, JobState::kCancelled);
  ASSERT_TRUE(j.root_cause.has_value());
  ASSERT_TRUE(j.start_time.has_value());
  EXPECT_EQ(absl::ToUnixMillis(*j.start_time), m.start_time_ms());
  EXPECT_EQ(j.spec.time_limit, absl::Milliseconds(m.spec().time_limit_ms()));
  EXPECT_EQ(j.spec.strategy, PlacementStrategy::kSpread);
  ExpectSame(m, internal::ToProto(j));
}

TEST(ConvertTest, NodesAndClusterStatusSurviveTheRoundTrip) {
  const auto m = Filled<proto::GetClusterStatusReply>();
  ClusterStatus s = internal::FromProto(m);
  ASSERT_EQ(s.nodes.size(), 2u);
  EXPECT_EQ(s.nodes[0].state, NodeState::kReconnecting);
  EXPECT_EQ(s.job_counts.at(JobState::kRunning), m.job_counts().at("RUNNING"));
  ExpectSame(m, internal::ToProto(s));
}

TEST(ConvertTest, TimelinesSurviveTheRoundTrip) {
  const auto m = Filled<proto::GetJobTimelineReply>();
  JobTimeline t = internal::FromProto(m);
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[0].kind, TimelineEventKind::kRequeued);
  EXPECT_EQ(absl::ToUnixMicros(t.events[0].time), m.events(0).time_us());
  ASSERT_TRUE(t.events[0].exit.has_value());
  ExpectSame(m, internal::ToProto(t));
}

TEST(ConvertTest, UnsetTimesAndRootCauseStayUnset) {
  proto::JobInfo m;
  m.set_job_id("job-1");
  m.set_submit_time_ms(1234);
  m.mutable_spec()->mutable_per_process();  // always there in a scheduler's record
  JobInfo j = internal::FromProto(m);
  EXPECT_FALSE(j.start_time.has_value());
  EXPECT_FALSE(j.end_time.has_value());
  EXPECT_FALSE(j.generation_start.has_value());
  EXPECT_FALSE(j.root_cause.has_value());
  ExpectSame(m, internal::ToProto(j));
}

TEST(ConvertTest, TimeLimitIsWholeMillisecondsAndZeroIsNone) {
  JobSpec spec;
  EXPECT_EQ(internal::ToProto(spec).time_limit_ms(), 0);
  spec.time_limit = absl::Microseconds(10);
  EXPECT_EQ(internal::ToProto(spec).time_limit_ms(), 1);
  spec.time_limit = absl::Minutes(90);
  EXPECT_EQ(internal::ToProto(spec).time_limit_ms(), 90 * 60 * 1000);
  // The defaults a program gets: one process of one CPU, packed.
  proto::JobSpec d = internal::ToProto(JobSpec{});
  EXPECT_EQ(d.nproc(), 1);
  EXPECT_EQ(d.per_process().cpus(), 1);
  EXPECT_EQ(d.strategy(), proto::PACK);
}

TEST(ConvertTest, LogOffsetsAndChunksKeepTheirStreams) {
  proto::LogChunk c;
  c.set_rank(3);
  c.set_stream(2);
  c.set_offset(77);
  c.set_data("line\n");
  LogChunk chunk = internal::FromProto(c);
  EXPECT_EQ(chunk.rank, 3);
  EXPECT_EQ(chunk.stream, LogStream::kStderr);
  EXPECT_EQ(chunk.offset, 77);
  EXPECT_EQ(chunk.data, "line\n");
  proto::LogOffset o = internal::ToProto(LogOffset{5, LogStream::kStdout, 9});
  EXPECT_EQ(o.rank(), 5);
  EXPECT_EQ(o.stream(), 1);
  EXPECT_EQ(o.offset(), 9);
}

TEST(TypesTest, StateNamesAndTerminalStatesMatchTheWire) {
  for (int i = proto::JobState_MIN; i <= proto::JobState_MAX; ++i) {
    const auto wire = static_cast<proto::JobState>(i);
    const JobState s = internal::FromProto(wire);
    EXPECT_EQ(JobStateName(s), proto::JobState_Name(wire));
    EXPECT_EQ(IsTerminal(s), IsTerminal(wire)) << JobStateName(s);
    EXPECT_EQ(internal::ToProto(s), wire);
  }
  EXPECT_FALSE(IsTerminal(JobState::kRunning));
  EXPECT_TRUE(IsTerminal(JobState::kCancelled));
  EXPECT_STREQ(NodeStateName(NodeState::kDead), "DEAD");
  EXPECT_STREQ(PlacementStrategyName(PlacementStrategy::kSpread), "SPREAD");
}

TEST(JsonTest, PrintsTheWireRecordsFieldNamesAndEnumNames) {
  JobInfo j;
  j.job_id = "job-7";
  j.state = JobState::kSucceeded;
  j.version = 12;
  j.spec.command = {"true"};
  const std::string json = ToJson(j);
  EXPECT_NE(json.find("\"job_id\": \"job-7\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"state\": \"SUCCEEDED\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"version\": \"12\""), std::string::npos) << json;  // int64: a string
  EXPECT_NE(json.find("\"live_processes\": 0"), std::string::npos) << json;  // defaults too
  const std::string list = JobsToJson({j, j});
  EXPECT_EQ(list.rfind("{\n \"jobs\": [", 0), 0u) << list;
  ClusterStatus s;
  s.state_backend = "memory";
  s.nodes.resize(1);
  s.nodes[0].total.gpus = 4;
  const std::string status = ToJson(s);
  EXPECT_NE(status.find("\"state_backend\": \"memory\""), std::string::npos) << status;
  EXPECT_NE(status.find("\"gpus\": 4"), std::string::npos) << status;
}

}  // namespace
}  // namespace drover
