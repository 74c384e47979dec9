#include "sdk/runtime/owner_cores.h"

#include <utility>

namespace drover::internal {

OwnerCores::OwnerCores(TaskSubmitter::Deps submitter, ActorClient::Deps actors)
    : loop_(std::make_unique<ConnectionLoop>()) {
  submitter.loop = loop_.get();
  actors.loop = loop_.get();
  submitter_ = std::make_unique<TaskSubmitter>(std::move(submitter));
  actors_ = std::make_unique<ActorClient>(std::move(actors));
}

OwnerCores::~OwnerCores() { Shutdown(); }

void OwnerCores::Shutdown() {
  actors_->Shutdown();
  submitter_->Shutdown();
  loop_->Stop();
}

}  // namespace drover::internal
