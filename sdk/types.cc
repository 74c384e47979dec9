#include "drover/types.h"

namespace drover {

const char* PlacementStrategyName(PlacementStrategy strategy) {
  switch (strategy) {
    case PlacementStrategy::kPack: return "PACK";
    case PlacementStrategy::kSpread: return "SPREAD";
  }
  return "?";
}

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kPending: return "PENDING";
    case JobState::kRunning: return "RUNNING";
    case JobState::kSucceeded: return "SUCCEEDED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCancelled: return "CANCELLED";
  }
  return "?";
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

const char* NodeStateName(NodeState state) {
  switch (state) {
    case NodeState::kAlive: return "ALIVE";
    case NodeState::kDead: return "DEAD";
    case NodeState::kReconnecting: return "RECONNECTING";
  }
  return "?";
}

}  // namespace drover
