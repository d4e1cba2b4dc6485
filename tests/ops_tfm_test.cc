// Edge cases of the transformer family (Attention, RotaryEmbedding, RMSNormalization, Resize)
// that the ONNX node suite does not cover, with expected values worked out by hand: cache
// offsets, windows, padding, fully-masked rows, integer Resize rounding, and bad inputs that must
// end in an Error.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "ops/registry.h"
#include "support/run_op.h"

using namespace reforge;
using namespace reforge::ops;

namespace {

template <typename T>
Tensor make(DType dt, Shape shape, std::vector<T> values) {
  Tensor t = Tensor::empty(dt, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  for (size_t i = 0; i < values.size(); ++i) t.mutable_data<T>()[i] = values[i];
  return t;
}
Tensor f32(Shape s, std::vector<float> v) { return make<float>(DType::Float32, std::move(s), std::move(v)); }
Tensor i64(Shape s, std::vector<int64_t> v) { return make<int64_t>(DType::Int64, std::move(s), std::move(v)); }

struct NodeBuilder {
  ir::Node n;
  NodeBuilder(const std::string& op, int opset, std::vector<std::string> inputs, size_t noutputs = 1) {
    n.name = "t";
    n.op_type = op;
    n.opset = opset;
    n.inputs = std::move(inputs);
    for (size_t i = 0; i < noutputs; ++i) n.outputs.push_back("out" + std::to_string(i));
  }
  NodeBuilder& i(const std::string& k, int64_t v) {
    n.attrs[k] = ir::int_attr(k, v);
    return *this;
  }
  NodeBuilder& f(const std::string& k, float v) {
    n.attrs[k] = ir::float_attr(k, v);
    return *this;
  }
  NodeBuilder& s(const std::string& k, const std::string& v) {
    n.attrs[k] = ir::string_attr(k, v);
    return *this;
  }
  NodeBuilder& ints(const std::string& k, std::vector<int64_t> v) {
    n.attrs[k] = ir::ints_attr(k, std::move(v));
    return *this;
  }
};

// Runs a node; `ins` entries that are undefined Tensors are passed as absent optional inputs.
std::vector<Tensor> run(const ir::Node& n, const std::vector<Tensor>& ins) {
  std::vector<const Tensor*> ptrs;
  for (auto& t : ins) ptrs.push_back(t.defined() ? &t : nullptr);
  return test_support::run_node(n, ptrs);
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

}  // namespace

// ---------------------------------------------------------------- Attention

TEST(Attention, TwoKeySoftmaxByHand) {
  // One query q=1, keys 0 and 1, scale 1: logits [0, 1], weights [1, e] / (1 + e).
  auto n = NodeBuilder("Attention", 23, {"Q", "K", "V"}).f("scale", 1.0f).n;
  auto out = run(n, {f32({1, 1, 1, 1}, {1}), f32({1, 1, 2, 1}, {0, 1}), f32({1, 1, 2, 1}, {1, 3})});
  const float e = std::exp(1.0f);
  expect_near(values<float>(out[0]), {(1 + 3 * e) / (1 + e)});
}

TEST(Attention, FullyMaskedRowIsZero) {
  auto n = NodeBuilder("Attention", 23, {"Q", "K", "V", "M"}, 4).i("qk_matmul_output_mode", 3).n;
  Tensor mask = make<bool>(DType::Bool, {2, 2}, {false, false, true, false});
  auto out = run(n, {f32({1, 1, 2, 1}, {1, 2}), f32({1, 1, 2, 1}, {1, 1}), f32({1, 1, 2, 1}, {5, 7}), mask});
  expect_near(values<float>(out[0]), {0, 5});
  expect_near(values<float>(out[3]), {0, 0, 1, 0});
}

TEST(Attention, CausalOffsetFromPast) {
  // past_len 2, one new key: query 0 sees keys 0..2 (all), so with equal logits Y = mean(V).
  // Query 0 of two new queries sees keys 0..2 only (offset 2), query 1 sees all four.
  auto n = NodeBuilder("Attention", 23, {"Q", "K", "V", "", "PK", "PV"}, 3).i("is_causal", 1).n;
  Tensor q = f32({1, 1, 2, 1}, {0, 0});  // zero query: equal logits
  Tensor k = f32({1, 1, 2, 1}, {1, 1});
  Tensor v = f32({1, 1, 2, 1}, {30, 40});
  Tensor pk = f32({1, 1, 2, 1}, {1, 1});
  Tensor pv = f32({1, 1, 2, 1}, {0, 10});
  auto out = run(n, {q, k, v, Tensor(), pk, pv});
  expect_near(values<float>(out[0]), {(0 + 10 + 30) / 3.0f, (0 + 10 + 30 + 40) / 4.0f});
  expect_near(values<float>(out[1]), {1, 1, 1, 1});
  expect_near(values<float>(out[2]), {0, 10, 30, 40});
}

TEST(Attention, NonpadIgnoresPaddingAndShiftsCausalFrontier) {
  // Batch of 2 with 3 cached keys each; nonpad = [1, 3]. Single query, causal: offset = nonpad-1,
  // so batch 0 sees key 0 only and batch 1 sees keys 0..2. The 1000s are padding.
  auto n = NodeBuilder("Attention", 24, {"Q", "K", "V", "", "", "", "L"}).i("is_causal", 1).n;
  Tensor q = f32({2, 1, 1, 1}, {0, 0});
  Tensor k = f32({2, 1, 3, 1}, {0, 0, 0, 0, 0, 0});
  Tensor v = f32({2, 1, 3, 1}, {4, 1000, 1000, 3, 6, 9});
  auto out = run(n, {q, k, v, Tensor(), Tensor(), Tensor(), i64({2}, {1, 3})});
  expect_near(values<float>(out[0]), {4, 6});
}

TEST(Attention, WindowOfZeroAttendsOwnPosition) {
  auto n = NodeBuilder("Attention", 25, {"Q", "K", "V"}).i("left_window_size", 0).i("right_window_size", 0).n;
  auto out = run(n, {f32({1, 1, 3, 1}, {1, 2, 3}), f32({1, 1, 3, 1}, {3, 2, 1}), f32({1, 1, 3, 1}, {7, 8, 9})});
  expect_near(values<float>(out[0]), {7, 8, 9});
}

TEST(Attention, GroupedQueryHeadsShareKv3D) {
  // 3D layout, 2 query heads on 1 KV head; zero queries average V over both keys.
  auto n = NodeBuilder("Attention", 23, {"Q", "K", "V"}).i("q_num_heads", 2).i("kv_num_heads", 1).n;
  auto out = run(n, {f32({1, 1, 2}, {0, 0}), f32({1, 2, 1}, {1, 2}), f32({1, 2, 1}, {2, 4})});
  EXPECT_EQ(out[0].shape(), (Shape{1, 1, 2}));
  expect_near(values<float>(out[0]), {3, 3});
}

TEST(Attention, ShortMaskIsPaddedWithNegInf) {
  // Mask covers only key 0; key 1 is masked by the padding rule.
  auto n = NodeBuilder("Attention", 23, {"Q", "K", "V", "M"}).n;
  auto out = run(n, {f32({1, 1, 1, 1}, {0}), f32({1, 1, 2, 1}, {0, 0}), f32({1, 1, 2, 1}, {5, 100}), f32({1}, {0})});
  expect_near(values<float>(out[0]), {5});
}

TEST(Attention, BadInputsAreErrors) {
  Tensor q = f32({1, 1, 2, 2}, {0, 0, 0, 0});
  Tensor k = f32({1, 1, 2, 2}, {0, 0, 0, 0});
  // Mask that does not broadcast over the query length.
  auto n = NodeBuilder("Attention", 23, {"Q", "K", "V", "M"}).n;
  EXPECT_THROW(run(n, {q, k, k, f32({3, 2}, {0, 0, 0, 0, 0, 0})}), Error);
  // Mask longer than the total sequence.
  EXPECT_THROW(run(n, {q, k, k, f32({2, 3}, {0, 0, 0, 0, 0, 0})}), Error);
  // 3D without head counts; hidden size not divisible.
  auto n3 = NodeBuilder("Attention", 23, {"Q", "K", "V"}).n;
  EXPECT_THROW(run(n3, {f32({1, 2, 2}, {0, 0, 0, 0}), f32({1, 2, 2}, {0, 0, 0, 0}), f32({1, 2, 2}, {0, 0, 0, 0})}),
               Error);
  auto n3h = NodeBuilder("Attention", 23, {"Q", "K", "V"}).i("q_num_heads", 3).i("kv_num_heads", 1).n;
  EXPECT_THROW(run(n3h, {f32({1, 2, 2}, {0, 0, 0, 0}), f32({1, 2, 2}, {0, 0, 0, 0}), f32({1, 2, 2}, {0, 0, 0, 0})}),
               Error);
  // past_key without past_value; nonpad together with past.
  auto np = NodeBuilder("Attention", 24, {"Q", "K", "V", "", "PK", "PV", "L"}, 3).n;
  EXPECT_THROW(run(np, {q, k, k, Tensor(), k, Tensor()}), Error);
  EXPECT_THROW(run(np, {q, k, k, Tensor(), k, k, i64({1}, {2})}), Error);
  // Query heads not a multiple of KV heads.
  EXPECT_THROW(run(n3, {f32({1, 3, 1, 2}, {0, 0, 0, 0, 0, 0}), f32({1, 2, 1, 2}, {0, 0, 0, 0}),
                        f32({1, 2, 1, 2}, {0, 0, 0, 0})}),
               Error);
  // Unsupported attribute values are reported by the checker.
  auto bad = NodeBuilder("Attention", 23, {"Q", "K", "V"}).i("qk_matmul_output_mode", 7).n;
  EXPECT_NE(OpRegistry::global().why_unsupported(bad), "");
}

// ---------------------------------------------------------------- RotaryEmbedding

TEST(RotaryEmbedding, QuarterTurn) {
  // cos = 0, sin = 1 rotates each pair (x1, x2) to (-x2, x1).
  Tensor x = f32({1, 1, 1, 4}, {1, 2, 3, 4});
  Tensor c = f32({1, 1, 2}, {0, 0});
  Tensor s = f32({1, 1, 2}, {1, 1});
  auto half = run(NodeBuilder("RotaryEmbedding", 23, {"X", "C", "S"}).n, {x, c, s});
  expect_near(values<float>(half[0]), {-3, -4, 1, 2});
  auto inter = run(NodeBuilder("RotaryEmbedding", 23, {"X", "C", "S"}).i("interleaved", 1).n, {x, c, s});
  expect_near(values<float>(inter[0]), {-2, 1, -4, 3});
  // Partial rotation: only the first 2 features rotate.
  auto part = run(NodeBuilder("RotaryEmbedding", 23, {"X", "C", "S"}).i("rotary_embedding_dim", 2).n,
                  {x, f32({1, 1, 1}, {0}), f32({1, 1, 1}, {1})});
  expect_near(values<float>(part[0]), {-2, 1, 3, 4});
}

TEST(RotaryEmbedding, PositionIdsAreValidated) {
  Tensor x = f32({1, 1, 1, 2}, {1, 2});
  Tensor c = f32({2, 1}, {1, 0});
  Tensor s = f32({2, 1}, {0, 1});
  auto n = NodeBuilder("RotaryEmbedding", 23, {"X", "C", "S", "P"}).n;
  expect_near(values<float>(run(n, {x, c, s, i64({1, 1}, {1})})[0]), {-2, 1});
  EXPECT_THROW(run(n, {x, c, s, i64({1, 1}, {2})}), Error);
  EXPECT_THROW(run(n, {x, c, s, i64({1, 1}, {-1})}), Error);
  // 3D input without num_heads.
  EXPECT_THROW(run(NodeBuilder("RotaryEmbedding", 23, {"X", "C", "S"}).n,
                   {f32({1, 1, 2}, {1, 2}), f32({1, 1, 1}, {1}), f32({1, 1, 1}, {0})}),
               Error);
}

// ---------------------------------------------------------------- RMSNormalization

TEST(RMSNormalization, ByHand) {
  // rms([3, 4]) = sqrt(12.5); scale [1, 2].
  auto n = NodeBuilder("RMSNormalization", 23, {"X", "W"}).f("epsilon", 0.0f).n;
  auto out = run(n, {f32({1, 2}, {3, 4}), f32({2}, {1, 2})});
  const float r = std::sqrt(12.5f);
  expect_near(values<float>(out[0]), {3 / r, 8 / r});
  // Scale broadcast along the normalized axes ([2,1] over X [2,2], axis 0).
  auto n0 = NodeBuilder("RMSNormalization", 23, {"X", "W"}).i("axis", 0).f("epsilon", 0.0f).n;
  auto out0 = run(n0, {f32({2, 2}, {1, 1, 1, 1}), f32({2, 1}, {2, 3})});
  expect_near(values<float>(out0[0]), {2, 2, 3, 3});
  EXPECT_THROW(
      run(NodeBuilder("RMSNormalization", 23, {"X", "W"}).i("axis", 2).n, {f32({1, 2}, {3, 4}), f32({2}, {1, 2})}),
      Error);
  EXPECT_THROW(run(n, {f32({1, 2}, {3, 4}), f32({3}, {1, 2, 3})}), Error);
}

// ---------------------------------------------------------------- Resize

TEST(Resize, NearestAndLinearByHand) {
  auto nearest = NodeBuilder("Resize", 19, {"X", "", "S"}).s("coordinate_transformation_mode", "asymmetric").n;
  expect_near(values<float>(run(nearest, {f32({2}, {1, 2}), Tensor(), f32({1}, {2})})[0]), {1, 1, 2, 2});
  auto linear = NodeBuilder("Resize", 19, {"X", "", "", "Z"})
                    .s("mode", "linear")
                    .s("coordinate_transformation_mode", "align_corners")
                    .n;
  expect_near(values<float>(run(linear, {f32({2}, {0, 3}), Tensor(), Tensor(), i64({1}, {4})})[0]), {0, 1, 2, 3});
  // Opset 10: inputs (X, scales), asymmetric.
  auto v10 = NodeBuilder("Resize", 10, {"X", "S"}).n;
  expect_near(values<float>(run(v10, {f32({1, 2}, {1, 2}), f32({2}, {1, 2})})[0]), {1, 1, 2, 2});
}

TEST(Resize, IntegerOutputsRoundHalfToEven) {
  // Asymmetric linear x2: the midpoint of [1, 2] is 1.5 -> 2, of [2, 3] is 2.5 -> 2.
  auto n =
      NodeBuilder("Resize", 19, {"X", "", "S"}).s("mode", "linear").s("coordinate_transformation_mode", "asymmetric").n;
  EXPECT_EQ(values<uint8_t>(run(n, {make<uint8_t>(DType::UInt8, {2}, {1, 2}), Tensor(), f32({1}, {2})})[0]),
            (std::vector<uint8_t>{1, 2, 2, 2}));
  EXPECT_EQ(values<uint8_t>(run(n, {make<uint8_t>(DType::UInt8, {2}, {2, 3}), Tensor(), f32({1}, {2})})[0]),
            (std::vector<uint8_t>{2, 2, 3, 3}));
}

TEST(Resize, CropAndResizeExtrapolates) {
  // roi [0.5, 1.5] over [0, 10]: coordinates 0.5 and 1.5; 1.5 lies outside [0, 1] -> 7.
  auto n = NodeBuilder("Resize", 19, {"X", "R", "", "Z"})
               .s("mode", "linear")
               .s("coordinate_transformation_mode", "tf_crop_and_resize")
               .f("extrapolation_value", 7.0f)
               .n;
  auto out = run(n, {f32({2}, {0, 10}), f32({2}, {0.5f, 1.5f}), Tensor(), i64({1}, {2})});
  expect_near(values<float>(out[0]), {5, 7});
}

TEST(Resize, AxesAndAspectRatio) {
  // X [1, 2, 4], sizes (axes 1, 2) = [4, 4] with not_larger: scale = min(2, 1) = 1 -> unchanged.
  auto n =
      NodeBuilder("Resize", 19, {"X", "", "", "Z"}).ints("axes", {1, 2}).s("keep_aspect_ratio_policy", "not_larger").n;
  Tensor x = f32({1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto out = run(n, {x, Tensor(), Tensor(), i64({2}, {4, 4})});
  EXPECT_EQ(out[0].shape(), (Shape{1, 2, 4}));
  expect_near(values<float>(out[0]), {1, 2, 3, 4, 5, 6, 7, 8});
}

TEST(Resize, BadInputsAreErrors) {
  auto n = NodeBuilder("Resize", 19, {"X", "", "S", "Z"}).n;
  Tensor x = f32({2}, {1, 2});
  EXPECT_THROW(run(n, {x, Tensor(), f32({2}, {1, 2}), Tensor()}), Error);    // wrong scales length
  EXPECT_THROW(run(n, {x, Tensor(), f32({1}, {-1}), Tensor()}), Error);      // negative scale
  EXPECT_THROW(run(n, {x, Tensor(), Tensor(), i64({1}, {-3})}), Error);      // negative size
  EXPECT_THROW(run(n, {x, Tensor(), f32({1}, {2}), i64({1}, {4})}), Error);  // both given
  EXPECT_THROW(run(n, {x, Tensor(), Tensor(), Tensor()}), Error);            // neither given
  auto crop = NodeBuilder("Resize", 19, {"X", "", "S"}).s("coordinate_transformation_mode", "tf_crop_and_resize").n;
  EXPECT_THROW(run(crop, {x, Tensor(), f32({1}, {2})}), Error);  // roi missing
  auto axes = NodeBuilder("Resize", 19, {"X", "", "S"}).ints("axes", {0, 0}).n;
  EXPECT_THROW(run(axes, {f32({1, 2}, {1, 2}), Tensor(), f32({2}, {1, 1})}), Error);  // repeated axis
  auto mode = NodeBuilder("Resize", 19, {"X", "", "S"}).s("mode", "bilinear").n;
  EXPECT_NE(OpRegistry::global().why_unsupported(mode), "");
}
