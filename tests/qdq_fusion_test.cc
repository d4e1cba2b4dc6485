// fuse-dequantize-matmul (passes/qdq_matmul.cc) and its recipe step reforge::QdqWeight
// (ops/reforge/qdq_weight.h): a Linear layer on DequantizeLinear(codes, scale[, zero point]) runs
// on reforge::MatMulQuant over the codes.
//
// - The layout is exact: MatMulQuant's reference kernel on QdqWeight's output equals, bit for bit,
//   DequantizeLinear's float32 weight multiplied with the float32 sum taken in ascending k (the
//   reference kernel's order), and the CPU kernel is within the bound of that sum in another
//   order, for every form the step takes (int8/uint8 per tensor and per output
//   channel, int4/uint4 per tensor, per channel and in blocks, with and without zero points, [K, N]
//   and transposed codes, a K that is no multiple of the block).
// - Built plans: the fused plan holds the codes, not float32 copies (its weight bytes shrink), and
//   agrees with the unfused plan (--skip-pass fuse-dequantize-matmul) within the float32 bound of
//   a K-term sum in any order, K * 2^-23 * sum_k |x_k w_k| (each plan is a float32 sum of the same
//   products in its own order: oneDNN's, the int8 kernel's with the scale applied to the sum).
// - What stays on DequantizeLinear (asymmetric int8, int8 per input channel, int16) is not fused
//   and gives the unfused plan's outputs bit for bit.
// - Refit: new codes give the engine weights and outputs of a fresh build bit for bit; new zero
//   points the int8 form cannot hold are refused, naming the engine weight, and change nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "builder/builder.h"
#include "ops/quant/quant_common.h"
#include "ops/reforge/qdq_weight.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/engine_checks.h"
#include "support/make_tensor.h"
#include "support/plan_round_trip.h"
#include "support/run_op.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::error_of;
using test_support::random_floats;
using test_support::round_trip;

namespace {

// Codes of type `t` drawn uniformly from its whole range (so the extremes occur).
Tensor random_codes(DType t, const Shape& shape, uint32_t seed) {
  int64_t lo = 0, hi = 0;
  EXPECT_TRUE(ops::quant::quant_int_range(t, lo, hi));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> d(lo, hi);
  std::vector<int64_t> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& x : v) x = d(rng);
  return ops::quant::int_tensor(v, t, shape);
}

Tensor positive_scales(const Shape& shape, uint32_t seed) { return random_floats(shape, seed, 0.001f, 0.05f); }

struct Qdq {
  Tensor codes, scale, zp;  // zp undefined: absent
  int64_t axis = 1, block = 0;
};

std::map<std::string, ir::Attribute> dq_attrs(const Qdq& w) {
  std::map<std::string, ir::Attribute> a = {{"axis", ir::int_attr("axis", w.axis)}};
  if (w.block) a["block_size"] = ir::int_attr("block_size", w.block);
  return a;
}

Tensor dequantize(const Qdq& w) {
  std::vector<const Tensor*> in = {&w.codes, &w.scale};
  if (w.zp.defined()) in.push_back(&w.zp);
  return transforms::evaluate_op("", "DequantizeLinear", 21, dq_attrs(w), in, 1)[0];
}

// One form of the tests below: codes of `t`, K x N (transposed: stored [N, K]), scale laid out
// per tensor (block 0, per_channel false), per output channel, or in blocks along K.
Qdq make_qdq(DType t, int64_t K, int64_t N, bool transposed, bool per_channel, int64_t block, bool with_zp,
             uint32_t seed) {
  Qdq w;
  const int64_t k_axis = transposed ? 1 : 0, n_axis = 1 - k_axis;
  w.codes = random_codes(t, transposed ? Shape{N, K} : Shape{K, N}, seed);
  Shape ss;
  if (block) {
    ss = Shape(2);
    ss[static_cast<size_t>(k_axis)] = (K + block - 1) / block;
    ss[static_cast<size_t>(n_axis)] = N;
    w.axis = k_axis;
    w.block = block;
  } else if (per_channel) {
    ss = {N};
    w.axis = n_axis;
  } else {
    ss = {};
  }
  w.scale = positive_scales(ss, seed + 1);
  if (with_zp) {
    const bool four = t == DType::Int4 || t == DType::UInt4;
    if (four) {
      w.zp = random_codes(t, ss, seed + 2);  // any zero point: the int4 form holds them all
    } else {
      std::vector<int64_t> centre(static_cast<size_t>(shape_numel(ss)), t == DType::UInt8 ? 128 : 0);
      w.zp = ops::quant::int_tensor(centre, t, ss);
    }
  }
  return w;
}

