// Shape and type inference (ops/infer.h, ops/infer_graph.h) on hand-built graphs: the tricky ops
// of the tensor and transformer families, shape arithmetic followed through Shape -> Gather ->
// Concat -> Reshape chains with symbolic dimensions, and the errors (each names its node). Every
// expected type is derived by hand from the ONNX operator definitions; the comments show the
// arithmetic. The conformance harness (`reforge conformance`) checks the same functions against
// what the kernels produce on the whole ONNX node suite.
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "ops/infer_graph.h"
#include "ops/registry.h"
#include "support/cli.h"
#include "support/make_tensor.h"

using namespace reforge;
using namespace reforge::ops;

namespace {

using test_support::make;

Tensor ints(std::vector<int64_t> v) { return make<int64_t>({static_cast<int64_t>(v.size())}, v); }
Tensor floats(std::vector<float> v) { return make<float>({static_cast<int64_t>(v.size())}, v); }
Tensor scalar_int(int64_t v) { return make<int64_t>({}, {v}); }

// A dimension of a declared input: a number or a symbol.
struct D {
  D(int v) : value(v) {}           // NOLINT
  D(const char* s) : symbol(s) {}  // NOLINT
  int64_t value = -1;
  std::string symbol;
};

class GraphBuilder {
 public:
  explicit GraphBuilder(int opset = 18) : opset_(opset) { g_.opsets[""] = opset; }
  GraphBuilder& input(const std::string& name, DType t, std::vector<D> dims) {
    ir::ValueInfo v;
    v.name = name;
    v.dtype = t;
    v.has_shape = true;
    for (const auto& d : dims) v.shape.push_back(ir::Dim{d.value, d.symbol});
    g_.inputs.push_back(v);
    return *this;
  }
  GraphBuilder& init(const std::string& name, Tensor t) {
    g_.initializers[name] = std::move(t);
    return *this;
  }
  GraphBuilder& node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                     std::vector<ir::Attribute> attrs = {}, const std::string& domain = "", int opset = 0) {
    ir::Node n;
    n.name = out.empty() ? op : out[0];
    n.op_type = op;
    n.domain = domain;
    n.opset = opset ? opset : domain.empty() ? opset_ : 1;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    for (auto& a : attrs) n.attrs[a.name] = a;
    g_.nodes.push_back(std::move(n));
    return *this;
  }
  GraphBuilder& output(const std::string& name) {
    ir::ValueInfo v;
    v.name = name;
    g_.outputs.push_back(v);
    return *this;
  }
  GraphTypes infer(const std::map<std::string, Shape>* shapes = nullptr) const {
    InferOptions o;
    o.input_shapes = shapes;
    o.require_all = kEveryOpInferred;
    return infer_graph(g_, o);
  }
  // The inferred type of `value` as text ("float32[batch,12]").
  std::string type(const std::string& value, const std::map<std::string, Shape>* shapes = nullptr) const {
    GraphTypes t = infer(shapes);
    const ValueType* v = t.find(value);
    return v ? v->str() : "(none)";
  }
  // The error message of a failing inference, "" when it succeeds.
  std::string error() const {
    try {
      infer();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  const ir::Graph& graph() const { return g_; }

 private:
  int opset_;
  ir::Graph g_;
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- Symbolic dimension arithmetic ----------------------------------------------------------

TEST(InferSymDims, ArithmeticIsCanonicalAndCancels) {
  const SymDim batch = SymDim::symbol("batch"), seq = SymDim::symbol("seq"), past = SymDim::symbol("past");
  EXPECT_EQ(sym_mul(seq, batch).str(), "(batch*seq)");
  EXPECT_EQ(sym_mul(batch, seq), sym_mul(seq, batch));
  const SymDim n = sym_mul(sym_mul(batch, seq), 768);
  EXPECT_EQ(n.str(), "(768*batch*seq)");
  EXPECT_EQ(sym_div(n, sym_mul(seq, 12)).str(), "(64*batch)");  // 768 / 12 = 64
  EXPECT_EQ(sym_div(n, sym_mul(batch, sym_mul(seq, 768))), SymDim(1));
  EXPECT_EQ(sym_add(past, seq).str(), "(past+seq)");
  EXPECT_EQ(sym_add(seq, past), sym_add(past, seq));
  EXPECT_EQ(sym_sub(sym_add(past, seq), past), seq);
  EXPECT_EQ(sym_add(seq, 0), seq);
  EXPECT_EQ(sym_add(seq, -1).str(), "(seq-1)");
  EXPECT_EQ(sym_add(sym_add(seq, 2), past).str(), "(past+seq+2)");
  EXPECT_EQ(sym_mul(seq, 0), SymDim(0));
  EXPECT_EQ(sym_div(SymDim(7), SymDim(2)), SymDim(3));
  EXPECT_EQ(sym_div(SymDim(-7), SymDim(2)), SymDim(-4));  // floor division
  EXPECT_EQ(sym_product({batch, 2, seq, 3}).str(), "(6*batch*seq)");
}

TEST(InferSymDims, OverflowingSizesStaySymbolic) {
  // Declared shapes are untrusted: a product past int64 is not a number (and never UB).
  const SymDim big(int64_t{1} << 40);
  EXPECT_FALSE(sym_mul(big, big).known());
  EXPECT_FALSE(sym_add(INT64_MAX, 1).known());
  EXPECT_FALSE(sym_sub(INT64_MIN, 1).known());
  EXPECT_FALSE(sym_div(INT64_MIN, -1).known());
  EXPECT_FALSE(sym_mul(sym_mul(SymDim::symbol("n"), big), big).known());
  GraphBuilder b;
  b.input("x", DType::Float32, {1 << 30, 1 << 30, 1 << 30}).node("Flatten", {"x"}, {"f"}, {ir::int_attr("axis", 0)});
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("f")->shape[0], SymDim(1));
  EXPECT_FALSE(t.find("f")->shape[1].known());
}

// ---- Reshape ------------------------------------------------------------------------------------

TEST(InferReshape, ZeroCopiesAndMinusOneDivides) {
  GraphBuilder b;
  b.input("x", DType::Float32, {"batch", "seq", 768})
      .init("s1", ints({0, 0, 12, -1}))
      .node("Reshape", {"x", "s1"}, {"heads"})
      .init("s2", ints({-1, 768}))
      .node("Reshape", {"x", "s2"}, {"rows"});
  // [batch, seq, 12, 768 / 12 = 64]; rows: batch*seq*768 / 768.
  EXPECT_EQ(b.type("heads"), "float32[batch,seq,12,64]");
  EXPECT_EQ(b.type("rows"), "float32[(batch*seq),768]");
}

TEST(InferReshape, AllowZeroKeepsZero) {
  GraphBuilder b(14);
  b.input("x", DType::Float32, {0, 4})
      .init("s", ints({0, 4}))
      .node("Reshape", {"x", "s"}, {"y"}, {ir::int_attr("allowzero", 1)});
  EXPECT_EQ(b.type("y"), "float32[0,4]");
}

TEST(InferReshape, TargetComputedFromShapeStaysSymbolic) {
  // Shape(x) -> Gather(0), Gather(1) -> Unsqueeze -> Concat with [12, 64] -> Reshape.
  GraphBuilder b;
  b.input("x", DType::Float32, {"batch", "seq", 768})
      .node("Shape", {"x"}, {"shape"})
      .init("i0", scalar_int(0))
      .init("i1", scalar_int(1))
      .init("ax", ints({0}))
      .node("Gather", {"shape", "i0"}, {"b"})
      .node("Gather", {"shape", "i1"}, {"s"})
      .node("Unsqueeze", {"b", "ax"}, {"b1"})
      .node("Unsqueeze", {"s", "ax"}, {"s1"})
      .init("tail", ints({12, 64}))
      .node("Concat", {"b1", "s1", "tail"}, {"target"}, {ir::int_attr("axis", 0)})
      .node("Reshape", {"x", "target"}, {"y"});
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("b")->str(), "int64[]");
  EXPECT_EQ(sym_shape_str(t.dims_values.at("b")), "[batch]");
  EXPECT_EQ(t.find("target")->str(), "int64[4]");
  EXPECT_EQ(sym_shape_str(t.dims_values.at("target")), "[batch,seq,12,64]");
  EXPECT_EQ(t.find("y")->str(), "float32[batch,seq,12,64]");
  // With one input signature fixed every size is a number: [2,5,12,64].
  std::map<std::string, Shape> shapes{{"x", {2, 5, 768}}};
  EXPECT_EQ(b.type("y", &shapes), "float32[2,5,12,64]");
}

TEST(InferReshape, BackFromRowsCancelsTheProduct) {
  // Reshape([batch*seq, 768] -> [batch, -1, 768]): -1 = batch*seq*768 / (batch*768) = seq.
  GraphBuilder b;
  b.input("x", DType::Float32, {"batch", "seq", 768})
      .init("s1", ints({-1, 768}))
      .node("Reshape", {"x", "s1"}, {"rows"})
      .node("Shape", {"x"}, {"shape"})
      .init("i0", ints({0}))
      .node("Gather", {"shape", "i0"}, {"b"})
      .init("rest", ints({-1, 768}))
      .node("Concat", {"b", "rest"}, {"target"}, {ir::int_attr("axis", 0)})
      .node("Reshape", {"rows", "target"}, {"y"});
  EXPECT_EQ(b.type("y"), "float32[batch,seq,768]");
}

TEST(InferReshape, TargetFromAGraphInputsValue) {
  GraphBuilder b;
  b.input("x", DType::Float32, {2, 3, 4}).input("s", DType::Int64, {2}).node("Reshape", {"x", "s"}, {"y"});
  EXPECT_EQ(b.graph().inputs.size(), 2u);
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("y")->shape.size(), 2u);  // the target's length only
  EXPECT_FALSE(t.find("y")->shape[0].known());
  // With the input's value given (one run of the graph): [6, -1] -> [6, 4].
  std::map<std::string, Tensor> values{{"s", ints({6, -1})}};
  InferOptions o;
  o.input_values = &values;
  EXPECT_EQ(infer_graph(b.graph(), o).find("y")->str(), "float32[6,4]");
}

