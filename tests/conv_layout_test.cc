// Native-layout activations (attribute value "NCHWc": channel-blocked, cpu::ActLayout::Blocked,
// on AVX2 / AVX-512 CPUs) and the
// residual written in place (conv-residual-inplace):
//   - FusedConv with every combination of native / plain X, Y and Z equals the NCHW kernel on
//     data the test lays out by explicit indexing (float32 through oneDNN, twice so the second
//     call takes the node's memoized primitive; float64 through the converting fallback);
//   - z_inplace = 1 writes the output into Z's buffer and still gives the NCHW result;
//   - reforge::MaxPool over native-layout data equals the ONNX MaxPool, NaN included;
//   - the passes mark z_inplace only where Z is dead and owns its buffer, and the built plan
//     (arena recording run, then arena runs) computes what the unoptimized graph computes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backends/backend.h"
#include "backends/cpu/dnnl_conv.h"
#include "builder/builder.h"
#include "ops/registry.h"
#include "runtime/engine.h"
#include "runtime/plan_engine.h"
#include "support/engine_for.h"
#include "support/make_tensor.h"
#include "support/run_op.h"

using namespace reforge;
using namespace reforge::ops;

namespace {

using test_support::random_floats;

Tensor widen(const Tensor& t) {
  Tensor o = Tensor::empty(DType::Float64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) o.mutable_data<double>()[i] = t.data<float>()[i];
  return o;
}

// [N, C, H, W] -> the native layout (cpu::native_layout(): [N, C/b, H, W, b] on AVX2 / AVX-512
// CPUs, else [N, H, W, C] or NCHW itself) by explicit indexing (the test's own reference).
Tensor to_native(const Tensor& t) {
  const cpu::ActLayout l = cpu::native_layout();
  if (l == cpu::ActLayout::Nchw) return t;
  const int64_t b = l == cpu::ActLayout::Blocked ? cpu::activation_block() : 1;
  const Shape& s = t.shape();
  Tensor o = Tensor::empty(
      t.dtype(), l == cpu::ActLayout::Blocked ? Shape{s[0], s[1] / b, s[2], s[3], b} : Shape{s[0], s[2], s[3], s[1]});
  const size_t e = dtype_size(t.dtype());
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t w = 0; w < s[3]; ++w) {
          const int64_t at = l == cpu::ActLayout::Blocked
                                 ? (((n * (s[1] / b) + c / b) * s[2] + h) * s[3] + w) * b + c % b
                                 : ((n * s[2] + h) * s[3] + w) * s[1] + c;
          std::memcpy(static_cast<char*>(o.mutable_raw()) + e * at,
                      static_cast<const char*>(t.raw()) + e * (((n * s[1] + c) * s[2] + h) * s[3] + w), e);
        }
  return o;
}

// Runs one node; `calls` times with the same prepared state (the conv memo is hit from the 2nd).
Tensor run(const std::string& domain, const std::string& op, int opset, std::vector<const Tensor*> inputs,
           const std::vector<ir::Attribute>& attrs, int calls = 1) {
  return test_support::run_op(domain, op, opset, std::move(inputs), attrs, 1, calls);
}

void expect_near(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(got.as_double(i), want.as_double(i), tol) << what << " at " << i;
}

}  // namespace

TEST(ConvLayout, BlockedFusedConvEqualsNchw) {
  struct Case {
    Shape xs, ws;
    int64_t group, stride;
  };
  const std::vector<Case> cases = {{{2, 16, 9, 7}, {32, 16, 3, 3}, 1, 1},
                                   {{1, 32, 8, 8}, {16, 32, 1, 1}, 1, 1},
                                   {{1, 32, 9, 9}, {64, 32, 1, 1}, 1, 2},  // ResNet's downsample
                                   {{1, 16, 7, 7}, {16, 1, 3, 3}, 16, 1},  // depthwise
                                   {{2, 64, 6, 5}, {64, 64, 3, 3}, 1, 2}};
  for (const auto& [xs, ws, group, stride] : cases) {
    for (DType dt : {DType::Float32, DType::Float64}) {
      Tensor x = random_floats(xs, 1), w = random_floats(ws, 2, -0.3f, 0.3f), b = random_floats({ws[0]}, 3);
      const std::vector<ir::Attribute> base = {ir::ints_attr("pads", {ws[2] / 2, ws[3] / 2, ws[2] / 2, ws[3] / 2}),
                                               ir::ints_attr("strides", {stride, stride}),
                                               ir::string_attr("activation", "Relu"), ir::int_attr("group", group)};
      Tensor y0 = run("reforge", "FusedConv", 1, {&x, &w, &b}, base);
      Tensor z = random_floats(y0.shape(), 9);
      if (dt == DType::Float64) x = widen(x), w = widen(w), b = widen(b), z = widen(z);
      const Tensor want = run("reforge", "FusedConv", 1, {&x, &w, &b, &z}, base);
      for (int mask = 1; mask < 8; ++mask) {
        const bool xl = mask & 1, yl = mask & 2, zl = mask & 4;
        std::vector<ir::Attribute> at = base;
        if (xl) at.push_back(ir::string_attr("x_layout", "NCHWc"));
        if (yl) at.push_back(ir::string_attr("y_layout", "NCHWc"));
        if (zl) at.push_back(ir::string_attr("z_layout", "NCHWc"));
        const Tensor xi = xl ? to_native(x) : x, zi = zl ? to_native(z) : z;
        const Tensor got = run("reforge", "FusedConv", 1, {&xi, &w, &b, &zi}, at, 2);
        expect_near(got, yl ? to_native(want) : want, 1e-4,
                    shape_str(xs) + " " + dtype_name(dt) + " layouts " + std::to_string(mask));
      }
    }
  }
}

