// Engine-owned state (runtime/state.h) and the kernels' sharing declarations (ops::Sharing).
//
// A decode loop through graphs of the two KV-cache forms, each step's outputs compared bit for bit
// with the same engine run without a state, its past given explicitly (the previous step's present,
// a copy): a Concat cache that grows (written in place, declared by Concat), a fixed TensorScatter
// cache (written in place, declared by TensorScatter), and a pair whose producer declares nothing
// (two buffers, swapped). After the first decode step no run allocates a tensor. The contract: a
// state input given by the caller, a second concurrent use, growth past max_length, a failed run
// after an in-place write (the state then refuses runs until reset), pairs that do not fit.
#include "runtime/state.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "runtime/engine.h"
#include "support/engine_checks.h"
#include "support/engine_for.h"
#include "support/make_tensor.h"
#include "support/same_bits.h"

using namespace reforge;
using test_support::same_bits;

namespace {

ir::Node node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs, int opset = 18) {
  ir::Node n;
  n.name = outs[0];
  n.op_type = op;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  return n;
}

ir::Dim sym(const char* s) { return ir::Dim{-1, s}; }

// The Hugging Face form: present = Concat(past, new, axis 2) with new [1, 2, S, 4] made from x
// [1, S, 4]; y reads the whole present (a sum over the length) and plen is the past length (a
// shape subgraph reading past after the Concat: it reads dimensions only). With `viewed`, the
// Concat reads past through an Identity, so it cannot write in place.
ir::Graph concat_cache_graph(bool viewed = false) {
  ir::Graph g;
  g.opsets[""] = 18;
  g.inputs.push_back({"x", DType::Float32, true, {ir::Dim{1}, sym("S"), ir::Dim{4}}});
  g.inputs.push_back({"past", DType::Float32, true, {ir::Dim{1}, ir::Dim{2}, sym("P"), ir::Dim{4}}});
  g.initializers["w"] = test_support::make<float>({4}, {0.5f, -1.f, 2.f, 0.25f});
  g.initializers["axis1"] = test_support::make<int64_t>({1}, {1});
  g.initializers["axis2"] = test_support::make<int64_t>({1}, {2});
  g.nodes.push_back(node("Mul", {"x", "w"}, {"kx"}));
  g.nodes.push_back(node("Unsqueeze", {"kx", "axis1"}, {"k1"}));
  g.nodes.push_back(node("Neg", {"k1"}, {"k2"}));
  ir::Node heads = node("Concat", {"k1", "k2"}, {"knew"});
  heads.attrs["axis"] = ir::int_attr("axis", 1);
  g.nodes.push_back(heads);
  std::string past = "past";
  if (viewed) {
    g.nodes.push_back(node("Identity", {"past"}, {"past_view"}));
    past = "past_view";
  }
  ir::Node cat = node("Concat", {past, "knew"}, {"present"});
  cat.attrs["axis"] = ir::int_attr("axis", 2);
  g.nodes.push_back(cat);
  ir::Node sum = node("ReduceSum", {"present", "axis2"}, {"y"});
  sum.attrs["keepdims"] = ir::int_attr("keepdims", 0);
  g.nodes.push_back(sum);
  ir::Node shape = node("Shape", {"past"}, {"plen"});
  shape.attrs["start"] = ir::int_attr("start", 2);
  shape.attrs["end"] = ir::int_attr("end", 3);
  g.nodes.push_back(shape);
  g.outputs.push_back({"y", DType::Float32, true, {ir::Dim{1}, ir::Dim{2}, ir::Dim{4}}});
  g.outputs.push_back({"present", DType::Float32, true, {ir::Dim{1}, ir::Dim{2}, sym("T"), ir::Dim{4}}});
  g.outputs.push_back({"plen", DType::Int64, true, {ir::Dim{1}}});
  return g;
}

