// CUDA kernels of the attention family (ONNX Attention, reforge::Attention, RotaryEmbedding,
// reforge::Rotary) against the CPU's on the same inputs: a one-node graph run on both, held to
// NMSE 1e-7 (float32, float64) and 1e-4 (16-bit floats). Sequence lengths are not multiples of the
// kernel's key tile (32) or query block (8); head sizes 8, 64, 80 and 128; grouped-query ratios 1,
// 2 and 4; causal masking with and without a past; bool and float masks broadcast from several
// ranks; fully masked rows; empty query sequences. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/cuda_compare.h"
#include "support/engine_for.h"
#include "support/make_tensor.h"

using namespace reforge;

namespace {

using test_support::expect_same_on_cuda;
using test_support::random_of;

ir::Node op_node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
                 std::map<std::string, ir::Attribute> attrs, int opset, const std::string& domain = "") {
  ir::Node n;
  n.name = outs[0];
  n.op_type = op;
  n.domain = domain;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  n.attrs = std::move(attrs);
  return n;
}

const std::vector<DType> kFloats = {DType::Float32, DType::Float16, DType::BFloat16};

std::string tname(DType t) { return dtype_name(t); }

// A bool mask of `shape` with about `open` of its entries true.
Tensor bool_mask(const Shape& shape, uint32_t seed, float open = 0.7f) {
  Tensor f = test_support::random_floats(shape, seed, 0.0f, 1.0f);
  Tensor m = Tensor::empty(DType::Bool, shape);
  for (int64_t i = 0; i < m.numel(); ++i) m.mutable_data<uint8_t>()[i] = f.data<float>()[i] < open ? 1 : 0;
  return m;
}

Tensor i64s(const Shape& shape, std::vector<int64_t> v) { return test_support::make<int64_t>(shape, std::move(v)); }

// --- ONNX Attention ---------------------------------------------------------------------------

TEST(CudaAttention, FourDimensionalHeadSizesAndGroups) {
  REQUIRE_GPU();
  for (DType t : kFloats)
    for (int64_t D : {8, 64, 80, 128})
      for (int64_t ratio : {1, 2, 4}) {
        const int64_t B = 2, Hkv = 2, Hq = Hkv * ratio, Sq = 13, Skv = 37;
        Tensor q = random_of(t, {B, Hq, Sq, D}, 1);
        Tensor k = random_of(t, {B, Hkv, Skv, D}, 2);
        Tensor v = random_of(t, {B, Hkv, Skv, D}, 3);
        expect_same_on_cuda(op_node("Attention", {"Q", "K", "V"}, {"Y"}, {}, 23), {q, k, v},
                            "Attention 4D " + tname(t) + " D=" + std::to_string(D) + " ratio " + std::to_string(ratio));
      }
}

TEST(CudaAttention, DifferentValueHeadSizeAndLongKeys) {
  REQUIRE_GPU();
  for (DType t : kFloats) {
    Tensor q = random_of(t, {1, 3, 9, 24}, 4);
    Tensor k = random_of(t, {1, 3, 133, 24}, 5);
    Tensor v = random_of(t, {1, 3, 133, 40}, 6);
    expect_same_on_cuda(op_node("Attention", {"Q", "K", "V"}, {"Y"}, {}, 24), {q, k, v},
                        "Attention Dv != D " + tname(t));
  }
}

TEST(CudaAttention, ThreeDimensionalWithHeadAttributes) {
  REQUIRE_GPU();
  for (DType t : kFloats)
    for (int64_t ratio : {1, 2, 4}) {
      const int64_t Hkv = 2, Hq = Hkv * ratio, D = 16;
      Tensor q = random_of(t, {2, 11, Hq * D}, 7);
      Tensor k = random_of(t, {2, 19, Hkv * D}, 8);
      Tensor v = random_of(t, {2, 19, Hkv * 12}, 9);
      expect_same_on_cuda(op_node("Attention", {"Q", "K", "V"}, {"Y"},
                                  {{"q_num_heads", ir::int_attr("q_num_heads", Hq)},
                                   {"kv_num_heads", ir::int_attr("kv_num_heads", Hkv)}},
                                  23),
                          {q, k, v}, "Attention 3D " + tname(t) + " ratio " + std::to_string(ratio));
    }
}

TEST(CudaAttention, CausalWithoutAndWithPast) {
  REQUIRE_GPU();
  for (DType t : kFloats) {
    const int64_t B = 2, Hq = 4, Hkv = 2, S = 17, P = 9, D = 64;
    Tensor q = random_of(t, {B, Hq, S, D}, 10);
    Tensor k = random_of(t, {B, Hkv, S, D}, 11);
    Tensor v = random_of(t, {B, Hkv, S, D}, 12);
    std::map<std::string, ir::Attribute> causal{{"is_causal", ir::int_attr("is_causal", 1)}};
    expect_same_on_cuda(op_node("Attention", {"Q", "K", "V"}, {"Y"}, causal, 23), {q, k, v},
                        "Attention causal " + tname(t));
    Tensor pk = random_of(t, {B, Hkv, P, D}, 13);
    Tensor pv = random_of(t, {B, Hkv, P, D}, 14);
    expect_same_on_cuda(op_node("Attention", {"Q", "K", "V", "", "past_key", "past_value"},
                                {"Y", "present_key", "present_value"}, causal, 23),
                        {q, k, v, Tensor(), pk, pv}, "Attention causal with past " + tname(t));
    // A decoding step: one query against past ++ one key.
    Tensor q1 = random_of(t, {B, Hq, 1, D}, 15);
    Tensor k1 = random_of(t, {B, Hkv, 1, D}, 16);
    Tensor v1 = random_of(t, {B, Hkv, 1, D}, 17);
    expect_same_on_cuda(op_node("Attention", {"Q", "K", "V", "", "past_key", "past_value"},
                                {"Y", "present_key", "present_value"}, causal, 23),
                        {q1, k1, v1, Tensor(), pk, pv}, "Attention decode step " + tname(t));
  }
}

