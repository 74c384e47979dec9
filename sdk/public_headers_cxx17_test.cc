// The public headers are C++17: this file and every header under include/drover/
// (the generated public_headers_cxx17.inc includes each one) compile with
// -std=c++17 -pedantic-errors, so a C++20-only construct in a header (a designated
// initializer, a concept) fails the build here rather than in a user's strict build.
#include "sdk/public_headers_cxx17.inc"

#include <memory>
#include <type_traits>

#include "gtest/gtest.h"

namespace drover {
namespace {

// The defaults the headers spell without designated initializers.
TEST(PublicHeadersCxx17Test, CallsDefaultToOneCpu) {
  const internal::CallOptions call;
  EXPECT_EQ(call.resources.cpus, 1);
  EXPECT_EQ(call.resources.gpus, 0);
  EXPECT_EQ(call.resources.memory_bytes, 0);
  EXPECT_TRUE(call.resources.custom.empty());

  const LoaderOptions loader;
  EXPECT_EQ(loader.resources.cpus, 1);
  EXPECT_EQ(loader.resources.gpus, 0);
}

// User code in C++17 sets options field by field.
TEST(PublicHeadersCxx17Test, OptionsWithoutDesignatedInitializers) {
  QueueOptions options;
  options.capacity = 8;
  options.name = "frames";
  EXPECT_EQ(options.capacity, 8u);
  EXPECT_FALSE(options.keep_until_drained);
  EXPECT_EQ(QueueInfo{}.size, 0u);

  Resources one_gpu;
  one_gpu.gpus = 1;
  EXPECT_EQ(one_gpu.cpus, 0);
}

// Handles over internal state are made only through their friend Access structs: user
// code cannot mint one from another handle's state (of the wrong type or kind).
static_assert(!std::is_constructible_v<ObjectRef<int>, std::shared_ptr<internal::RefState>>);
struct Counter {};
static_assert(!std::is_constructible_v<ActorHandle<Counter>, std::shared_ptr<internal::ActorState>>);
static_assert(!std::is_constructible_v<Queue<int>, std::shared_ptr<internal::QueueClient>>);
static_assert(!std::is_constructible_v<by_name::AnyQueue, std::shared_ptr<internal::QueueClient>>);
static_assert(!std::is_constructible_v<by_name::AnyRef, std::shared_ptr<internal::RefState>>);
// By-name values own store objects: moved, never copied, and not made from internal state.
static_assert(!std::is_copy_constructible_v<by_name::EncodedValue>);
static_assert(!std::is_copy_constructible_v<by_name::ReceivedValue>);
static_assert(!std::is_constructible_v<by_name::EncodedValue, internal::EncodedValue>);
static_assert(!std::is_constructible_v<by_name::ReceivedValue, internal::OwnedValue>);

}  // namespace
}  // namespace drover
