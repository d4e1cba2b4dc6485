// fuse-conv-activation: a Conv followed by a residual Add and/or a Relu becomes one
// reforge::FusedConv (src/ops/conv.cc), which runs the add and the ReLU as post-ops of the
// oneDNN convolution instead of as two more passes over the activations:
//
//   Relu(Conv(X, W, B))           -> FusedConv(X, W, B)     activation = "Relu"
//   Add(Conv(X, W, B), Z)         -> FusedConv(X, W, B, Z)
//   Relu(Add(Conv(X, W, B), Z))   -> FusedConv(X, W, B, Z)  activation = "Relu"
//
// The weights stay the node's inputs unchanged (no constant is made, so no recipe: a refit
// re-packs them through the op's prepare step), and the pass never reads weight values. The
// intermediate values must have no other reader and not be graph outputs. The fused node takes
// the place of the last node it replaces, where every one of its inputs (Z included) exists.
//
// conv-channels-last: oneDNN runs float convolutions fastest channels-last, and ONNX tensors
// are channels-first, so each convolution would reorder its input and its output. A value
// produced by a 2-D float32 convolution and read only by such convolutions (as X or as the
// residual Z) is kept [N, H, W, C] instead: its producer gets y_layout = "NHWC" and its readers
// x_layout / z_layout = "NHWC" (plain Convs involved become FusedConvs). A 2-D MaxPool between
// such convolutions becomes reforge::MaxPool with layout = "NHWC". ResNet-style networks then
// reorder once on the way in and once on the way out. Only weight shapes are read.
#include "passes/build_state.h"