// An engine weight held in device memory (the runtime's upload-only weights) is known to inference
// by its type only: nothing reads its bytes on the host, so the shape it feeds stays computable and
// no value is folded from it.
TEST(InferGraph, DeviceInitializersAreKnownByTypeOnly) {
  const Tensor host = ints({6, -1});
  // Labelled device memory: any read of it on the host would throw.
  const Tensor on_device = Tensor::wrap(DType::Int64, {2}, host.storage(), host.raw(), Memory::Device);
  GraphBuilder b;
  b.input("x", DType::Float32, {2, 3, 4}).init("s", on_device).init("h", host);
  b.node("Add", {"s", "h"}, {"sum"}).node("Reshape", {"x", "h"}, {"y"});
  GraphTypes t;
  ASSERT_NO_THROW(t = b.infer());
  EXPECT_EQ(t.find("s")->str(), "int64[2]");
  EXPECT_EQ(t.constants.count("s"), 0u);
  EXPECT_EQ(t.find("sum")->str(), "int64[2]");
  EXPECT_EQ(t.constants.count("sum"), 0u);  // not folded
  EXPECT_EQ(t.find("y")->str(), "float32[6,4]");
}

TEST(InferReshape, ElementCountMismatchNamesTheNode) {
  GraphBuilder b;
  b.input("x", DType::Float32, {2, 3}).init("s", ints({4, 2})).node("Reshape", {"x", "s"}, {"r"});
  const std::string e = b.error();
  EXPECT_TRUE(contains(e, "node 'r' (Reshape)")) << e;
  EXPECT_TRUE(contains(e, "element counts differ")) << e;
  GraphBuilder c;
  c.input("x", DType::Float32, {2, 3}).init("s", ints({4, -1})).node("Reshape", {"x", "s"}, {"r"});
  EXPECT_TRUE(contains(c.error(), "the -1 cannot be inferred")) << c.error();  // 6 % 4 != 0
}