TEST(CudaAttention, PresentOutputsWithoutPast) {
  REQUIRE_GPU();
  Tensor q = random_of(DType::Float32, {1, 10, 2 * 8}, 18);
  Tensor k = random_of(DType::Float32, {1, 6, 2 * 8}, 19);
  Tensor v = random_of(DType::Float32, {1, 6, 2 * 8}, 20);
  expect_same_on_cuda(
      op_node("Attention", {"Q", "K", "V"}, {"Y", "present_key", "present_value"},
              {{"q_num_heads", ir::int_attr("q_num_heads", 2)}, {"kv_num_heads", ir::int_attr("kv_num_heads", 2)}}, 23),
      {q, k, v}, "Attention 3D present without past");
}

TEST(CudaAttention, BoolAndFloatMasksBroadcast) {
  REQUIRE_GPU();
  const int64_t B = 2, Hq = 4, Hkv = 2, Sq = 11, P = 4, S = 11, L = P + S, D = 8;
  const std::vector<Shape> mask_shapes = {{L}, {Sq, L}, {B, 1, Sq, L}, {1, Hq, 1, L}, {B, Hq, Sq, L}, {Sq, L - 3}};
  for (DType t : kFloats)
    for (const Shape& ms : mask_shapes)
      for (bool is_bool : {true, false})
        for (bool causal : {false, true}) {
          Tensor q = random_of(t, {B, Hq, Sq, D}, 21);
          Tensor k = random_of(t, {B, Hkv, S, D}, 22);
          Tensor v = random_of(t, {B, Hkv, S, D}, 23);
          Tensor pk = random_of(t, {B, Hkv, P, D}, 24);
          Tensor pv = random_of(t, {B, Hkv, P, D}, 25);
          Tensor m = is_bool ? bool_mask(ms, 26) : random_of(t, ms, 26, -3.0f, 1.0f);
          expect_same_on_cuda(op_node("Attention", {"Q", "K", "V", "M", "past_key", "past_value"},
                                      {"Y", "present_key", "present_value"},
                                      {{"is_causal", ir::int_attr("is_causal", causal ? 1 : 0)}}, 23),
                              {q, k, v, m, pk, pv},
                              "Attention mask " + std::string(is_bool ? "bool " : "float ") + shape_str(ms) +
                                  (causal ? " causal " : " ") + tname(t));
        }
}

TEST(CudaAttention, FloatMaskOfAnotherTypeAndFullyMaskedRows) {
  REQUIRE_GPU();
  for (DType t : kFloats) {
    const int64_t Sq = 9, L = 35;
    Tensor q = random_of(t, {1, 2, Sq, 16}, 27);
    Tensor k = random_of(t, {1, 2, L, 16}, 28);
    Tensor v = random_of(t, {1, 2, L, 16}, 29);
    // Rows 0 and 5 closed everywhere: their outputs are zeros.
    Tensor m = bool_mask({Sq, L}, 30);
    for (int64_t j = 0; j < L; ++j) m.mutable_data<uint8_t>()[0 * L + j] = m.mutable_data<uint8_t>()[5 * L + j] = 0;
    expect_same_on_cuda(op_node("Attention", {"Q", "K", "V", "M"}, {"Y"}, {}, 23), {q, k, v, m},
                        "Attention fully masked rows " + tname(t));
    // A float32 mask for 16-bit inputs, with -inf entries and a fully -inf row.
    Tensor fm = random_of(DType::Float32, {Sq, L}, 31, -4.0f, 2.0f);
    for (int64_t j = 0; j < L; j += 3) fm.mutable_data<float>()[j] = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < L; ++j) fm.mutable_data<float>()[2 * L + j] = -std::numeric_limits<float>::infinity();
    expect_same_on_cuda(op_node("Attention", {"Q", "K", "V", "M"}, {"Y"}, {}, 23), {q, k, v, fm},
                        "Attention float32 mask with -inf " + tname(t));
  }
}

TEST(CudaAttention, ScaleSoftcapAndSoftmaxPrecision) {
  REQUIRE_GPU();
  for (DType t : kFloats) {
    Tensor q = random_of(t, {2, 2, 7, 32}, 32);
    Tensor k = random_of(t, {2, 2, 45, 32}, 33);
    Tensor v = random_of(t, {2, 2, 45, 32}, 34);
    expect_same_on_cuda(
        op_node("Attention", {"Q", "K", "V"}, {"Y"},
                {{"scale", ir::float_attr("scale", 0.37f)}, {"softcap", ir::float_attr("softcap", 2.5f)}}, 23),
        {q, k, v}, "Attention scale + softcap " + tname(t));
    for (int64_t prec : {1, 10, 11, 16})
      expect_same_on_cuda(op_node("Attention", {"Q", "K", "V"}, {"Y"},
                                  {{"softmax_precision", ir::int_attr("softmax_precision", prec)},
                                   {"is_causal", ir::int_attr("is_causal", 1)}},
                                  23),
                          {q, k, v}, "Attention softmax_precision " + std::to_string(prec) + " " + tname(t));
  }
}

