// Structural fusions of the transformer patterns that PyTorch exporters (1.13's TorchScript
// exporter and 2.x's dynamo exporter) decompose into primitive ops. None of them changes a weight:
// weights stay node inputs of the fused operator, so no recipe is recorded. Scalar constants that
// define the pattern (an exponent 2, sqrt(2), 0.5) are checked before rewriting; a fusion that
// would drop a refittable constant from the graph does not happen (GraphIndex::specializable),
// and the ones a kernel can honour at any value (RMSNorm's eps and exponent, GELU's constants,
// the attention scale, a mask fill value) stay inputs of the fused node so that a refit still
// reaches them.
//
// fuse-rms-norm:  x * (1 / sqrt(mean(x^2, -1) + eps)) [* w]  ->  reforge::RmsNorm(x, w, eps, p, n)
// fuse-rms-norm-cast: a 16-bit model's Cast(float32) -> reforge::RmsNorm -> Cast(back) -> Mul(w)
//                                                         ->  RMSNormalization-23(x, w)
// fuse-add-rms-norm: RMSNormalization-23(a + b, scale), a and b of one type and shape (a residual
//                 sum, which the graph reads again)     ->  reforge::AddRmsNorm(a, scale, b) -> (y, a + b)
// fuse-gelu:      x * 0.5 * (1 + erf(x / sqrt 2))           ->  reforge::Gelu(x)
//                 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  ->  reforge::Gelu(x, approximate=tanh)
//                 (Gelu-20's semantics, with the decomposition's accuracy: see gelu_fast.cc)
// fuse-silu:      x * sigmoid(x) [* u]                      ->  reforge::Silu(x) / reforge::SiluMul(x, u)
// fuse-attention: softmax(mask(scale(Q K^T))) V with the K transpose, the grouped-query
//                 repeat_kv (Unsqueeze/Expand/Reshape) and the head transposes of Q, V and the
//                 output absorbed                         ->  reforge::Attention
//                 also PyTorch's scaled_dot_product_attention decomposition: (Q c1)(K^T c2), each
//                 side scaled by sqrt(scale) (scale_op 'mul_qk', K^T possibly through a Reshape
//                 to its own shape), and Where(IsNaN(P), 0, P) after the softmax (softmax_nan
//                 'zero')
// fuse-layer-norm: (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * g [+ b]
//                                                         ->  LayerNormalization-17(x, g, b)
// fuse-rotary:    x * cos + concat(-x[..., h:], x[..., :h]) * sin (rotate_half), with the head
//                 transpose of x absorbed               ->  reforge::Rotary(x, cos, sin)
// fuse-attention and fuse-rotary make a fused node only where the target backend's kernel takes
// it (passes/backend_verdict.h: its checker and its shape check on the inferred input types);
// elsewhere the unfused ops stay.
#include <algorithm>
#include <set>
#include <tuple>

#include "passes/backend_verdict.h"
#include "passes/pattern.h"