// ---- Slice ---------------------------------------------------------------------------------------

TEST(InferSlice, NegativeClampedAndSteppedBounds) {
  GraphBuilder b;
  b.input("x", DType::Float32, {10, 8})
      // Axis 0: start -3 -> 7, end INT64_MAX -> 10: 3 rows.
      .init("st0", ints({-3}))
      .init("en0", ints({INT64_MAX}))
      .init("ax0", ints({0}))
      .node("Slice", {"x", "st0", "en0", "ax0"}, {"a"})
      // Axis 1: start 7, end -100 -> clamped to -1, step -2: indices 7, 5, 3, 1.
      .init("st1", ints({7}))
      .init("en1", ints({-100}))
      .init("ax1", ints({1}))
      .init("sp1", ints({-2}))
      .node("Slice", {"x", "st1", "en1", "ax1", "sp1"}, {"b"})
      // Both axes: start -20 -> 0 (clamped), end 5; start 1, end 8, step 3: indices 1, 4, 7.
      .init("st2", ints({-20, 1}))
      .init("en2", ints({5, 8}))
      .init("ax2", ints({0, 1}))
      .init("sp2", ints({1, 3}))
      .node("Slice", {"x", "st2", "en2", "ax2", "sp2"}, {"c"})
      // Start past the end: empty.
      .init("st3", ints({9}))
      .init("en3", ints({3}))
      .node("Slice", {"x", "st3", "en3", "ax0"}, {"d"});
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("a")->str(), "float32[3,8]");
  EXPECT_EQ(t.find("b")->str(), "float32[10,4]");
  EXPECT_EQ(t.find("c")->str(), "float32[5,3]");
  EXPECT_EQ(t.find("d")->str(), "float32[0,8]");
}