std::vector<Tensor> qdq_weight(const Qdq& w, bool transposed, size_t outputs) {
  std::vector<const Tensor*> in = {&w.codes, &w.scale};
  if (w.zp.defined()) in.push_back(&w.zp);
  return transforms::evaluate_op("reforge", "QdqWeight", 1,
                                 {{"axis", ir::int_attr("axis", w.axis)},
                                  {"block_size", ir::int_attr("block_size", w.block)},
                                  {"transposed", ir::int_attr("transposed", transposed ? 1 : 0)}},
                                 in, outputs);
}

TEST(QdqWeight, MatMulQuantReferenceEqualsDequantizeThenAscendingSum) {
  struct Case {
    DType t;
    bool transposed, per_channel;
    int64_t block;
    bool zp;
  };
  const std::vector<Case> cases = {
      {DType::Int8, false, true, 0, true},    {DType::Int8, false, true, 0, false},
      {DType::Int8, true, true, 0, true},     {DType::Int8, false, false, 0, true},
      {DType::UInt8, false, true, 0, true},   {DType::UInt8, true, false, 0, true},
      {DType::Int4, false, false, 16, true},  {DType::Int4, false, false, 32, false},
      {DType::Int4, true, false, 16, true},   {DType::UInt4, false, false, 16, true},
      {DType::UInt4, true, false, 64, false}, {DType::Int4, false, true, 0, true},
      {DType::UInt4, true, false, 0, false},
  };
  const int64_t K = 77, N = 9, M = 3;  // K odd and no multiple of any block: a short last block
  uint32_t seed = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.t)) + (c.transposed ? " transposed" : "") +
                 (c.per_channel ? " per channel" : "") + " block " + std::to_string(c.block) +
                 (c.zp ? " zp" : " no zp"));
    const Qdq w = make_qdq(c.t, K, N, c.transposed, c.per_channel, c.block, c.zp, seed += 10);
    const Tensor wd = dequantize(w);
    ops::quant::QdqForm f;
    ASSERT_EQ(
        ops::quant::qdq_form(c.t, w.codes.shape(), DType::Float32, w.scale.shape(), w.axis, w.block, c.transposed, f),
        "");
    const bool four = f.target.bits == 4;
    const std::vector<Tensor> q = qdq_weight(w, c.transposed, four ? 3 : 2);
    const Tensor x = random_floats({M, K}, seed + 5);
    ir::Node mq;
    mq.name = "mq";
    mq.domain = "reforge";
    mq.op_type = "MatMulQuant";
    mq.opset = 1;
    mq.inputs = {"x", "q", "s", four ? "z" : ""};
    mq.outputs = {"y"};
    mq.attrs = {{"bits", ir::int_attr("bits", f.target.bits)},
                {"block_size", ir::int_attr("block_size", f.target.block_size)},
                {"K", ir::int_attr("K", K)},
                {"N", ir::int_attr("N", N)}};
    std::vector<const Tensor*> in = {&x, &q[0], &q[1], four ? &q[2] : nullptr};
    const Tensor y = test_support::run_reference_node(mq, in)[0];
    const Tensor y_cpu = test_support::run_node(mq, in)[0];
    ASSERT_EQ(y.shape(), (Shape{M, N}));
    const float* pw = wd.data<float>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
          const float p = x.data<float>()[m * K + k] * pw[c.transposed ? n * K + k : k * N + n];
          acc += p;
        }
        ASSERT_EQ(y.data<float>()[m * N + n], acc) << "m " << m << " n " << n;
        // The CPU kernel: another order of the same sum (int8: the scale applied to the sum).
        double mag = 0;
        for (int64_t k = 0; k < K; ++k)
          mag += std::fabs(double(x.data<float>()[m * K + k]) * pw[c.transposed ? n * K + k : k * N + n]);
        ASSERT_LE(std::fabs(double(y_cpu.data<float>()[m * N + n]) - acc), double(K + 1) * std::ldexp(mag, -23))
            << "CPU kernel, m " << m << " n " << n;
      }
  }
}

