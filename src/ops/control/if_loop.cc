// If and Loop (every opset: tensors only; optional and sequence values are not supported).
#include <climits>
#include <string>
#include <vector>

#include "ir/subgraph.h"
#include "ops/control/body.h"
#include "ops/control/control.h"

namespace reforge::ops::control {
namespace {

// ---- If ---------------------------------------------------------------------------------------

void if_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const bool cond = scalar_condition(ctx.input(0), node.label() + ": input 'cond'");
  const std::string branch = cond ? "then_branch" : "else_branch";
  const ir::Graph& g = subgraph(node, branch);
  if (g.outputs.size() != node.outputs.size())
    fail(node.label(), ": ", branch, " has ", g.outputs.size(), " outputs, the node has ", node.outputs.size());
  Body body(g, node.label() + " " + branch, ctx.threads());
  std::vector<Tensor> out = body.run({}, captured_inputs(ctx, branch));
  for (size_t i = 0; i < out.size(); ++i) ctx.set_output(i, std::move(out[i]));
}

std::string check_if(const ir::Node& node) {
  if (ir::num_declared_inputs(node) != 1) return "If takes exactly one input ('cond')";
  for (const char* b : {"then_branch", "else_branch"}) {
    const ir::Attribute* a = node.attr(b);
    if (!a || a->type != ir::AttrType::Graph || !a->g) return std::string("graph attribute '") + b + "' is required";
    if (!a->g->inputs.empty()) return std::string(b) + " must have no inputs";
    if (a->g->outputs.size() != node.outputs.size())
      return std::string(b) + " has " + std::to_string(a->g->outputs.size()) + " outputs, the node has " +
             std::to_string(node.outputs.size());
    std::string why = why_body_unsupported(*a->g);
    if (!why.empty()) return why;
  }
  return "";
}

bool if_draws_random(const ir::Node& node) {
  return body_draws_random(subgraph(node, "then_branch")) || body_draws_random(subgraph(node, "else_branch"));
}

// ---- Loop -------------------------------------------------------------------------------------

// The body of a Loop with N loop-carried values and K scan outputs has inputs (iteration number,
// condition, N carried) and outputs (condition, N carried, K scan outputs); the node has inputs
// (M, cond, N initial values) and outputs (N final values, K scan outputs).
std::string check_loop_shape(const ir::Node& node) {
  const ir::Attribute* a = node.attr("body");
  if (!a || a->type != ir::AttrType::Graph || !a->g) return "graph attribute 'body' is required";
  const ir::Graph& g = *a->g;
  const size_t declared = ir::num_declared_inputs(node);
  if (declared < 2) return "Loop takes inputs (M, cond, loop-carried values...)";
  const size_t n = declared - 2;
  if (g.inputs.size() != n + 2)
    return "body has " + std::to_string(g.inputs.size()) + " inputs; with " + std::to_string(n) +
           " loop-carried values it must have " + std::to_string(n + 2) + " (iteration number, condition, carried)";
  if (node.outputs.size() < n)
    return "the node has " + std::to_string(node.outputs.size()) + " outputs, fewer than its " + std::to_string(n) +
           " loop-carried values";
  if (g.outputs.size() != node.outputs.size() + 1)
    return "body has " + std::to_string(g.outputs.size()) + " outputs; the node's " +
           std::to_string(node.outputs.size()) + " outputs need " + std::to_string(node.outputs.size() + 1) +
           " (condition, " + std::to_string(n) + " carried, " + std::to_string(node.outputs.size() - n) +
           " scan outputs)";
  return "";
}

std::string check_loop(const ir::Node& node) {
  std::string why = check_loop_shape(node);
  return why.empty() ? why_body_unsupported(subgraph(node, "body")) : why;
}

void loop_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string why = check_loop_shape(node);
  if (!why.empty()) fail(node.label(), ": ", why);
  const ir::Graph& g = subgraph(node, "body");
  const size_t n = ir::num_declared_inputs(node) - 2;
  const size_t k = node.outputs.size() - n;
  const bool has_m = ctx.has_input(0), has_cond = ctx.has_input(1);
  if (!has_m && !has_cond) fail(node.label(), ": a Loop without a trip count and without a condition never ends");
  int64_t trips = INT64_MAX;
  if (has_m) {
    const Tensor& m = ctx.input(0);
    if (m.numel() != 1 || !is_integer(m.dtype()))
      fail(node.label(), ": input 'M' must be one integer, got ", m.describe());
    trips = m.as_int64(0);
  }
  bool cond = has_cond ? scalar_condition(ctx.input(1), node.label() + ": input 'cond'") : true;
  std::vector<Tensor> carried(n);
  for (size_t i = 0; i < n; ++i) carried[i] = ctx.input(2 + i);
  std::vector<std::vector<Tensor>> scans(k);
  const std::vector<const Tensor*> captured = captured_inputs(ctx, "body");
  Body body(g, node.label() + " body", ctx.threads());
  int64_t i = 0;
  for (; i < trips && cond; ++i) {
    Tensor iter = Tensor::scalar<int64_t>(DType::Int64, i);
    Tensor c = Tensor::scalar<bool>(DType::Bool, cond);
    std::vector<const Tensor*> ins = {&iter, &c};
    for (const auto& t : carried) ins.push_back(&t);
    std::vector<Tensor> out = body.run(ins, captured);
    if (has_cond)
      cond = scalar_condition(out[0], node.label() + ": body output 'cond' of iteration " + std::to_string(i));
    for (size_t j = 0; j < n; ++j) carried[j] = std::move(out[1 + j]);
    for (size_t j = 0; j < k; ++j) scans[j].push_back(std::move(out[1 + n + j]));
  }
  for (size_t j = 0; j < n; ++j) ctx.set_output(j, std::move(carried[j]));
  for (size_t j = 0; j < k; ++j) {
    if (!ctx.output_wanted(n + j)) continue;
    if (!scans[j].empty()) {
      ctx.set_output(n + j, stack_along(scans[j], 0, false, node.label() + ": scan output " + std::to_string(j)));
      continue;
    }
    // No iteration: an empty stack of the body's declared per-iteration shape.
    const ir::ValueInfo& vi = g.outputs[1 + n + j];
    if (vi.dtype == DType::Undefined)
      fail(node.label(), ": the loop ran no iteration and the body does not declare the type of scan output '", vi.name,
           "'");
    Shape s = {0};
    for (const auto& d : vi.shape) s.push_back(d.fixed() ? d.value : 0);
    ctx.allocate_output(n + j, vi.dtype, s);
  }
}

bool loop_draws_random(const ir::Node& node) { return body_draws_random(subgraph(node, "body")); }

}  // namespace

void register_if_loop(OpRegistry& r) {
  r.add({"", "If", 1, INT_MAX, if_kernel, check_if, nullptr, {}, if_draws_random});
  // M (the trip count) is read as structure; the condition and the carried values are data.
  r.add({"",
         "Loop",
         1,
         INT_MAX,
         loop_kernel,
         check_loop,
         nullptr,
         {InputRole::kShape, InputRole::kData},
         loop_draws_random});
}

}  // namespace reforge::ops::control