TEST(InferSlice, SymbolicAxisKeptWholeOrMadeFresh) {
  GraphBuilder b;
  b.input("x", DType::Float32, {"batch", "seq"})
      .init("zero", ints({0}))
      .init("big", ints({INT64_MAX}))
      .init("one", ints({1}))
      .init("ax", ints({1}))
      .node("Slice", {"x", "zero", "big", "ax"}, {"whole"})
      .node("Slice", {"x", "one", "big", "ax"}, {"tail"});
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("whole")->str(), "float32[batch,seq]");
  // seq - 1 only when seq >= 1: a fresh symbol, not a guess.
  const ValueType* tail = t.find("tail");
  EXPECT_EQ(tail->shape[0], SymDim::symbol("batch"));
  EXPECT_FALSE(tail->shape[1].known());
  EXPECT_NE(tail->shape[1], SymDim::symbol("seq"));
}

TEST(InferSlice, SliceOfAShapeIsADimsValue) {
  GraphBuilder b;
  b.input("x", DType::Float32, {"batch", "seq", 12, 64})
      .node("Shape", {"x"}, {"shape"})
      .init("st", ints({-2}))
      .init("en", ints({INT64_MAX}))
      .node("Slice", {"shape", "st", "en"}, {"last2"});
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("last2")->str(), "int64[2]");
  EXPECT_EQ(sym_shape_str(t.dims_values.at("last2")), "[12,64]");
}

// ---- Gather, Concat, Expand ---------------------------------------------------------------------

TEST(InferGather, OfAShapePicksDimensions) {
  GraphBuilder b;
  b.input("x", DType::Float32, {"batch", "seq", 64})
      .node("Shape", {"x"}, {"shape"})
      .init("last", scalar_int(-1))
      .init("two", ints({0, 1}))
      .node("Gather", {"shape", "last"}, {"d"})
      .node("Gather", {"shape", "two"}, {"bs"})
      .input("w", DType::Float32, {100, 16})
      .input("ids", DType::Int64, {"batch", "seq"})
      .node("Gather", {"w", "ids"}, {"emb"});
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("d")->str(), "int64[]");
  EXPECT_EQ(sym_shape_str(t.dims_values.at("d")), "[64]");
  EXPECT_EQ(sym_shape_str(t.dims_values.at("bs")), "[batch,seq]");
  EXPECT_EQ(t.find("emb")->str(), "float32[batch,seq,16]");  // [seq-of-indices..., 16]
}

TEST(InferConcat, DimsValuesConcatenateAndSizesAdd) {
  GraphBuilder b;
  b.input("past", DType::Float32, {"batch", 12, "past_len", 64})
      .input("cur", DType::Float32, {"batch", 12, "seq", 64})
      .node("Concat", {"past", "cur"}, {"kv"}, {ir::int_attr("axis", -2)})
      .node("Shape", {"kv"}, {"shape"})
      .init("i2", ints({2}))
      .node("Gather", {"shape", "i2"}, {"total"})
      .init("one", ints({1}))
      .node("Concat", {"one", "total"}, {"target"}, {ir::int_attr("axis", 0)})
      .node("ConstantOfShape", {"target"}, {"mask"});
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("kv")->str(), "float32[batch,12,(past_len+seq),64]");
  EXPECT_EQ(sym_shape_str(t.dims_values.at("target")), "[1,(past_len+seq)]");
  EXPECT_EQ(t.find("mask")->str(), "float32[1,(past_len+seq)]");
}

TEST(InferConcat, MismatchedRanksAndSizesNameTheNode) {
  GraphBuilder b;
  b.input("a", DType::Float32, {2, 3}).input("c", DType::Float32, {2, 3, 1});
  b.node("Concat", {"a", "c"}, {"cat"}, {ir::int_attr("axis", 0)});
  EXPECT_TRUE(contains(b.error(), "node 'cat' (Concat)")) << b.error();
  EXPECT_TRUE(contains(b.error(), "different ranks")) << b.error();
  GraphBuilder c;
  c.input("a", DType::Float32, {2, 3}).input("d", DType::Float32, {2, 4});
  c.node("Concat", {"a", "d"}, {"cat"}, {ir::int_attr("axis", 0)});  // 3 vs 4 outside axis 0
  EXPECT_TRUE(contains(c.error(), "differ outside axis 0")) << c.error();
}

TEST(InferExpand, BroadcastsBothWays) {
  GraphBuilder b;
  b.input("x", DType::Float32, {3, 1})
      .init("s", ints({2, 1, 4}))
      .node("Expand", {"x", "s"}, {"y"})  // [3,1] with [2,1,4]: [2,3,4]
      .input("m", DType::Float32, {"batch", 1})
      .input("ref", DType::Float32, {"batch", "seq"})
      .node("Shape", {"ref"}, {"rs"})
      .node("Expand", {"m", "rs"}, {"z"});
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("y")->str(), "float32[2,3,4]");
  EXPECT_EQ(t.find("z")->str(), "float32[batch,seq]");
  GraphBuilder c;
  c.input("x", DType::Float32, {3, 2}).init("s", ints({4, 4})).node("Expand", {"x", "s"}, {"bad"});
  EXPECT_TRUE(contains(c.error(), "node 'bad' (Expand)")) << c.error();
  EXPECT_TRUE(contains(c.error(), "do not broadcast")) << c.error();
}

