// Tasks and actors: call functions of your program on the cluster and get futures
// back, Ray-style.
//
//   drover::Tensor Normalize(drover::Tensor img, float scale);
//   int64_t Sum(std::vector<int64_t> xs);
//   Model* MakeModel(std::string path);
//   DROVER_REMOTE(Normalize, Sum, MakeModel, &Model::Predict);
//
//   int main(int argc, char** argv) {
//     if (absl::Status s = drover::Init(argc, argv); !s.ok()) { ...; return 1; }
//     drover::ObjectRef<drover::Tensor> img = drover::Put(LoadImage());
//     auto out = drover::Task(Normalize).Remote(img, 0.5f);       // 1 CPU by default
//     absl::StatusOr<drover::Tensor> t = drover::Get(out);
//     drover::Resources one_gpu;
//     one_gpu.gpus = 1;
//     auto model = drover::Actor(MakeModel).SetResources(one_gpu).Remote("w.bin");
//     auto pred = model.Task(&Model::Predict).Remote(out);
//   }
//
// The program is its own worker: the node agents start the same binary (shipped to
// every node as a content-addressed package) with an environment that makes Init serve
// tasks instead of returning. So call Init first thing in main, before work that a
// worker should not repeat.
//
// Futures: Remote returns an ObjectRef<T> at once. Get waits for the value; a task's
// failure (its error status or exception, a crash with its signal and stderr tail, a
// lost node) comes back from Get as an error naming the function and the node. Refs
// can be passed to other tasks as arguments: they are resolved before the task runs.
//
// Values: anything msgpack packs (numbers, strings, std containers, structs with
// MSGPACK_DEFINE) and drover::Tensor, whose data goes into the object store once and is
// read in place (zero copy) on the node that reads it.
//
// Thread safety: every function here may be called from any thread after Init.
#ifndef DROVER_SDK_INCLUDE_DROVER_TASK_H_
#define DROVER_SDK_INCLUDE_DROVER_TASK_H_

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "drover/internal/codec.h"
#include "drover/internal/registry.h"
#include "drover/internal/runtime_api.h"
#include "drover/tensor.h"

namespace drover {

// ---- the runtime ----

struct InitOptions {
  // The cluster, as for the CLI: empty = DROVER_ADDRESS / DROVER_TOKEN_FILE, then the
  // cluster `drover up` recorded ($DROVER_HOME/cluster.json).
  std::string address;
  std::string token_file;
  // TLS clusters: the cluster CA's certificate (empty: DROVER_TLS_CA, then the one
  // `drover up --tls` recorded; none: plain text).
  std::string tls_ca_file;
  // Files the workers need beside the binary are not shipped; the workers run in the
  // driver's working directory when it exists on their node.
  //
  // The program the workers run: empty for this binary (the usual case). A process that
  // is not itself a drover C++ program (the Python module, python/drover_module.cc)
  // names a C++ binary built with the SDK, whose registered functions (DROVER_REMOTE)
  // its DataLoaders call; it is shipped to the nodes like this binary would be, and
  // started with `worker_args` (its path is argv[0]).
  std::string worker_program;
  std::vector<std::string> worker_args;
};

// Connects this process to the cluster: inside a drover job (drover run/submit) as a
// part of that job, else as a new "driver" job that lives as long as this process.
// In a worker process started by a node agent, serves tasks and never returns.
// Errors: FAILED_PRECONDITION no cluster found (the message says how to start one),
// UNAVAILABLE the scheduler does not answer, ALREADY_EXISTS Init was called before.
absl::Status Init(int argc, char** argv, const InitOptions& options = {});
// Releases every lease, kills this driver's actors and frees its objects. Called at
// exit if not before. After it, calls fail with FAILED_PRECONDITION.
void Shutdown();
bool IsInitialized();
// True in a process an agent started to serve tasks (Init will serve, never return).
// For programs that must do something before Init in a driver only.
bool RunningAsWorker();
// The job this process belongs to ("" before Init).
std::string JobId();
// The node this process runs on ("" before Init, or for a driver on a machine with no
// drover agent).
std::string NodeId();

// ---- objects ----

namespace internal {
struct RefAccess;    // below: for drover's own code, not for users
struct ActorAccess;  // below ActorHandle, likewise
}  // namespace internal

// A future of a T: the result of a task, actor call or Put. Copies share the object;
// when the last copy (in the owning process) goes, the object is freed.
template <typename T>
class ObjectRef {
 public:
  using value_type = T;
  // An invalid ref. Valid ones come from Put, Remote, or as a task's argument.
  ObjectRef() = default;