TEST(CudaAttention, QkMatmulOutputModes) {
  REQUIRE_GPU();
  for (DType t : kFloats)
    for (int64_t mode : {0, 1, 2, 3}) {
      Tensor q = random_of(t, {2, 4, 5, 8}, 35);
      Tensor k = random_of(t, {2, 2, 6, 8}, 36);
      Tensor v = random_of(t, {2, 2, 6, 8}, 37);
      Tensor pk = random_of(t, {2, 2, 3, 8}, 38);
      Tensor pv = random_of(t, {2, 2, 3, 8}, 39);
      Tensor m = random_of(t, {5, 9}, 40, -2.0f, 1.0f);
      expect_same_on_cuda(op_node("Attention", {"Q", "K", "V", "M", "past_key", "past_value"},
                                  {"Y", "present_key", "present_value", "qk"},
                                  {{"qk_matmul_output_mode", ir::int_attr("qk_matmul_output_mode", mode)},
                                   {"softcap", ir::float_attr("softcap", 3.0f)},
                                   {"is_causal", ir::int_attr("is_causal", 1)}},
                                  23),
                          {q, k, v, m, pk, pv}, "Attention qk output mode " + std::to_string(mode) + " " + tname(t));
    }
}

TEST(CudaAttention, NonpadKvSeqlen) {
  REQUIRE_GPU();
  for (DType t : kFloats) {
    const int64_t B = 3, Sq = 4, L = 40;
    Tensor q = random_of(t, {B, 2, Sq, 16}, 41);
    Tensor k = random_of(t, {B, 1, L, 16}, 42);
    Tensor v = random_of(t, {B, 1, L, 16}, 43);
    // Batch 2 has no valid key (and a negative causal offset): zeros.
    Tensor n = i64s({B}, {33, 40, 0});
    for (bool causal : {false, true})
      expect_same_on_cuda(op_node("Attention", {"Q", "K", "V", "", "", "", "nonpad"}, {"Y"},
                                  {{"is_causal", ir::int_attr("is_causal", causal ? 1 : 0)}}, 24),
                          {q, k, v, Tensor(), Tensor(), Tensor(), n},
                          "Attention nonpad_kv_seqlen " + std::string(causal ? "causal " : "") + tname(t));
  }
}

TEST(CudaAttention, SlidingWindow) {
  REQUIRE_GPU();
  Tensor q = random_of(DType::Float32, {1, 2, 21, 8}, 44);
  Tensor k = random_of(DType::Float32, {1, 2, 21, 8}, 45);
  Tensor v = random_of(DType::Float32, {1, 2, 21, 8}, 46);
  expect_same_on_cuda(op_node("Attention", {"Q", "K", "V"}, {"Y"},
                              {{"left_window_size", ir::int_attr("left_window_size", 5)},
                               {"right_window_size", ir::int_attr("right_window_size", 2)}},
                              25),
                      {q, k, v}, "Attention sliding window");
}

TEST(CudaAttention, Float64AndEmptyQueries) {
  REQUIRE_GPU();
  Tensor q = random_of(DType::Float64, {1, 2, 10, 40}, 47);
  Tensor k = random_of(DType::Float64, {1, 2, 33, 40}, 48);
  Tensor v = random_of(DType::Float64, {1, 2, 33, 40}, 49);
  expect_same_on_cuda(op_node("Attention", {"Q", "K", "V"}, {"Y"}, {{"is_causal", ir::int_attr("is_causal", 1)}}, 23),
                      {q, k, v}, "Attention float64");
  Tensor q0 = random_of(DType::Float32, {2, 2, 0, 8}, 50);
  Tensor k0 = random_of(DType::Float32, {2, 2, 5, 8}, 51);
  Tensor v0 = random_of(DType::Float32, {2, 2, 5, 8}, 52);
  expect_same_on_cuda(op_node("Attention", {"Q", "K", "V"}, {"Y", "present_key", "present_value"}, {}, 23),
                      {q0, k0, v0}, "Attention empty query sequence");
}

// --- reforge::Attention -----------------------------------------------------------------------

std::map<std::string, ir::Attribute> layouts(const std::string& q, const std::string& k, const std::string& v,
                                             const std::string& o) {
  return {{"q_layout", ir::string_attr("q_layout", q)},
          {"k_layout", ir::string_attr("k_layout", k)},
          {"v_layout", ir::string_attr("v_layout", v)},
          {"out_layout", ir::string_attr("out_layout", o)}};
}

// [B, H, S, D] in `layout` (bhds: [B, H, D, S]).
Shape in_layout(const std::string& layout, int64_t B, int64_t H, int64_t S, int64_t D) {
  if (layout == "bshd") return {B, S, H, D};
  if (layout == "bhds") return {B, H, D, S};
  return {B, H, S, D};
}