TEST(InferRange, LengthFromBoundsOrFromASize) {
  GraphBuilder b;
  b.input("x", DType::Float32, {"batch", "seq"})
      .init("s", scalar_int(1))
      .init("l", scalar_int(10))
      .init("d", scalar_int(4))
      .node("Range", {"s", "l", "d"}, {"r"})  // 1, 5, 9: ceil(9 / 4) = 3
      .node("Shape", {"x"}, {"shape"})
      .init("i1", scalar_int(1))
      .node("Gather", {"shape", "i1"}, {"n"})
      .init("zero", scalar_int(0))
      .init("step", scalar_int(1))
      .node("Range", {"zero", "n", "step"}, {"pos"});
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("r")->str(), "int64[3]");
  EXPECT_EQ(sym_shape_str(t.dims_values.at("r")), "[1,5,9]");  // folded by running the kernel
  EXPECT_EQ(t.find("pos")->str(), "int64[seq]");
}

// ---- Split, Pad, Resize -------------------------------------------------------------------------

TEST(InferSplit, SizesFromInputAttributeOrEqualParts) {
  GraphBuilder b(13);
  b.input("x", DType::Float32, {6, 4})
      .init("sizes", ints({2, 4}))
      .node("Split", {"x", "sizes"}, {"a", "b"})
      .node("Split", {"x"}, {"p", "q", "r"});  // 6 / 3
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("a")->str(), "float32[2,4]");
  EXPECT_EQ(t.find("b")->str(), "float32[4,4]");
  EXPECT_EQ(t.find("r")->str(), "float32[2,4]");
  // Opset 18 num_outputs = 4 over 6: chunks of ceil(6 / 4) = 2, the last 6 - 3 * 2 = 0.
  GraphBuilder c(18);
  c.input("x", DType::Float32, {6, 4}).node("Split", {"x"}, {"a", "b", "c", "d"}, {ir::int_attr("num_outputs", 4)});
  EXPECT_EQ(c.type("a"), "float32[2,4]");
  EXPECT_EQ(c.type("d"), "float32[0,4]");
  GraphBuilder e(11);
  e.input("x", DType::Float32, {6, 4}).node("Split", {"x"}, {"a", "b"}, {ir::ints_attr("split", {2, 3})});
  EXPECT_TRUE(contains(e.error(), "node 'a' (Split)")) << e.error();
  EXPECT_TRUE(contains(e.error(), "sums to 5, but axis 0 has size 6")) << e.error();
}

TEST(InferPad, PadsAddAndCrop) {
  GraphBuilder b(13);
  b.input("x", DType::Float32, {1, 3, 4, 5})
      .init("pads", ints({0, 0, 1, 2, 0, 0, 3, -1}))
      .node("Pad", {"x", "pads"}, {"y"});  // [1, 3, 4+1+3, 5+2-1]
  EXPECT_EQ(b.type("y"), "float32[1,3,8,6]");
  GraphBuilder c(18);
  c.input("x", DType::Float32, {1, 3, 4, "w"})
      .init("pads", ints({1, 2, 3, 0}))  // axes [2, 3]: begins 1, 2; ends 3, 0
      .init("axes", ints({2, 3}))
      .node("Pad", {"x", "pads", "", "axes"}, {"y"}, {ir::string_attr("mode", "reflect")});
  EXPECT_EQ(c.type("y"), "float32[1,3,8,(w+2)]");
  GraphBuilder d(13);
  d.input("x", DType::Float32, {2, 2}).init("pads", ints({0, -3, 0, 0})).node("Pad", {"x", "pads"}, {"y"});
  EXPECT_TRUE(contains(d.error(), "node 'y' (Pad)")) << d.error();
}