namespace reforge::passes {

namespace {

bool is(const ir::Node* n, const char* op) { return n && n->op_type == op && n->domain.empty(); }

// Axes of a Reduce* node (attribute before opset 18, input from 18 on); nullopt when unknown.
std::optional<std::vector<int64_t>> reduce_axes(const GraphIndex& g, const ir::Node& n) {
  if (n.opset < 18 || n.op_type != "ReduceMean") {
    if (n.inputs.size() > 1 && !n.inputs[1].empty()) return g.ints(n.inputs[1]);
    if (!n.has_attr("axes")) return std::nullopt;
    return n.attr_ints("axes");
  }
  if (n.inputs.size() < 2 || n.inputs[1].empty()) return std::nullopt;
  return g.ints(n.inputs[1]);
}

bool reduces_last_axis(const GraphIndex& g, const ir::Node& n) {
  if (n.attr_int("keepdims", 1) != 1) return false;
  auto axes = reduce_axes(g, n);
  return axes && axes->size() == 1 && (*axes)[0] == -1;
}

// Given a value `a` that must be multiplied by x and 0.5 (in any order, in at most two Mul
// nodes with single-use intermediates), returns the node producing the final product and the
// name of the 0.5 constant, and records the intermediate nodes; nullptr when the shape does not
// match.
ir::Node* product_with_x_and_half(GraphIndex& g, const std::string& a, const std::string& x,
                                  std::vector<ir::Node*>& matched, std::string& half_name) {
  ir::Node* m1 = g.sole_consumer(a);
  if (!is(m1, "Mul")) return nullptr;
  const std::string o1 = other_input(*m1, a);
  if (o1.empty()) return nullptr;
  if (o1 == x || g.near(o1, 0.5)) {
    ir::Node* m2 = g.sole_consumer(m1->outputs[0]);
    if (!is(m2, "Mul")) return nullptr;
    const std::string o2 = other_input(*m2, m1->outputs[0]);
    bool ok = (o1 == x && g.near(o2, 0.5)) || (o1 != x && o2 == x);
    if (!ok) return nullptr;
    half_name = o1 == x ? o2 : o1;
    matched.push_back(m1);
    return m2;
  }
  ir::Node* half = g.producer(o1, "Mul");
  if (!half || !g.single_use(o1)) return nullptr;
  const std::string h = other_input(*half, x);
  if (h.empty() || !g.near(h, 0.5)) return nullptr;
  half_name = h;
  matched.push_back(half);
  return m1;
}

}  // namespace

void fuse_rms_norm(BuildState& s) {
  GraphIndex g(s);
  const size_t n_nodes = s.graph.nodes.size();
  std::vector<std::pair<size_t, ir::Node>> replace;
  for (size_t i = 0; i < n_nodes; ++i) {
    ir::Node* rm = &s.graph.nodes[i];
    if (!is(rm, "ReduceMean") || g.dead(i) || !reduces_last_axis(g, *rm)) continue;
    std::vector<ir::Node*> matched = {rm};
    // x^2: Pow(x, p) or Mul(x, x).
    const std::string sq = rm->inputs[0];
    ir::Node* sqn = g.producer(sq);
    if (!sqn || !g.single_use(sq)) continue;
    std::string x, exponent;
    if (is(sqn, "Pow") && sqn->inputs.size() == 2) {
      x = sqn->inputs[0];
      exponent = sqn->inputs[1];
      auto p = g.scalar(exponent);
      if (!p || *p != 2.0) continue;
      if (g.specializable(exponent)) exponent = "";  // the kernel's default: 2
    } else if (is(sqn, "Mul") && sqn->inputs.size() == 2 && sqn->inputs[0] == sqn->inputs[1]) {
      x = sqn->inputs[0];
    } else {
      continue;
    }
    matched.push_back(sqn);
    // + eps
    ir::Node* add = g.sole_consumer(rm->outputs[0]);
    if (!is(add, "Add")) continue;
    const std::string eps = other_input(*add, rm->outputs[0]);
    auto eps_v = g.scalar(eps);
    if (!eps_v || g.const_dtype(eps) != DType::Float32 || *eps_v < 0) continue;
    matched.push_back(add);
    ir::Node* sqrt = g.sole_consumer(add->outputs[0]);
    if (!is(sqrt, "Sqrt")) continue;
    matched.push_back(sqrt);
    // 1 / sqrt (Reciprocal or Div(n, .)) then x * that; or x / sqrt directly.
    ir::Node* c = g.sole_consumer(sqrt->outputs[0]);
    std::string numerator;
    ir::Node* y = nullptr;
    if (is(c, "Reciprocal")) {
      matched.push_back(c);
      y = g.sole_consumer(c->outputs[0]);
      if (!is(y, "Mul") || other_input(*y, c->outputs[0]) != x) continue;
    } else if (is(c, "Div") && c->inputs[1] == sqrt->outputs[0] && c->inputs[0] == x) {
      y = c;
    } else if (is(c, "Div") && c->inputs[1] == sqrt->outputs[0]) {
      numerator = c->inputs[0];
      auto nv = g.scalar(numerator);
      if (!nv || g.const_dtype(numerator) != DType::Float32) continue;
      if (g.scalar_is(numerator, 1.0, 0.0)) numerator = "";
      matched.push_back(c);
      y = g.sole_consumer(c->outputs[0]);
      if (!is(y, "Mul") || other_input(*y, c->outputs[0]) != x) continue;
    } else {
      continue;
    }
    // Optional weight: Mul(y, w) with a constant float32 w shaped [..1.., N].
    std::string w;
    ir::Node* last = y;
    if (ir::Node* mw = g.sole_consumer(y->outputs[0]); is(mw, "Mul")) {
      const std::string cand = other_input(*mw, y->outputs[0]);
      if (g.is_const(cand) && s.consts.at(cand).value.dtype() == DType::Float32) {
        const Tensor& t = s.consts.at(cand).value;
        bool vec = t.rank() >= 1;
        for (int64_t d = 0; vec && d + 1 < t.rank(); ++d) vec = t.dim(d) == 1;
        if (vec) {
          matched.push_back(y);
          w = cand;
          last = mw;
        }
      }
    }
    ir::Node f = make_node(*last, "reforge", "RmsNorm", 1);
    f.inputs = {x, w, eps, exponent, numerator};
    while (!f.inputs.empty() && f.inputs.back().empty()) f.inputs.pop_back();
    f.outputs = {last->outputs[0]};
    for (ir::Node* m : matched) g.kill(m);
    replace.emplace_back(g.index_of(last), std::move(f));
  }
  for (auto& [idx, f] : replace) s.graph.nodes[idx] = std::move(f);
  g.sweep();
}

// A 16-bit model's RMSNorm as Hugging Face writes it (LlamaRMSNorm and its kin): the input cast
// to float32, normalized there, cast back and multiplied by the weight in the 16-bit type,
//   Cast(x: T -> float32) -> reforge::RmsNorm(., eps) -> Cast(. -> T) -> Mul(., w: T)
// is ONNX's RMSNormalization-23(x, w, epsilon, stash_type float32) exactly: the normalization in
// float32 rounded to x's type, then times the scale rounded to the scale's type. One kernel
// instead of four. Only where eps cannot change at refit (it becomes an attribute); the weight
// stays an input.
void fuse_rms_norm_cast(BuildState& s) {
  GraphIndex g(s);
  BackendVerdict verdict(s);
  std::vector<std::pair<size_t, ir::Node>> replace;
  for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
    ir::Node* norm = &s.graph.nodes[i];
    if (g.dead(i) || norm->domain != "reforge" || norm->op_type != "RmsNorm") continue;
    // No weight, exponent or numerator of its own: x * (1 / sqrt(mean(x^2) + eps)).
    if (norm->inputs.size() != 3 || !norm->inputs[1].empty() || !g.specializable(norm->inputs[2])) continue;
    const std::optional<double> eps = g.scalar(norm->inputs[2]);
    if (!eps) continue;
    ir::Node* up = g.producer(norm->inputs[0], "Cast");
    if (!up || !g.single_use(norm->inputs[0]) || up->attr_int("to", 0) != static_cast<int64_t>(DType::Float32))
      continue;
    const ops::ValueType* xt = verdict.type_of(up->inputs[0]);
    if (!xt || (xt->dtype != DType::BFloat16 && xt->dtype != DType::Float16)) continue;
    ir::Node* down = g.sole_consumer(norm->outputs[0]);
    if (!is(down, "Cast") || down->attr_int("to", 0) != static_cast<int64_t>(xt->dtype)) continue;
    ir::Node* mul = g.sole_consumer(down->outputs[0]);
    if (!is(mul, "Mul")) continue;
    const std::string w = other_input(*mul, down->outputs[0]);
    if (!g.is_const(w) || g.const_dtype(w) != xt->dtype) continue;
    const Tensor& wt = s.consts.at(w).value;
    if (wt.rank() != 1 || !xt->rank_known || xt->shape.empty() || !xt->shape.back().known() ||
        xt->shape.back().value() != wt.dim(0))
      continue;
    ir::Node f = make_node(*mul, "", "RMSNormalization", 23);
    f.inputs = {up->inputs[0], w};
    f.outputs = {mul->outputs[0]};
    f.attrs["axis"] = ir::int_attr("axis", -1);
    f.attrs["epsilon"] = ir::float_attr("epsilon", static_cast<float>(*eps));
    f.attrs["stash_type"] = ir::int_attr("stash_type", static_cast<int64_t>(DType::Float32));
    if (verdict.declines(f)) continue;
    for (ir::Node* m : {up, norm, down}) g.kill(m);
    replace.emplace_back(g.index_of(mul), std::move(f));
  }
  for (auto& [idx, f] : replace) s.graph.nodes[idx] = std::move(f);
  g.sweep();
}

