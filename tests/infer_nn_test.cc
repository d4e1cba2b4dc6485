// Shape and type inference of the elementwise, unary, reduce and nn families
// (ops/{elementwise,unary,reduce,nn}/infer.cc) on one-node graphs, against sizes derived by hand
// from the ONNX operator definitions.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/dnnl_conv.h"
#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "ops/infer_graph.h"
#include "runtime/plan_engine.h"
#include "support/engine_checks.h"
#include "support/make_tensor.h"
#include "support/plan_round_trip.h"

namespace reforge {
namespace {

using test_support::error_of;
using test_support::make;

// A graph under construction: inputs with (possibly symbolic) shapes, initializers and nodes.
struct G {
  ir::Graph g;
  int opset = 18;

  // Dimensions as strings: a number, or a symbol.
  G& input(const std::string& name, DType dt, const std::vector<std::string>& dims) {
    ir::ValueInfo v;
    v.name = name;
    v.dtype = dt;
    v.has_shape = true;
    for (const auto& d : dims) {
      ir::Dim dim;
      if (!d.empty() && (std::isdigit(static_cast<unsigned char>(d[0])) != 0))
        dim.value = std::stoll(d);
      else
        dim.symbol = d;
      v.shape.push_back(dim);
    }
    g.inputs.push_back(v);
    return *this;
  }
  G& init(const std::string& name, Tensor t) {
    g.initializers[name] = std::move(t);
    return *this;
  }
  G& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
          std::vector<ir::Attribute> attrs = {}, const std::string& domain = "") {
    ir::Node n;
    n.name = op + "_" + std::to_string(g.nodes.size());
    n.op_type = op;
    n.domain = domain;
    n.opset = domain.empty() ? opset : 1;
    n.inputs = std::move(ins);
    n.outputs = std::move(outs);
    for (auto& a : attrs) n.attrs[a.name] = a;
    g.nodes.push_back(std::move(n));
    return *this;
  }
  ops::GraphTypes infer() const {
    ops::InferOptions o;
    o.require_all = false;
    return ops::infer_graph(g, o);
  }
  // The inferred type of `value`, as "float32[batch,8,4,4]".
  std::string type(const std::string& value) const {
    const ops::GraphTypes t = infer();
    const ops::ValueType* v = t.find(value);
    return v ? v->str() : "(none)";
  }
  std::string error() const {
    return error_of([&] { infer(); });
  }
};

Tensor i64(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return make<int64_t>({n}, std::move(v));
}

// ---- Conv, ConvTranspose, pools ----

TEST(InferNn, ConvSameUpperStride2) {
  // SAME_UPPER: out = ceil(7 / 2) = 4.
  G g;
  g.input("x", DType::Float32, {"1", "3", "7", "7"}).init("w", Tensor::empty(DType::Float32, {8, 3, 3, 3}));
  g.node("Conv", {"x", "w"}, {"y"}, {ir::string_attr("auto_pad", "SAME_UPPER"), ir::ints_attr("strides", {2, 2})});
  EXPECT_EQ(g.type("y"), "float32[1,8,4,4]");
}

TEST(InferNn, ConvPadsDilationsAndSymbols) {
  // span = (3 - 1) * 2 + 1 = 5; out = (10 + 1 + 1 - 5) / 1 + 1 = 8 for the known side. With a
  // symbolic H and "same" explicit pads (pads 2+2 = span - 1) at stride 1 the symbol stays.
  G g;
  g.input("x", DType::Float32, {"N", "3", "H", "10"}).init("w", Tensor::empty(DType::Float32, {8, 3, 3, 3}));
  g.node("Conv", {"x", "w"}, {"y"}, {ir::ints_attr("pads", {2, 1, 2, 1}), ir::ints_attr("dilations", {2, 2})});
  EXPECT_EQ(g.type("y"), "float32[N,8,H,8]");
  // At stride 2 a symbolic size becomes a fresh symbol.
  G s;
  s.input("x", DType::Float32, {"N", "3", "H"}).init("w", Tensor::empty(DType::Float32, {4, 3, 3}));
  s.node("Conv", {"x", "w"}, {"y"}, {ir::ints_attr("strides", {2})});
  const ops::ValueType y = *s.infer().find("y");
  ASSERT_EQ(y.shape.size(), 3u);
  EXPECT_EQ(y.shape[0].symbol(), "N");
  EXPECT_EQ(y.shape[1].value(), 4);
  EXPECT_FALSE(y.shape[2].known());
  EXPECT_NE(y.shape[2].symbol(), "H");
}

TEST(InferNn, ConvGroupsAndChannelMismatch) {
  G g;
  g.input("x", DType::Float32, {"1", "6", "5", "5"}).init("w", Tensor::empty(DType::Float32, {6, 2, 3, 3}));
  g.node("Conv", {"x", "w"}, {"y"}, {ir::int_attr("group", 3)});
  EXPECT_EQ(g.type("y"), "float32[1,6,3,3]");
  G bad;
  bad.input("x", DType::Float32, {"1", "4", "5", "5"}).init("w", Tensor::empty(DType::Float32, {8, 3, 3, 3}));
  bad.node("Conv", {"x", "w"}, {"y"});
  const std::string e = bad.error();
  EXPECT_NE(e.find("node 'Conv_0' (Conv)"), std::string::npos) << e;
  EXPECT_NE(e.find("4 channels"), std::string::npos) << e;
}

TEST(InferNn, ConvTransposeOutputPaddingPadsAndShape) {
  // out = stride * (in - 1) + output_padding + span - pads = 2 * 2 + 1 + 3 - 0 = 8; with pads
  // 1+1: 6. M = W.dim(1) * group = 4.
  G g;
  g.input("x", DType::Float32, {"1", "2", "3", "3"}).init("w", Tensor::empty(DType::Float32, {2, 4, 3, 3}));
  g.node("ConvTranspose", {"x", "w"}, {"y"},
         {ir::ints_attr("strides", {2, 2}), ir::ints_attr("output_padding", {1, 1})});
  g.node(
      "ConvTranspose", {"x", "w"}, {"z"},
      {ir::ints_attr("strides", {2, 2}), ir::ints_attr("output_padding", {1, 1}), ir::ints_attr("pads", {1, 1, 1, 1})});
  g.node("ConvTranspose", {"x", "w"}, {"u"},
         {ir::ints_attr("strides", {3, 3}), ir::ints_attr("output_shape", {10, 8})});
  g.node("ConvTranspose", {"x", "w"}, {"v"},
         {ir::ints_attr("strides", {2, 2}), ir::string_attr("auto_pad", "SAME_UPPER")});
  EXPECT_EQ(g.type("y"), "float32[1,4,8,8]");
  EXPECT_EQ(g.type("z"), "float32[1,4,6,6]");
  EXPECT_EQ(g.type("u"), "float32[1,4,10,8]");
  EXPECT_EQ(g.type("v"), "float32[1,4,6,6]");
}

TEST(InferNn, MaxPoolCeilModeAndIndices) {
  // in 6, kernel 3, stride 2: floor -> (6 - 3) / 2 + 1 = 2; ceil -> 3.
  // in 5, kernel 2, stride 2, pads 1+1: ceil gives 4, but the 4th window would start at
  // 3 * 2 = 6 >= 5 + 1 (inside the end padding) and is dropped: 3.
  G g;
  g.input("x", DType::Float32, {"2", "3", "6", "5"});
  g.node("MaxPool", {"x"}, {"y", "i"},
         {ir::ints_attr("kernel_shape", {3, 2}), ir::ints_attr("strides", {2, 2}), ir::ints_attr("pads", {0, 1, 0, 1}),
          ir::int_attr("ceil_mode", 1)});
  g.node("MaxPool", {"x"}, {"f"}, {ir::ints_attr("kernel_shape", {3, 2}), ir::ints_attr("strides", {2, 2})});
  EXPECT_EQ(g.type("y"), "float32[2,3,3,3]");
  EXPECT_EQ(g.type("i"), "int64[2,3,3,3]");
  EXPECT_EQ(g.type("f"), "float32[2,3,2,2]");
}

TEST(InferNn, PoolsSameAndGlobal) {
  // SAME_LOWER stride 2: ceil(5 / 2) = 3; stride 1 keeps a symbol.
  G g;
  g.input("x", DType::Float32, {"B", "4", "5", "W"});
  g.node("AveragePool", {"x"}, {"y"},
         {ir::ints_attr("kernel_shape", {3, 3}), ir::ints_attr("strides", {2, 1}),
          ir::string_attr("auto_pad", "SAME_LOWER")});
  g.node("GlobalMaxPool", {"x"}, {"z"});
  EXPECT_EQ(g.type("y"), "float32[B,4,3,W]");
  EXPECT_EQ(g.type("z"), "float32[B,4,1,1]");
  G bad;
  bad.input("x", DType::Float32, {"1", "1", "2", "2"});
  bad.node("MaxPool", {"x"}, {"y"}, {ir::ints_attr("kernel_shape", {3, 3})});
  EXPECT_NE(bad.error().find("does not fit"), std::string::npos) << bad.error();
}

TEST(InferNn, FusedConvAndMaxPoolInActivationLayouts) {
  // NHWC: X [1, 5, 5, 3] is [1, 3, 5, 5]; pads 1 keep 5 x 5; Y [1, 16, 5, 5] stored [1, 5, 5, 16].
  G g;
  g.input("x", DType::Float32, {"N", "5", "5", "3"}).init("w", Tensor::empty(DType::Float32, {16, 3, 3, 3}));
  g.node(
      "FusedConv", {"x", "w"}, {"y"},
      {ir::string_attr("x_layout", "NHWC"), ir::string_attr("y_layout", "NHWC"), ir::ints_attr("pads", {1, 1, 1, 1})},
      "reforge");
  g.node("MaxPool", {"y"}, {"p"},
         {ir::string_attr("layout", "NHWC"), ir::ints_attr("kernel_shape", {2, 2}), ir::ints_attr("strides", {2, 2})},
         "reforge");
  // NCHWc is the CPU's native layout: channels in blocks of its block size b ([N, C/b, H, W, b]),
  // channels-last, or plain NCHW, as cpu::native_layout() says.
  g.node("FusedConv", {"y", "w16"}, {"z"},
         {ir::string_attr("x_layout", "NHWC"), ir::string_attr("y_layout", "NCHWc"), ir::ints_attr("strides", {2, 2})},
         "reforge");
  g.init("w16", Tensor::empty(DType::Float32, {32, 16, 1, 1}));
  EXPECT_EQ(g.type("y"), "float32[N,5,5,16]");
  EXPECT_EQ(g.type("p"), "float32[N,2,2,16]");
  const int64_t b = cpu::activation_block();
  const cpu::ActLayout native = cpu::native_layout();
  EXPECT_EQ(g.type("z"), native == cpu::ActLayout::Blocked
                             ? "float32[N," + std::to_string(32 / b) + ",3,3," + std::to_string(b) + "]"
                         : native == cpu::ActLayout::Nhwc ? std::string("float32[N,3,3,32]")
                                                          : std::string("float32[N,32,3,3]"));
}

// ---- MatMul, Gemm ----

TEST(InferNn, MatMulOneDimensionalAndBatched) {
  G g;
  g.input("v", DType::Float32, {"3"}).input("m", DType::Float32, {"2", "3"}).input("n", DType::Float32, {"3", "4"});
  g.input("a", DType::Float32, {"5", "1", "2", "3"}).input("b", DType::Float32, {"4", "3", "6"});
  g.input("x", DType::Float32, {"batch", "seq", "3"});
  g.node("MatMul", {"v", "v"}, {"dot"});
  g.node("MatMul", {"m", "v"}, {"mv"});
  g.node("MatMul", {"v", "n"}, {"vm"});
  g.node("MatMul", {"a", "b"}, {"ab"});
  g.node("MatMul", {"v", "b"}, {"vb"});
  g.node("MatMul", {"x", "n"}, {"xn"});
  EXPECT_EQ(g.type("dot"), "float32[]");
  EXPECT_EQ(g.type("mv"), "float32[2]");
  EXPECT_EQ(g.type("vm"), "float32[4]");
  EXPECT_EQ(g.type("ab"), "float32[5,4,2,6]");
  EXPECT_EQ(g.type("vb"), "float32[4,6]");
  EXPECT_EQ(g.type("xn"), "float32[batch,seq,4]");
  G bad;
  bad.input("m", DType::Float32, {"2", "3"}).input("n", DType::Float32, {"4", "5"});
  bad.node("MatMul", {"m", "n"}, {"y"});
  const std::string e = bad.error();
  EXPECT_NE(e.find("node 'MatMul_0' (MatMul)"), std::string::npos) << e;
  EXPECT_NE(e.find("inner dimensions differ"), std::string::npos) << e;
}

TEST(InferNn, GemmTransposes) {
  // op(A) = A^T: [3, 4]; op(B) = B^T: [4, 5].
  G g;
  g.input("a", DType::Float32, {"4", "3"}).input("b", DType::Float32, {"5", "4"}).input("c", DType::Float32, {"5"});
  g.node("Gemm", {"a", "b", "c"}, {"y"}, {ir::int_attr("transA", 1), ir::int_attr("transB", 1)});
  EXPECT_EQ(g.type("y"), "float32[3,5]");
  G bad;
  bad.input("a", DType::Float32, {"4", "3"}).input("b", DType::Float32, {"5", "4"});
  bad.node("Gemm", {"a", "b"}, {"y"});
  EXPECT_NE(bad.error().find("inner dimensions differ"), std::string::npos);
}

// ---- normalizations ----

TEST(InferNn, LayerNormStatsAndBatchNormTraining) {
  G g;
  g.input("x", DType::Float16, {"2", "S", "4"}).init("s", Tensor::empty(DType::Float16, {4}));
  g.node("LayerNormalization", {"x", "s"}, {"y", "mean", "inv"}, {ir::int_attr("axis", 1)});
  EXPECT_EQ(g.type("y"), "float16[2,S,4]");
  EXPECT_EQ(g.type("mean"), "float32[2,1,1]");
  EXPECT_EQ(g.type("inv"), "float32[2,1,1]");
  G b;
  b.input("x", DType::Float32, {"N", "3", "8"});
  for (const char* p : {"s", "bias", "m", "v"}) b.init(p, Tensor::empty(DType::Float32, {3}));
  b.node("BatchNormalization", {"x", "s", "bias", "m", "v"}, {"y", "rm", "rv"}, {ir::int_attr("training_mode", 1)});
  EXPECT_EQ(b.type("y"), "float32[N,3,8]");
  EXPECT_EQ(b.type("rm"), "float32[3]");
  EXPECT_EQ(b.type("rv"), "float32[3]");
}

// ---- reduce family ----

TEST(InferReduce, AxesAsInputAndAttribute) {
  G g;
  g.input("x", DType::Float32, {"2", "S", "4"}).input("dyn", DType::Int64, {"1"}).init("ax", i64({1}));
  g.node("ReduceSum", {"x", "ax"}, {"sum1"}, {ir::int_attr("keepdims", 0)});
  g.node("ReduceSum", {"x"}, {"all"});
  g.node("ReduceSum", {"x"}, {"noop"}, {ir::int_attr("noop_with_empty_axes", 1)});
  g.node("ReduceMax", {"x", "dyn"}, {"dyn_keep"});
  g.node("ReduceMax", {"x", "dyn"}, {"dyn_drop"}, {ir::int_attr("keepdims", 0)});
  g.node("ArgMax", {"x"}, {"arg"}, {ir::int_attr("axis", -1), ir::int_attr("keepdims", 0)});
  EXPECT_EQ(g.type("sum1"), "float32[2,4]");
  EXPECT_EQ(g.type("all"), "float32[1,1,1]");
  EXPECT_EQ(g.type("noop"), "float32[2,S,4]");
  EXPECT_EQ(g.type("dyn_drop"), "float32[?]");
  EXPECT_EQ(g.type("arg"), "int64[2,S]");
  const ops::ValueType k = *g.infer().find("dyn_keep");
  ASSERT_TRUE(k.rank_known);
  EXPECT_EQ(k.shape.size(), 3u);
  EXPECT_FALSE(k.shape[0].known());  // kept (2) or reduced (1): unknown
  // Before opset 18 ReduceMean takes axes as an attribute.
  G a;
  a.opset = 13;
  a.input("x", DType::Float32, {"2", "3", "4"});
  a.node("ReduceMean", {"x"}, {"y"}, {ir::ints_attr("axes", {-1, 0})});
  EXPECT_EQ(a.type("y"), "float32[1,3,1]");
}

TEST(InferReduce, TopKSoftmaxCumSum) {
  G g;
  g.input("x", DType::Float32, {"3", "N"}).input("kdyn", DType::Int64, {"1"}).init("k", i64({2}));
  g.init("axis", make<int64_t>({}, {0}));
  g.node("TopK", {"x", "k"}, {"v", "i"});
  g.node("TopK", {"x", "kdyn"}, {"v2", "i2"}, {ir::int_attr("axis", 0)});
  g.node("Softmax", {"x"}, {"s"});
  g.node("CumSum", {"x", "axis"}, {"c"});
  EXPECT_EQ(g.type("v"), "float32[3,2]");
  EXPECT_EQ(g.type("i"), "int64[3,2]");
  const ops::GraphTypes t = g.infer();
  EXPECT_FALSE(t.find("v2")->shape[0].known());
  EXPECT_EQ(t.find("v2")->shape[1].symbol(), "N");
  EXPECT_EQ(t.find("i2")->dtype, DType::Int64);
  EXPECT_EQ(g.type("s"), "float32[3,N]");
  EXPECT_EQ(g.type("c"), "float32[3,N]");
  G bad;
  bad.input("x", DType::Float32, {"3", "4"}).init("k", i64({5}));
  bad.node("TopK", {"x", "k"}, {"v", "i"});
  EXPECT_NE(bad.error().find("k = 5 is out of range"), std::string::npos) << bad.error();
}

TEST(InferReduce, Einsum) {
  G g;
  g.input("a", DType::Float32, {"2", "3"}).input("b", DType::Float32, {"3", "4"});
  g.input("e", DType::Float32, {"5", "2", "3"}).input("sq", DType::Float32, {"3", "3"});
  g.input("p", DType::Float32, {"B", "2", "3"}).input("q", DType::Float32, {"1", "3", "7"});
  g.node("Einsum", {"a", "b"}, {"mm"}, {ir::string_attr("equation", "ij,jk->ik")});
  g.node("Einsum", {"a", "b"}, {"implicit"}, {ir::string_attr("equation", "ij,jk")});
  g.node("Einsum", {"e"}, {"tr"}, {ir::string_attr("equation", "...ij->...ji")});
  g.node("Einsum", {"sq"}, {"diag"}, {ir::string_attr("equation", "ii->i")});
  g.node("Einsum", {"sq"}, {"trace"}, {ir::string_attr("equation", "ii")});
  // Implicit output: letters used once, in ASCII order (uppercase first): "Zi,iA" -> "AZ".
  g.node("Einsum", {"a", "b"}, {"upper"}, {ir::string_attr("equation", "Zi,iA")});
  g.node("Einsum", {"p", "q"}, {"batched"}, {ir::string_attr("equation", "bij,bjk->bik")});
  EXPECT_EQ(g.type("mm"), "float32[2,4]");
  EXPECT_EQ(g.type("implicit"), "float32[2,4]");
  EXPECT_EQ(g.type("tr"), "float32[5,3,2]");
  EXPECT_EQ(g.type("diag"), "float32[3]");
  EXPECT_EQ(g.type("trace"), "float32[]");
  EXPECT_EQ(g.type("upper"), "float32[4,2]");
  EXPECT_EQ(g.type("batched"), "float32[B,2,7]");
  G bad;
  bad.input("a", DType::Float32, {"2", "3"}).input("b", DType::Float32, {"4", "5"});
  bad.node("Einsum", {"a", "b"}, {"y"}, {ir::string_attr("equation", "ij,jk->ik")});
  EXPECT_NE(bad.error().find("node 'Einsum_0' (Einsum)"), std::string::npos) << bad.error();
}

// ---- elementwise and unary ----

TEST(InferElementwise, BroadcastingOfSymbols) {
  G g;
  g.opset = 20;  // Gelu
  g.input("x", DType::Float32, {"batch", "1", "64"}).input("y", DType::Float32, {"seq", "1"});
  g.input("a", DType::Float32, {"A"}).input("b", DType::Float32, {"B"}).input("c", DType::Float32, {"A", "3"});
  g.input("cond", DType::Bool, {"1", "3"});
  g.node("Add", {"x", "y"}, {"xy"});
  g.node("Mul", {"a", "b"}, {"ab"});
  g.node("Sub", {"c", "b"}, {"cb"});
  g.node("Where", {"cond", "c", "a"}, {"w"});
  g.node("Less", {"x", "y"}, {"lt"});
  g.node("Max", {"x", "y", "a"}, {"mx"});
  g.node("Cast", {"c"}, {"ci"}, {ir::int_attr("to", 7)});
  g.node("CastLike", {"c", "cond"}, {"cb2"});
  g.node("IsNaN", {"c"}, {"nan"});
  g.node("Gelu", {"c"}, {"gelu"});
  EXPECT_EQ(g.type("xy"), "float32[batch,seq,64]");
  const ops::GraphTypes t = g.infer();
  const ops::ValueType& ab = *t.find("ab");
  ASSERT_EQ(ab.shape.size(), 1u);
  EXPECT_FALSE(ab.shape[0].known());  // A against B: neither can be assumed 1
  EXPECT_NE(ab.shape[0].symbol(), "A");
  EXPECT_NE(ab.shape[0].symbol(), "B");
  EXPECT_EQ(t.find("cb")->shape[1].value(), 3);  // B must be 3 or 1: the result is 3
  EXPECT_EQ(g.type("lt"), "bool[batch,seq,64]");
  EXPECT_EQ(g.type("ci"), "int64[A,3]");
  EXPECT_EQ(g.type("cb2"), "bool[A,3]");
  EXPECT_EQ(g.type("nan"), "bool[A,3]");
  EXPECT_EQ(g.type("gelu"), "float32[A,3]");
  EXPECT_EQ(t.find("mx")->shape.size(), 3u);
  EXPECT_EQ(t.find("w")->str().substr(0, 8), "float32[");
  G bad;
  bad.input("x", DType::Float32, {"2", "3"}).input("y", DType::Float32, {"4"});
  bad.node("Add", {"x", "y"}, {"z"});
  EXPECT_NE(bad.error().find("node 'Add_0' (Add)"), std::string::npos) << bad.error();
}

TEST(InferElementwise, ShapeArithmeticKeepsContents) {
  // [2, S] * 3 + [0, 1] = [6, 3S + 1]: the contents of an integer value followed through
  // arithmetic, numbers exactly.
  G g;
  g.input("x", DType::Float32, {"2", "S"}).init("three", i64({3})).init("off", i64({0, 1}));
  g.node("Shape", {"x"}, {"s"});
  g.node("Mul", {"s", "three"}, {"m"});
  g.node("Add", {"m", "off"}, {"a"});
  const ops::GraphTypes t = g.infer();
  ASSERT_TRUE(t.dims_values.count("a"));
  const ops::SymShape& a = t.dims_values.at("a");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].value(), 6);
  EXPECT_FALSE(a[1].known());
  EXPECT_EQ(t.find("a")->str(), "int64[2]");
}

