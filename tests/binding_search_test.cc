// The derived binding forms (build/binding_search.h) one by one: each constant is made from a
// checkpoint tensor by a hand-written loop (the independent reference), found by the search,
// and its binding replayed on *new* checkpoint values must equal the same loop on those values.
#include "builder/binding_search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "builder/binding.h"
#include "core/half.h"
#include "refit/safetensors.h"
#include "support/synthetic_checkpoint.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::checkpoint_of;
using test_support::random_f32;

namespace {

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// T5's relative-position bias: out[0, h, i, j] = table[bucket(i, j), h].
Tensor relative_bias(const Tensor& table, const std::vector<int64_t>& bucket, int64_t s) {
  const int64_t heads = table.dim(1);
  Tensor out = Tensor::empty(DType::Float32, {1, heads, s, s});
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < s; ++j)
        out.mutable_data<float>()[(h * s + i) * s + j] = table.data<float>()[bucket[i * s + j] * heads + h];
  return out;
}

std::vector<int64_t> buckets(int64_t s) {
  std::vector<int64_t> b(size_t(s * s));
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < s; ++j) {
      int64_t d = j - i;
      b[size_t(i * s + j)] = d < 0 ? std::min<int64_t>(-d, 7) : 8 + std::min<int64_t>(d, 7);
    }
  return b;
}

// The one binding the search finds for `v` from `name`, replayed on `fresh`.
Tensor replay(const std::map<std::string, plan::Binding>& found, const std::string& name, const Tensor& fresh,
              const Tensor& v) {
  EXPECT_EQ(found.size(), 1u);
  EXPECT_TRUE(found.count(name)) << name;
  if (!found.count(name)) return Tensor();
  return transforms::apply_binding(found.at(name), {fresh}, v.dtype(), v.shape());
}

}  // namespace

TEST(BindingSearch, GatherThroughABucketIndexThenPermuteAndUnsqueeze) {
  const int64_t s = 6;
  Tensor table = random_f32({16, 4}, 1);
  Tensor v = relative_bias(table, buckets(s), s);
  auto found =
      build::derive_bindings(v, checkpoint_of({{"rel.weight", table}, {"other.weight", random_f32({16, 4}, 2)}}));
  ASSERT_TRUE(found.count("rel.weight"));
  bool gather = false;
  for (const auto& st : found.at("rel.weight").steps) gather |= st.op_type == "Gather";
  EXPECT_TRUE(gather);
  Tensor fresh = random_f32({16, 4}, 3);
  EXPECT_TRUE(same(replay(found, "rel.weight", fresh, v), relative_bias(fresh, buckets(s), s)));
}

TEST(BindingSearch, SliceAtAnOffsetWithALeadingAxis) {
  Tensor table = random_f32({32, 8}, 4);
  auto rows = [](const Tensor& t, int64_t from, int64_t n) {
    Tensor out = Tensor::empty(DType::Float32, {1, n, t.dim(1)});
    std::memcpy(out.mutable_raw(), t.data<float>() + from * t.dim(1), size_t(n * t.dim(1)) * 4);
    return out;
  };
  Tensor v = rows(table, 5, 12);
  auto found = build::derive_bindings(v, checkpoint_of({{"wpe.weight", table}}));
  ASSERT_TRUE(found.count("wpe.weight"));
  ASSERT_EQ(found.at("wpe.weight").steps.size(), 1u);
  EXPECT_EQ(found.at("wpe.weight").steps[0].op_type, "Slice");
  Tensor fresh = random_f32({32, 8}, 5);
  EXPECT_TRUE(same(replay(found, "wpe.weight", fresh, v), rows(fresh, 5, 12)));
}

TEST(BindingSearch, BroadcastOfAClassToken) {
  Tensor cls = random_f32({1, 1, 8}, 6);
  auto expand = [](const Tensor& c) {
    Tensor out = Tensor::empty(DType::Float32, {3, 1, 8});
    for (int b = 0; b < 3; ++b) std::memcpy(out.mutable_data<float>() + b * 8, c.raw(), 32);
    return out;
  };
  Tensor v = expand(cls);
  auto found = build::derive_bindings(v, checkpoint_of({{"cls_token", cls}}));
  ASSERT_TRUE(found.count("cls_token"));
  EXPECT_EQ(found.at("cls_token").steps.back().op_type, "Expand");
  Tensor fresh = random_f32({1, 1, 8}, 7);
  EXPECT_TRUE(same(replay(found, "cls_token", fresh, v), expand(fresh)));
}