// The constants are checked by value; when any of them may change at refit (a float
// initializer in a refittable build), all of them stay inputs of the fused node, whose kernel
// then evaluates the formula with whatever values they hold.
void fuse_gelu(BuildState& s) {
  GraphIndex g(s);
  std::vector<std::pair<size_t, ir::Node>> replace;
  for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
    ir::Node* core = &s.graph.nodes[i];
    if (g.dead(i)) continue;
    std::vector<ir::Node*> matched = {core};
    std::string x;
    const char* approx = nullptr;
    std::vector<std::string> params;  // erf: k, one, half; tanh: c1, c2, p, one, half
    std::string k_op;
    if (is(core, "Erf")) {
      // x / sqrt(2) or x * (1 / sqrt(2))
      ir::Node* d = g.producer(core->inputs[0]);
      if (!d || !g.single_use(core->inputs[0])) continue;
      if (is(d, "Div") && g.near(d->inputs[1], std::sqrt(2.0)))
        x = d->inputs[0], params = {d->inputs[1]}, k_op = "div";
      else if (is(d, "Mul") && g.near(d->inputs[1], std::sqrt(0.5)))
        x = d->inputs[0], params = {d->inputs[1]}, k_op = "mul";
      else if (is(d, "Mul") && g.near(d->inputs[0], std::sqrt(0.5)))
        x = d->inputs[1], params = {d->inputs[0]}, k_op = "mul";
      else
        continue;
      matched.push_back(d);
      approx = "none";
    } else if (is(core, "Tanh")) {
      // sqrt(2/pi) * (x + 0.044715 * x^3)
      ir::Node* u = g.producer(core->inputs[0], "Mul");
      if (!u || !g.single_use(core->inputs[0])) continue;
      std::string inner;
      if (g.near(u->inputs[1], std::sqrt(2.0 / M_PI)))
        inner = u->inputs[0], params = {u->inputs[1]};
      else if (g.near(u->inputs[0], std::sqrt(2.0 / M_PI)))
        inner = u->inputs[1], params = {u->inputs[0]};
      else
        continue;
      ir::Node* a = g.producer(inner, "Add");
      if (!a || !g.single_use(inner)) continue;
      bool found = false;
      for (int side = 0; side < 2 && !found; ++side) {
        const std::string cand_x = a->inputs[side], cube_term = a->inputs[1 - side];
        ir::Node* m = g.producer(cube_term, "Mul");
        if (!m || !g.single_use(cube_term)) continue;
        std::string cube, c2;
        if (g.near(m->inputs[1], 0.044715))
          cube = m->inputs[0], c2 = m->inputs[1];
        else if (g.near(m->inputs[0], 0.044715))
          cube = m->inputs[1], c2 = m->inputs[0];
        else
          continue;
        ir::Node* p = g.producer(cube, "Pow");
        if (!p || !g.single_use(cube) || p->inputs[0] != cand_x || !g.near(p->inputs[1], 3.0, 0.0)) continue;
        x = cand_x;
        params.push_back(c2);
        params.push_back(p->inputs[1]);
        matched.insert(matched.end(), {u, a, m, p});
        found = true;
      }
      if (!found) continue;
      approx = "tanh";
    } else {
      continue;
    }
    ir::Node* one = g.sole_consumer(core->outputs[0]);
    if (!is(one, "Add") || !g.near(other_input(*one, core->outputs[0]), 1.0)) continue;
    params.push_back(other_input(*one, core->outputs[0]));
    matched.push_back(one);
    std::string half;
    ir::Node* last = product_with_x_and_half(g, one->outputs[0], x, matched, half);
    if (!last) continue;
    params.push_back(half);
    bool all_fixed = true, all_f32 = true;
    for (const auto& c : params) {
      all_fixed &= g.specializable(c);
      all_f32 &= g.const_dtype(c) == DType::Float32;
    }
    if (!all_fixed && !all_f32) continue;
    const bool fixed = all_fixed;
    ir::Node f = make_node(*last, "reforge", "Gelu", 1);
    f.attrs["approximate"] = ir::string_attr("approximate", approx);
    f.inputs = {x};
    if (!fixed) {
      f.inputs.insert(f.inputs.end(), params.begin(), params.end());
      if (!k_op.empty()) f.attrs["k_op"] = ir::string_attr("k_op", k_op);
    }
    f.outputs = {last->outputs[0]};
    for (ir::Node* m : matched) g.kill(m);
    replace.emplace_back(g.index_of(last), std::move(f));
  }
  for (auto& [idx, f] : replace) s.graph.nodes[idx] = std::move(f);
  g.sweep();
}

void fuse_add_rms_norm(BuildState& s) {
  BackendVerdict verdict(s);
  GraphIndex g(s);
  std::vector<std::pair<size_t, ir::Node>> replace;
  std::set<const ir::Node*> taken;
  for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
    ir::Node* n = &s.graph.nodes[i];
    if (g.dead(i) || !is(n, "RMSNormalization") || n->opset < 23 || n->inputs.size() != 2 || n->outputs.size() != 1)
      continue;
    ir::Node* add = g.producer(n->inputs[0], "Add");
    // The scale exists where the Add is: a constant.
    if (!add || taken.count(add) || add->inputs.size() != 2 || !g.is_const(n->inputs[1])) continue;
    const ops::ValueType* a = verdict.type_of(add->inputs[0]);
    const ops::ValueType* b = verdict.type_of(add->inputs[1]);
    if (!a || !b || !a->rank_known || !b->rank_known || a->dtype != b->dtype || !is_float(a->dtype) ||
        a->shape != b->shape)
      continue;
    ir::Node f = make_node(*n, "reforge", "AddRmsNorm", 1);
    f.inputs = {add->inputs[0], n->inputs[1], add->inputs[1]};
    f.outputs = {n->outputs[0], add->outputs[0]};
    f.attrs = n->attrs;
    if (verdict.declines(f)) continue;
    taken.insert(add);
    g.kill(n);
    replace.emplace_back(g.index_of(add), std::move(f));
  }
  for (auto& [idx, f] : replace) s.graph.nodes[idx] = std::move(f);
  g.sweep();
}