TEST(CudaFusedAttention, LayoutsScaleAndMasks) {
  REQUIRE_GPU();
  const int64_t B = 2, H = 3, Sq = 13, Sk = 37, D = 64;
  struct Case {
    std::string q, k, v, o;
  };
  const std::vector<Case> cases = {{"bhsd", "bhsd", "bhsd", "bhsd"},
                                   {"bshd", "bshd", "bshd", "bshd"},
                                   {"bhsd", "bhds", "bhsd", "bshd"},
                                   {"bshd", "bhds", "bhsd", "bhsd"}};
  for (const Case& c : cases)
    for (const std::string scale_op : {"none", "mul", "div"})
      for (const std::string mask_mode : {"none", "add", "where_fill_true", "where_fill_false"}) {
        auto attrs = layouts(c.q, c.k, c.v, c.o);
        attrs["scale_op"] = ir::string_attr("scale_op", scale_op);
        attrs["mask_mode"] = ir::string_attr("mask_mode", mask_mode);
        Tensor q = random_of(DType::Float32, in_layout(c.q, B, H, Sq, D), 60);
        Tensor k = random_of(DType::Float32, in_layout(c.k, B, H, Sk, D), 61);
        Tensor v = random_of(DType::Float32, in_layout(c.v, B, H, Sk, D), 62);
        Tensor scale = Tensor::scalar(DType::Float32, 8.0f);
        Tensor mask =
            mask_mode == "add" ? random_of(DType::Float32, {B, 1, Sq, Sk}, 63, -3.0f, 0.0f) : bool_mask({Sq, Sk}, 64);
        Tensor fill = Tensor::scalar(DType::Float32, -1e9f);
        std::vector<std::string> ins = {"Q",
                                        "K",
                                        "V",
                                        scale_op == "none" ? "" : "scale",
                                        mask_mode == "none" ? "" : "mask",
                                        mask_mode.rfind("where", 0) == 0 ? "fill" : ""};
        expect_same_on_cuda(
            op_node("Attention", ins, {"Y"}, attrs, 1, "reforge"), {q, k, v, scale, mask, fill},
            "reforge::Attention " + c.q + "/" + c.k + "/" + c.v + "/" + c.o + " " + scale_op + " " + mask_mode,
            {"scale", "fill"});
      }
}

TEST(CudaFusedAttention, GroupedQueryThroughRepeatKv) {
  REQUIRE_GPU();
  for (int64_t ratio : {1, 2, 4})
    for (int64_t D : {8, 80, 128}) {
      const int64_t B = 2, Hkv = 2, Hq = Hkv * ratio, Sq = 10, Sk = 33;
      Tensor q = random_of(DType::Float32, {B, Hq, Sq, D}, 65);
      Tensor k = random_of(DType::Float32, {B, Hkv, Sk, D}, 66);
      Tensor v = random_of(DType::Float32, {B, Hkv, Sk, D}, 67);
      Tensor scale = Tensor::scalar(DType::Float32, 0.125f);
      Tensor mask = random_of(DType::Float32, {1, 1, Sq, Sk}, 68, -2.0f, 0.0f);
      Tensor expand = i64s({5}, {B, Hkv, ratio, Sk, D});
      Tensor reshape = i64s({4}, {B, Hq, Sk, D});
      auto attrs = layouts("bhsd", "bhsd", "bhsd", "bhsd");
      attrs["scale_op"] = ir::string_attr("scale_op", "mul");
      attrs["mask_mode"] = ir::string_attr("mask_mode", "add");
      expect_same_on_cuda(op_node("Attention", {"Q", "K", "V", "scale", "mask", "", "ke", "kr", "ve", "vr"}, {"Y"},
                                  attrs, 1, "reforge"),
                          {q, k, v, scale, mask, Tensor(), expand, reshape, expand, reshape},
                          "reforge::Attention GQA ratio " + std::to_string(ratio) + " D=" + std::to_string(D),
                          {"scale", "ke", "kr", "ve", "vr"});
    }
}

TEST(CudaFusedAttention, BroadcastKvHeadsAndSixteenBit) {
  REQUIRE_GPU();
  // One K/V head shared by every query head, batch 1 K/V for batch 2 Q.
  Tensor q = random_of(DType::Float32, {2, 4, 9, 16}, 69);
  Tensor k = random_of(DType::Float32, {1, 1, 21, 16}, 70);
  Tensor v = random_of(DType::Float32, {1, 1, 21, 16}, 71);
  expect_same_on_cuda(op_node("Attention", {"Q", "K", "V"}, {"Y"}, {}, 1, "reforge"), {q, k, v},
                      "reforge::Attention broadcast K/V");
  for (DType t : {DType::Float16, DType::BFloat16}) {
    Tensor q16 = random_of(t, {2, 3, 11, 32}, 72);
    Tensor k16 = random_of(t, {2, 3, 41, 32}, 73);
    Tensor v16 = random_of(t, {2, 3, 41, 32}, 74);
    Tensor scale = Tensor::scalar(DType::Float32, 0.25f);
    expect_same_on_cuda(op_node("Attention", {"Q", "K", "V", "scale"}, {"Y"},
                                {{"scale_op", ir::string_attr("scale_op", "mul")}}, 1, "reforge"),
                        {q16, k16, v16, cast_tensor(scale, t)}, "reforge::Attention " + tname(t), {"scale"});
  }
}