TEST(InferElementwise, WhereOfAShapeComparedWithMinusOneFeedsExpand) {
  // The torch export of x.expand(shape): Expand(x, Where(Equal(s, -1 * ones), ones, s)) with s
  // computed from Shape. A size is never -1, so every element of the Equal is false and the
  // Where picks s: Expand's output has the symbolic shape s.
  G g;
  g.input("x", DType::Float32, {"1", "S", "1"}).input("y", DType::Float32, {"B", "S", "4"});
  g.init("minus1", i64({-1, -1, -1})).init("ones", i64({1, 1, 1}));
  g.node("Shape", {"y"}, {"s"});
  g.node("Equal", {"s", "minus1"}, {"eq"});
  g.node("Where", {"eq", "ones", "s"}, {"target"});
  g.node("Expand", {"x", "target"}, {"e"});
  g.node("Less", {"s", "minus1"}, {"lt"});
  g.node("GreaterOrEqual", {"s", "minus1"}, {"ge"});
  const ops::GraphTypes t = g.infer();
  ASSERT_TRUE(t.dims_values.count("eq"));
  EXPECT_EQ(sym_shape_str(t.dims_values.at("eq")), "[0,0,0]");
  EXPECT_EQ(sym_shape_str(t.dims_values.at("lt")), "[0,0,0]");
  EXPECT_EQ(sym_shape_str(t.dims_values.at("ge")), "[1,1,1]");
  EXPECT_EQ(sym_shape_str(t.dims_values.at("target")), "[B,S,4]");
  EXPECT_EQ(t.find("e")->str(), "float32[B,S,4]");
  // With an undecided comparison (a symbol against a non-negative number) nothing is stated.
  G u;
  u.input("y", DType::Float32, {"B", "S"}).init("one", i64({1, 1}));
  u.node("Shape", {"y"}, {"s"});
  u.node("Equal", {"s", "one"}, {"eq"});
  EXPECT_FALSE(u.infer().dims_values.count("eq"));
}