TEST(QdqWeight, FormsThatStayOnDequantizeLinear) {
  ops::quant::QdqForm f;
  auto why = [&](DType t, Shape cs, DType st, Shape ss, int64_t axis, int64_t block, bool tr = false) {
    return ops::quant::qdq_form(t, cs, st, ss, axis, block, tr, f);
  };
  EXPECT_NE(why(DType::Int16, {8, 4}, DType::Float32, {4}, 1, 0).find("int16 codes have no MatMulQuant form"),
            std::string::npos);
  EXPECT_NE(why(DType::Float8E4M3FN, {8, 4}, DType::Float32, {}, 1, 0).find("no MatMulQuant form"), std::string::npos);
  EXPECT_NE(why(DType::Int8, {8, 4}, DType::Float16, {4}, 1, 0).find("not float32"), std::string::npos);
  // A scale per input channel (axis K) or in blocks: int8 has one scale per output channel.
  EXPECT_NE(why(DType::Int8, {8, 4}, DType::Float32, {8}, 0, 0).find("is not per tensor, per output channel"),
            std::string::npos);
  EXPECT_NE(why(DType::Int8, {32, 4}, DType::Float32, {2, 4}, 0, 16).find("int8 codes in blocks"), std::string::npos);
  // 4-bit blocks MatMulQuant does not take.
  EXPECT_NE(why(DType::Int4, {48, 4}, DType::Float32, {2, 4}, 0, 24).find("power of two >= 16"), std::string::npos);
  EXPECT_NE(why(DType::Int4, {16, 4}, DType::Float32, {2, 4}, 0, 8).find("power of two >= 16"), std::string::npos);
  // The int8 step refuses zero points off the centre (the pass does not choose that form then).
  Qdq w = make_qdq(DType::Int8, 8, 4, false, true, 0, false, 1);
  w.zp = ops::quant::int_tensor({0, 0, 3, 0}, DType::Int8, {4});
  EXPECT_FALSE(ops::quant::symmetric_zero_points(w.zp));
  const std::string err = error_of([&] { qdq_weight(w, false, 2); });
  EXPECT_NE(err.find("is not 0 everywhere: MatMulQuant's int8 form holds symmetrically quantized weights only"),
            std::string::npos)
      << err;
}

// Int4Unpack lays QuantizeWeight's int4 output out as DequantizeLinear's uint4 inputs, and
// QdqWeight lays those back out: the round trip gives QuantizeWeight's bytes, padding included.
TEST(QdqWeight, Int4UnpackIsTheInverseOfQdqWeight) {
  for (bool transposed : {false, true})
    for (int64_t block : {16, 32}) {
      SCOPED_TRACE(std::string(transposed ? "[N, K]" : "[K, N]") + " block " + std::to_string(block));
      const int64_t K = 77, N = 6;
      const Tensor w = random_floats(transposed ? Shape{N, K} : Shape{K, N}, 40 + static_cast<uint32_t>(block));
      const std::vector<Tensor> q = transforms::evaluate_op("reforge", "QuantizeWeight", 1,
                                                            {{"bits", ir::int_attr("bits", 4)},
                                                             {"block_size", ir::int_attr("block_size", block)},
                                                             {"transposed", ir::int_attr("transposed", transposed)}},
                                                            {&w}, 3);
      const std::vector<Tensor> u =
          transforms::evaluate_op("reforge", "Int4Unpack", 1,
                                  {{"K", ir::int_attr("K", K)}, {"transposed", ir::int_attr("transposed", transposed)}},
                                  {&q[0], &q[1], &q[2]}, 3);
      ASSERT_EQ(u[0].dtype(), DType::UInt4);
      ASSERT_EQ(u[0].shape(), transposed ? (Shape{N, K}) : (Shape{K, N}));
      // DequantizeLinear of the unpacked form is QuantizeWeight's dequantized weight: (q - zp) * scale.
      Qdq d;
      d.codes = u[0];
      d.scale = u[1];
      d.zp = u[2];
      d.axis = transposed ? 1 : 0;
      d.block = block;
      const std::vector<Tensor> back = qdq_weight(d, transposed, 3);
      for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(transforms::bit_equal(back[i], q[i])) << "output " << i;
    }
}