  bool valid() const { return state_ != nullptr; }
  // The object's id ("" for an invalid ref).
  std::string id() const { return state_ ? internal::RefId(*state_) : std::string(); }

 private:
  friend struct internal::RefAccess;
  explicit ObjectRef(std::shared_ptr<internal::RefState> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::RefState> state_;
};

namespace internal {

// An ObjectRef over a reference's state, and a ref's state: for the templates of this
// file and code inside drover (sdk/runtime/). SDK handles expose their internal state
// only this way (as Objects, Tensor, Queue and SharedTensor do), so that user code
// cannot make handles from it.
struct RefAccess {
  template <typename T>
  static ObjectRef<T> Make(std::shared_ptr<RefState> state) {
    return ObjectRef<T>(std::move(state));
  }
  template <typename T>
  static const std::shared_ptr<RefState>& State(const ObjectRef<T>& ref) {
    return ref.state_;
  }
};

}  // namespace internal

// Puts `value` into the cluster: small values stay in this process, larger ones (and
// every tensor above a few KiB) go into this node's object store once. Never fails
// itself: a value that does not encode gives a ref whose Get fails with
// INVALID_ARGUMENT naming why.
template <typename T>
ObjectRef<std::decay_t<T>> Put(T&& value) {
  absl::StatusOr<internal::EncodedValue> enc = internal::Encode(value, internal::DefaultCodecContext());
  if (!enc.ok()) return internal::RefAccess::Make<std::decay_t<T>>(internal::FailedRef(enc.status()));
  return internal::RefAccess::Make<std::decay_t<T>>(internal::PutValue(*std::move(enc)));
}

// Waits up to `timeout` for the object and returns its value. Tensors come back as
// zero-copy views of the node's store. DEADLINE_EXCEEDED after the timeout (the
// message says what the task waits for, e.g. "pending: no node has 4 GPUs"); the
// task's own error otherwise.
template <typename T>
absl::StatusOr<T> Get(const ObjectRef<T>& ref, absl::Duration timeout = absl::InfiniteDuration()) {
  static_assert(!std::is_void_v<T>, "use drover::Get(ObjectRef<void>) (returns absl::Status)");
  if (!ref.valid()) return absl::InvalidArgumentError("Get of an empty ObjectRef");
  absl::StatusOr<internal::ValueView> view = internal::GetValue(internal::RefAccess::State(ref), timeout);
  if (!view.ok()) return view.status();
  return internal::Decode<T>(*view, internal::DefaultCodecContext());
}
absl::Status Get(const ObjectRef<void>& ref, absl::Duration timeout = absl::InfiniteDuration());

// Every value, in order; the first error if any fails (or the timeout passes).
template <typename T>
absl::StatusOr<std::vector<T>> Get(const std::vector<ObjectRef<T>>& refs,
                                   absl::Duration timeout = absl::InfiniteDuration()) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<T> out;
  out.reserve(refs.size());
  for (const ObjectRef<T>& r : refs) {
    absl::StatusOr<T> v = Get(r, deadline - absl::Now());
    if (!v.ok()) return v.status();
    out.push_back(*std::move(v));
  }
  return out;
}

template <typename T>
struct WaitResult {
  // Finished (successfully or not), in the order they finished.
  std::vector<ObjectRef<T>> ready;
  // The rest, in the order given.
  std::vector<ObjectRef<T>> unready;
};

// Waits until `num_ready` of `refs` are finished or `timeout` passes; returns the
// finished ones in completion order and the others.
template <typename T>
WaitResult<T> Wait(const std::vector<ObjectRef<T>>& refs, int num_ready,
                   absl::Duration timeout = absl::InfiniteDuration()) {
  std::vector<std::shared_ptr<internal::RefState>> states;
  states.reserve(refs.size());
  for (const auto& r : refs) states.push_back(internal::RefAccess::State(r));
  std::vector<size_t> done = internal::WaitRefs(states, num_ready, timeout);
  WaitResult<T> out;
  std::vector<bool> is_ready(refs.size(), false);
  for (size_t i : done) {
    is_ready[i] = true;
    out.ready.push_back(refs[i]);
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    if (!is_ready[i]) out.unready.push_back(refs[i]);
  }
  return out;
}

// Cancels the task making `ref`: one not started yet never runs; a running one is
// stopped only with force (its worker is killed). Get then fails with CANCELLED.
template <typename T>
absl::Status Cancel(const ObjectRef<T>& ref, bool force = false) {
  if (!ref.valid()) return absl::InvalidArgumentError("Cancel of an empty ObjectRef");
  return internal::CancelRef(internal::RefAccess::State(ref), force);
}

// ---- tasks ----

namespace internal {

template <typename T>
struct IsObjectRef : std::false_type {};
template <typename T>
struct IsObjectRef<ObjectRef<T>> : std::true_type {
  using value_type = T;
};

// Encodes one argument for a parameter of type P.
template <typename P, typename A>
TaskArgument MakeArgument(A&& a) {
  using D = std::decay_t<A>;
  using PD = std::decay_t<P>;
  TaskArgument out;
  if constexpr (IsObjectRef<D>::value && !IsObjectRef<PD>::value) {
    static_assert(std::is_same_v<typename IsObjectRef<D>::value_type, PD>,
                  "an ObjectRef<T> argument must match the parameter's type T");
    out.ref = RefAccess::State(a);
    if (out.ref == nullptr) out.error = absl::InvalidArgumentError("an empty ObjectRef was passed");
  } else {
    static_assert(std::is_convertible_v<A&&, PD>,
                  "the argument cannot be converted to the remote function's parameter type");
    absl::StatusOr<EncodedValue> enc = Encode(static_cast<PD>(std::forward<A>(a)), DefaultCodecContext());
    if (enc.ok()) {
      out.value = *std::move(enc);
    } else {
      out.error = enc.status();
    }
  }
  return out;
}

template <typename... P, typename... A, size_t... I>
std::vector<TaskArgument> MakeArguments(std::index_sequence<I...>, A&&... a) {
  std::vector<TaskArgument> out;
  out.reserve(sizeof...(A));
  (out.push_back(MakeArgument<std::tuple_element_t<I, std::tuple<P...>>>(std::forward<A>(a))), ...);
  return out;
}

template <typename Self>
class CallBuilder {
 public:
  // Resources the call needs (default: 1 CPU).
  Self& SetResources(Resources r) {
    options_.resources = std::move(r);
    return self();
  }
  // The name in errors and logs (default: the function's name).
  Self& SetName(std::string name) {
    options_.name = std::move(name);
    return self();
  }
  // Run on this node (soft: preferably there).
  Self& SetNodeAffinity(std::string node_id, bool soft = false) {
    options_.node_id = std::move(node_id);
    options_.soft_affinity = soft;
    return self();
  }
  // Spread such calls over the nodes instead of filling one first.
  Self& SetSpread(bool spread = true) {
    options_.spread = spread;
    return self();
  }