// The ONNX 24 form: a fixed cache [1, 2, M, 4], the new rows written at `pos` by TensorScatter.
ir::Graph scatter_cache_graph() {
  ir::Graph g;
  g.opsets[""] = 24;
  g.inputs.push_back({"x", DType::Float32, true, {ir::Dim{1}, ir::Dim{2}, sym("S"), ir::Dim{4}}});
  g.inputs.push_back({"pos", DType::Int64, true, {ir::Dim{1}}});
  g.inputs.push_back({"cache", DType::Float32, true, {ir::Dim{1}, ir::Dim{2}, sym("M"), ir::Dim{4}}});
  g.nodes.push_back(node("TensorScatter", {"cache", "x", "pos"}, {"new_cache"}, 24));
  g.nodes.push_back(node("Sigmoid", {"new_cache"}, {"y"}, 24));
  g.outputs.push_back({"y", DType::Float32, true, {ir::Dim{1}, ir::Dim{2}, sym("M"), ir::Dim{4}}});
  g.outputs.push_back({"new_cache", DType::Float32, true, {ir::Dim{1}, ir::Dim{2}, sym("M"), ir::Dim{4}}});
  return g;
}

// `steps` steps (the first a prompt of 3 positions, then one at a time) through `e` with a State
// and through `ref` with the past given explicitly; every output equal, bit for bit. Returns the
// allocations of each step with the state.
std::vector<int64_t> decode_against_reference(const runtime::Engine& e, const runtime::Engine& ref,
                                              runtime::State& state, int steps) {
  std::vector<int64_t> allocations;
  Tensor past = Tensor::empty(DType::Float32, {1, 2, 0, 4});
  for (int step = 0; step < steps; ++step) {
    const int64_t s = step == 0 ? 3 : 1;
    const Tensor x = test_support::random_floats({1, s, 4}, static_cast<uint32_t>(100 + step));
    runtime::RunOptions with_state;
    with_state.state = &state;
    const std::vector<Tensor> got = e.run({{"x", x}}, with_state);
    allocations.push_back(e.stats().last_run_allocations);
    const std::vector<Tensor> want = ref.run({{"x", x}, {"past", past}});
    for (size_t o = 0; o < want.size(); ++o)
      EXPECT_TRUE(same_bits(got[o], want[o]))
          << "step " << step << " output " << o << ": " << got[o].describe() << " vs " << want[o].describe();
    EXPECT_TRUE(same_bits(state.value("past"), want[1])) << "step " << step;
    EXPECT_EQ(state.length(), want[1].dim(2));
    past = want[1].clone();
  }
  return allocations;
}

TEST(State, PairsProvenByStructure) {
  const auto pairs = runtime::state_pairs(concat_cache_graph());
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].input, "past");
  EXPECT_EQ(pairs[0].output, "present");
  const auto scatter = runtime::state_pairs(scatter_cache_graph());
  ASSERT_EQ(scatter.size(), 1u);
  EXPECT_EQ(scatter[0].input, "cache");
  EXPECT_EQ(scatter[0].output, "new_cache");
  // Through an Identity nothing is proven.
  EXPECT_TRUE(runtime::state_pairs(concat_cache_graph(true)).empty());
  // A device plan's form: the Concat reads a ToDevice copy of the past, a ToHost copy of it is
  // the present.
  ir::Graph placed = concat_cache_graph();
  for (ir::Node& n : placed.nodes) {
    for (auto& in : n.inputs)
      if (in == "past") in = "past::device";
    for (auto& out : n.outputs)
      if (out == "present") out = "present::device";
  }
  ir::Node to_device = node("ToDevice", {"past"}, {"past::device"}, 1),
           to_host = node("ToHost", {"present::device"}, {"present"}, 1);
  to_device.domain = to_host.domain = "reforge";
  placed.nodes.insert(placed.nodes.begin(), to_device);
  placed.nodes.push_back(to_host);
  const auto through = runtime::state_pairs(placed);
  ASSERT_EQ(through.size(), 1u);
  EXPECT_EQ(through[0].input, "past");
  EXPECT_EQ(through[0].output, "present");
}