TEST(BindingSearch, PermutationOfRankThree) {
  Tensor w = random_f32({2, 3, 4}, 8);
  auto permute = [](const Tensor& t) {  // out[k, i, j] = t[i, j, k]
    Tensor out = Tensor::empty(DType::Float32, {4, 2, 3});
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k)
          out.mutable_data<float>()[(k * 2 + i) * 3 + j] = t.data<float>()[(i * 3 + j) * 4 + k];
    return out;
  };
  Tensor v = permute(w);
  auto found = build::derive_bindings(v, checkpoint_of({{"conv.weight", w}}));
  Tensor fresh = random_f32({2, 3, 4}, 9);
  EXPECT_TRUE(same(replay(found, "conv.weight", fresh, v), permute(fresh)));
}

TEST(BindingSearch, WideningCastOfABfloat16Table) {
  Tensor table = Tensor::empty(DType::BFloat16, {16, 4});
  Tensor r = random_f32({16, 4}, 10);
  for (int64_t i = 0; i < 64; ++i) table.mutable_data<bfloat16>()[i].bits = bfloat16::from_float(r.data<float>()[i]);
  auto widened_rows = [](const Tensor& t, int64_t n) {
    Tensor out = Tensor::empty(DType::Float32, {1, n, 4});
    for (int64_t i = 0; i < n * 4; ++i) out.mutable_data<float>()[i] = bfloat16::to_float(t.data<bfloat16>()[i].bits);
    return out;
  };
  Tensor v = widened_rows(table, 10);
  auto found = build::derive_bindings(v, checkpoint_of({{"pos.weight", table}}));
  ASSERT_TRUE(found.count("pos.weight"));
  EXPECT_EQ(found.at("pos.weight").steps[0].op_type, "Cast");
  Tensor fresh = Tensor::empty(DType::BFloat16, {16, 4});
  for (int64_t i = 0; i < 64; ++i) fresh.mutable_data<bfloat16>()[i].bits = uint16_t(0x3f00 + i);
  EXPECT_TRUE(same(replay(found, "pos.weight", fresh, v), widened_rows(fresh, 10)));
}

TEST(BindingSearch, EqualRowsGiveNoIndexAndAllEqualValuesBroadcast) {
  // A table with two equal rows: which one the constant took cannot be told, so no binding.
  Tensor table = random_f32({8, 4}, 11);
  std::memcpy(table.mutable_data<float>() + 4 * 4, table.data<float>() + 2 * 4, 16);
  Tensor v = Tensor::empty(DType::Float32, {3, 4});
  for (int r : {0, 1, 2})
    std::memcpy(v.mutable_data<float>() + r * 4, table.data<float>() + (r == 1 ? 2 : r + 5) * 4, 16);
  EXPECT_TRUE(build::derive_bindings(v, checkpoint_of({{"emb.weight", table}})).empty());
  // An all-equal value is an Expand of every all-equal checkpoint tensor that broadcasts to it.
  Tensor zeros16 = Tensor::empty(DType::Float32, {2, 1, 8});
  auto found =
      build::broadcast_bindings(zeros16, checkpoint_of({{"a.cls_token", Tensor::empty(DType::Float32, {1, 1, 8})},
                                                        {"b.bias", Tensor::empty(DType::Float32, {8})},
                                                        {"c.bias", Tensor::empty(DType::Float32, {3})},
                                                        {"d.weight", random_f32({8}, 12)}}));
  EXPECT_EQ(found.size(), 2u);
  EXPECT_TRUE(found.count("a.cls_token") && found.count("b.bias"));
  // Zero q/k/v biases fused into one [24]: a concatenation of zeros could be any of them, so the
  // fused zeros are related to them (unbound), not structural.
  auto qkv = checkpoint_of({{"q.bias", Tensor::empty(DType::Float32, {8})},
                            {"k.bias", Tensor::empty(DType::Float32, {8})},
                            {"v.bias", Tensor::empty(DType::Float32, {8})}});
  EXPECT_EQ(build::related_constants(Tensor::empty(DType::Float32, {24}), qkv).size(), 3u);
  EXPECT_TRUE(build::related_constants(Tensor::empty(DType::Float32, {2, 1, 17, 17}), qkv).empty());
  ir::Graph g;
  ir::Node n;
  n.name = "n0", n.op_type = "Add", n.opset = 18, n.inputs = {"x", "qkv_bias"}, n.outputs = {"y"};
  g.nodes = {n};
  g.initializers["qkv_bias"] = Tensor::empty(DType::Float32, {24});
  build::BindOptions partial;
  partial.allow_partial = true;
  auto r = build::bind_checkpoint(g, {}, qkv, partial);
  EXPECT_EQ(r.bindings.at({0, 1}).status, plan::Binding::Status::Unbound) << r.bindings.at({0, 1}).note;
}