TEST(CudaFusedAttention, ThreeDimensionalOperandsBroadcast) {
  REQUIRE_GPU();
  // [H, S, D] operands (K^T given as [H, D, S]); a 4-D mask makes the output 4-D.
  const int64_t H = 3, Sq = 10, Sk = 35, D = 24;
  Tensor q = random_of(DType::Float32, {H, Sq, D}, 79);
  Tensor kt = random_of(DType::Float32, {H, D, Sk}, 80);
  Tensor k1 = random_of(DType::Float32, {1, D, Sk}, 81);
  Tensor v = random_of(DType::Float32, {H, Sk, 20}, 82);
  Tensor scale = Tensor::scalar(DType::Float32, 5.0f);
  Tensor m3 = random_of(DType::Float32, {Sq, Sk}, 83, -2.0f, 0.0f);
  Tensor m4 = random_of(DType::Float32, {2, 1, Sq, Sk}, 84, -2.0f, 0.0f);
  auto attrs = layouts("bhsd", "bhds", "bhsd", "bhsd");
  attrs["scale_op"] = ir::string_attr("scale_op", "div");
  attrs["mask_mode"] = ir::string_attr("mask_mode", "add");
  ir::Node n = op_node("Attention", {"Q", "K", "V", "scale", "M"}, {"Y"}, attrs, 1, "reforge");
  expect_same_on_cuda(n, {q, kt, v, scale, m3}, "reforge::Attention 3-D", {"scale"});
  expect_same_on_cuda(n, {q, kt, v, scale, m4}, "reforge::Attention 3-D with a 4-D mask", {"scale"});
  // One K head for every Q head.
  expect_same_on_cuda(op_node("Attention", {"Q", "K", "V", "scale", "M"}, {"Y"}, attrs, 1, "reforge"),
                      {q, k1, v, scale, m3}, "reforge::Attention 3-D broadcast K", {"scale"});
}

TEST(CudaFusedAttention, RowOfOnlyMinusInfinityIsNaN) {
  REQUIRE_GPU();
  // The CPU's fused kernel: softmax over a row of -inf scores is NaN (exp(-inf - -inf)); other rows
  // with -inf entries are finite.
  const int64_t Sq = 6, Sk = 45;
  Tensor q = random_of(DType::Float32, {1, 2, Sq, 16}, 75);
  Tensor k = random_of(DType::Float32, {1, 2, Sk, 16}, 76);
  Tensor v = random_of(DType::Float32, {1, 2, Sk, 16}, 77);
  Tensor m = random_of(DType::Float32, {Sq, Sk}, 78, -2.0f, 0.0f);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < Sk; ++j) m.mutable_data<float>()[3 * Sk + j] = ninf;
  for (int64_t j = 0; j < Sk; j += 2) m.mutable_data<float>()[1 * Sk + j] = ninf;
  for (int64_t j = 0; j < 40; ++j) m.mutable_data<float>()[4 * Sk + j] = ninf;  // open keys only in the last tile
  expect_same_on_cuda(op_node("Attention", {"Q", "K", "V", "", "M"}, {"Y"},
                              {{"mask_mode", ir::string_attr("mask_mode", "add")}}, 1, "reforge"),
                      {q, k, v, Tensor(), m}, "reforge::Attention -inf rows");
}

TEST(CudaFusedAttention, QAndKScaledSeparatelyWithTheNanGuard) {
  REQUIRE_GPU();
  // PyTorch's decomposition as fuse-attention finds it: Q * c1 and K * c2 (scale_op 'mul_qk'),
  // and softmax_nan 'zero', on rows of only -inf (zero, not NaN) and partly -inf.
  const int64_t Sq = 7, Sk = 40, D = 32;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (DType t : {DType::Float32, DType::BFloat16}) {
    Tensor q = random_of(t, {2, 2, Sq, D}, 85);
    Tensor k = random_of(t, {2, 2, Sk, D}, 86);
    Tensor v = random_of(t, {2, 2, Sk, D}, 87);
    Tensor m = random_of(DType::Float32, {Sq, Sk}, 88, -2.0f, 0.0f);
    for (int64_t j = 0; j < Sk; ++j) m.mutable_data<float>()[2 * Sk + j] = ninf;
    for (int64_t j = 0; j < Sk; j += 3) m.mutable_data<float>()[5 * Sk + j] = ninf;
    Tensor c1 = Tensor::scalar(DType::Float32, 0.42f), c2 = Tensor::scalar(DType::Float32, 0.42f);
    auto attrs = layouts("bhsd", "bhsd", "bhsd", "bhsd");
    attrs["scale_op"] = ir::string_attr("scale_op", "mul_qk");
    attrs["mask_mode"] = ir::string_attr("mask_mode", "add");
    attrs["softmax_nan"] = ir::string_attr("softmax_nan", "zero");
    expect_same_on_cuda(
        op_node("Attention", {"Q", "K", "V", "c1", "M", "", "", "", "", "", "c2"}, {"Y"}, attrs, 1, "reforge"),
        {q, k, v, cast_tensor(c1, t), cast_tensor(m, t), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(),
         cast_tensor(c2, t)},
        "reforge::Attention mul_qk + softmax_nan zero " + tname(t), {"c1", "c2"});
  }
}