TEST(InferElementwise, ReshapeTargetFromMulOfShapeKeepsItsSymbol) {
  // Reshape(x, Concat(Unsqueeze(Shape(x)[0] * Shape(x)[1]), [4])) is Reshape(x, [-1, 4]): both
  // must give the same symbolic size B*S, not a fresh symbol.
  G g;
  g.input("x", DType::Float32, {"B", "S", "4"});
  g.init("i0", make<int64_t>({}, {0})).init("i1", make<int64_t>({}, {1})).init("four", i64({4}));
  g.init("ax", i64({0})).init("flat", i64({-1, 4}));
  g.node("Shape", {"x"}, {"s"});
  g.node("Gather", {"s", "i0"}, {"b"});
  g.node("Gather", {"s", "i1"}, {"q"});
  g.node("Mul", {"b", "q"}, {"bq"});
  g.node("Unsqueeze", {"bq", "ax"}, {"bq1"});
  g.node("Concat", {"bq1", "four"}, {"target"}, {ir::int_attr("axis", 0)});
  g.node("Reshape", {"x", "target"}, {"r1"});
  g.node("Reshape", {"x", "flat"}, {"r2"});
  const ops::GraphTypes t = g.infer();
  const ops::ValueType& r1 = *t.find("r1");
  ASSERT_TRUE(r1.rank_known);
  ASSERT_EQ(r1.shape.size(), 2u);
  EXPECT_FALSE(r1.shape[0].known());
  EXPECT_EQ(r1.shape[0].symbol().find("unk_"), std::string::npos) << r1.str();
  EXPECT_EQ(r1.str(), t.find("r2")->str());
}