// z_inplace = 1: the output is Z's buffer (float32, blocked Y and Z), the values are the NCHW
// kernel's; without the attribute Z is left untouched.
TEST(ConvLayout, ResidualWrittenInPlace) {
  const Tensor x = random_floats({2, 32, 10, 10}, 1), w = random_floats({32, 32, 3, 3}, 2, -0.2f, 0.2f);
  const Tensor b = random_floats({32}, 3), z = random_floats({2, 32, 10, 10}, 4);
  const std::vector<ir::Attribute> base = {ir::ints_attr("pads", {1, 1, 1, 1}), ir::string_attr("activation", "Relu")};
  const Tensor want = to_native(run("reforge", "FusedConv", 1, {&x, &w, &b, &z}, base));
  std::vector<ir::Attribute> at = base;
  for (const char* a : {"x_layout", "y_layout", "z_layout"}) at.push_back(ir::string_attr(a, "NCHWc"));
  const Tensor xb = to_native(x);
  {
    const Tensor zb = to_native(z), before = zb.clone();
    const Tensor got = run("reforge", "FusedConv", 1, {&xb, &w, &b, &zb}, at);
    expect_near(got, want, 1e-4, "copying");
    EXPECT_NE(got.raw(), zb.raw());
    EXPECT_EQ(std::memcmp(zb.raw(), before.raw(), zb.nbytes()), 0);
  }
  at.push_back(ir::int_attr("z_inplace", 1));
  for (int calls : {1, 2}) {  // the first call builds the primitive, the second uses the memo
    const Tensor zb = to_native(z);
    ir::Node node;
    node.name = "n", node.op_type = "FusedConv", node.domain = "reforge", node.opset = 1;
    node.inputs = {"x", "w", "b", "z"}, node.outputs = {"y"};
    for (const auto& a : at) node.attrs[a.name] = a;
    const backends::Resolved def = backends::host_kernel(node);
    ops::HostPrepareContext host_context;
    auto prepared = (*def.prepare)(node, {nullptr, &w, &b, nullptr}, host_context);
    for (int i = 0; i < calls; ++i) {
      const Tensor zi = i + 1 == calls ? zb : to_native(z);
      KernelContext ctx(node, {&xb, &w, &b, &zi}, 1, nullptr, prepared.get());
      (*def.kernel)(ctx);
      const Tensor got = ctx.outputs()[0];
      // (Where the native layout is plain NCHW the node runs the NCHW kernel, which copies.)
      if (cpu::native_layout() != cpu::ActLayout::Nchw) {
        EXPECT_EQ(got.raw(), zi.raw()) << calls;
      }
      expect_near(got, want, 1e-4, "in place, call " + std::to_string(i + 1));
    }
  }
}

// reforge::MaxPool over blocked data equals the ONNX MaxPool on NCHW, NaN included; float64 and
// Indices take the converting fallback.
TEST(ConvLayout, BlockedMaxPool) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = random_floats({2, 32, 11, 9}, 3, -3, 3);
    x.mutable_data<float>()[7] = nan;
    x.mutable_data<float>()[11 * 9 * 5 + 20] = nan;
    if (dt == DType::Float64) x = widen(x);
    for (int64_t k : {2, 3}) {
      const std::vector<ir::Attribute> at = {ir::ints_attr("kernel_shape", {k, k}), ir::ints_attr("strides", {2, 2}),
                                             ir::ints_attr("pads", {1, 1, 1, 1})};
      const Tensor want = to_native(run("", "MaxPool", 12, {&x}, at));
      std::vector<ir::Attribute> at2 = at;
      at2.push_back(ir::string_attr("layout", "NCHWc"));
      const Tensor xb = to_native(x);
      const Tensor got = run("reforge", "MaxPool", 1, {&xb}, at2);
      ASSERT_EQ(got.shape(), want.shape());
      for (int64_t i = 0; i < got.numel(); ++i) {
        const double a = got.as_double(i), b = want.as_double(i);
        ASSERT_TRUE((std::isnan(a) && std::isnan(b)) || a == b) << i << ": " << a << " vs " << b;
      }
    }
  }
}