 protected:
  Self& self() { return static_cast<Self&>(*this); }
  CallOptions options_;
};

}  // namespace internal

// A task of a remote function, being configured. From drover::Task(f).
template <typename R, typename... P>
class TaskCaller : public internal::CallBuilder<TaskCaller<R, P...>> {
 public:
  using Result = typename internal::RemoteResult<R>::type;
  explicit TaskCaller(std::string key) : key_(std::move(key)) {}

  // Retries when the task's worker dies (default 3). Errors the task returns or throws
  // are never retried.
  TaskCaller& SetMaxRetries(int n) {
    this->options_.max_retries = n;
    return *this;
  }

  // Submits the task with these arguments (values, or ObjectRefs resolved first) and
  // returns the future of its result at once. Never fails itself: an argument that does
  // not encode, an unregistered function or a missing drover::Init make the ref's Get
  // fail with that error.
  template <typename... A>
  ObjectRef<Result> Remote(A&&... args) {
    static_assert(sizeof...(A) == sizeof...(P), "wrong number of arguments for the remote function");
    return internal::RefAccess::Make<Result>(internal::SubmitTask(
        key_, this->options_,
        internal::MakeArguments<P...>(std::index_sequence_for<A...>(), std::forward<A>(args)...)));
  }

 private:
  std::string key_;
};

// A task of `f`, which must be registered with DROVER_REMOTE (else Get of its result
// says so, naming it).
template <typename R, typename... P>
TaskCaller<R, P...> Task(R (*f)(P...)) {
  return TaskCaller<R, P...>(internal::FunctionKey(f));
}

// ---- actors ----

template <typename T>
class ActorHandle;

// A method call on an actor, being configured. From ActorHandle<T>::Task(&T::Method).
template <typename T, typename R, typename... P>
class ActorTaskCaller : public internal::CallBuilder<ActorTaskCaller<T, R, P...>> {
 public:
  using Result = typename internal::RemoteResult<R>::type;
  ActorTaskCaller(std::shared_ptr<internal::ActorState> actor, std::string key)
      : actor_(std::move(actor)), key_(std::move(key)) {}