TEST(InferResize, ScalesSizesAndAspectRatio) {
  GraphBuilder b(13);
  b.input("x", DType::Float32, {1, 3, 4, 6})
      .init("scales", floats({1, 1, 2, 0.5f}))
      .node("Resize", {"x", "", "scales"}, {"up"})  // [1, 3, floor(4*2), floor(6*0.5)]
      .init("sizes", ints({1, 3, 5, 7}))
      .node("Resize", {"x", "", "", "sizes"}, {"sized"})
      .init("roi", floats({}))
      .init("noscales", floats({}))
      .node("Resize", {"x", "roi", "noscales", "sizes"}, {"sized2"});  // empty inputs are absent
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("up")->str(), "float32[1,3,8,3]");
  EXPECT_EQ(t.find("sized")->str(), "float32[1,3,5,7]");
  EXPECT_EQ(t.find("sized2")->str(), "float32[1,3,5,7]");
  // not_larger over axes [2, 3] to [8, 8]: scale min(8/4, 8/6) = 4/3; round(4 * 4/3) = 5,
  // round(6 * 4/3) = 8.
  GraphBuilder c(18);
  c.input("x", DType::Float32, {1, 3, 4, 6})
      .init("sizes", ints({8, 8}))
      .node("Resize", {"x", "", "", "sizes"}, {"y"},
            {ir::ints_attr("axes", {2, 3}), ir::string_attr("keep_aspect_ratio_policy", "not_larger")});
  EXPECT_EQ(c.type("y"), "float32[1,3,5,8]");
  // An integer scale of a symbolic size is exact.
  GraphBuilder d(13);
  d.input("x", DType::Float32, {"n", 3, "h", "w"})
      .init("scales", floats({1, 1, 2, 2}))
      .node("Resize", {"x", "", "scales"}, {"y"});
  EXPECT_EQ(d.type("y"), "float32[n,3,(2*h),(2*w)]");
}

// ---- Attention ---------------------------------------------------------------------------------

TEST(InferAttention, FourDimensionalWithPastAndQkOutput) {
  GraphBuilder b(23);
  b.input("q", DType::Float32, {2, 8, 5, 64})
      .input("k", DType::Float32, {2, 2, 7, 64})
      .input("v", DType::Float32, {2, 2, 7, 32})
      .input("pk", DType::Float32, {2, 2, 3, 64})
      .input("pv", DType::Float32, {2, 2, 3, 32})
      .node("Attention", {"q", "k", "v", "", "pk", "pv"}, {"y", "present_k", "present_v", "qk"});
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("y")->str(), "float32[2,8,5,32]");           // [B, Hq, Sq, Dv]
  EXPECT_EQ(t.find("present_k")->str(), "float32[2,2,10,64]");  // [B, Hkv, 3 + 7, D]
  EXPECT_EQ(t.find("present_v")->str(), "float32[2,2,10,32]");
  EXPECT_EQ(t.find("qk")->str(), "float32[2,8,5,10]");  // [B, Hq, Sq, total]
}

TEST(InferAttention, ThreeDimensionalAndSymbolic) {
  GraphBuilder b(23);
  // Hq = 8, Hkv = 2: head size 512 / 8 = 64 = 128 / 2; V head 96 / 2 = 48; Y [2, 5, 8 * 48].
  b.input("q", DType::Float16, {2, 5, 512})
      .input("k", DType::Float16, {2, 7, 128})
      .input("v", DType::Float16, {2, 7, 96})
      .node("Attention", {"q", "k", "v"}, {"y", "pk", "pv"},
            {ir::int_attr("q_num_heads", 8), ir::int_attr("kv_num_heads", 2)});
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("y")->str(), "float16[2,5,384]");
  EXPECT_EQ(t.find("pk")->str(), "float16[2,2,7,64]");
  EXPECT_EQ(t.find("pv")->str(), "float16[2,2,7,48]");
  GraphBuilder c(23);
  c.input("q", DType::Float32, {"batch", 8, "seq", 64})
      .input("k", DType::Float32, {"batch", 8, "seq", 64})
      .input("v", DType::Float32, {"batch", 8, "seq", 64})
      .input("pk", DType::Float32, {"batch", 8, "past", 64})
      .input("pv", DType::Float32, {"batch", 8, "past", 64})
      .node("Attention", {"q", "k", "v", "", "pk", "pv"}, {"y", "present_k"});
  EXPECT_EQ(c.type("present_k"), "float32[batch,8,(past+seq),64]");
  GraphBuilder e(23);
  e.input("q", DType::Float32, {2, 8, 5, 64})
      .input("k", DType::Float32, {2, 3, 7, 64})  // 8 heads are not a multiple of 3
      .input("v", DType::Float32, {2, 3, 7, 64})
      .node("Attention", {"q", "k", "v"}, {"att"});
  EXPECT_TRUE(contains(e.error(), "node 'att' (Attention)")) << e.error();
}

