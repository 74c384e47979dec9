#include "sdk/internal/pull_progress.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace drover::internal {

PullProgress::PullProgress(ProgressLine* line, Clock* clock, PullProgressOptions options,
                           std::string object_id, Poll poll)
    : line_(line),
      clock_(clock),
      options_(options),
      object_id_(std::move(object_id)),
      poll_(std::move(poll)),
      next_poll_(clock_->Now() + options_.show_after) {}

PullProgress::~PullProgress() {
  if (drawn_) line_->Clear();
}

void PullProgress::Tick() {
  if (line_ == nullptr || unsupported_) return;
  const absl::Time now = clock_->Now();
  if (now < next_poll_) return;
  next_poll_ = now + options_.poll_every;
  absl::StatusOr<FetchProgress> p = poll_();
  if (!p.ok()) {
    unsupported_ = absl::IsUnimplemented(p.status());
    return;  // the bar is a nicety: a failed ask is not the Get's error
  }
  if (!p->pulling || p->total_bytes <= 0) return;  // waiting for a holder, or done
  if (meter_ == nullptr || p->source_node != source_) {
    source_ = p->source_node;
    meter_ = std::make_unique<ProgressMeter>(ProgressMeter::Options{
        .label = absl::StrCat("drover: pulling ", absl::CHexEscape(object_id_), " from ",
                              source_),
        .total = p->total_bytes,
        .start = p->received_bytes,
        .unit = ProgressMeter::Unit::kBytes,
        .clock = clock_});
  }
  meter_->Set(p->received_bytes);
  line_->Show(meter_->Render(line_->columns()));
  drawn_ = true;
}

}  // namespace drover::internal