// --- Plans built from small graphs -------------------------------------------------------------

ir::Node node(const std::string& name, const std::string& op, std::vector<std::string> ins, std::string out,
              int opset = 21) {
  ir::Node n;
  n.name = name;
  n.op_type = op;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = {std::move(out)};
  return n;
}

// y = MatMul(x, DequantizeLinear(w.q, w.scale[, w.zp])), or Gemm with transB and a bias that is
// DequantizeLinear of int32 codes (as ONNX Runtime's quantize_static writes it).
ir::Graph linear_graph(const Qdq& w, bool gemm, int64_t N) {
  ir::Graph g;
  g.name = "qdq_linear";
  g.ir_version = 10;
  g.opsets = {{"", 21}};
  g.inputs.push_back({"x", DType::Float32, false, {}});
  g.outputs.push_back({"y", DType::Float32, false, {}});
  g.initializers["w.q"] = w.codes;
  g.initializers["w.scale"] = w.scale;
  std::vector<std::string> dq = {"w.q", "w.scale"};
  if (w.zp.defined()) {
    g.initializers["w.zp"] = w.zp;
    dq.push_back("w.zp");
  }
  ir::Node d = node("w_DequantizeLinear", "DequantizeLinear", dq, "w");
  d.attrs = dq_attrs(w);
  g.nodes.push_back(d);
  if (!gemm) {
    g.nodes.push_back(node("fc/MatMul", "MatMul", {"x", "w"}, "y"));
    return g;
  }
  g.initializers["b.q"] = random_codes(DType::Int32, {N}, 77);
  g.initializers["b.scale"] = test_support::make<float>({}, {1e-9f});
  g.nodes.push_back(node("b_DequantizeLinear", "DequantizeLinear", {"b.q", "b.scale"}, "b"));
  ir::Node gm = node("fc/Gemm", "Gemm", {"x", "w", "b"}, "y");
  gm.attrs = {{"transB", ir::int_attr("transB", 1)}};
  g.nodes.push_back(gm);
  return g;
}

plan::Plan build(const ir::Graph& g, bool fuse, plan::BuildMode mode = plan::BuildMode::Refit) {
  build::BuildOptions o;
  o.mode = mode;
  if (!fuse) o.skip_passes = {"fuse-dequantize-matmul"};
  return round_trip(build::build_plan(g, o));
}

size_t count_ops(const plan::Plan& p, const std::string& op) {
  size_t n = 0;
  for (const auto& node : p.graph.nodes) n += node.op_type == op;
  return n;
}

size_t weight_bytes(const plan::Plan& p) {
  size_t b = 0;
  for (const auto& w : p.weights) b += w.data.nbytes();
  return b;
}

// |a - b| <= K * 2^-23 * sum_k |x_k w_k| + tiny for every output: two float32 sums of the same K
// products in different orders (plus a bias added last, the same in both).
// `ulps`: further float32 roundings of the output allowed (an addition after the product).
void expect_within_sum_bound(const Tensor& a, const Tensor& b, const Tensor& x, const Tensor& wd, bool transposed,
                             double ulps = 0) {
  const int64_t K = x.dim(1), M = x.dim(0), N = a.dim(1);
  ASSERT_EQ(a.shape(), (Shape{M, N}));
  ASSERT_EQ(b.shape(), (Shape{M, N}));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double mag = 0;
      for (int64_t k = 0; k < K; ++k)
        mag += std::fabs(double(x.data<float>()[m * K + k]) * wd.data<float>()[transposed ? n * K + k : k * N + n]);
      const double bound = double(K) * std::ldexp(1.0, -23) * mag +
                           ulps * std::ldexp(std::fabs(double(b.data<float>()[m * N + n])), -23) + 1e-30;
      ASSERT_LE(std::fabs(double(a.data<float>()[m * N + n]) - b.data<float>()[m * N + n]), bound)
          << "m " << m << " n " << n;
    }
}