TEST(InferAttention, FusedLayoutsAndGroupedQuery) {
  GraphBuilder b;
  b.input("q", DType::Float32, {2, 5, 8, 64})  // bshd
      .input("k", DType::Float32, {2, 2, 7, 64})
      .input("v", DType::Float32, {2, 2, 7, 32})
      .init("scale", make<float>({}, {0.125f}))
      .init("ke", ints({2, 2, 4, 7, 64}))  // repeat_kv: [B, Hkv, 4, S, D] -> [B, 8, S, D]
      .init("kr", ints({2, 8, 7, 64}))
      .init("ve", ints({2, 2, 4, 7, 32}))
      .init("vr", ints({2, 8, 7, 32}))
      .node("Attention", {"q", "k", "v", "scale", "", "", "ke", "kr", "ve", "vr"}, {"y"},
            {ir::string_attr("q_layout", "bshd"), ir::string_attr("out_layout", "bshd"),
             ir::string_attr("scale_op", "mul")},
            "reforge");
  EXPECT_EQ(b.type("y"), "float32[2,5,8,32]");  // [B, Sq, Hq, Dv]
}

// ---- Errors name the node ------------------------------------------------------------------------

TEST(InferErrors, AxisOutOfRangeAndBadPermutation) {
  GraphBuilder b;
  b.input("x", DType::Float32, {2, 3})
      .init("i", ints({0}))
      .node("Gather", {"x", "i"}, {"g"}, {ir::int_attr("axis", 3)});
  EXPECT_TRUE(contains(b.error(), "node 'g' (Gather)")) << b.error();
  EXPECT_TRUE(contains(b.error(), "axis 3 is out of range for rank 2")) << b.error();
  GraphBuilder c;
  c.input("x", DType::Float32, {2, 3}).node("Transpose", {"x"}, {"t"}, {ir::ints_attr("perm", {0, 0})});
  EXPECT_TRUE(contains(c.error(), "node 't' (Transpose)")) << c.error();
  EXPECT_TRUE(contains(c.error(), "is not a permutation")) << c.error();
  GraphBuilder d;
  d.input("x", DType::Float32, {2, 3}).init("ax", ints({1})).node("Squeeze", {"x", "ax"}, {"sq"});
  EXPECT_TRUE(contains(d.error(), "node 'sq' (Squeeze)")) << d.error();
  EXPECT_TRUE(contains(d.error(), "its size is not 1")) << d.error();
}

TEST(InferErrors, TheBuildFailsNamingTheNode) {
  GraphBuilder b;
  b.input("x", DType::Float32, {2, 3}).init("s", ints({4, 2})).node("Reshape", {"x", "s"}, {"r"}).output("r");
  try {
    build::build_plan(b.graph(), {});
    FAIL() << "the build accepted a Reshape of 6 elements into [4,2]";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "node 'r' (Reshape)")) << e.what();
    EXPECT_TRUE(contains(e.what(), "shape inference")) << e.what();
  }
}

TEST(InferErrors, CheckReportsShapeErrorsAndPrintsInputAndOutputTypes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("reforge_infer_check_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  GraphBuilder bad;
  bad.input("x", DType::Float32, {2, 3}).init("s", ints({4, 2})).node("Reshape", {"x", "s"}, {"r"}).output("r");
  onnx::write_model_file(bad.graph(), (dir / "bad.onnx").string());
  test_support::CliResult r = test_support::run_cli("check " + (dir / "bad.onnx").string());
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "shape error: node 'r' (Reshape): cannot reshape")) << r.output;
  EXPECT_TRUE(contains(r.output, "1 nodes, 0 unsupported, 1 shape error")) << r.output;
  GraphBuilder good;
  good.input("x", DType::Float32, {"batch", "seq", 768})
      .init("s", ints({0, 0, 12, -1}))
      .node("Reshape", {"x", "s"}, {"r"})
      .output("r");
  onnx::write_model_file(good.graph(), (dir / "good.onnx").string());
  r = test_support::run_cli("check --shapes " + (dir / "good.onnx").string());
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "input 'x': float32[batch,seq,768]")) << r.output;
  EXPECT_TRUE(contains(r.output, "output 'r': float32[batch,seq,12,64]")) << r.output;
  EXPECT_TRUE(contains(r.output, "1 nodes, 0 unsupported, 0 shape errors")) << r.output;
  r = test_support::run_cli("check --json " + (dir / "good.onnx").string());
  EXPECT_TRUE(contains(r.output, "\"name\": \"x\",\n      \"type\": \"float32[batch,seq,768]\"")) << r.output;
  fs::remove_all(dir);
}

// ---- Folding checks the inference against the kernel ---------------------------------------------

TEST(InferFolding, ConstantsGetTheKernelsExactType) {
  GraphBuilder b;
  b.init("shape", ints({2, 3}))
      .node("ConstantOfShape", {"shape"}, {"c"}, {ir::tensor_attr("value", make<int64_t>({1}, {7}))})
      .node("Shape", {"c"}, {"cs"});
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("c")->str(), "int64[2,3]");
  ASSERT_TRUE(t.constants.count("c"));
  EXPECT_EQ(t.constants.at("c").as_int64(5), 7);
  EXPECT_EQ(sym_shape_str(t.dims_values.at("cs")), "[2,3]");
}

