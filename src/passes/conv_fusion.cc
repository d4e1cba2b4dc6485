// fuse-conv-activation: a Conv followed by a residual Add and/or a Relu becomes one
// reforge::FusedConv (src/backends/cpu/conv.cc), which runs the add and the ReLU as post-ops of the
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
// conv-channels-last: oneDNN computes float convolutions in a channel-blocked layout
// ([N, C/b, H, W, b], b = 8 with AVX2, 16 with AVX-512: see cpu::ActLayout), and ONNX tensors
// are NCHW, so each convolution would reorder its input, its residual and its output. A value
// produced by a 2-D float32 convolution and read only by such convolutions (as X or as the
// residual Z) is kept blocked instead: its producer gets y_layout = "NCHWc" and its readers
// x_layout / z_layout = "NCHWc" (plain Convs involved become FusedConvs). A 2-D MaxPool between
// such convolutions becomes reforge::MaxPool with layout = "NCHWc". ResNet-style networks then
// reorder once on the way in and once on the way out, as with ONNX Runtime's NCHWc transformer.
// ("NCHWc" means oneDNN's native layout on the CPU that runs the plan: blocked where its direct
// kernels compute blocked, NHWC or NCHW where it prefers those; see cpu::native_layout.)
// A value whose channel count is not a multiple of 16 (any block size divides it then) is kept
// channels-last ("NHWC") instead, which still spares oneDNN's reorders of plain NCHW rows for
// most kernels. Only weight shapes are read.
//
// conv-residual-inplace: a FusedConv's sum post-op adds the residual Z to what the output
// buffer holds, so the kernel must first copy Z into its fresh output. When no later node reads
// Z and Z owns its buffer, the node gets z_inplace = 1 and writes its output over Z instead.
// Z qualifies when it is made by a convolution or pool (whose outputs never alias another
// value), is no graph input, output or constant, is not another input of the node, and every
// other reader is such a convolution or pool that runs before the node in any order (an
// ancestor of it). The arena sees the output as a view of Z and extends Z's lifetime.
#include <set>

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
  // Channel counts (a convolution's output channels, passed through pools) pick the layout.
  std::map<std::string, int64_t> channels;
  for (size_t i = 0; i < count; ++i) {
    const ir::Node& n = g.nodes[i];
    if (conv[i]) channels[n.outputs[0]] = s.consts.at(n.inputs[1]).value.dim(0);
    if (pool[i] && channels.count(n.inputs[0])) channels[n.outputs[0]] = channels[n.inputs[0]];
  }
  auto layout_of = [&](const std::string& v) -> std::string {
    if (!nhwc(v)) return "";
    auto c = channels.find(v);
    return c != channels.end() && c->second % 16 == 0 ? "NCHWc" : "NHWC";
  };
  auto set = [](ir::Node& n, const char* attr, const std::string& l) {
    if (!l.empty()) n.attrs[attr] = ir::string_attr(attr, l);
  };
  for (size_t i = 0; i < count; ++i) {
    ir::Node& n = g.nodes[i];
    if (pool[i]) {
      const std::string l = layout_of(n.outputs[0]);
      if (l.empty()) continue;
      n.domain = "reforge";
      n.opset = 1;
      n.outputs.resize(1);
      set(n, "layout", l);
      continue;
    }
    if (!conv[i]) continue;
    const std::string x = layout_of(n.inputs[0]), y = layout_of(n.outputs[0]);
    const std::string z = n.inputs.size() > 3 ? layout_of(n.inputs[3]) : "";
    if (x.empty() && y.empty() && z.empty()) continue;
    if (n.domain.empty()) {
      n.op_type = "FusedConv";
      n.domain = "reforge";
      n.opset = 1;
    }
    set(n, "x_layout", x), set(n, "y_layout", y), set(n, "z_layout", z);
  }
}

void conv_residual_inplace(BuildState& s) {
  // A subgraph's reads of outer values are inputs of its node (ir/subgraph.h), so `readers` sees
  // them: a control-flow node reading z keeps the convolution out of place.
  ir::Graph& g = s.graph;
  auto fresh_output = [](const ir::Node& n) {  // kernels whose output never aliases another value
    return (n.domain.empty() && (n.op_type == "Conv" || n.op_type == "MaxPool")) ||
           (n.domain == "reforge" && (n.op_type == "FusedConv" || n.op_type == "MaxPool"));
  };
  std::map<std::string, size_t> producer;
  std::map<std::string, std::vector<size_t>> readers;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty()) readers[in].push_back(i);
  }
  std::set<std::string> boundary;  // graph inputs and outputs
  for (const auto& v : g.inputs) boundary.insert(v.name);
  for (const auto& v : g.outputs) boundary.insert(v.name);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    ir::Node& n = g.nodes[i];
    if (n.domain != "reforge" || n.op_type != "FusedConv" || n.inputs.size() < 4 || n.inputs[3].empty()) continue;
    const std::string& z = n.inputs[3];
    if (boundary.count(z) || s.is_const(z) || g.initializers.count(z)) continue;
    auto p = producer.find(z);
    if (p == producer.end() || !fresh_output(g.nodes[p->second])) continue;
    bool ok = true;
    for (size_t k = 0; k < 3 && ok; ++k) ok = n.inputs[k] != z;
    // Ancestors of the node: everything its inputs are computed from.
    std::set<size_t> ancestors;
    std::vector<size_t> todo = {i};
    while (!todo.empty() && ok) {
      const size_t at = todo.back();
      todo.pop_back();
      for (const auto& in : g.nodes[at].inputs) {
        auto q = producer.find(in);
        if (q != producer.end() && ancestors.insert(q->second).second) todo.push_back(q->second);
      }
    }
    for (size_t r : readers[z]) {
      if (!ok) break;
      if (r == i) continue;
      ok = ancestors.count(r) && fresh_output(g.nodes[r]);
    }
    size_t reads = 0;
    for (const auto& in : n.inputs) reads += in == z;
    if (ok && reads == 1) n.attrs["z_inplace"] = ir::int_attr("z_inplace", 1);
  }
}

}  // namespace reforge::passes