TEST(FuseDequantizeMatMul, FusedPlansHoldCodesAndAgreeWithTheFloatPath) {
  struct Case {
    DType t;
    bool gemm, per_channel;
    int64_t block;
    bool zp;
  };
  const std::vector<Case> cases = {
      {DType::Int8, false, true, 0, true},    {DType::Int8, true, true, 0, true},
      {DType::UInt8, false, false, 0, true},  {DType::Int4, false, false, 32, true},
      {DType::UInt4, true, false, 16, false}, {DType::Int4, false, true, 0, false},
  };
  const int64_t K = 200, N = 48;
  uint32_t seed = 500;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.t)) + (c.gemm ? " Gemm" : " MatMul") + " block " + std::to_string(c.block));
    const Qdq w = make_qdq(c.t, K, N, c.gemm, c.per_channel, c.block, c.zp, seed += 10);
    const ir::Graph g = linear_graph(w, c.gemm, N);
    const plan::Plan fused = build(g, true), plain = build(g, false);
    EXPECT_EQ(count_ops(fused, "MatMulQuant"), 1u);
    EXPECT_EQ(count_ops(fused, "DequantizeLinear"), 0u);
    EXPECT_EQ(count_ops(plain, "MatMulQuant"), 0u);
    // The fused plan holds a byte (int8) or half a byte and a share of the block's scale (int4) per
    // weight element, the unfused one four: at least 2 * K * N bytes fewer.
    EXPECT_LE(weight_bytes(fused) + size_t(2 * K * N), weight_bytes(plain))
        << "fused " << weight_bytes(fused) << " bytes, unfused " << weight_bytes(plain);
    runtime::PlanEngine ef(fused), ep(plain);
    for (int64_t M : {1, 5}) {
      const Tensor x = random_floats({M, K}, seed + static_cast<uint32_t>(M));
      const Tensor a = ef.run({{"x", x}})[0], b = ep.run({{"x", x}})[0];
      expect_within_sum_bound(a, b, x, dequantize(w), c.gemm);
    }
  }
}

TEST(FuseDequantizeMatMul, UnrepresentableFormsStayOnDequantizeLinear) {
  const int64_t K = 64, N = 16;
  std::vector<Qdq> ws;
  Qdq asym = make_qdq(DType::Int8, K, N, false, true, 0, false, 900);  // asymmetric int8
  std::vector<int64_t> z(N, 0);
  z[3] = -5;
  asym.zp = ops::quant::int_tensor(z, DType::Int8, {N});
  ws.push_back(asym);
  Qdq per_k = make_qdq(DType::Int8, K, N, false, true, 0, true, 910);  // a scale per input channel
  per_k.scale = positive_scales({K}, 911);
  per_k.zp = ops::quant::int_tensor(std::vector<int64_t>(K, 0), DType::Int8, {K});
  per_k.axis = 0;
  ws.push_back(per_k);
  ws.push_back(make_qdq(DType::Int16, K, N, false, true, 0, false, 920));
  for (const Qdq& w : ws) {
    SCOPED_TRACE(w.codes.describe());
    const ir::Graph g = linear_graph(w, false, N);
    const plan::Plan fused = build(g, true), plain = build(g, false);
    EXPECT_EQ(count_ops(fused, "MatMulQuant"), 0u);
    runtime::PlanEngine ef(fused), ep(plain);
    const Tensor x = random_floats({3, K}, 930);
    EXPECT_TRUE(transforms::bit_equal(ef.run({{"x", x}})[0], ep.run({{"x", x}})[0]));
  }
}