namespace reforge::passes {

namespace {

bool is_op(const ir::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

// The one node reading `value` (its index), or -1 when it has several readers, none, or is a
// graph output.
int64_t sole_reader(const ir::Graph& g, const std::map<std::string, int>& uses, const std::string& value) {
  auto u = uses.find(value);
  if (u == uses.end() || u->second != 1) return -1;
  for (const auto& o : g.outputs)
    if (o.name == value) return -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs)
      if (in == value) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace

void fuse_conv_activation(BuildState& s) {
  auto uses = s.use_counts();
  ir::Graph& g = s.graph;
  std::vector<bool> erase(g.nodes.size(), false);
  for (size_t ci = 0; ci < g.nodes.size(); ++ci) {
    if (erase[ci] || !is_op(g.nodes[ci], "Conv") || g.nodes[ci].outputs.size() != 1) continue;
    if (g.nodes[ci].inputs.size() < 2 || g.nodes[ci].inputs.size() > 3) continue;
    const std::string conv_out = g.nodes[ci].outputs[0];
    int64_t next = sole_reader(g, uses, conv_out);
    if (next < 0 || erase[static_cast<size_t>(next)]) continue;
    std::string sum;
    bool relu = false;
    size_t last = static_cast<size_t>(next);
    std::vector<size_t> absorbed;
    const ir::Node* n = &g.nodes[last];
    if (is_op(*n, "Add") && n->inputs.size() == 2 && n->outputs.size() == 1) {
      const std::string& other = n->inputs[0] == conv_out ? n->inputs[1] : n->inputs[0];
      if (other == conv_out || other.empty()) continue;
      sum = other;
      absorbed.push_back(last);
      const int64_t r = sole_reader(g, uses, n->outputs[0]);
      if (r >= 0 && !erase[static_cast<size_t>(r)] && is_op(g.nodes[static_cast<size_t>(r)], "Relu")) {
        relu = true;
        last = static_cast<size_t>(r);
        absorbed.push_back(last);
      }
    } else if (is_op(*n, "Relu") && n->inputs.size() == 1 && n->outputs.size() == 1) {
      relu = true;
      absorbed.push_back(last);
    } else {
      continue;
    }
    ir::Node fused = g.nodes[ci];
    fused.op_type = "FusedConv";
    fused.domain = "reforge";
    fused.opset = 1;
    if (!sum.empty()) {
      fused.inputs.resize(3);  // "" = no bias
      fused.inputs.push_back(sum);
    }
    if (relu) fused.attrs["activation"] = ir::string_attr("activation", "Relu");
    fused.outputs = {g.nodes[last].outputs[0]};
    for (size_t a : absorbed) erase[a] = true;
    erase[ci] = true;
    erase[last] = false;
    g.nodes[last] = std::move(fused);
  }
  std::vector<ir::Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!erase[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
}

void conv_channels_last(BuildState& s) {
  ir::Graph& g = s.graph;
  // Convolutions: 2-D with constant float32 weights (so X is [N, C, H, W]). Pools: 2-D MaxPool
  // without Indices, which pass the layout through (input and output NHWC together).
  auto is_conv = [&](const ir::Node& n) {
    const bool conv = is_op(n, "Conv") && n.inputs.size() >= 2 && n.inputs.size() <= 3;
    const bool fused = n.domain == "reforge" && n.op_type == "FusedConv" && n.inputs.size() >= 2;
    if ((!conv && !fused) || n.outputs.size() != 1) return false;
    auto w = s.consts.find(n.inputs[1]);
    return w != s.consts.end() && w->second.value.dtype() == DType::Float32 && w->second.value.rank() == 4;
  };
  auto is_pool = [&](const ir::Node& n) {
    return is_op(n, "MaxPool") && n.inputs.size() == 1 && (n.outputs.size() == 1 || n.outputs[1].empty()) &&
           n.attr_ints("kernel_shape").size() == 2;
  };
  const size_t count = g.nodes.size();
  std::vector<char> conv(count), pool(count);
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < count; ++i) {
    conv[i] = is_conv(g.nodes[i]);
    pool[i] = !conv[i] && is_pool(g.nodes[i]);
    if (conv[i] || pool[i]) producer[g.nodes[i].outputs[0]] = i;
  }
  // A value goes channels-last when its producer is one of those and every reader reads it as X
  // (or a convolution's Z); a pool's input and output then decide together.
  std::map<std::string, bool> last;
  for (const auto& [v, i] : producer) last[v] = true;
  for (const auto& o : g.outputs) last.erase(o.name);
  for (size_t i = 0; i < count; ++i)
    for (size_t k = 0; k < g.nodes[i].inputs.size(); ++k) {
      auto it = last.find(g.nodes[i].inputs[k]);
      if (it != last.end() && !((conv[i] && (k == 0 || k == 3)) || (pool[i] && k == 0))) it->second = false;
    }
  auto nhwc = [&](const std::string& v) {
    auto it = last.find(v);
    return it != last.end() && it->second;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < count; ++i) {
      if (!pool[i]) continue;
      const std::string& in = g.nodes[i].inputs[0];
      const std::string& out = g.nodes[i].outputs[0];
      if (nhwc(in) != nhwc(out)) {
        if (last.count(in) && last[in]) last[in] = false, changed = true;
        if (last.count(out) && last[out]) last[out] = false, changed = true;
      }
    }
  }
  for (size_t i = 0; i < count; ++i) {
    ir::Node& n = g.nodes[i];
    if (pool[i]) {
      if (!nhwc(n.outputs[0])) continue;
      n.domain = "reforge";
      n.opset = 1;
      n.outputs.resize(1);
      n.attrs["layout"] = ir::string_attr("layout", "NHWC");
      continue;
    }
    if (!conv[i]) continue;
    const bool x = nhwc(n.inputs[0]), y = nhwc(n.outputs[0]), z = n.inputs.size() > 3 && nhwc(n.inputs[3]);
    if (!x && !y && !z) continue;
    if (n.domain.empty()) {
      n.op_type = "FusedConv";
      n.domain = "reforge";
      n.opset = 1;
    }
    if (x) n.attrs["x_layout"] = ir::string_attr("x_layout", "NHWC");
    if (y) n.attrs["y_layout"] = ir::string_attr("y_layout", "NHWC");
    if (z) n.attrs["z_layout"] = ir::string_attr("z_layout", "NHWC");
  }
}

}  // namespace reforge::passes