void fuse_silu(BuildState& s) {
  GraphIndex g(s);
  std::vector<std::pair<size_t, ir::Node>> replace;
  for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
    ir::Node* sg = &s.graph.nodes[i];
    if (g.dead(i) || !is(sg, "Sigmoid")) continue;
    const std::string x = sg->inputs[0];
    ir::Node* m = g.sole_consumer(sg->outputs[0]);
    if (!is(m, "Mul") || other_input(*m, sg->outputs[0]) != x) continue;
    std::vector<ir::Node*> matched = {sg};
    ir::Node* last = m;
    std::string u;
    // SwiGLU: silu(x) * u, u any other tensor (the kernel broadcasts when shapes differ).
    if (ir::Node* m2 = g.sole_consumer(m->outputs[0]); is(m2, "Mul")) {
      const std::string cand = other_input(*m2, m->outputs[0]);
      if (!cand.empty() && cand != m->outputs[0]) {
        u = cand;
        matched.push_back(m);
        last = m2;
      }
    }
    ir::Node f = make_node(*last, "reforge", u.empty() ? "Silu" : "SiluMul", 1);
    f.inputs = u.empty() ? std::vector<std::string>{x} : std::vector<std::string>{x, u};
    f.outputs = {last->outputs[0]};
    for (ir::Node* n : matched) g.kill(n);
    replace.emplace_back(g.index_of(last), std::move(f));
  }
  for (auto& [idx, f] : replace) s.graph.nodes[idx] = std::move(f);
  g.sweep();
}

namespace {

bool perm_is(const ir::Node& t, std::vector<int64_t> want) { return t.attr_ints("perm") == want; }

// Unsqueeze(x, [2]) -> Expand(., shape5) -> Reshape(., shape4): repeat_kv of grouped-query
// attention. Returns {x, expand shape, reshape shape} and records the nodes.
struct RepeatKv {
  std::string x, expand_shape, reshape_shape;
  int64_t allowzero = 0;
};
std::optional<RepeatKv> match_repeat_kv(GraphIndex& g, const std::string& v, std::vector<ir::Node*>& matched) {
  ir::Node* rs = g.producer(v, "Reshape");
  if (!rs || rs->inputs.size() < 2) return std::nullopt;
  ir::Node* ex = g.producer(rs->inputs[0], "Expand");
  if (!ex || !g.single_use(rs->inputs[0])) return std::nullopt;
  ir::Node* us = g.producer(ex->inputs[0], "Unsqueeze");
  if (!us || !g.single_use(ex->inputs[0])) return std::nullopt;
  std::optional<std::vector<int64_t>> axes;
  if (us->opset >= 13)
    axes = us->inputs.size() > 1 ? g.ints(us->inputs[1]) : std::nullopt;
  else
    axes = us->attr_ints("axes");
  if (!axes || axes->size() != 1 || ((*axes)[0] != 2 && (*axes)[0] != -3)) return std::nullopt;
  matched.insert(matched.end(), {rs, ex, us});
  return RepeatKv{us->inputs[0], ex->inputs[1], rs->inputs[1], rs->attr_int("allowzero", 0)};
}

// How many of `nodes` read `v`.
int readers_of(const std::string& v, const std::vector<ir::Node*>& nodes) {
  int n = 0;
  for (const ir::Node* x : nodes) n += std::count(x->inputs.begin(), x->inputs.end(), v) > 0;
  return n;
}

// The Shape nodes that read `v` and the nodes computed from them, when every value they make is
// read only by `matched` nodes or by each other (and is no graph output): a shape computation
// that dies when `matched` is replaced. Empty when there is none or it reaches anything else.
std::vector<ir::Node*> shape_readers_dying_with(GraphIndex& g, BuildState& s, const std::string& v,
                                                const std::vector<ir::Node*>& matched) {
  constexpr size_t kMax = 32;
  std::set<const ir::Node*> in_set(matched.begin(), matched.end());
  std::vector<ir::Node*> found;
  for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
    ir::Node* n = &s.graph.nodes[i];
    if (!g.dead(i) && is(n, "Shape") && n->inputs.size() == 1 && n->inputs[0] == v) found.push_back(n);
  }
  if (found.empty()) return {};
  std::set<const ir::Node*> chain(found.begin(), found.end());
  // Grow the chain by every consumer of its values; fail on a graph output or past kMax nodes.
  for (size_t next = 0; next < found.size(); ++next) {
    for (const auto& o : found[next]->outputs) {
      if (o.empty()) continue;
      if (g.is_output(o)) return {};
      for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
        ir::Node* c = &s.graph.nodes[i];
        if (g.dead(i) || in_set.count(c) || chain.count(c)) continue;
        if (std::find(c->inputs.begin(), c->inputs.end(), o) == c->inputs.end()) continue;
        // Only shape arithmetic joins the chain.
        static const std::set<std::string> kShapeOps = {"Shape", "Slice", "Concat", "Gather", "Squeeze", "Unsqueeze",
                                                        "Cast"};
        if (!c->domain.empty() || !kShapeOps.count(c->op_type) || found.size() >= kMax) return {};
        chain.insert(c);
        found.push_back(c);
      }
    }
  }
  return found;
}

bool same_dim(const ops::SymDim& a, const ops::SymDim& b) {
  if (a.known() || b.known()) return a.known() && b.known() && a.value() == b.value();
  return a.symbol() != "?" && a.symbol() == b.symbol();
}