// precision 'float32' (fuse-attention's node of a 16-bit model): against a float64 computation of
// the same 16-bit inputs (scores, masked, softmax, weighted values), every output element within
// one unit in the last place of the 16-bit type plus 1e-5 of the largest |V|. Grouped-query heads
// through repeat_kv, a 16-bit additive mask holding the type's lowest value (Hugging Face's
// padding), one query row against many keys (a decoding step, its keys split across blocks) and
// a prompt's rows (16 or more: through cuBLASLt's products in float32).
TEST(CudaFusedAttention, SixteenBitComputedInFloat32AgainstFloat64) {
  REQUIRE_GPU();
  struct Case {
    int64_t B, Hq, Hkv, Sq, Sk, D;
  };
  for (DType t : {DType::BFloat16, DType::Float16})
    for (const Case& c : {Case{1, 8, 2, 1, 600, 64}, Case{2, 4, 4, 13, 45, 32}, Case{1, 32, 8, 1, 97, 128},
                          Case{1, 4, 1, 40, 40, 80}, Case{2, 8, 2, 24, 50, 64}, Case{1, 32, 8, 130, 130, 64},
                          Case{2, 16, 2, 1, 3000, 128}, Case{4, 32, 32, 1, 1000, 64}, Case{2, 12, 4, 1, 77, 80}}) {
      const std::string what = tname(t) + " B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) + " Hkv" +
                               std::to_string(c.Hkv) + " Sq" + std::to_string(c.Sq) + " Sk" + std::to_string(c.Sk) +
                               " D" + std::to_string(c.D);
      const int64_t group = c.Hq / c.Hkv;
      Tensor q = random_of(t, {c.B, c.Hq, c.Sq, c.D}, 91);
      Tensor k = random_of(t, {c.B, c.Hkv, c.Sk, c.D}, 92);
      Tensor v = random_of(t, {c.B, c.Hkv, c.Sk, c.D}, 93);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
      // Padding: the first keys of batch 1 closed with the type's lowest value; a causal edge.
      Tensor mf = Tensor::empty(DType::Float32, {c.B, 1, c.Sq, c.Sk});
      const float lowest = t == DType::BFloat16 ? -3.3895313892515355e+38f : -65504.0f;
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t i = 0; i < c.Sq; ++i)
          for (int64_t j = 0; j < c.Sk; ++j)
            mf.mutable_data<float>()[(b * c.Sq + i) * c.Sk + j] =
                (b == 1 && j < 3) || j > i + (c.Sk - c.Sq) ? lowest : 0.0f;
      Tensor mask = cast_tensor(mf, t);
      auto attrs = layouts("bhsd", "bhsd", "bhsd", "bhsd");
      attrs["scale_op"] = ir::string_attr("scale_op", "mul");
      attrs["mask_mode"] = ir::string_attr("mask_mode", "add");
      attrs["precision"] = ir::string_attr("precision", "float32");
      std::vector<std::string> ins = {"Q", "K", "V", "scale", "M"};
      ir::Graph g;
      g.name = "attention16";
      g.ir_version = 10;
      g.opsets[""] = 17;
      g.opsets["reforge"] = 1;
      for (auto [name, x] : {std::pair<std::string, Tensor>{"Q", q}, {"K", k}, {"V", v}, {"M", mask}})
        g.inputs.push_back(test_support::value_info(name, x.dtype(), x.shape()));
      g.initializers["scale"] = cast_tensor(Tensor::scalar(DType::Float32, static_cast<float>(scale)), t);
      if (group > 1) {
        ins.insert(ins.end(), {"", "ke", "kr", "ke", "kr"});
        g.initializers["ke"] = i64s({5}, {c.B, c.Hkv, group, c.Sk, c.D});
        g.initializers["kr"] = i64s({4}, {c.B, c.Hq, c.Sk, c.D});
      }
      g.nodes.push_back(op_node("Attention", ins, {"Y"}, attrs, 1, "reforge"));
      ir::ValueInfo y;
      y.name = "Y";
      g.outputs.push_back(y);
      const Tensor got =
          test_support::engine_for(g, {}, "cuda").run({{"Q", q}, {"K", k}, {"V", v}, {"M", mask}})[0];
      ASSERT_EQ(got.shape(), (Shape{c.B, c.Hq, c.Sq, c.D})) << what;
      const double sc = cast_tensor(g.initializers["scale"], DType::Float64).data<double>()[0];
      double vmax = 0;
      for (int64_t x = 0; x < v.numel(); ++x) vmax = std::max(vmax, std::fabs(v.as_double(x)));
      int64_t bad = 0;
      std::vector<double> w(static_cast<size_t>(c.Sk));
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.Hq; ++h)
          for (int64_t i = 0; i < c.Sq; ++i) {
            const int64_t kh = h / group;
            double mx = -INFINITY;
            for (int64_t j = 0; j < c.Sk; ++j) {
              double dot = 0;
              for (int64_t e = 0; e < c.D; ++e)
                dot += q.as_double(((b * c.Hq + h) * c.Sq + i) * c.D + e) *
                       k.as_double(((b * c.Hkv + kh) * c.Sk + j) * c.D + e);
              w[static_cast<size_t>(j)] = dot * sc + mask.as_double((b * c.Sq + i) * c.Sk + j);
              mx = std::max(mx, w[static_cast<size_t>(j)]);
            }
            double sum = 0;
            for (double& x : w) sum += x = std::exp(x - mx);
            for (int64_t e = 0; e < c.D; ++e) {
              double want = 0;
              for (int64_t j = 0; j < c.Sk; ++j)
                want += w[static_cast<size_t>(j)] / sum * v.as_double(((b * c.Hkv + kh) * c.Sk + j) * c.D + e);
              const double a = std::max(std::fabs(want), 1e-30);
              const double ulp = std::ldexp(1.0, std::ilogb(a) - (t == DType::BFloat16 ? 7 : 10));
              const double g_v = got.as_double(((b * c.Hq + h) * c.Sq + i) * c.D + e);
              if (!(std::fabs(g_v - want) <= ulp + 1e-5 * vmax) && bad++ < 5)
                ADD_FAILURE() << what << ": [" << b << "," << h << "," << i << "," << e << "] = " << g_v << ", want "
                              << want;
            }
          }
      EXPECT_EQ(bad, 0) << what;
    }
}

