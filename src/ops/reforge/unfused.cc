#include "ops/reforge/unfused.h"

#include "core/error.h"

namespace reforge::ops {

ir::Node unfused_node(const ir::Node& of, const char* op, int opset, size_t inputs,
                      std::map<std::string, ir::Attribute> attrs) {
  ir::Node node;
  node.name = of.name;
  node.op_type = op;
  node.opset = opset;
  node.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs; ++i) node.inputs.push_back("in" + std::to_string(i));
  node.outputs = {"out"};
  return node;
}

Tensor attention_unfused(const KernelContext& ctx, const RunOp& runner) {
  const auto& run = runner.op;
  auto perm = [](std::vector<int64_t> p) {
    return std::map<std::string, ir::Attribute>{{"perm", ir::ints_attr("perm", p)}};
  };
  const std::string ql = ctx.attr_string("q_layout", "bhsd"), kl = ctx.attr_string("k_layout", "bhsd"),
                    vl = ctx.attr_string("v_layout", "bhsd"), ol = ctx.attr_string("out_layout", "bhsd");
  auto repeat = [&](const Tensor& x, size_t ei, size_t ri) {
    if (!ctx.has_input(ei)) return x;
    Tensor axes = Tensor::empty(DType::Int64, {1});
    axes.mutable_data<int64_t>()[0] = 2;
    Tensor u = run("Unsqueeze", 13, {&x, &axes}, {});
    Tensor e = run("Expand", 13, {&u, &ctx.input(ei)}, {});
    return run("Reshape", 14, {&e, &ctx.input(ri)},
               {{"allowzero", ir::int_attr("allowzero", ctx.attr_int("kv_allowzero", 0))}});
  };
  Tensor q = ql == "bshd" ? run("Transpose", 13, {&ctx.input(0)}, perm({0, 2, 1, 3})) : ctx.input(0);
  Tensor k = repeat(ctx.input(1), 6, 7);
  if (kl == "bhsd")
    k = run("Transpose", 13, {&k}, perm({0, 1, 3, 2}));
  else if (kl == "bshd")
    k = run("Transpose", 13, {&k}, perm({0, 2, 3, 1}));
  const std::string so = ctx.attr_string("scale_op", "none");
  if (so == "mul_qk") {
    q = run("Mul", 14, {&q, &ctx.input(3)}, {});
    k = run("Mul", 14, {&k, &ctx.input(10)}, {});
  }
  Tensor s = run("MatMul", 13, {&q, &k}, {});
  if (so == "mul" || so == "div") s = run(so == "div" ? "Div" : "Mul", 14, {&s, &ctx.input(3)}, {});
  const std::string mm = ctx.attr_string("mask_mode", "none");
  if (mm == "add")
    s = run("Add", 14, {&s, &ctx.input(4)}, {});
  else if (mm == "where_fill_true")
    s = run("Where", 16, {&ctx.input(4), &ctx.input(5), &s}, {});
  else if (mm == "where_fill_false")
    s = run("Where", 16, {&ctx.input(4), &s, &ctx.input(5)}, {});
  Tensor p = run("Softmax", 13, {&s}, {{"axis", ir::int_attr("axis", -1)}});
  if (ctx.attr_string("softmax_nan", "keep") == "zero") {
    const Tensor nan = run("IsNaN", 20, {&p}, {});
    const Tensor zero = runner.zeros(p.dtype(), {});
    p = run("Where", 16, {&nan, &zero, &p}, {});
  }
  // V's head transpose comes before its repeat (the pass absorbs it from there).
  Tensor v = vl == "bshd" ? run("Transpose", 13, {&ctx.input(2)}, perm({0, 2, 1, 3})) : ctx.input(2);
  v = repeat(v, 8, 9);
  Tensor y = run("MatMul", 13, {&p, &v}, {});
  if (ol == "bshd") y = run("Transpose", 13, {&y}, perm({0, 2, 1, 3}));
  return y;
}

Tensor rotary_unfused(const KernelContext& ctx, const RunOp& runner) {
  const auto& run = runner.op;
  Tensor x = ctx.input(0);
  if (ctx.attr_string("layout", "bhsd") == "bshd")
    x = run("Transpose", 13, {&x}, {{"perm", ir::ints_attr("perm", {0, 2, 1, 3})}});
  const std::vector<int64_t> axes = ctx.attr_ints("axes", {-1, -1, -1});
  REFORGE_CHECK(axes.size() == 3, ctx.node().label(), ": axes must have 3 values");
  auto i64 = [](int64_t v) {
    Tensor t = Tensor::empty(DType::Int64, {1});
    t.mutable_data<int64_t>()[0] = v;
    return t;
  };
  Tensor a0 = i64(axes[0]), a1 = i64(axes[1]);
  Tensor hi = run("Slice", 13, {&x, &ctx.input(3), &ctx.input(4), &a0}, {});
  Tensor lo = run("Slice", 13, {&x, &ctx.input(5), &ctx.input(6), &a1}, {});
  Tensor neg = run("Neg", 13, {&hi}, {});
  Tensor cat = run("Concat", 13, {&neg, &lo}, {{"axis", ir::int_attr("axis", axes[2])}});
  Tensor ms = run("Mul", 14, {&cat, &ctx.input(2)}, {});
  Tensor mc = run("Mul", 14, {&x, &ctx.input(1)}, {});
  return run("Add", 14, {&mc, &ms}, {});
}

}  // namespace reforge::ops