// K (with the three view nodes) when `kt` is Reshape(Transpose(Reshape(K, [B*H,S,D]), [0,2,1]),
// [B,H,D,S]) of a K [B,H,S,D] (fuse_attention), each intermediate read once.
std::optional<std::pair<std::string, std::vector<ir::Node*>>> k_transpose_view(GraphIndex& g, BackendVerdict& verdict,
                                                                               const std::string& kt) {
  ir::Node* r2 = g.producer(kt, "Reshape");
  if (!r2 || !g.single_use(kt)) return std::nullopt;
  ir::Node* t = g.producer(r2->inputs[0], "Transpose");
  if (!t || !g.single_use(r2->inputs[0]) || !perm_is(*t, {0, 2, 1})) return std::nullopt;
  ir::Node* r1 = g.producer(t->inputs[0], "Reshape");
  if (!r1 || !g.single_use(t->inputs[0])) return std::nullopt;
  const ops::ValueType* x = verdict.type_of(r1->inputs[0]);
  const ops::ValueType* mid = verdict.type_of(t->inputs[0]);
  const ops::ValueType* out = verdict.type_of(kt);
  if (!x || !mid || !out || !x->rank_known || !mid->rank_known || !out->rank_known) return std::nullopt;
  if (x->shape.size() != 4 || mid->shape.size() != 3 || out->shape.size() != 4) return std::nullopt;
  const auto& a = x->shape;
  if (!(same_dim(mid->shape[1], a[2]) && same_dim(mid->shape[2], a[3]) && same_dim(out->shape[0], a[0]) &&
        same_dim(out->shape[1], a[1]) && same_dim(out->shape[2], a[3]) && same_dim(out->shape[3], a[2])))
    return std::nullopt;
  return std::make_pair(r1->inputs[0], std::vector<ir::Node*>{r2, t, r1});
}

}  // namespace