  // Sends the call; calls from one caller run in the order they were sent. Like
  // TaskCaller::Remote, its errors come back from Get of the returned ref.
  template <typename... A>
  ObjectRef<Result> Remote(A&&... args) {
    static_assert(sizeof...(A) == sizeof...(P), "wrong number of arguments for the actor method");
    return internal::RefAccess::Make<Result>(internal::SubmitActorTask(
        actor_, key_, this->options_,
        internal::MakeArguments<P...>(std::index_sequence_for<A...>(), std::forward<A>(args)...)));
  }

 private:
  std::shared_ptr<internal::ActorState> actor_;
  std::string key_;
};

// A handle on an actor: copyable, and passable to tasks and other actors as an
// argument (a task receiving one calls the same actor).
template <typename T>
class ActorHandle {
 public:
  // An invalid handle. Valid ones come from Actor(...).Remote, GetActor, or as a task's
  // argument.
  ActorHandle() = default;

  template <typename R, typename... P>
  ActorTaskCaller<T, R, P...> Task(R (T::*method)(P...)) const {
    return ActorTaskCaller<T, R, P...>(state_, internal::FunctionKey(method));
  }
  template <typename R, typename... P>
  ActorTaskCaller<T, R, P...> Task(R (T::*method)(P...) const) const {
    return ActorTaskCaller<T, R, P...>(state_, internal::FunctionKey(method));
  }

  bool valid() const { return state_ != nullptr; }
  std::string id() const { return state_ ? internal::ActorId(*state_) : std::string(); }
  // Waits until the actor's factory has run: OK, or why the actor is dead.
  absl::Status WaitReady(absl::Duration timeout = absl::InfiniteDuration()) const {
    if (!state_) return absl::InvalidArgumentError("an empty ActorHandle");
    return internal::WaitActorReady(state_, timeout);
  }

 private:
  friend struct internal::ActorAccess;
  explicit ActorHandle(std::shared_ptr<internal::ActorState> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::ActorState> state_;
};

namespace internal {

// An ActorHandle over an actor's state, and a handle's state (see RefAccess).
struct ActorAccess {
  template <typename T>
  static ActorHandle<T> Make(std::shared_ptr<ActorState> state) {
    return ActorHandle<T>(std::move(state));
  }
  template <typename T>
  static const std::shared_ptr<ActorState>& State(const ActorHandle<T>& actor) {
    return actor.state_;
  }
};

}  // namespace internal

// An actor being configured. From drover::Actor(factory).
template <typename T, typename... P>
class ActorCreator : public internal::CallBuilder<ActorCreator<T, P...>> {
 public:
  explicit ActorCreator(std::string key) : key_(std::move(key)) {}