TEST(State, GrowingCacheInPlaceEqualsStatelessRuns) {
  const runtime::Engine e = test_support::engine_for(concat_cache_graph());
  const runtime::Engine ref = test_support::engine_for(concat_cache_graph());
  runtime::StateOptions so;
  so.max_length = 24;
  runtime::State state(e, so);
  EXPECT_EQ(state.allocations(), 1);  // its one buffer
  const std::vector<int64_t> allocations = decode_against_reference(e, ref, state, 20);
  // Warm-up: the prompt's arena (and y's and plen's buffers), the first decode step's arena; then
  // nothing, at any length (one shape bucket: the length axis at max_length).
  EXPECT_GT(allocations[0], 0);
  for (size_t i = 2; i < allocations.size(); ++i) EXPECT_EQ(allocations[i], 0) << "step " << i;
  EXPECT_EQ(state.allocations(), 3);  // the pair's one buffer (no second: in place), y's, plen's
  EXPECT_EQ(e.stats().inference_passes, 2);

  // New sequences of the same lengths: the second keeps each length's shape values in the memo
  // (one small tensor per step: plen), the third reads them from there and allocates nothing.
  for (int sequence = 2; sequence <= 3; ++sequence) {
    state.reset();
    EXPECT_EQ(state.length(), 0);
    const std::vector<int64_t> again = decode_against_reference(e, ref, state, 20);
    for (size_t i = 2; i < again.size(); ++i)
      EXPECT_EQ(again[i], sequence == 2 ? 1 : 0) << "sequence " << sequence << ", step " << i;
  }
  EXPECT_EQ(state.allocations(), 3);
}

TEST(State, UndeclaredProducerUsesTwoBuffers) {
  // past reaches the Concat through an Identity: not the Concat's own input, so not in place.
  const runtime::Engine e = test_support::engine_for(concat_cache_graph(true));
  const runtime::Engine ref = test_support::engine_for(concat_cache_graph(true));
  runtime::StateOptions so;
  so.pairs = {{"past", "present"}};
  so.max_length = 16;
  runtime::State state(e, so);
  const std::vector<int64_t> allocations = decode_against_reference(e, ref, state, 12);
  for (size_t i = 2; i < allocations.size(); ++i) EXPECT_EQ(allocations[i], 0) << "step " << i;
  EXPECT_EQ(state.allocations(), 4);  // two buffers for the pair, y's, plen's
}

TEST(State, FixedCacheScatteredInPlace) {
  const ir::Graph g = scatter_cache_graph();
  const runtime::Engine e = test_support::engine_for(g);
  const runtime::Engine ref = test_support::engine_for(g);
  runtime::StateOptions so;
  so.dims = {{"M", 10}};
  runtime::State state(e, so);
  Tensor cache = Tensor::empty(DType::Float32, {1, 2, 10, 4});
  int64_t at = 0;
  for (int step = 0; step < 6; ++step) {
    const int64_t s = step == 0 ? 4 : 1;
    const Tensor x = test_support::random_floats({1, 2, s, 4}, static_cast<uint32_t>(7 + step));
    const Tensor pos = test_support::make<int64_t>({1}, {at});
    runtime::RunOptions ro;
    ro.state = &state;
    const std::vector<Tensor> got = e.run({{"x", x}, {"pos", pos}}, ro);
    if (step > 1) {
      EXPECT_EQ(e.stats().last_run_allocations, 0) << "step " << step;
    }
    const std::vector<Tensor> want = ref.run({{"x", x}, {"pos", pos}, {"cache", cache}});
    EXPECT_TRUE(same_bits(got[0], want[0])) << "step " << step;
    EXPECT_TRUE(same_bits(state.value("cache"), want[1])) << "step " << step;
    cache = want[1].clone();
    at += s;
  }
  EXPECT_EQ(state.allocations(), 2);  // the cache (no second buffer: in place) and y's
  // reset() zero-fills a fixed cache.
  state.reset();
  EXPECT_TRUE(same_bits(state.value("cache"), Tensor::empty(DType::Float32, {1, 2, 10, 4})));
}