void fuse_attention(BuildState& s) {
  BackendVerdict verdict(s);
  GraphIndex g(s);
  std::vector<std::pair<size_t, ir::Node>> replace;
  for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
    ir::Node* sm = &s.graph.nodes[i];
    if (g.dead(i) || !is(sm, "Softmax")) continue;
    if (sm->attr_int("axis", sm->opset >= 13 ? -1 : 1) != -1) continue;
    std::vector<ir::Node*> matched = {sm};
    // A constant zero of one element, of any float type (a 16-bit model's guard is 16-bit).
    auto is_zero = [&](const std::string& v) {
      if (!g.is_const(v) || s.consts.at(v).value.numel() != 1) return false;
      const Tensor& t = s.consts.at(v).value;
      return is_float(t.dtype()) && cast_tensor(t, DType::Float64).data<double>()[0] == 0.0;
    };
    // Softmax -> [Where(IsNaN(P), 0, P)] -> MatMul(P, V)
    std::string probs = sm->outputs[0];
    bool nan_zero = false;
    ir::Node* pv = g.sole_consumer(probs);
    if (!pv && g.uses(probs) == 2) {
      ir::Node *isnan = nullptr, *guard = nullptr;
      for (size_t j = 0; j < s.graph.nodes.size(); ++j) {
        ir::Node* c = &s.graph.nodes[j];
        if (g.dead(j) || std::find(c->inputs.begin(), c->inputs.end(), probs) == c->inputs.end()) continue;
        if (is(c, "IsNaN")) isnan = c;
        if (is(c, "Where")) guard = c;
      }
      if (isnan && guard && guard->inputs.size() == 3 && guard->inputs[0] == isnan->outputs[0] &&
          guard->inputs[2] == probs && g.single_use(isnan->outputs[0]) && is_zero(guard->inputs[1])) {
        matched.push_back(isnan);
        matched.push_back(guard);
        probs = guard->outputs[0];
        pv = g.sole_consumer(probs);
        nan_zero = true;
      }
    }
    if (!is(pv, "MatMul") || pv->inputs[0] != probs) continue;
    // Mask: Add(S, mask) or Where(cond, fill, S) / Where(cond, S, fill).
    std::string scores = sm->inputs[0];
    std::string mask, fill, mask_mode = "none";
    if (!g.single_use(scores)) continue;
    if (ir::Node* a = g.producer(scores, "Add")) {
      // The scores side is the QK MatMul, possibly scaled; the mask may be anything.
      auto leads_to_qk = [&](const std::string& v) {
        ir::Node* p = g.producer(v);
        if (is(p, "MatMul")) return true;
        if (!is(p, "Div") && !is(p, "Mul")) return false;
        for (const auto& in : p->inputs)
          if (is(g.producer(in), "MatMul")) return true;
        return false;
      };
      for (int side = 0; side < 2; ++side) {
        if (leads_to_qk(a->inputs[side])) {
          mask = a->inputs[1 - side];
          scores = a->inputs[side];
          break;
        }
      }
      if (mask.empty()) continue;
      mask_mode = "add";
      matched.push_back(a);
    } else if (ir::Node* w = g.producer(scores, "Where")) {
      mask = w->inputs[0];
      std::string a = w->inputs[1], b = w->inputs[2];
      auto is_scalar_const = [&](const std::string& v) { return g.is_const(v) && g.scalar(v).has_value(); };
      if (is_scalar_const(a) && !is_scalar_const(b)) {
        fill = a;
        scores = b;
        mask_mode = "where_fill_true";
      } else if (is_scalar_const(b) && !is_scalar_const(a)) {
        fill = b;
        scores = a;
        mask_mode = "where_fill_false";
      } else {
        continue;
      }
      if (g.const_dtype(fill) != DType::Float32) continue;
      matched.push_back(w);
    }
    if (!g.single_use(scores)) continue;
    // Scale: Div(QK, c), Mul(QK, c) or Mul(c, QK), c a float32 scalar constant.
    std::string scale, scale_op = "none";
    if (ir::Node* d = g.producer(scores, "Div");
        d && g.scalar(d->inputs[1]) && g.const_dtype(d->inputs[1]) == DType::Float32) {
      scale = d->inputs[1];
      scale_op = "div";
      scores = d->inputs[0];
      matched.push_back(d);
    } else if (ir::Node* m = g.producer(scores, "Mul")) {
      for (int side = 0; side < 2; ++side)
        if (g.scalar(m->inputs[side]) && g.const_dtype(m->inputs[side]) == DType::Float32) {
          scale = m->inputs[side];
          scores = m->inputs[1 - side];
          scale_op = "mul";
          matched.push_back(m);
          break;
        }
      if (scale.empty()) continue;
    }
    if (!g.single_use(scores)) continue;
    ir::Node* qk = g.producer(scores, "MatMul");
    if (!qk) continue;
    matched.push_back(qk);
    std::string qk_q = qk->inputs[0], qk_k = qk->inputs[1];
    // PyTorch's decomposition: Mul(Q, c1) and Mul(K^T, c2), K^T maybe through a Reshape that
    // keeps its shape; c1 and c2 scalar float constants (of any float type: the kernels round
    // each product to the tensors' type, as the Muls do).
    std::string k_scale;
    auto float_scalar = [&](const std::string& v) {
      if (!g.is_const(v) || s.consts.at(v).value.numel() != 1) return false;
      const DType t = g.const_dtype(v);
      return t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16;
    };
    if (scale_op == "none") {
      ir::Node* mq = g.producer(qk_q, "Mul");
      ir::Node* mk = g.producer(qk_k, "Mul");
      if (mq && mk && g.single_use(qk_q) && g.single_use(qk_k)) {
        const int sq = float_scalar(mq->inputs[1]) ? 1 : float_scalar(mq->inputs[0]) ? 0 : -1;
        const int sk = float_scalar(mk->inputs[1]) ? 1 : float_scalar(mk->inputs[0]) ? 0 : -1;
        if (sq >= 0 && sk >= 0) {
          scale = mq->inputs[sq];
          k_scale = mk->inputs[sk];
          scale_op = "mul_qk";
          qk_q = mq->inputs[1 - sq];
          qk_k = mk->inputs[1 - sk];
          matched.push_back(mq);
          matched.push_back(mk);
          // A Reshape of K^T to its own shape (the decomposition's view) is no reshape at all.
          if (ir::Node* r = g.producer(qk_k, "Reshape"); r && g.single_use(qk_k)) {
            const ops::ValueType* in = verdict.type_of(r->inputs[0]);
            const ops::ValueType* out = verdict.type_of(qk_k);
            if (in && out && in->fully_known() && out->fully_known() && in->shape == out->shape) {
              qk_k = r->inputs[0];
              matched.push_back(r);
            }
          }
        }
      }
    }
    // Float32, shown by a constant of the pattern, or 16-bit: then the fused node computes in
    // float32 (precision 'float32', as flash attention does), which only a backend whose kernel
    // takes it fuses (the CUDA backend; the CPU declines it and keeps the unfused ops, as rounding
    // like the unfused Softmax in a fused kernel is several times slower than those ops).
    bool f32 = (!scale.empty() && g.const_dtype(scale) == DType::Float32) ||
               (!fill.empty() && g.const_dtype(fill) == DType::Float32) ||
               (mask_mode == "add" && g.const_dtype(mask) == DType::Float32);
    const auto half = [&](const std::string& v) {
      if (v.empty()) return false;
      const ops::ValueType* t = verdict.type_of(v);
      return t && (t->dtype == DType::BFloat16 || t->dtype == DType::Float16);
    };
    const bool sixteen = !f32 && half(qk_q) && half(pv->inputs[1]);
    if (!f32 && !sixteen) continue;
    // K^T: Transpose(K, [0,1,3,2]) of [B,H,S,D] or Transpose(K, [0,2,3,1]) of [B,S,H,D], or the
    // decomposition's 3-D view of the first: Reshape(Transpose(Reshape(K, [B*H,S,D]), [0,2,1]),
    // [B,H,D,S]) (shapes proven by inference: K [B,H,S,D], the 3-D view [., S, D], the result
    // [B,H,D,S]; the first reshape then merges B and H, which the last splits again).
    std::string k = qk_k, k_layout = "bhds";
    if (auto view = k_transpose_view(g, verdict, k)) {
      k = view->first;
      k_layout = "bhsd";
      matched.insert(matched.end(), view->second.begin(), view->second.end());
    } else if (ir::Node* t = g.producer(k, "Transpose"); t && g.single_use(k)) {
      if (perm_is(*t, {0, 1, 3, 2}))
        k_layout = "bhsd";
      else if (perm_is(*t, {0, 2, 3, 1}))
        k_layout = "bshd";
      if (k_layout != "bhds") {
        k = t->inputs[0];
        matched.push_back(t);
      }
    }
    std::string q = qk_q, q_layout = "bhsd";
    if (ir::Node* t = g.producer(q, "Transpose"); t && g.single_use(q) && perm_is(*t, {0, 2, 1, 3})) {
      q = t->inputs[0];
      q_layout = "bshd";
      matched.push_back(t);
    }
    std::string v = pv->inputs[1], v_layout = "bhsd";
    if (ir::Node* t = g.producer(v, "Transpose"); t && g.single_use(v) && perm_is(*t, {0, 2, 1, 3})) {
      v = t->inputs[0];
      v_layout = "bshd";
      matched.push_back(t);
    }
    // Grouped-query attention: K and V repeated per group (only from [B,Hkv,S,D]).
    std::optional<RepeatKv> krep, vrep;
    const size_t before_repeat = matched.size();
    // K's shape may also be read for the view's reshapes (Shape(K) -> Slice -> Concat): those
    // readers die with the view, so they do not keep the repeat alive.
    std::vector<ir::Node*> k_shape_readers;
    auto k_read_once = [&] {
      if (g.single_use(k)) return true;
      k_shape_readers = shape_readers_dying_with(g, s, k, matched);
      return !k_shape_readers.empty() && !g.is_output(k) && g.uses(k) == 1 + readers_of(k, k_shape_readers);
    };
    if (k_layout == "bhsd" && k_read_once() && (krep = match_repeat_kv(g, k, matched)))
      matched.insert(matched.end(), k_shape_readers.begin(), k_shape_readers.end());
    if (v_layout == "bhsd" && g.single_use(v)) vrep = match_repeat_kv(g, v, matched);
    if (krep.has_value() != vrep.has_value() || (krep && krep->allowzero != vrep->allowzero)) {
      // Both or neither: undo the partial match by rematching without repeat_kv.
      matched.resize(before_repeat);
      krep.reset();
      vrep.reset();
    }
    if (krep) {
      k = krep->x;
      v = vrep->x;
      // The head transpose before V's repeat ([B,S,Hkv,D] -> [B,Hkv,S,D]) is absorbed too.
      if (ir::Node* t = g.producer(v, "Transpose"); t && g.single_use(v) && perm_is(*t, {0, 2, 1, 3})) {
        v = t->inputs[0];
        v_layout = "bshd";
        matched.push_back(t);
      }
    }
    // Output: MatMul(P, V) -> Transpose([0,2,1,3]) becomes a [B,S,H,D] output.
    ir::Node* last = pv;
    std::string out_layout = "bhsd";
    if (ir::Node* t = g.sole_consumer(pv->outputs[0]); is(t, "Transpose") && perm_is(*t, {0, 2, 1, 3})) {
      matched.push_back(pv);
      last = t;
      out_layout = "bshd";
    }
    ir::Node f = make_node(*last, "reforge", "Attention", 1);
    f.inputs = {q, k, v, scale, mask, fill};
    if (krep)
      f.inputs.insert(f.inputs.end(),
                      {krep->expand_shape, krep->reshape_shape, vrep->expand_shape, vrep->reshape_shape});
    if (!k_scale.empty()) {
      f.inputs.resize(10);
      f.inputs.push_back(k_scale);
    }
    while (!f.inputs.empty() && f.inputs.back().empty()) f.inputs.pop_back();
    // A value the fused node reads must not be made by a shape computation that dies with it.
    bool reads_dying = false;
    if (krep)
      for (const ir::Node* n : k_shape_readers)
        for (const auto& o : n->outputs) reads_dying |= std::find(f.inputs.begin(), f.inputs.end(), o) != f.inputs.end();
    if (reads_dying) continue;
    f.outputs = {last->outputs[0]};
    f.attrs["q_layout"] = ir::string_attr("q_layout", q_layout);
    f.attrs["k_layout"] = ir::string_attr("k_layout", k_layout);
    f.attrs["v_layout"] = ir::string_attr("v_layout", v_layout);
    f.attrs["out_layout"] = ir::string_attr("out_layout", out_layout);
    f.attrs["scale_op"] = ir::string_attr("scale_op", scale_op);
    f.attrs["mask_mode"] = ir::string_attr("mask_mode", mask_mode);
    if (nan_zero) f.attrs["softmax_nan"] = ir::string_attr("softmax_nan", "zero");
    if (sixteen) f.attrs["precision"] = ir::string_attr("precision", "float32");
    if (krep) f.attrs["kv_allowzero"] = ir::int_attr("kv_allowzero", krep->allowzero);
    if (verdict.declines(f)) continue;  // the unfused ops stay
    for (ir::Node* n : matched)
      if (n != last) g.kill(n);
    replace.emplace_back(g.index_of(last), std::move(f));
  }
  for (auto& [idx, f] : replace) s.graph.nodes[idx] = std::move(f);
  g.sweep();
}