// A decoding step of a 16-bit model in float32 (one query row per head: the decoding kernel,
// attention_decode.h) against a float64 computation of the same inputs, as the float32 test
// above: grouped heads, scale none/mul/div/mul_qk (PyTorch's decomposition: Q and K each scaled
// before the product), an additive mask of the inputs' type and of float32
// with -inf keys and a batch whose keys are all closed (a NaN row, or zeros under softmax_nan
// 'zero'), the boolean mask's fill, and keys split across blocks.
TEST(CudaFusedAttention, DecodingStepMasksAndScalesAgainstFloat64) {
  REQUIRE_GPU();
  const int64_t B = 2, Hq = 8, Hkv = 2, group = Hq / Hkv, D = 64;
  const double ninf = -std::numeric_limits<double>::infinity();
  for (DType t : {DType::BFloat16, DType::Float16})
    for (int64_t L : {5, 300})
      for (const std::string scale_op : {"none", "mul", "div", "mul_qk"})
        for (const std::string mask : {"add", "add_f32", "where_fill_true"})
          for (const std::string nan : {"keep", "zero"}) {
            const std::string what = "decoding " + tname(t) + " L" + std::to_string(L) + " " + scale_op + " " +
                                     mask + " softmax_nan " + nan;
            Tensor q = random_of(t, {B, Hq, 1, D}, 95);
            Tensor k = random_of(t, {B, Hkv, L, D}, 96);
            Tensor v = random_of(t, {B, Hkv, L, D}, 97);
            const bool where = mask == "where_fill_true";
            Tensor m;
            if (where) {
              m = bool_mask({B, 1, 1, L}, 98);
            } else {
              m = random_of(DType::Float32, {B, 1, 1, L}, 98, -2.0f, 0.0f);
              for (int64_t j = 0; j < L; j += 3) m.mutable_data<float>()[j] = -INFINITY;
              for (int64_t j = 0; j < L; ++j) m.mutable_data<float>()[L + j] = -INFINITY;  // batch 1: no open key
              if (mask == "add") m = cast_tensor(m, t);
            }
            Tensor scale = cast_tensor(Tensor::scalar(DType::Float32, 0.125f), t);
            Tensor fill = cast_tensor(Tensor::scalar(DType::Float32, -1e4f), t);
            Tensor k_scale = cast_tensor(Tensor::scalar(DType::Float32, 0.5f), t);  // mul_qk: K's factor
            ir::Graph g;
            g.name = "decoding";
            g.ir_version = 10;
            g.opsets[""] = 17;
            g.opsets["reforge"] = 1;
            for (auto [name, x] : {std::pair<std::string, Tensor>{"Q", q}, {"K", k}, {"V", v}, {"M", m}})
              g.inputs.push_back(test_support::value_info(name, x.dtype(), x.shape()));
            g.initializers["scale"] = scale;
            g.initializers["fill"] = fill;
            g.initializers["kscale"] = k_scale;
            g.initializers["ke"] = i64s({5}, {B, Hkv, group, L, D});
            g.initializers["kr"] = i64s({4}, {B, Hq, L, D});
            auto attrs = layouts("bhsd", "bhsd", "bhsd", "bhsd");
            attrs["scale_op"] = ir::string_attr("scale_op", scale_op);
            attrs["mask_mode"] = ir::string_attr("mask_mode", where ? mask : "add");
            attrs["precision"] = ir::string_attr("precision", "float32");
            attrs["softmax_nan"] = ir::string_attr("softmax_nan", nan);
            std::vector<std::string> ins = {"Q", "K", "V", scale_op == "none" ? "" : "scale", "M", where ? "fill" : "",
                                            "ke", "kr", "ke", "kr"};
            if (scale_op == "mul_qk") ins.push_back("kscale");
            g.nodes.push_back(op_node("Attention", ins, {"Y"}, attrs, 1, "reforge"));
            ir::ValueInfo y;
            y.name = "Y";
            g.outputs.push_back(y);
            const Tensor got =
                test_support::engine_for(g, {}, "cuda").run({{"Q", q}, {"K", k}, {"V", v}, {"M", m}})[0];
            ASSERT_EQ(got.shape(), (Shape{B, Hq, 1, D})) << what;
            const double sc = scale.as_double(0), fv = fill.as_double(0);
            double vmax = 0;
            for (int64_t x = 0; x < v.numel(); ++x) vmax = std::max(vmax, std::fabs(v.as_double(x)));
            int64_t bad = 0;
            std::vector<double> w(static_cast<size_t>(L));
            for (int64_t b = 0; b < B; ++b)
              for (int64_t h = 0; h < Hq; ++h) {
                const int64_t kh = h / group;
                double mx = ninf;
                for (int64_t j = 0; j < L; ++j) {
                  double s = 0;
                  for (int64_t e = 0; e < D; ++e)
                    s += q.as_double((b * Hq + h) * D + e) * k.as_double(((b * Hkv + kh) * L + j) * D + e);
                  if (scale_op == "mul") s *= sc;
                  if (scale_op == "div") s /= sc;
                  if (scale_op == "mul_qk") s *= sc * k_scale.as_double(0);
                  if (where) {
                    if (m.data<uint8_t>()[b * L + j]) s = fv;
                  } else {
                    s += m.as_double(b * L + j);
                  }
                  w[static_cast<size_t>(j)] = s;
                  mx = std::max(mx, s);
                }
                const bool closed = mx == ninf;  // every key closed: NaN, or zeros under 'zero'
                double sum = 0;
                if (!closed)
                  for (double& x : w) sum += x = std::exp(x - mx);
                for (int64_t e = 0; e < D; ++e) {
                  const double g_v = got.as_double((b * Hq + h) * D + e);
                  if (closed) {
                    const bool ok = nan == "zero" ? g_v == 0.0 : std::isnan(g_v);
                    if (!ok && bad++ < 5) ADD_FAILURE() << what << ": closed row [" << b << "," << h << "," << e << "] = " << g_v;
                    continue;
                  }
                  double want = 0;
                  for (int64_t j = 0; j < L; ++j)
                    want += w[static_cast<size_t>(j)] / sum * v.as_double(((b * Hkv + kh) * L + j) * D + e);
                  const double a = std::max(std::fabs(want), 1e-30);
                  const double ulp = std::ldexp(1.0, std::ilogb(a) - (t == DType::BFloat16 ? 7 : 10));
                  if (!(std::fabs(g_v - want) <= ulp + 1e-5 * vmax) && bad++ < 5)
                    ADD_FAILURE() << what << ": [" << b << "," << h << "," << e << "] = " << g_v << ", want " << want;
                }
              }
            EXPECT_EQ(bad, 0) << what;
            if (::testing::Test::HasFatalFailure()) return;
          }
}

