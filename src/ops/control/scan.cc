// Scan: opset 8 (a batch axis 0, the sequence on axis 1, optional sequence_lens) and opsets 9+
// (no batch axis; scan_input_axes, scan_input_directions, scan_output_axes,
// scan_output_directions).
#include <climits>
#include <string>
#include <vector>

#include "ir/subgraph.h"
#include "ops/control/body.h"
#include "ops/control/control.h"

namespace reforge::ops::control {
namespace {

// Normalized per-input (or per-output) attribute values: `values` of length `count`, or all
// `def` when absent.
std::vector<int64_t> per_value(const ir::Node& node, const char* attr, size_t count, int64_t def) {
  std::vector<int64_t> v = node.attr_ints(attr, {});
  if (v.empty()) return std::vector<int64_t>(count, def);
  if (v.size() != count)
    fail(node.label(), ": attribute '", attr, "' has ", v.size(), " entries, ", count, " are needed");
  return v;
}

// (N states, M scan inputs, K scan outputs) of the node; the body's inputs are N + M, its
// outputs N + K. `leading` is 1 for opset 8's sequence_lens.
struct ScanShape {
  size_t n = 0, m = 0, k = 0;
};

std::string scan_shape(const ir::Node& node, size_t leading, ScanShape& s) {
  const ir::Attribute* a = node.attr("body");
  if (!a || a->type != ir::AttrType::Graph || !a->g) return "graph attribute 'body' is required";
  const ir::Graph& g = *a->g;
  const int64_t m = node.attr_int("num_scan_inputs", -1);
  const size_t declared = ir::num_declared_inputs(node);
  if (m < 1) return "attribute 'num_scan_inputs' must be at least 1";
  if (declared < leading + static_cast<size_t>(m))
    return "the node has " + std::to_string(declared) + " inputs, fewer than its " + std::to_string(m) + " scan inputs";
  s.m = static_cast<size_t>(m);
  s.n = declared - leading - s.m;
  if (node.outputs.size() < s.n)
    return "the node has " + std::to_string(node.outputs.size()) + " outputs, fewer than its " + std::to_string(s.n) +
           " state values";
  s.k = node.outputs.size() - s.n;
  if (g.inputs.size() != s.n + s.m)
    return "body has " + std::to_string(g.inputs.size()) + " inputs; " + std::to_string(s.n) + " states and " +
           std::to_string(s.m) + " scan inputs need " + std::to_string(s.n + s.m);
  if (g.outputs.size() != s.n + s.k)
    return "body has " + std::to_string(g.outputs.size()) + " outputs; the node's " +
           std::to_string(node.outputs.size()) + " outputs need " + std::to_string(s.n + s.k);
  return "";
}

std::string check_scan(const ir::Node& node) {
  ScanShape s;
  std::string why = scan_shape(node, node.opset < 9 ? 1 : 0, s);
  return why.empty() ? why_body_unsupported(subgraph(node, "body")) : why;
}

bool scan_draws_random(const ir::Node& node) { return body_draws_random(subgraph(node, "body")); }

int64_t axis_in(const ir::Node& node, int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank) fail(node.label(), ": ", what, " ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

void scan9_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  ScanShape s;
  const std::string why = scan_shape(node, 0, s);
  if (!why.empty()) fail(node.label(), ": ", why);
  const std::vector<int64_t> in_axes = per_value(node, "scan_input_axes", s.m, 0);
  const std::vector<int64_t> in_dirs = per_value(node, "scan_input_directions", s.m, 0);
  const std::vector<int64_t> out_axes = per_value(node, "scan_output_axes", s.k, 0);
  const std::vector<int64_t> out_dirs = per_value(node, "scan_output_directions", s.k, 0);
  int64_t length = -1;
  std::vector<int64_t> axes(s.m);
  for (size_t j = 0; j < s.m; ++j) {
    const Tensor& x = ctx.input(s.n + j);
    axes[j] = axis_in(node, in_axes[j], x.rank(), "scan_input_axes entry");
    const int64_t len = x.dim(axes[j]);
    if (length >= 0 && len != length)
      fail(node.label(), ": scan input ", j, " has ", len, " steps along its scan axis, scan input 0 has ", length);
    length = len;
  }
  std::vector<Tensor> states(s.n);
  for (size_t i = 0; i < s.n; ++i) states[i] = ctx.input(i);
  std::vector<std::vector<Tensor>> scans(s.k);
  const std::vector<const Tensor*> captured = captured_inputs(ctx, "body");
  Body body(subgraph(node, "body"), node.label() + " body", ctx.threads());
  for (int64_t t = 0; t < length; ++t) {
    std::vector<Tensor> slices(s.m);
    for (size_t j = 0; j < s.m; ++j)
      slices[j] = slice_along(ctx.input(s.n + j), axes[j], in_dirs[j] != 0 ? length - 1 - t : t);
    std::vector<const Tensor*> ins;
    for (const auto& x : states) ins.push_back(&x);
    for (const auto& x : slices) ins.push_back(&x);
    std::vector<Tensor> out = body.run(ins, captured);
    for (size_t i = 0; i < s.n; ++i) states[i] = std::move(out[i]);
    for (size_t j = 0; j < s.k; ++j) scans[j].push_back(std::move(out[s.n + j]));
  }
  for (size_t i = 0; i < s.n; ++i) ctx.set_output(i, std::move(states[i]));
  for (size_t j = 0; j < s.k; ++j) {
    if (!ctx.output_wanted(s.n + j)) continue;
    if (scans[j].empty()) fail(node.label(), ": the scan inputs have no steps, so scan output ", j, " has no shape");
    const int64_t axis = axis_in(node, out_axes[j], scans[j][0].rank() + 1, "scan_output_axes entry");
    ctx.set_output(s.n + j,
                   stack_along(scans[j], axis, out_dirs[j] != 0, node.label() + ": scan output " + std::to_string(j)));
  }
}

// Opset 8: every state and scan input has a batch axis 0; scan inputs have the sequence on axis 1.
// Each batch entry is scanned separately over its own length (sequence_lens, default the whole
// axis); scan outputs past an entry's length are zeros.
void scan8_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  ScanShape s;
  const std::string why = scan_shape(node, 1, s);
  if (!why.empty()) fail(node.label(), ": ", why);
  const std::vector<int64_t> dirs = per_value(node, "directions", s.m, 0);
  if (s.m == 0) fail(node.label(), ": no scan inputs");
  const Tensor& first = ctx.input(1 + s.n);
  if (first.rank() < 2)
    fail(node.label(), ": scan input 0 must have a batch and a sequence axis, got ", first.describe());
  const int64_t batch = first.dim(0), max_len = first.dim(1);
  for (size_t j = 0; j < s.m; ++j) {
    const Tensor& x = ctx.input(1 + s.n + j);
    if (x.rank() < 2 || x.dim(0) != batch || x.dim(1) != max_len)
      fail(node.label(), ": scan input ", j, " is ", x.describe(), ", scan input 0 is ", first.describe(),
           " (batch and sequence axes must agree)");
  }
  for (size_t i = 0; i < s.n; ++i)
    if (ctx.input(1 + i).rank() < 1 || ctx.input(1 + i).dim(0) != batch)
      fail(node.label(), ": state ", i, " is ", ctx.input(1 + i).describe(), ", it needs the batch axis of ", batch);
  std::vector<int64_t> lens(static_cast<size_t>(batch), max_len);
  if (ctx.has_input(0)) {
    const Tensor& sl = ctx.input(0);
    if (sl.numel() != batch) fail(node.label(), ": sequence_lens is ", sl.describe(), ", the batch is ", batch);
    for (int64_t b = 0; b < batch; ++b) {
      lens[static_cast<size_t>(b)] = sl.as_int64(b);
      if (lens[static_cast<size_t>(b)] < 0 || lens[static_cast<size_t>(b)] > max_len)
        fail(node.label(), ": sequence_lens[", b, "] = ", lens[static_cast<size_t>(b)], " is outside [0, ", max_len,
             "]");
    }
  }
  const std::vector<const Tensor*> captured = captured_inputs(ctx, "body");
  Body body(subgraph(node, "body"), node.label() + " body", ctx.threads());
  std::vector<std::vector<Tensor>> final_states(s.n), scan_rows(s.k);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Tensor> states(s.n);
    for (size_t i = 0; i < s.n; ++i) states[i] = slice_along(ctx.input(1 + i), 0, b);
    std::vector<Tensor> rows(s.m);
    for (size_t j = 0; j < s.m; ++j) rows[j] = slice_along(ctx.input(1 + s.n + j), 0, b);
    const int64_t len = lens[static_cast<size_t>(b)];
    std::vector<std::vector<Tensor>> steps(s.k);
    for (int64_t t = 0; t < len; ++t) {
      std::vector<Tensor> slices(s.m);
      for (size_t j = 0; j < s.m; ++j) slices[j] = slice_along(rows[j], 0, dirs[j] != 0 ? len - 1 - t : t);
      std::vector<const Tensor*> ins;
      for (const auto& x : states) ins.push_back(&x);
      for (const auto& x : slices) ins.push_back(&x);
      std::vector<Tensor> out = body.run(ins, captured);
      for (size_t i = 0; i < s.n; ++i) states[i] = std::move(out[i]);
      for (size_t j = 0; j < s.k; ++j) steps[j].push_back(std::move(out[s.n + j]));
    }
    for (size_t i = 0; i < s.n; ++i) final_states[i].push_back(std::move(states[i]));
    for (size_t j = 0; j < s.k; ++j) {
      if (steps[j].empty())
        fail(node.label(), ": batch entry ", b, " has no steps, so scan output ", j, " has no shape");
      // Pad to the longest sequence with zeros.
      while (static_cast<int64_t>(steps[j].size()) < max_len)
        steps[j].push_back(Tensor::empty(steps[j][0].dtype(), steps[j][0].shape()));
      scan_rows[j].push_back(stack_along(steps[j], 0, false, node.label() + ": scan output " + std::to_string(j)));
    }
  }
  for (size_t i = 0; i < s.n; ++i)
    ctx.set_output(i, stack_along(final_states[i], 0, false, node.label() + ": state " + std::to_string(i)));
  for (size_t j = 0; j < s.k; ++j)
    if (ctx.output_wanted(s.n + j))
      ctx.set_output(s.n + j, stack_along(scan_rows[j], 0, false, node.label() + ": scan output " + std::to_string(j)));
}

}  // namespace

void register_scan(OpRegistry& r) {
  // Opset 8's first input is sequence_lens (per batch entry; data, not structure: a length per
  // row); every other input is data.
  r.add({"", "Scan", 8, 8, scan8_kernel, check_scan, nullptr, {}, scan_draws_random});
  r.add({"", "Scan", 9, INT_MAX, scan9_kernel, check_scan, nullptr, {}, scan_draws_random});
}

}  // namespace reforge::ops::control