namespace {

// Slice(x, starts, ends, [axis], [1]) along the last axis (-1, or 3 of a 4-D tensor; the kernel
// checks the rank). starts/ends may be computed at run time (dynamic-shape exports compute the
// split point from Shape); the kernel checks them. Returns {starts, ends, axis}.
struct LastAxisSlice {
  std::string start, end;
  int64_t axis;
};
std::optional<LastAxisSlice> last_axis_slice(const GraphIndex& g, const ir::Node& n) {
  if (n.opset < 10 || n.inputs.size() < 4) return std::nullopt;
  auto ax = g.ints(n.inputs[3]);
  if (!ax || ax->size() != 1 || ((*ax)[0] != -1 && (*ax)[0] != 3)) return std::nullopt;
  if (n.inputs.size() > 4 && !n.inputs[4].empty()) {
    auto sp = g.ints(n.inputs[4]);
    if (!sp || sp->size() != 1 || (*sp)[0] != 1) return std::nullopt;
  }
  for (int i : {1, 2})
    if (auto v = g.ints(n.inputs[i]); g.is_const(n.inputs[i]) && (!v || v->size() != 1)) return std::nullopt;
  return LastAxisSlice{n.inputs[1], n.inputs[2], (*ax)[0]};
}

}  // namespace

void fuse_rotary(BuildState& s) {
  BackendVerdict verdict(s);
  GraphIndex g(s);
  std::vector<std::pair<size_t, ir::Node>> replace;
  for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
    ir::Node* cat = &s.graph.nodes[i];
    if (g.dead(i) || !is(cat, "Concat") || cat->inputs.size() != 2) continue;
    const int64_t axis = cat->attr_int("axis", 0);
    if (axis != -1 && axis != 3) continue;
    // concat(-x[..., h:], x[..., :h])
    ir::Node* neg = g.producer(cat->inputs[0], "Neg");
    ir::Node* lo = g.producer(cat->inputs[1], "Slice");
    if (!neg || !lo || !g.single_use(cat->inputs[0]) || !g.single_use(cat->inputs[1])) continue;
    ir::Node* hi = g.producer(neg->inputs[0], "Slice");
    if (!hi || !g.single_use(neg->inputs[0]) || hi->inputs[0] != lo->inputs[0]) continue;
    auto hs = last_axis_slice(g, *hi), ls = last_axis_slice(g, *lo);
    if (!hs || !ls) continue;
    // Constant bounds are checked here already: lo = [0, h), hi = [h, end).
    auto lo_start = g.ints(ls->start), lo_end = g.ints(ls->end), hi_start = g.ints(hs->start);
    if (lo_start && (*lo_start)[0] != 0) continue;
    if (lo_end && hi_start && (*lo_end)[0] != (*hi_start)[0]) continue;
    const std::string x = lo->inputs[0];
    // * sin, then + x * cos
    ir::Node* ms = g.sole_consumer(cat->outputs[0]);
    if (!is(ms, "Mul")) continue;
    const std::string sin = other_input(*ms, cat->outputs[0]);
    ir::Node* add = g.sole_consumer(ms->outputs[0]);
    if (!is(add, "Add")) continue;
    const std::string xc = other_input(*add, ms->outputs[0]);
    ir::Node* mc = g.producer(xc, "Mul");
    if (!mc || !g.single_use(xc)) continue;
    const std::string cos = other_input(*mc, x);
    if (cos.empty() || sin.empty() || cos == x || sin == x) continue;
    std::vector<ir::Node*> matched = {cat, neg, lo, hi, ms, mc};
    // x = Transpose([B,S,H,D], perm 0,2,1,3) read only by this pattern: absorbed.
    std::string in = x, layout = "bhsd";
    if (ir::Node* t = g.producer(x, "Transpose"); t && g.uses(x) == 3 && perm_is(*t, {0, 2, 1, 3})) {
      bool all_ours = true;
      for (const auto& o : s.graph.outputs) all_ours &= o.name != x;
      if (all_ours) {
        in = t->inputs[0];
        layout = "bshd";
        matched.push_back(t);
      }
    }
    ir::Node f = make_node(*add, "reforge", "Rotary", 1);
    f.inputs = {in, cos, sin, hs->start, hs->end, ls->start, ls->end};
    f.outputs = {add->outputs[0]};
    f.attrs["axes"] = ir::ints_attr("axes", {hs->axis, ls->axis, axis});  // for the unfused fallback
    f.attrs["layout"] = ir::string_attr("layout", layout);
    if (verdict.declines(f)) continue;  // the unfused ops stay
    for (ir::Node* n : matched) g.kill(n);
    replace.emplace_back(g.index_of(add), std::move(f));
  }
  for (auto& [idx, f] : replace) s.graph.nodes[idx] = std::move(f);
  g.sweep();
}