// A DequantizeLinear read by the MatMul and by another node: the MatMul runs on the codes, the
// other node still gets the float32 weight.
TEST(FuseDequantizeMatMul, SharedDequantizeStaysForItsOtherReaders) {
  const int64_t K = 32, N = 32;
  const Qdq w = make_qdq(DType::Int8, K, N, false, true, 0, true, 950);
  ir::Graph g = linear_graph(w, false, N);
  g.nodes.back().outputs = {"h"};
  g.nodes.push_back(node("add", "Add", {"h", "w"}, "y"));
  const plan::Plan fused = build(g, true), plain = build(g, false);
  EXPECT_EQ(count_ops(fused, "MatMulQuant"), 1u);
  runtime::PlanEngine ef(fused), ep(plain);
  const Tensor x = random_floats({K, K}, 951);
  // y = x W + W: the products' bound plus the one rounding of the addition in each plan.
  expect_within_sum_bound(ef.run({{"x", x}})[0], ep.run({{"x", x}})[0], x, dequantize(w), false, 2);
}

// Refit of a fused plan from new codes and scales equals a fresh build from them; new zero points
// the int8 form cannot hold are refused and leave the engine as it was.
TEST(FuseDequantizeMatMul, RefitEqualsFreshBuildAndRefusesAsymmetricZeroPoints) {
  const int64_t K = 96, N = 24;
  for (DType t : {DType::Int8, DType::Int4}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t block = t == DType::Int4 ? 32 : 0;
    const Qdq a = make_qdq(t, K, N, true, true, block, true, 1000);
    const Qdq b = make_qdq(t, K, N, true, true, block, true, 2000);
    runtime::PlanEngine e(build(linear_graph(a, true, N), true));
    runtime::PlanEngine fresh(build(linear_graph(b, true, N), true));
    ASSERT_EQ(count_ops(e.plan(), "MatMulQuant"), 1u);
    refit::Refitter r(e);
    r.set("w.q", b.codes);
    r.set("w.scale", b.scale);
    r.set("w.zp", b.zp);
    r.set("b.q", random_codes(DType::Int32, {N}, 77));  // the bias of linear_graph()
    r.set("b.scale", test_support::make<float>({}, {1e-9f}));
    const refit::CommitReport rep = r.commit();
    EXPECT_EQ(test_support::derived_weight_hashes(e), test_support::derived_weight_hashes(fresh));
    // The refit reports how many codes and scales changed: counted here on the sources.
    size_t codes_changed = 0, scales_changed = 0;
    const auto ca = ops::quant::to_int64_values(a.codes), cb = ops::quant::to_int64_values(b.codes);
    for (size_t i = 0; i < ca.size(); ++i) codes_changed += ca[i] != cb[i];
    for (int64_t i = 0; i < a.scale.numel(); ++i)
      scales_changed += a.scale.data<float>()[i] != b.scale.data<float>()[i];
    std::map<std::string, std::pair<size_t, size_t>> parts;
    for (const auto& q : rep.quantized) parts[q.part] = {q.values, q.changed};
    EXPECT_EQ(parts["q"], std::make_pair(size_t(K * N), codes_changed));
    EXPECT_EQ(parts["scales"], std::make_pair(size_t(a.scale.numel()), scales_changed));
    const Tensor x = random_floats({4, K}, 3000);
    EXPECT_TRUE(transforms::bit_equal(e.run({{"x", x}})[0], fresh.run({{"x", x}})[0]));
    if (t != DType::Int8) continue;
    const auto before = test_support::derived_weight_hashes(e);
    std::vector<int64_t> z(N, 0);
    z[5] = 1;
    refit::Refitter bad(e);
    bad.set("w.q", b.codes);
    bad.set("w.scale", b.scale);
    bad.set("w.zp", ops::quant::int_tensor(z, DType::Int8, {N}));
    bad.set("b.q", random_codes(DType::Int32, {N}, 77));
    bad.set("b.scale", test_support::make<float>({}, {1e-9f}));
    const std::string err = error_of([&] { bad.commit(); });
    EXPECT_NE(err.find("while replaying the recipe of engine weight"), std::string::npos) << err;
    EXPECT_NE(err.find("(from sources 'w.q@"), std::string::npos) << err;
    EXPECT_NE(err.find("'w.zp@"), std::string::npos) << err;
    EXPECT_NE(err.find("is not 0 everywhere"), std::string::npos) << err;
    EXPECT_EQ(test_support::derived_weight_hashes(e), before);
  }
}

}  // namespace