// ---- Plan::values ----

// A built plan records the type of every graph input and node output, and it survives the file;
// resolved with the inputs' sizes, the recorded type of each graph output is what a run returns.
TEST(PlanValues, BuiltPlansRecordEveryValueAndMatchTheRun) {
  namespace fs = std::filesystem;
  const fs::path models = fs::path(REFORGE_SOURCE_DIR) / "models";
  struct Case {
    const char* model;
    const char* inputs;
  };
  for (const Case c : {Case{"llama/torch113_nofold_dynamic/A/model.onnx", "llama/inputs/b2_s5"},
                       Case{"bert/torch113_fold_dynamic/A/model.onnx", "bert/inputs/b1_s7"},
                       Case{"cnn/torch113_fold_dynamic/A/model.onnx", "cnn/inputs/b2"}}) {
    SCOPED_TRACE(c.model);
    const ir::Graph g = onnx::import_model_file((models / c.model).string());
    plan::Plan p = test_support::round_trip(build::build_plan(g, build::BuildOptions{}));
    size_t expected = p.graph.inputs.size();
    for (const auto& n : p.graph.nodes)
      for (const auto& o : n.outputs) expected += o.empty() ? 0 : 1;
    ASSERT_EQ(p.values.size(), expected);
    std::map<std::string, ir::ValueInfo> by_name;
    for (const auto& v : p.values) by_name[v.name] = v;
    std::map<std::string, Tensor> in;
    for (const auto& e : fs::directory_iterator(models / c.inputs))
      in[e.path().stem().string()] = read_npy(e.path().string());
    // Symbols of the inputs, bound from the tensors fed.
    std::map<std::string, int64_t> bound;
    for (const auto& vi : p.graph.inputs) {
      const ir::ValueInfo& rec = by_name.at(vi.name);
      EXPECT_EQ(rec.dtype, vi.dtype) << vi.name;
      ASSERT_TRUE(rec.has_shape) << vi.name;
      for (size_t d = 0; d < rec.shape.size(); ++d)
        if (!rec.shape[d].fixed()) bound[rec.shape[d].symbol] = in.at(vi.name).shape()[d];
    }
    EXPECT_FALSE(bound.empty());  // dynamic exports: their inputs have symbolic sizes
    std::vector<std::string> names;
    for (const auto& o : p.graph.outputs) names.push_back(o.name);
    runtime::PlanEngine engine(std::move(p));
    const std::vector<Tensor> outs = engine.run(in);
    for (size_t i = 0; i < outs.size(); ++i) {
      const ir::ValueInfo& rec = by_name.at(names[i]);
      EXPECT_EQ(rec.dtype, outs[i].dtype()) << names[i];
      ASSERT_TRUE(rec.has_shape) << names[i];
      ASSERT_EQ(static_cast<int64_t>(rec.shape.size()), outs[i].rank()) << names[i];
      for (size_t d = 0; d < rec.shape.size(); ++d) {
        const ir::Dim& dim = rec.shape[d];
        if (dim.fixed())
          EXPECT_EQ(dim.value, outs[i].shape()[d]) << names[i] << " dim " << d;
        else if (bound.count(dim.symbol))
          EXPECT_EQ(bound.at(dim.symbol), outs[i].shape()[d]) << names[i] << " dim " << d << " " << dim.symbol;
        else
          ADD_FAILURE() << names[i] << " dim " << d << " is '" << dim.symbol << "', not a size of the inputs";
      }
    }
  }
}

}  // namespace
}  // namespace reforge