void fuse_layer_norm(BuildState& s) {
  GraphIndex g(s);
  std::vector<std::pair<size_t, ir::Node>> replace;
  for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
    ir::Node* sub = &s.graph.nodes[i];
    if (g.dead(i) || !is(sub, "Sub") || sub->inputs.size() != 2) continue;
    const std::string x = sub->inputs[0], d = sub->outputs[0];
    ir::Node* mu = g.producer(sub->inputs[1], "ReduceMean");
    if (!mu || mu->inputs[0] != x || !reduces_last_axis(g, *mu) || g.uses(sub->inputs[1]) != 1) continue;
    // d is read twice: by the square and by the division.
    if (g.uses(d) != 2 && !(g.uses(d) == 3)) continue;
    ir::Node *sq = nullptr, *div = nullptr;
    for (auto& n : s.graph.nodes) {
      if (&n == sub) continue;
      bool reads = false;
      for (const auto& in : n.inputs) reads |= in == d;
      if (!reads) continue;
      if (is(&n, "Pow") && n.inputs[0] == d && g.scalar_is(n.inputs[1], 2.0, 0.0))
        sq = &n;
      else if (is(&n, "Mul") && n.inputs.size() == 2 && n.inputs[0] == d && n.inputs[1] == d)
        sq = &n;
      else if (is(&n, "Div") && n.inputs[0] == d)
        div = &n;
    }
    if (!sq || !div) continue;
    const int expected_uses = is(sq, "Mul") ? 3 : 2;
    if (g.uses(d) != expected_uses) continue;
    ir::Node* var = g.sole_consumer(sq->outputs[0]);
    if (!is(var, "ReduceMean") || !reduces_last_axis(g, *var)) continue;
    ir::Node* add = g.sole_consumer(var->outputs[0]);
    if (!is(add, "Add")) continue;
    const std::string eps = other_input(*add, var->outputs[0]);
    auto eps_v = g.scalar(eps);
    if (!eps_v || !g.specializable(eps) || g.const_dtype(eps) != DType::Float32 || *eps_v < 0) continue;
    ir::Node* sqrt = g.sole_consumer(add->outputs[0]);
    if (!is(sqrt, "Sqrt") || div->inputs[1] != sqrt->outputs[0] || !g.single_use(sqrt->outputs[0])) continue;
    // * gamma (required: LayerNormalization has a Scale), + beta (optional); both constant
    // float32 vectors along the last axis.
    auto vec_const = [&](const std::string& v) {
      if (!g.is_const(v) || s.consts.at(v).value.dtype() != DType::Float32) return false;
      const Tensor& t = s.consts.at(v).value;
      if (t.rank() < 1) return false;
      for (int64_t k = 0; k + 1 < t.rank(); ++k)
        if (t.dim(k) != 1) return false;
      return true;
    };
    ir::Node* mg = g.sole_consumer(div->outputs[0]);
    if (!is(mg, "Mul")) continue;
    const std::string gamma = other_input(*mg, div->outputs[0]);
    if (!vec_const(gamma)) continue;
    std::vector<ir::Node*> matched = {mu, sub, sq, var, add, sqrt, div};
    ir::Node* last = mg;
    std::string beta;
    if (ir::Node* ab = g.sole_consumer(mg->outputs[0]); is(ab, "Add")) {
      const std::string cand = other_input(*ab, mg->outputs[0]);
      if (vec_const(cand) && s.consts.at(cand).value.numel() == s.consts.at(gamma).value.numel()) {
        beta = cand;
        matched.push_back(mg);
        last = ab;
      }
    }
    ir::Node f = make_node(*last, "", "LayerNormalization", 17);
    f.inputs = {x, gamma};
    if (!beta.empty()) f.inputs.push_back(beta);
    f.outputs = {last->outputs[0]};
    f.attrs["axis"] = ir::int_attr("axis", -1);
    f.attrs["epsilon"] = ir::float_attr("epsilon", static_cast<float>(*eps_v));
    for (ir::Node* n : matched) g.kill(n);
    replace.emplace_back(g.index_of(last), std::move(f));
  }
  for (auto& [idx, f] : replace) s.graph.nodes[idx] = std::move(f);
  g.sweep();
}

}  // namespace reforge::passes