TEST(State, ContractIsEnforced) {
  const runtime::Engine e = test_support::engine_for(concat_cache_graph());
  runtime::StateOptions so;
  so.max_length = 4;
  runtime::State state(e, so);
  runtime::RunOptions ro;
  ro.state = &state;
  const Tensor x3 = test_support::random_floats({1, 3, 4}, 1);
  const Tensor x1 = test_support::random_floats({1, 1, 4}, 2);
  // The state's input is not the caller's to give.
  EXPECT_NE(test_support::error_of([&] {
              e.run({{"x", x1}, {"past", Tensor::empty(DType::Float32, {1, 2, 0, 4})}}, ro);
            }).find("carried by the state"),
            std::string::npos);
  e.run({{"x", x3}}, ro);
  e.run({{"x", x1}}, ro);
  EXPECT_EQ(state.length(), 4);
  const Tensor before = state.value("past").clone();
  // Past max_length: refused before anything is written; the state is as it was.
  const std::string grow = test_support::error_of([&] { e.run({{"x", x1}}, ro); });
  EXPECT_NE(grow.find("max_length 4"), std::string::npos) << grow;
  EXPECT_FALSE(state.needs_reset());
  EXPECT_TRUE(same_bits(state.value("past"), before));
  // Another engine's state.
  const runtime::Engine other = test_support::engine_for(concat_cache_graph());
  EXPECT_NE(test_support::error_of([&] { other.run({{"x", x1}}, ro); }).find("another engine"), std::string::npos);
  // Pairs that do not fit the graph.
  auto error_for = [&](runtime::StateOptions o) {
    return test_support::error_of([&] { runtime::State s(e, std::move(o)); });
  };
  runtime::StateOptions bad;
  bad.max_length = 4;
  bad.pairs = {{"past", "y"}};
  EXPECT_NE(error_for(bad).find("one rank"), std::string::npos) << error_for(bad);
  bad.pairs = {{"pastt", "present"}};
  EXPECT_NE(error_for(bad).find("'pastt' is not a graph input"), std::string::npos);
  bad.pairs = {{"past", "present"}};
  bad.max_length = 0;
  EXPECT_NE(error_for(bad).find("max_length must be > 0"), std::string::npos);
}

TEST(State, FailedRunAfterAnInPlaceWriteNeedsReset) {
  // y = present + bias: a bias of the wrong shape fails the Add after the Concat wrote in place.
  ir::Graph g = concat_cache_graph();
  g.inputs.push_back({"bias", DType::Float32, true, {ir::Dim{1}, ir::Dim{2}, sym("B"), ir::Dim{4}}});
  g.nodes.push_back(node("Add", {"present", "bias"}, {"biased"}));
  g.outputs.push_back({"biased", DType::Float32, true, {ir::Dim{1}, ir::Dim{2}, sym("T"), ir::Dim{4}}});
  const runtime::Engine e = test_support::engine_for(g);
  runtime::StateOptions so;
  so.max_length = 8;
  runtime::State state(e, so);
  runtime::RunOptions ro;
  ro.state = &state;
  auto run = [&](int64_t s, int64_t b) {
    return e.run(
        {{"x", test_support::random_floats({1, s, 4}, 3)}, {"bias", test_support::random_floats({1, 2, b, 4}, 4)}}, ro);
  };
  run(2, 2);
  run(1, 3);
  EXPECT_NE(test_support::error_of([&] { run(1, 2); }).find("biased"), std::string::npos);
  EXPECT_TRUE(state.needs_reset());
  EXPECT_NE(test_support::error_of([&] { run(1, 4); }).find("needs reset"), std::string::npos);
  state.reset();
  EXPECT_FALSE(state.needs_reset());
  run(2, 2);
  EXPECT_EQ(state.length(), 2);
}