// --- RotaryEmbedding and reforge::Rotary ------------------------------------------------------

TEST(CudaRotary, RotaryEmbeddingVariants) {
  REQUIRE_GPU();
  for (DType t : kFloats)
    for (bool interleaved : {false, true})
      for (int64_t rot : {0, 6}) {
        const int64_t B = 2, H = 3, S = 7, Dh = 10, half = (rot ? rot : Dh) / 2;
        std::map<std::string, ir::Attribute> attrs{{"interleaved", ir::int_attr("interleaved", interleaved)},
                                                   {"rotary_embedding_dim", ir::int_attr("rotary_embedding_dim", rot)}};
        const std::string what =
            tname(t) + (interleaved ? " interleaved" : " half-split") + " rot " + std::to_string(rot);
        // 4-D, per-token caches.
        Tensor x4 = random_of(t, {B, H, S, Dh}, 80);
        Tensor c = random_of(t, {B, S, half}, 81, -1.0f, 1.0f);
        Tensor s = random_of(t, {B, S, half}, 82, -1.0f, 1.0f);
        expect_same_on_cuda(op_node("RotaryEmbedding", {"X", "cos", "sin"}, {"Y"}, attrs, 23), {x4, c, s},
                            "RotaryEmbedding 4D " + what);
        // 3-D with position_ids into a [max_position, half] cache.
        auto attrs3 = attrs;
        attrs3["num_heads"] = ir::int_attr("num_heads", H);
        Tensor x3 = random_of(t, {B, S, H * Dh}, 83);
        Tensor cc = random_of(t, {23, half}, 84, -1.0f, 1.0f);
        Tensor sc = random_of(t, {23, half}, 85, -1.0f, 1.0f);
        Tensor pos = i64s({B, S}, {0, 3, 22, 5, 5, 1, 9, 17, 2, 4, 6, 8, 10, 12});
        expect_same_on_cuda(op_node("RotaryEmbedding", {"X", "cos", "sin", "pos"}, {"Y"}, attrs3, 23),
                            {x3, cc, sc, pos}, "RotaryEmbedding 3D position_ids " + what, {"pos"});
      }
}

TEST(CudaRotary, FusedRotaryLayoutsAndBroadcast) {
  REQUIRE_GPU();
  const int64_t B = 2, H = 3, S = 9, D = 12;
  for (DType t : {DType::Float32, DType::Float16})
    for (const std::string layout : {"bhsd", "bshd"})
      for (const Shape& table : {Shape{S, D}, Shape{B, 1, S, D}, Shape{1, H, S, D}}) {
        Tensor x = random_of(t, in_layout(layout, B, H, S, D), 90);
        Tensor c = random_of(t, table, 91, -1.0f, 1.0f);
        Tensor s = random_of(t, table, 92, -1.0f, 1.0f);
        Tensor hs = i64s({1}, {D / 2}), he = i64s({1}, {int64_t{1} << 62}), ls = i64s({1}, {0}),
               le = i64s({1}, {D / 2});
        expect_same_on_cuda(op_node("Rotary", {"X", "cos", "sin", "hs", "he", "ls", "le"}, {"Y"},
                                    {{"layout", ir::string_attr("layout", layout)}}, 1, "reforge"),
                            {x, c, s, hs, he, ls, le},
                            "reforge::Rotary " + tname(t) + " " + layout + " " + shape_str(table),
                            {"hs", "he", "ls", "le"});
      }
  // 3-D X [H, S, D] with a [S, D] table, and with a 4-D table (the output becomes 4-D); bounds
  // given as negative and clamped values.
  Tensor x3 = random_of(DType::Float32, {H, S, D}, 93);
  Tensor hs = i64s({1}, {-D / 2}), he = i64s({1}, {D + 5}), ls = i64s({1}, {0}), le = i64s({1}, {D / 2});
  for (const Shape& table : {Shape{S, D}, Shape{1, 1, S, D}}) {
    Tensor c = random_of(DType::Float32, table, 94, -1.0f, 1.0f);
    Tensor s = random_of(DType::Float32, table, 95, -1.0f, 1.0f);
    expect_same_on_cuda(op_node("Rotary", {"X", "cos", "sin", "hs", "he", "ls", "le"}, {"Y"}, {}, 1, "reforge"),
                        {x3, c, s, hs, he, ls, le}, "reforge::Rotary 3-D X, table " + shape_str(table),
                        {"hs", "he", "ls", "le"});
  }
}

}  // namespace