// A residual network by hand: stem conv, two residual blocks, a block whose input is also read
// after it (so its residual must not be overwritten), and a residual that is a graph input.
TEST(ConvLayout, ResidualInPlacePassAndArenaRuns) {
  ir::Graph g;
  g.opsets = {{"", 17}};
  g.inputs = {{"x", DType::Float32, false, {}}, {"r", DType::Float32, false, {}}};
  g.outputs = {{"y", DType::Float32, false, {}}, {"y2", DType::Float32, false, {}}};
  int k = 0;
  auto conv = [&](const std::string& in, const std::string& out, int64_t cin, int64_t cout) {
    ir::Node n;
    n.name = out, n.op_type = "Conv", n.opset = 17, n.inputs = {in, "w" + std::to_string(k), "b" + std::to_string(k)};
    n.outputs = {out};
    n.attrs["pads"] = ir::ints_attr("pads", {1, 1, 1, 1});
    g.initializers["w" + std::to_string(k)] = random_floats({cout, cin, 3, 3}, 10 + k, -0.1f, 0.1f);
    g.initializers["b" + std::to_string(k)] = random_floats({cout}, 50 + k);
    ++k;
    g.nodes.push_back(n);
  };
  auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    ir::Node n;
    n.name = out, n.op_type = op, n.opset = 17, n.inputs = std::move(in), n.outputs = {out};
    g.nodes.push_back(n);
  };
  conv("x", "s", 8, 16);
  node("Relu", {"s"}, "a0");
  for (int blk = 0; blk < 2; ++blk) {  // a_{i+1} = relu(conv(relu(conv(a_i))) + a_i)
    const std::string a = "a" + std::to_string(blk), t = "t" + std::to_string(blk);
    conv(a, t + "c", 16, 16);
    node("Relu", {t + "c"}, t);
    conv(t, t + "d", 16, 16);
    node("Add", {t + "d", a}, t + "s");
    node("Relu", {t + "s"}, "a" + std::to_string(blk + 1));
  }
  conv("a2", "u", 16, 16);  // a3 = u + a2, and a2 is read again afterwards by the Mul
  node("Add", {"u", "a2"}, "a3");
  conv("a3", "v", 16, 16);  // the residual is the graph input r
  node("Add", {"v", "r"}, "y");
  float two = 2.0f;
  g.initializers["two"] = Tensor::copy_of(DType::Float32, {}, &two);
  node("Mul", {"a2", "two"}, "y2");
  const std::map<std::string, Tensor> in = {{"x", random_floats({2, 8, 12, 12}, 1)},
                                            {"r", random_floats({2, 16, 12, 12}, 2)}};
  const auto want = test_support::engine_for(g).run(in);

  build::BuildOptions o;
  plan::Plan p = build::build_plan(g, o);
  std::map<std::string, const ir::Node*> by_out;
  for (const auto& n : p.graph.nodes) by_out[n.outputs[0]] = &n;
  ASSERT_TRUE(by_out.count("a1") && by_out.count("a2") && by_out.count("a3") && by_out.count("y"));
  EXPECT_EQ(by_out["a1"]->attr_int("z_inplace", 0), 1);  // its residual a0 is dead afterwards
  EXPECT_EQ(by_out["a2"]->attr_int("z_inplace", 0), 1);
  EXPECT_EQ(by_out["a3"]->attr_int("z_inplace", 0), 0);  // a2 is read later by the Mul
  EXPECT_EQ(by_out["y"]->attr_int("z_inplace", 0), 0);   // r is a graph input
  EXPECT_EQ(by_out["a1"]->attr_string("z_layout", ""), "NCHWc");
  EXPECT_EQ(by_out["a1"]->attr_string("y_layout", ""), "NCHWc");

  runtime::PlanEngine e(std::move(p));
  for (int run = 0; run < 3; ++run) {  // recording run, then arena runs
    const auto got = e.run(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) expect_near(got[i], want[i], 1e-4, "output " + std::to_string(i));
  }
  const Tensor r_before = random_floats({2, 16, 12, 12}, 2);
  EXPECT_EQ(std::memcmp(in.at("r").raw(), r_before.raw(), r_before.nbytes()), 0);  // inputs untouched
}
