// Aborting Gloo's TCP transport from outside: Gloo has no public abort.
//
// Internal to collective/ (GlooGroup's AbortTransport, and its test). Thread-safe: may
// be called from any thread while another thread waits in a Gloo operation on the pair.
#ifndef DROVER_COLLECTIVE_GLOO_ABORT_H_
#define DROVER_COLLECTIVE_GLOO_ABORT_H_

#include <string>

#include "gloo/transport/pair.h"

namespace drover::collective::internal {

// Fails every operation pending on `pair` (a tcp pair; others are left alone), wakes the
// threads waiting on them with a gloo::IoException, and closes the connection, so the
// peer's operations fail too. `why` is the exception's message unless the pair had
// already failed (then its own error stands).
//
// Unlike Gloo's own signalException, this also reaches the unbound buffers the pair is
// in the middle of reading into or writing from: Gloo takes those off its pending lists
// when their payload starts to flow, so when the connection broke mid-payload their
// waits (waitRecv/waitSend) would otherwise sleep until the operation's timeout.
void AbortGlooPair(gloo::transport::Pair* pair, const std::string& why);

}  // namespace drover::collective::internal

#endif  // DROVER_COLLECTIVE_GLOO_ABORT_H_