  // Restarts (the factory runs again in a new worker) after its worker dies.
  ActorCreator& SetMaxRestarts(int n) {
    this->options_.max_restarts = n;
    return *this;
  }

  // Creates the actor (asynchronously) and returns its handle. A name makes it
  // findable with GetActor<T>(name) (SetName); names are unique in the cluster. Never
  // fails itself: why creation failed comes back from WaitReady and every call's Get.
  template <typename... A>
  ActorHandle<T> Remote(A&&... args) {
    static_assert(sizeof...(A) == sizeof...(P), "wrong number of arguments for the actor factory");
    return internal::ActorAccess::Make<T>(internal::CreateActor(
        key_, this->options_,
        internal::MakeArguments<P...>(std::index_sequence_for<A...>(), std::forward<A>(args)...)));
  }

 private:
  std::string key_;
};

// An actor made by `factory` (a registered function returning T*; the actor owns it).
template <typename T, typename... P>
ActorCreator<T, P...> Actor(T* (*factory)(P...)) {
  return ActorCreator<T, P...>(internal::FunctionKey(factory));
}

// The named actor, waiting up to `timeout` for it to be created. NOT_FOUND if no live
// actor has that name.
template <typename T>
absl::StatusOr<ActorHandle<T>> GetActor(const std::string& name,
                                        absl::Duration timeout = absl::Seconds(10)) {
  absl::StatusOr<std::shared_ptr<internal::ActorState>> s = internal::LookupActor(name, timeout);
  if (!s.ok()) return s.status();
  return internal::ActorAccess::Make<T>(*std::move(s));
}

// Kills the actor's worker; it is not restarted. Once it returns OK, every later call on a
// handle to it in this process fails at once with the kill's reason; calls in flight
// fail as the worker dies.
template <typename T>
absl::Status Kill(const ActorHandle<T>& actor) {
  if (!actor.valid()) return absl::InvalidArgumentError("Kill of an empty ActorHandle");
  return internal::KillActor(internal::ActorAccess::State(actor));
}

}  // namespace drover

// Tensors travel as a header and their bytes (small) or the store object holding them;
// ActorHandles as their actor id.
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
namespace adaptor {

template <>
struct pack<drover::Tensor> {
  template <typename Stream>
  packer<Stream>& operator()(packer<Stream>& o, const drover::Tensor& t) const {
    const std::string ext = drover::internal::EncodeTensorExt(t);
    o.pack_ext(ext.size(), drover::internal::kTensorExtType);
    o.pack_ext_body(ext.data(), static_cast<uint32_t>(ext.size()));
    return o;
  }
};

template <>
struct convert<drover::Tensor> {
  const msgpack::object& operator()(const msgpack::object& o, drover::Tensor& t) const {
    if (o.type != msgpack::type::EXT || o.via.ext.type() != drover::internal::kTensorExtType) {
      throw drover::internal::DecodeError("expected a tensor, got " + drover::internal::DescribeMsgpack(o));
    }
    t = drover::internal::DecodeTensorExt(o.via.ext.data(), o.via.ext.size);
    return o;
  }
};

template <typename T>
struct pack<drover::ActorHandle<T>> {
  template <typename Stream>
  packer<Stream>& operator()(packer<Stream>& o, const drover::ActorHandle<T>& v) const {
    o.pack(v.id());
    return o;
  }
};

template <typename T>
struct convert<drover::ActorHandle<T>> {
  const msgpack::object& operator()(const msgpack::object& o, drover::ActorHandle<T>& v) const {
    v = drover::internal::ActorAccess::Make<T>(drover::internal::ActorFromId(o.as<std::string>()));
    return o;
  }
};

}  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack

#endif  // DROVER_SDK_INCLUDE_DROVER_TASK_H_