// Decoding in a window (State::set_window): the input keeps the window's length, the sequence at
// its end equal bit for bit to a growing state's, zeros before it; y (a sum over the length, which
// the zeros do not change) equals the growing run's; a full window moves to a longer one.
TEST(State, WindowKeepsTheInputLengthAndTheSequence) {
  const runtime::Engine e = test_support::engine_for(concat_cache_graph());
  runtime::StateOptions so;
  so.max_length = 13;
  runtime::State growing(e, so), windowed(e, so);
  runtime::RunOptions rg, rw;
  rg.state = &growing;
  rw.state = &windowed;
  const Tensor x3 = test_support::random_floats({1, 3, 4}, 1);
  e.run({{"x", x3}}, rg);
  e.run({{"x", x3}}, rw);
  // The sequence of `growing` at the end of `windowed`'s window, zeros before it.
  auto check_window = [&](int step) {
    const int64_t w = windowed.window(), f = windowed.filled();
    ASSERT_EQ(f, growing.length()) << "step " << step;
    const Tensor v = windowed.value("past"), g = growing.value("past");
    ASSERT_EQ(v.shape(), (Shape{1, 2, w, 4})) << "step " << step;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < w; ++i)
        for (int64_t d = 0; d < 4; ++d) {
          const float got = v.data<float>()[(h * w + i) * 4 + d];
          const float want = i < w - f ? 0.f : g.data<float>()[(h * f + i - (w - f)) * 4 + d];
          ASSERT_EQ(got, want) << "step " << step << ", head " << h << ", position " << i;
        }
  };
  EXPECT_NE(test_support::error_of([&] { windowed.set_window(3); }).find("must be longer"), std::string::npos);
  EXPECT_NE(test_support::error_of([&] { windowed.set_window(13); }).find("past max_length 13"), std::string::npos);
  windowed.set_window(5);
  EXPECT_EQ(windowed.window(), 5);
  EXPECT_EQ(windowed.length(), 5);
  check_window(0);
  int moves = 0;
  for (int step = 1; step <= 8; ++step) {
    if (windowed.filled() == windowed.window()) {
      windowed.set_window(windowed.window() + 6);
      ++moves;
    }
    const Tensor x1 = test_support::random_floats({1, 1, 4}, 10 + step);
    const auto want = e.run({{"x", x1}}, rg);
    const auto got = e.run({{"x", x1}}, rw);
    ASSERT_EQ(got[0].shape(), want[0].shape());
    for (int64_t i = 0; i < want[0].numel(); ++i)
      EXPECT_NEAR(got[0].data<float>()[i], want[0].data<float>()[i], 1e-5f) << "y[" << i << "], step " << step;
    EXPECT_EQ(got[2].data<int64_t>()[0], windowed.window()) << "plen: the past's length is the window's";
    EXPECT_EQ(got[1].dim(2), windowed.window() + 1) << "present: the window and the new position";
    check_window(step);
  }
  EXPECT_EQ(moves, 1);  // 5 holds 3 + 2, then 11
  // A run in a window adds exactly one position; refused before the state changes.
  const std::string two = test_support::error_of([&] { e.run({{"x", test_support::random_floats({1, 2, 4}, 5)}}, rw); });
  EXPECT_NE(two.find("adds exactly one"), std::string::npos) << two;
  windowed.reset();
  EXPECT_EQ(windowed.window(), 0);
  EXPECT_EQ(windowed.length(), 0);
  e.run({{"x", x3}}, rw);
  EXPECT_EQ(windowed.length(), 3);
}

TEST(State, SequencesOnTwoThreads) {
  const runtime::Engine e = test_support::engine_for(concat_cache_graph());
  runtime::StateOptions so;
  so.max_length = 64;
  runtime::State a(e, so), b(e, so);
  // Two sequences on two threads, each with its own State: both equal the one-thread result.
  auto decode = [&](runtime::State& st) {
    runtime::RunOptions ro;
    ro.state = &st;
    for (int i = 0; i < 40; ++i) e.run({{"x", test_support::random_floats({1, 1, 4}, static_cast<uint32_t>(i))}}, ro);
    return st.value("past").clone();
  };
  auto fa = std::async(std::launch::async, [&] { return decode(a); });
  const Tensor vb = decode(b);
  const Tensor va = fa.get();
  EXPECT_TRUE(same_bits(va, vb));
  EXPECT_EQ(a.length(), 40);
}

}  // namespace