// ---- Real exported models -----------------------------------------------------------------------

// Every export of models/manifest.json infers without error, symbolically (declared inputs) and
// for each input set's shapes; with the input set's shapes, every graph output that has a
// framework reference is inferred with the reference's dtype and shape.
TEST(InferModels, ExportsInferToTheirReferenceShapes) {
  namespace fs = std::filesystem;
  const fs::path models = fs::path(REFORGE_SOURCE_DIR) / "models";
  std::ifstream f(models / "manifest.json");
  if (!f) GTEST_SKIP() << "models/manifest.json not present";
  const nlohmann::json j = nlohmann::json::parse(f);
  int compared = 0;
  for (const auto& e : j.at("exports")) {
    const std::string path = e.at("path").get<std::string>();
    SCOPED_TRACE(path);
    const ir::Graph g = onnx::import_model_file((models / path).string());
    InferOptions o;
    o.require_all = kEveryOpInferred;
    ASSERT_NO_THROW(infer_graph(g, o));
    for (const auto& set : e.at("input_sets")) {
      std::map<std::string, Shape> shapes;
      for (const auto& [n, v] : set.at("inputs").items())
        shapes[n] = read_npy((models / v.get<std::string>()).string()).shape();
      o.input_shapes = &shapes;
      GraphTypes t;
      ASSERT_NO_THROW(t = infer_graph(g, o)) << set.at("name");
      for (const auto& [n, v] : set.at("reference").items()) {
        const ValueType* vt = t.find(n);
        ASSERT_NE(vt, nullptr) << n;
        if (!kEveryOpInferred && vt->dtype == DType::Undefined) continue;  // behind an op without inference
        const Tensor ref = read_npy((models / v.get<std::string>()).string());
        EXPECT_EQ(vt->str(), ValueType::of(ref.dtype(), SymShape(ref.shape().begin(), ref.shape().end())).str())
            << n << " of " << set.at("name");
        ++compared;
      }
    }
  }
  std::cout << "compared " << compared << " model outputs with their references\n";
}

TEST(InferFolding, KnownShapeValuesFoldLikeConstants) {
  // Range(0.0, float(Shape(x)[1]), 1.0): the float bound is not a dims value, but with one input
  // signature fixed Shape's contents are numbers, so Gather, Cast and Range fold.
  GraphBuilder b;
  b.input("x", DType::Int64, {"batch", "seq"})
      .node("Shape", {"x"}, {"shape"})
      .init("i1", scalar_int(1))
      .node("Gather", {"shape", "i1"}, {"n"})
      .node("Cast", {"n"}, {"nf"}, {ir::int_attr("to", 1)})
      .init("zero", make<float>({}, {0.0f}))
      .init("one", make<float>({}, {1.0f}))
      .node("Range", {"zero", "nf", "one"}, {"pos"});
  std::map<std::string, Shape> shapes{{"x", {2, 7}}};
  EXPECT_EQ(b.type("pos", &shapes), "float32[7]");
  GraphTypes t = b.infer();
  EXPECT_EQ(t.find("pos")->shape.size(), 1u);
  EXPECT_FALSE(t.find("pos")->shape[0].known());  // symbolic: a float bound is not followed
}

// ---- Registry coverage ---------------------------------------------------------------------------

// Every op of the tensor, transformer and reforge-domain families has an inference: a registry
// with only those families and their inference leaves no entry without one.
TEST(InferRegistry, TensorTransformerAndReforgeFamiliesAreCovered) {
  OpRegistry r;
  register_tensor_ops(r);
  register_transformer_ops(r);
  register_reforge_ops(r);
  register_tensor_inference(r);
  register_transformer_inference(r);
  register_reforge_inference(r);
  std::string missing;
  for (const OpDef* d : r.entries())
    if (!d->infer) missing += " " + (d->domain.empty() ? "" : d->domain + "::") + d->op_type;
  EXPECT_TRUE(missing.empty()) << "without inference:" << missing;
}

// Every entry of the global registry has an inference: kEveryOpInferred (the builder, check and
// conformance require inference) holds only while this passes; it lists the entries without one.
TEST(InferRegistry, EveryEntryHasAnInference) {
  std::string missing;
  for (const OpDef* d : OpRegistry::global().entries())
    if (!d->infer)
      missing +=
          " " + (d->domain.empty() ? "" : d->domain + "::") + d->op_type + "-" + std::to_string(d->since_version);
  if (!kEveryOpInferred && !missing.empty()) GTEST_SKIP() << "without inference:" << missing;
  EXPECT_TRUE(missing.empty()) << "without inference:" << missing;
}

}  // namespace