// In binding: a perturbed rotary table is unbound (the recognizer refuses it), the exact one a
// proven constant; a constant that equals several all-equal tensors is decided by scope.
TEST(BindingSearch, RecognizerDecidesInBindingAndScopeSettlesBroadcasts) {
  const int64_t seq = 8, dim = 8;
  Tensor cos_table = Tensor::empty(DType::Float32, {1, 1, seq, dim});
  for (int64_t p = 0; p < seq; ++p)
    for (int64_t i = 0; i < dim; ++i) {
      float inv = 1.0f / std::pow(10000.0f, float(2 * (i % (dim / 2))) / float(dim));
      cos_table.mutable_data<float>()[p * dim + i] = std::cos(float(p) * inv);
    }
  Tensor bad = cos_table.clone();
  bad.mutable_data<float>()[3 * dim + 1] *= 1.001f;
  ir::Graph g;
  auto add = [&](const std::string& name, const std::string& in, const std::string& scope) {
    ir::Node n;
    n.name = name;
    n.op_type = "Add";
    n.opset = 18;
    n.inputs = {"x", in};
    n.outputs = {name + "_out"};
    n.metadata.push_back({"pkg.torch.onnx.name_scopes", scope});
    g.nodes.push_back(n);
  };
  g.initializers["cos"] = cos_table;
  g.initializers["cos_bad"] = bad;
  g.initializers["zeros"] = Tensor::empty(DType::Float32, {2, 1, 8});
  add("n0", "cos", "['', 'rotary']");
  add("n1", "cos_bad", "['', 'rotary']");
  add("n2", "zeros", "['', 'a']");
  std::map<std::string, Tensor> ck = {{"w.weight", random_f32({8, 8}, 13)},
                                      {"a.cls_token", Tensor::empty(DType::Float32, {1, 1, 8})},
                                      {"b.bias", Tensor::empty(DType::Float32, {8})}};
  build::BindOptions partial;
  partial.allow_partial = true;
  auto r = build::bind_checkpoint(g, {}, checkpoint_of(ck), partial);
  EXPECT_EQ(r.bindings.at({0, 1}).status, plan::Binding::Status::Constant) << r.bindings.at({0, 1}).note;
  EXPECT_EQ(r.bindings.at({0, 1}).reason, plan::Binding::Reason::Proven);
  EXPECT_EQ(r.bindings.at({1, 1}).status, plan::Binding::Status::Unbound);
  EXPECT_EQ(r.bindings.at({2, 1}).status, plan::Binding::Status::Bound) << r.bindings.at({2, 1}).note;
  EXPECT_EQ(r.bindings.at({2, 1}).checkpoint.at(0).name, "a.cls_token");
  // Without a scope that decides, the zeros are unbound, never a guess between the candidates.
  g.nodes[2].metadata.clear();
  auto r2 = build::bind_checkpoint(g, {}, checkpoint_of(ck), partial);
  EXPECT_EQ(r2.bindings.at({2, 1}).status, plan::Binding::Status::Unbound) << r2.bindings.at({2, 1}).note;
  // Under half bound without --allow-partial-binding: refused, naming what did not bind.
  std::string err;
  try {
    build::bind_checkpoint(g, {}, checkpoint_of(ck), {});
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("--allow-partial-binding"), std::string::npos) << err;
  // A --bind name that is no initializer is an error with the nearest names.
  build::BindOptions typo = partial;
  typo.binds["cos_bda"] = "w.weight";
  err.clear();
  try {
    build::bind_checkpoint(g, {}, checkpoint_of(ck), typo);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("'cos_bda'"), std::string::npos) << err;
  EXPECT_NE(err.find("'cos_bad'"), std::string::npos) << err;
}

TEST(BindingSearch, NarrowingCastOfAFloat32Table) {
  Tensor table = random_f32({16, 4}, 14);
  auto half_rows = [](const Tensor& t, int64_t from, int64_t n) {
    Tensor out = Tensor::empty(DType::Float16, {1, n, 4});
    for (int64_t i = 0; i < n * 4; ++i)
      out.mutable_data<float16>()[i].bits = float16::from_float(t.data<float>()[from * 4 + i]);
    return out;
  };
  Tensor v = half_rows(table, 3, 9);
  auto found = build::derive_bindings(v, checkpoint_of({{"pos.weight", table}}));
  ASSERT_TRUE(found.count("pos.weight"));
  Tensor fresh = random_f32({16, 4}, 15);
  EXPECT_TRUE(same(replay(found, "pos.weight", fresh, v), half_rows(fresh, 3, 9)));
}
