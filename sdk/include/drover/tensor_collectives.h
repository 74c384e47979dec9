// Collectives on tensors whose results live in the object store: a CollectiveGroup
// operation whose input is a drover::Tensor (in this process's memory or read from the
// store) and whose result is a NEW sealed tensor object in this node's store, readable
// by id by every process of the cluster.
//
//   auto objects = drover::Objects::FromEnvironment();
//   auto group = drover::CollectiveGroup::FromEnvironment();
//   auto grads = (*objects)->GetTensor("grads.rank3", absl::Seconds(30));
//   auto sum = drover::AllReduceTensor(**group, **objects, *grads, "grads-sum.rank3",
//                                      drover::ReduceOp::kSum);
//   auto values = sum->span<float>();   // the result object, in place
//
// In place in shared memory: the result object is created directly in this node's
// arena (created with its tensor header as metadata) and the group writes into
// it: AllReduce and Broadcast copy the input once into the result's region and run the
// group operation in place there; AllGather, ReduceScatter and Recv write the result
// region straight from the input. Nothing goes through a private buffer.
//
// Results: read-only Tensors viewing the result object in place (Tensor::in_store(),
// object_id() == out_id): contiguous (row-major), storage offset 0, the input's dtype.
//   AllReduceTensor      the input's shape
//   BroadcastTensor      the root's shape
//   AllGatherTensor      [size() * d0, d1, ...]: rank r's input at rows [r*d0, (r+1)*d0)
//   ReduceScatterTensor  [d0 / size(), d1, ...]: rows [rank*d0/size, (rank+1)*d0/size) of
//                        the reduction
//   RecvTensor           the sender's shape
// Input tensors must be contiguous (Tensor::is_contiguous; any storage offset; Clone()
// makes a contiguous copy). Reductions (AllReduce, ReduceScatter) support the dtypes
// the groups do: float16, float32, float64, int32, int64, uint8 (kAvg on integers
// truncates, as CollectiveGroup). Operations that only move bytes (Broadcast,
// AllGather, Send, Recv) take every dtype.
//
// Output ids: `out_id` names the result object in this node's store. Ranks on one node
// share that store, so each rank must pass its own id (put the rank in it, e.g.
// "grads-sum.rank3"); a taken id fails with ALREADY_EXISTS. Keep ids unique across the
// cluster too: Objects::Get on another node pulls whichever node's copy it finds first.
//
// Agreement: before moving any data every rank exchanges a small record (one
// AllGather of 1 KiB per rank; two for Broadcast; SendTensor/RecvTensor exchange a
// record each way) saying whether its own part is valid (input checks, output created)
// and what it passes (dtype and shape, op, root). So a bad argument on any rank makes
// EVERY rank return an error, no result object is left behind on any node, and the
// group stays usable. A rank whose own part was fine returns the failing rank's code
// with a message naming that rank. The round costs a few µs on one node (shared
// memory) and a Gloo round trip across nodes: small next to tensors of megabytes.
//
// Ownership: the caller keeps the group, the Objects and the input Tensor; they are
// borrowed for the call only. The returned Tensor pins the result object in this
// node's store until its last copy is destroyed; the object itself stays in the store
// (sealed, immutable) until someone deletes it (Objects::Delete), like any object put
// there.
//
// Threading: as CollectiveGroup: one thread at a time per group, and every rank makes
// the same calls (same op, dtype, shape, root, in the same order). The Objects may be
// shared with other threads.
//
// Errors (absl canonical codes):
//   INVALID_ARGUMENT   a dtype a reduction does not support (the message names it and
//                      lists the supported ones), a non-contiguous input, ranks passing
//                      different dtypes/shapes (the message names both ranks and their
//                      shapes), ops or roots, a scalar where dim 0 is needed,
//                      ReduceScatter's dim 0 not divisible by size(), a bad root or peer.
//   ALREADY_EXISTS     out_id is already in this node's store (see "Output ids").
//   RESOURCE_EXHAUSTED no room for the result in this node's store.
//   and the CollectiveGroup errors (ABORTED, DEADLINE_EXCEEDED, UNAVAILABLE,
//   FAILED_PRECONDITION) when the group fails during the call; then the group is broken
//   (see drover/collective.h) and the result object was aborted.
// On every error the result object is aborted (nothing stays in the store), except
// if reading back the just-sealed result fails (the store went away): then the
// result may stay, sealed and complete.
#ifndef DROVER_SDK_INCLUDE_DROVER_TENSOR_COLLECTIVES_H_
#define DROVER_SDK_INCLUDE_DROVER_TENSOR_COLLECTIVES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "drover/collective.h"
#include "drover/objects.h"
#include "drover/tensor.h"

namespace drover {

// Every rank ends with a tensor object `out_id` holding the reduction of all ranks'
// `in` (same dtype and shape on every rank).
absl::StatusOr<Tensor> AllReduceTensor(CollectiveGroup& group, Objects& objects,
                                       const Tensor& in, const std::string& out_id,
                                       ReduceOp op);

// Every rank ends with a copy of the root's tensor as `out_id`. `in` is read on the root
// only (it must be non-null there); other ranks may pass nullptr and learn the dtype
// and shape from the root.
absl::StatusOr<Tensor> BroadcastTensor(CollectiveGroup& group, Objects& objects,
                                       const Tensor* in, const std::string& out_id, int root);

// Every rank ends with all ranks' inputs concatenated along dim 0, in rank order. Every
// rank's input must have the same dtype and shape (ndim >= 1).
absl::StatusOr<Tensor> AllGatherTensor(CollectiveGroup& group, Objects& objects,
                                       const Tensor& in, const std::string& out_id);

// Each rank ends with its 1/size() slice (along dim 0) of the reduction of all ranks'
// inputs. Same dtype and shape everywhere; dim 0 divisible by size().
absl::StatusOr<Tensor> ReduceScatterTensor(CollectiveGroup& group, Objects& objects,
                                           const Tensor& in, const std::string& out_id,
                                           ReduceOp op);

// Point to point: SendTensor on one rank matches RecvTensor on `peer` with the same tag.
// The sender sends a header record, the receiver creates the result object and answers
// whether it could, then the data goes straight from the sender's tensor into the
// receiver's object. Either side's failure is reported to the other (both return an
// error, no object is left). Both calls block until the exchange is done; order
// exchanges as for CollectiveGroup::Send/Recv (two ranks that both SendTensor to each
// other first deadlock).
absl::Status SendTensor(CollectiveGroup& group, const Tensor& in, int peer, uint32_t tag = 0);
absl::StatusOr<Tensor> RecvTensor(CollectiveGroup& group, Objects& objects,
                                  const std::string& out_id, int peer, uint32_t tag = 0);

}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_TENSOR_COLLECTIVES_H_
