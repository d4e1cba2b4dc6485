#include "builder/binding.h"

#include <omp.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "builder/binding_quant.h"
#include "builder/binding_search.h"
#include "builder/fingerprint.h"
#include "builder/literal_proof.h"
#include "core/dispatch.h"
#include "core/file_pages.h"
#include "core/nearest_names.h"
#include "core/timing.h"
#include "ops/registry.h"
#include "ops/tensor/transpose2d.h"
#include "refit/checkpoint_refit.h"
#include "transforms/recipe.h"

namespace reforge::build {

namespace {

// Up to 64 elements of `t` (or of its 2-D transpose) at fixed, evenly spaced flat positions of
// that form. Indexing by this sketch costs O(1) per tensor instead of reading (or transposing)
// every byte; each candidate it finds is then confirmed on all bytes.
Tensor sketch(const Tensor& t, bool transpose) {
  const int64_t n = t.numel(), k = std::min<int64_t>(64, n);
  const size_t e = dtype_size(t.dtype());
  Tensor out = Tensor::empty(t.dtype(), {k});
  const auto* src = static_cast<const unsigned char*>(t.raw());
  auto* dst = static_cast<unsigned char*>(out.mutable_raw());
  for (int64_t j = 0; j < k; ++j) {
    int64_t i = j * n / k;
    if (transpose) i = (i % t.dim(0)) * t.dim(1) + i / t.dim(0);
    std::memcpy(dst + j * e, src + i * e, e);
  }
  return out;
}

uint64_t key_of(const Tensor& sample, size_t form_nbytes) {
  return XXH3_64bits_withSeed(sample.raw(), sample.nbytes(), form_nbytes);
}

using ir::int_attr;
using ir::ints_attr;

plan::RecipeStep step(const std::string& op, std::map<std::string, ir::Attribute> attrs,
                      std::vector<plan::Operand> ins) {
  plan::RecipeStep s;
  s.op_type = op;
  s.opset = 13;
  if (op == "Slice") s.opset = 1;  // attribute form: starts/ends/axes need no literal operands
  s.attrs = std::move(attrs);
  s.inputs = std::move(ins);
  return s;
}

// One indexed form of a checkpoint tensor: as is, transposed (2-D) and/or cast.
struct Form {
  std::string name;
  bool transpose = false;
  DType cast = DType::Undefined;
  int rank() const { return (transpose ? 1 : 0) + (cast != DType::Undefined ? 2 : 0); }
  auto tie() const { return std::tie(name, transpose, cast); }
  bool operator<(const Form& o) const { return tie() < o.tie(); }
};

plan::Binding make_binding(const Form& f, const Tensor& t) {
  plan::Binding b;
  b.status = plan::Binding::Status::Bound;
  b.checkpoint.push_back({f.name, t.dtype(), t.shape()});
  auto prev = [&]() {
    return b.steps.empty() ? plan::Operand{plan::Operand::Kind::Source, 0}
                           : plan::Operand{plan::Operand::Kind::Step, uint32_t(b.steps.size() - 1)};
  };
  if (f.transpose) b.steps.push_back(step("Transpose", {{"perm", ints_attr("perm", {1, 0})}}, {prev()}));
  if (f.cast != DType::Undefined) b.steps.push_back(step("Cast", {{"to", int_attr("to", int64_t(f.cast))}}, {prev()}));
  return b;
}

std::string describe_binding(const plan::Binding& b) {
  std::string s;
  for (const auto& st : b.steps) s += (s.empty() ? "" : "+") + st.op_type;
  return s.empty() ? "identity" : s;
}

std::string module_of(const std::string& name) {
  auto d = name.rfind('.');
  return d == std::string::npos ? "" : name.substr(0, d);
}

class Binder {
 public:
  explicit Binder(const refit::Checkpoint& c) : ckpt_(c) {}

  void index(const std::set<int64_t>& numels, const std::set<DType>& dtypes) {
    for (const auto& [name, t] : ckpt_.tensors()) {
      if (!is_float(t.dtype())) continue;
      by_rank_[t.rank()].push_back(name);
      std::vector<Form> forms{{name}};
      if (t.rank() == 2 && t.dim(0) > 1 && t.dim(1) > 1) forms.push_back({name, true});
      for (DType d : dtypes)
        if (d != t.dtype())
          for (size_t k = 0, n = forms.size(); k < n; ++k) forms.push_back({name, forms[k].transpose, d});
      for (const auto& f : forms) {
        Tensor sk = sketch(t, f.transpose);
        DType dt = t.dtype();
        if (f.cast != DType::Undefined)  // the same Cast kernel as the binding: elementwise, so bit-identical
          sk = transforms::evaluate_op("", "Cast", 13, {{"to", int_attr("to", int64_t(f.cast))}}, {&sk}, 1)[0],
          dt = f.cast;
        index_[key_of(sk, size_t(t.numel()) * dtype_size(dt))].push_back(f);
      }
    }
  }

  Tensor materialize(const Form& f) const {
    const Tensor& t = ckpt_.tensors().at(f.name);
    plan::Binding b = make_binding(f, t);
    if (b.steps.empty()) return t;
    Tensor r = t;
    DType dt = f.cast != DType::Undefined ? f.cast : t.dtype();
    Shape shape = t.shape();
    if (f.transpose) std::swap(shape[0], shape[1]);
    return transforms::apply_binding(b, {t}, dt, shape);
  }

  // True when form `f` of its checkpoint tensor has exactly the bytes of `v` (same dtype and
  // element count). Identity (and reshape) is one memcmp; a pure 2-D transpose is compared tile
  // by tile against the checkpoint tensor without materializing it, stopping at the first
  // difference (the same bytes the Transpose kernel would write); casts run the refit's own
  // kernels (transforms::apply_binding) and compare the result.
  bool equals(const Form& f, const Tensor& v) const {
    const Tensor& t = ckpt_.tensors().at(f.name);
    if (f.cast == DType::Undefined) {
      if (t.dtype() != v.dtype() || t.numel() != v.numel()) return false;
      if (!f.transpose) return std::memcmp(t.raw(), v.raw(), v.nbytes()) == 0;
      ops::Transpose2D tr;
      tr.rows = t.dim(0), tr.cols = t.dim(1), tr.elem = dtype_size(t.dtype());
      return ops::transpose_equals(v.raw(), t.raw(), tr, omp_get_max_threads());
    }
    Tensor m = materialize(f);
    return m.dtype() == v.dtype() && m.numel() == v.numel() && std::memcmp(m.raw(), v.raw(), v.nbytes()) == 0;
  }

  // Exactly equal indexed forms of checkpoint tensors, best form per name. Each candidate form
  // is confirmed at most once.
  std::map<std::string, Form> matches(const Tensor& v) {
    std::map<std::string, Form> out;
    std::set<Form> tried;
    auto consider = [&](const Form& f) {
      if (!tried.insert(f).second || !equals(f, v)) return;
      auto it = out.find(f.name);
      if (it == out.end() || f.rank() < it->second.rank()) out[f.name] = f;
    };
    auto it = index_.find(key_of(sketch(v, false), v.nbytes()));
    if (it != index_.end())
      for (const auto& f : it->second) consider(f);
    return out;
  }

  // `v` as the concatenation along one axis of several checkpoint tensors (each as is or 2-D
  // transposed): fused QKV or gate/up projections. Walks the axis, at each offset looking up the
  // sketch of v's slice for every piece length a checkpoint tensor offers there; a piece must be
  // equal to exactly one checkpoint tensor. Returns a Bound binding, or status None.
  plan::Binding concat(const Tensor& v) {
    for (int64_t axis = 0; axis < v.rank(); ++axis) {
      std::set<std::pair<int64_t, bool>> lengths;  // (length along axis, transposed)
      for (const auto& name : by_rank_[v.rank()]) {
        const Tensor& t = ckpt_.tensors().at(name);
        if (t.dtype() != v.dtype()) continue;
        for (bool tr : {false, true}) {
          if (tr && v.rank() != 2) continue;
          Shape sh = t.shape();
          if (tr) std::swap(sh[0], sh[1]);
          bool fits = sh[axis] < v.dim(axis);
          for (int64_t k = 0; k < v.rank(); ++k) fits &= k == axis || sh[k] == v.dim(k);
          if (fits) lengths.insert({sh[axis], tr});
        }
      }
      if (lengths.empty()) continue;
      std::vector<Form> pieces;
      int64_t at = 0;
      while (at < v.dim(axis)) {
        bool found = false;
        for (const auto& [len, tr] : lengths) {
          if (at + len > v.dim(axis)) continue;
          Tensor part = transforms::evaluate_op("", "Slice", 1,
                                                {{"starts", ints_attr("starts", {at})},
                                                 {"ends", ints_attr("ends", {at + len})},
                                                 {"axes", ints_attr("axes", {axis})}},
                                                {&v}, 1)[0];
          auto it = index_.find(key_of(sketch(part, false), part.nbytes()));
          if (it == index_.end()) continue;
          std::vector<Form> hits;
          for (const auto& f : it->second) {
            if (f.transpose != tr || f.cast != DType::Undefined) continue;
            Shape sh = ckpt_.tensors().at(f.name).shape();
            if (f.transpose) std::swap(sh[0], sh[1]);
            if (sh == part.shape() && equals(f, part)) hits.push_back(f);
          }
          if (hits.size() != 1) continue;  // none, or undecidable by value: no concat binding here
          pieces.push_back(hits[0]);
          at += len;
          found = true;
          break;
        }
        if (!found) break;
      }
      if (at != v.dim(axis) || pieces.size() < 2) continue;
      plan::Binding b;
      b.status = plan::Binding::Status::Bound;
      plan::RecipeStep cat = step("Concat", {{"axis", int_attr("axis", axis)}}, {});
      for (size_t j = 0; j < pieces.size(); ++j) {
        const Tensor& t = ckpt_.tensors().at(pieces[j].name);
        b.checkpoint.push_back({pieces[j].name, t.dtype(), t.shape()});
        plan::Operand o{plan::Operand::Kind::Source, uint32_t(j)};
        if (pieces[j].transpose) {
          b.steps.push_back(step("Transpose", {{"perm", ints_attr("perm", {1, 0})}}, {o}));
          o = {plan::Operand::Kind::Step, uint32_t(b.steps.size() - 1)};
        }
        cat.inputs.push_back(o);
      }
      b.steps.push_back(std::move(cat));
      // Confirm the whole binding with the refit's own replay.
      Tensor again = transforms::apply_binding(
          b,
          [&] {
            std::vector<Tensor> ins;
            for (const auto& in : b.checkpoint) ins.push_back(ckpt_.tensors().at(in.name));
            return ins;
          }(),
          v.dtype(), v.shape());
      if (transforms::bit_equal(again, v)) return b;
    }
    return {};
  }

  // The other checkpoint tensors with exactly the bytes of tensor `name` (same dtype and shape),
  // none when its value is all-equal: the copies of a tied parameter (plan::Binding::Input::ties).
  // The sketch index offers the candidates; each is confirmed on all bytes.
  std::vector<std::string> twins(const std::string& name) const {
    const Tensor& t = ckpt_.tensors().at(name);
    std::vector<std::string> out;
    if (!is_float(t.dtype()) || t.numel() == 0 || all_equal(t)) return out;
    auto it = index_.find(key_of(sketch(t, false), t.nbytes()));
    if (it == index_.end()) return out;
    for (const auto& f : it->second) {
      if (f.name == name || f.transpose || f.cast != DType::Undefined) continue;
      const Tensor& u = ckpt_.tensors().at(f.name);
      if (u.dtype() == t.dtype() && u.shape() == t.shape() && std::memcmp(u.raw(), t.raw(), t.nbytes()) == 0)
        out.push_back(f.name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  const refit::Checkpoint& ckpt_;
  std::unordered_map<uint64_t, std::vector<Form>> index_;
  std::map<int64_t, std::vector<std::string>> by_rank_;
};

}  // namespace

std::vector<std::string> node_scopes(const ir::Node& n) {
  std::vector<std::string> out;
  for (const auto& [k, v] : n.metadata) {
    if (k != "pkg.torch.onnx.name_scopes") continue;
    // A Python list literal: ['', 'layers.0', 'layers.0.input_norm', 'mul_52']
    size_t i = 0;
    while ((i = v.find('\'', i)) != std::string::npos) {
      size_t j = v.find('\'', i + 1);
      if (j == std::string::npos) break;
      std::string s = v.substr(i + 1, j - i - 1);
      if (!s.empty()) out.push_back(s);
      i = j + 1;
    }
    return out;
  }
  if (!n.name.empty() && n.name[0] == '/') {  // "/layers.0/input_norm/Mul"
    std::string acc;
    size_t i = 1;
    while (i < n.name.size()) {
      size_t j = n.name.find('/', i);
      if (j == std::string::npos) break;  // the last component is the op itself
      acc += (acc.empty() ? "" : ".") + n.name.substr(i, j - i);
      out.push_back(acc);
      i = j + 1;
    }
  }
  return out;
}

namespace {

// Every exact derivation of `v` from the checkpoint, by checkpoint name ("" for a concatenation
// of several): the indexed forms first, then concatenations, then the derived forms
// (binding_search.h), each tried only when nothing simpler matched.
std::map<std::string, plan::Binding> candidates(Binder& b, const refit::Checkpoint& ckpt, const Tensor& v) {
  std::map<std::string, plan::Binding> out;
  if (!is_float(v.dtype()) || v.numel() == 0) return out;
  for (const auto& [name, f] : b.matches(v)) out[name] = make_binding(f, ckpt.tensors().at(name));
  if (!out.empty()) return out;
  // An all-equal value splits into pieces of any all-equal tensors: no concatenation is decided
  // by value, only broadcasts (decided per use by scope, like every several-candidate match).
  if (all_equal(v)) return broadcast_bindings(v, ckpt);
  if (auto c = b.concat(v); c.status == plan::Binding::Status::Bound) return {{"", std::move(c)}};
  return derive_bindings(v, ckpt);
}

plan::Binding constant_binding(const Tensor& v, const LiteralProof& proof) {
  plan::Binding b;
  b.status = plan::Binding::Status::Constant;
  b.reason =
      proof.kind == LiteralProof::Kind::Structural ? plan::Binding::Reason::Structural : plan::Binding::Reason::Proven;
  b.rule = describe(proof);
  b.literals.push_back(v);
  b.note = "a function of the configuration, not of the checkpoint: " + b.rule;
  return b;
}

using Uses = std::map<std::string, std::vector<std::pair<uint32_t, uint32_t>>>;

// The uses binding decides, by initializer: every non-literal initializer input but the
// quantized ones (bound with their node by build/binding_quant.h, never by --bind).
Uses uses_to_bind(const ir::Graph& g, const std::set<std::string>& literals) {
  Uses out;
  for (size_t p = 0; p < g.nodes.size(); ++p)
    for (size_t slot = 0; slot < g.nodes[p].inputs.size(); ++slot) {
      const std::string& in = g.nodes[p].inputs[slot];
      if (in.empty() || !g.initializers.count(in) || literals.count(in) || ops::is_quantized_input(g.nodes[p], slot))
        continue;
      out[in].push_back({uint32_t(p), uint32_t(slot)});
    }
  return out;
}

// The meaning of a --bind key: NAME@POS:SLOT binds one use (a source key); NAME@* every use of
// the initializer, explicitly; a bare NAME an initializer of one use only. Exporters merge equal
// initializers (zero biases, unit norm weights), and the uses of a merged one are different
// checkpoint tensors: a bare name that looks like an identity (--bind X=X) would rebind them all
// to one tensor, silently. Refuses such a bind, listing the source keys to give instead.
void check_bind_keys(const BindOptions& o, const Uses& uses, const ir::Graph& g) {
  for (const auto& [key, want] : o.binds) {
    if (key.find('@') != std::string::npos) continue;  // a source key, or NAME@*: checked where used
    auto it = uses.find(key);
    if (it == uses.end() || it->second.size() < 2) continue;
    std::string list;
    for (size_t i = 0; i < it->second.size() && i < 6; ++i) {
      const auto& [p, slot] = it->second[i];
      list += str_cat("\n  ", key, "@", p, ":", slot, " (read by ", g.nodes[p].label(), ")");
    }
    if (it->second.size() > 6) list += str_cat("\n  ... and ", it->second.size() - 6, " more");
    fail("--bind ", key, "=", want, ": initializer '", key, "' is read by ", it->second.size(),
         " sources, which may be different checkpoint tensors (an exporter merges equal initializers):", list,
         "\nbind each by its source key (--bind ", key, "@POS:SLOT=CHECKPOINT_NAME), or every use to '", want,
         "' explicitly (--bind ", key, "@*=", want, ")");
  }
}

// The consumer's module: the innermost of its scopes that owns checkpoint tensors (a scope's
// last entry is often the op itself, 'mul_52', which owns none). "" when none does.
std::string owner_scope(const ir::Node& n, const std::set<std::string>& modules) {
  auto scopes = node_scopes(n);
  for (auto s = scopes.rbegin(); s != scopes.rend(); ++s)
    if (modules.count(*s)) return *s;
  return "";
}

// BatchNorm modules of the checkpoint with running statistics of `channels` channels ("stem.bn,
// block1.bn"), "" if none: what a Conv weight nothing derives was most likely folded with.
std::string batchnorm_statistics(const refit::Checkpoint& ckpt, int64_t channels) {
  std::string out;
  int shown = 0;
  for (const auto& [name, t] : ckpt.tensors()) {
    const std::string suffix = ".running_mean";
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string module = name.substr(0, name.size() - suffix.size());
    const Tensor* var = ckpt.find(module + ".running_var");
    if (!var || t.shape() != Shape{channels} || var->shape() != Shape{channels}) continue;
    if (shown++ < 3) out += (out.empty() ? "'" : ", '") + module + "'";
  }
  if (shown > 3) out += ", ...";
  return out;
}

}  // namespace

// "(nearest: 'a', 'b')" or "" when no name is close.
static std::string nearest_hint(const std::string& name, const std::vector<std::string>& names) {
  auto near = nearest_names(name, names);
  return near.empty() ? "" : " (nearest: " + quoted_list(near) + ")";
}

// Why a quantized input (ops::is_quantized_input) is never bound to a float checkpoint.
constexpr const char* kQuantizedNote =
    "a quantized weight (integer codes, scales or zero points) computed by the tool that quantized this ONNX model "
    "(ONNX Runtime's quantize_static / quantize_dynamic / MatMulNBitsQuantizer write them so), not by a reforge "
    "recipe: it cannot be re-derived exactly from float checkpoint tensors (only 4-bit weights that "
    "reforge::QuantizeWeight of a checkpoint tensor reproduces bit for bit are: build/binding_quant.h)";

BindResult bind_checkpoint(const ir::Graph& g, const std::set<std::string>& literals, const refit::Checkpoint& ckpt,
                           const BindOptions& o) {
  BindResult r;
  r.checkpoint_bytes = ckpt.total_bytes();
  auto t0 = std::chrono::steady_clock::now();
  std::set<int64_t> numels;
  std::set<DType> dtypes;
  for (const auto& [name, t] : g.initializers)
    if (!literals.count(name) && is_float(t.dtype())) numels.insert(t.numel()), dtypes.insert(t.dtype());
  Binder b(ckpt);
  b.index(numels, dtypes);
  r.index_ms = ms_since(t0);
  auto t1 = std::chrono::steady_clock::now();

  std::vector<std::string> ambiguous, quantized;
  std::set<std::string> used_binds;
  // Node position -> its weight input shown folded (a per-channel scale of the checkpoint tensor
  // of its name: build/binding_search.h scale_axis), and the uses so explained.
  std::map<uint32_t, std::string> folded_nodes;
  std::set<std::pair<uint32_t, uint32_t>> folded;
  std::set<std::string> mismatched;  // initializers the checkpoint holds by name with other values
  std::map<std::string, std::vector<std::pair<uint32_t, uint32_t>>> unmatched;  // initializer -> its uses
  std::map<std::string, std::map<std::string, plan::Binding>> cache;            // by initializer name
  // Node position -> the bindings of its quantized inputs by slot (build/binding_quant.h), or why none.
  std::map<size_t, std::pair<std::optional<std::map<size_t, plan::Binding>>, std::string>> requantized;
  const auto uses = uses_to_bind(g, literals);
  check_bind_keys(o, uses, g);
  std::set<std::string> modules;  // every module that owns a checkpoint tensor
  for (const auto& [name, _] : ckpt.tensors()) modules.insert(module_of(name));
  for (size_t p = 0; p < g.nodes.size(); ++p) {
    const ir::Node& n = g.nodes[p];
    for (size_t slot = 0; slot < n.inputs.size(); ++slot) {
      const std::string& in = n.inputs[slot];
      auto it = g.initializers.find(in);
      if (in.empty() || it == g.initializers.end() || literals.count(in)) continue;
      const Tensor& v = it->second;
      std::string key = in + "@" + std::to_string(p) + ":" + std::to_string(slot);
      plan::Binding& bd = r.bindings[{uint32_t(p), uint32_t(slot)}];
      if (ops::is_quantized_input(n, slot)) {
        // Codes, scales and zero points of a weight quantized before reforge saw the model: bound
        // only where reforge::QuantizeWeight of one checkpoint tensor gives them bit for bit.
        if (!requantized.count(p)) {
          std::string why;
          requantized[p] = {quantized_bindings(g, n, ckpt, why), why};
        }
        const auto& [found, why] = requantized.at(p);
        if (found && found->count(slot)) {
          bd = found->at(slot);
          continue;
        }
        bd.status = plan::Binding::Status::Unbound;
        bd.note = std::string(kQuantizedNote) + (why.empty() ? "" : " (" + why + ")");
        quantized.push_back("'" + in + "' " + v.describe() + " (input " + std::to_string(slot) + " of " + n.label() +
                            ")");
        continue;
      }
      if (!cache.count(in)) {
        cache[in] = candidates(b, ckpt, v);
        // Later uses of `in` read the cache: the pages of the bytes just compared leave the
        // resident set, so that binding does not hold the model and the checkpoint at once.
        release_file_pages(v.raw(), v.nbytes());
        for (const auto& [cn, cb] : cache[in])
          for (const auto& c : cb.checkpoint)
            if (const Tensor* t = ckpt.find(c.name)) ckpt.release_pages_of(*t);
      }
      std::map<std::string, plan::Binding> cands = cache[in];
      std::string how;
      // A source key names this use; NAME@* every use; a bare name an initializer of one use
      // (check_bind_keys).
      auto forced = o.binds.find(key);
      if (forced == o.binds.end()) forced = o.binds.find(in + "@*");
      if (forced == o.binds.end()) forced = o.binds.find(in);
      if (forced != o.binds.end()) {
        used_binds.insert(forced->first);
        const std::string& want = forced->second;
        if (!ckpt.find(want))
          fail("--bind ", forced->first, "=", want, ": the checkpoint has no tensor '", want, "'",
               nearest_hint(want, [&] {
                 std::vector<std::string> v;
                 for (const auto& [cn, _] : ckpt.tensors()) v.push_back(cn);
                 return v;
               }()));
        if (!cands.count(want))
          fail("--bind ", forced->first, "=", want, ": checkpoint tensor '", want, "' (", ckpt.find(want)->describe(),
               ") does not equal initializer '", in, "' (", v.describe(), ", read by ", n.label(),
               ") under any supported transform: a bind confirms what the values show, it never overrides them");
        cands = {{want, cands[want]}};
        how = "by --bind";
      }
      if (cands.count("")) {
        bd = cands[""];
        bd.note = "Concat of " + std::to_string(bd.checkpoint.size()) + " checkpoint tensors";
        continue;
      }
      // Equal values are no evidence of identity: several candidates, or one whose value is
      // all-equal (unit norm weights, zero biases are equal by initialization, so a missing one
      // leaves its twin of another layer), are decided by a proven rule or not at all.
      if (forced == o.binds.end() && (cands.size() > 1 || (cands.size() == 1 && all_equal(v)))) {
        const std::string scope = owner_scope(n, modules);
        std::map<std::string, plan::Binding> picked;
        for (const auto& [cn, f] : cands)
          if (!scope.empty() && module_of(cn) == scope) picked.emplace(cn, f);
        if (!picked.empty()) how = "by module scope '" + scope + "'";
        // The initializer's own name decides only for an initializer of one use: a merged one
        // carries the name of one of its uses (GPT-2's tied lm_head.weight is read as wte).
        const bool one_use = uses.count(in) && uses.at(in).size() == 1;
        if (one_use && cands.count(in) && (picked.empty() || picked.size() > 1) &&
            (picked.empty() || picked.count(in))) {
          how = picked.empty() ? "by its name" : how + " and its name";
          picked = {{in, cands.at(in)}};
        }
        if (picked.size() > 1) {
          std::string list;
          for (const auto& [cn, _] : picked) list += " " + cn;
          ambiguous.push_back(key + " (consumer '" + n.name + "'): candidates" + list);
          continue;
        }
        if (picked.empty()) {
          std::string list;
          for (const auto& [cn, _] : cands) list += (list.empty() ? "'" : ", '") + cn + "'";
          // What a --bind must name: the source key where the initializer has several uses.
          const std::string bind_key = one_use ? in : key;
          const std::string undecided =
              "neither the consumer's module scope (" +
              (scope.empty() ? std::string("none owns checkpoint tensors") : "'" + scope + "'") +
              ") nor the initializer's name ('" + in + "'" +
              (one_use ? "" : ", shared by " + std::to_string(uses.at(in).size()) + " uses") + ") names " +
              (cands.size() > 1 ? "one of them" : "it");
          bd.status = plan::Binding::Status::Unbound;
          bd.note = cands.size() > 1
                        ? "equals " + std::to_string(cands.size()) + " checkpoint tensors (" + list + "), and " +
                              undecided + "; --bind " + bind_key + "=NAME settles it"
                        : "equals checkpoint tensor " + list + " only as an all-equal value (" + v.describe() +
                              ", every element " + str_cat(v.as_double(0)) +
                              "), which cannot tell one tensor from another of the same value, and " + undecided +
                              "; --bind " + bind_key + "=" + cands.begin()->first + " settles it if it is the one";
          continue;
        }
        cands = picked;
      }
      if (cands.size() == 1) {
        bd = cands.begin()->second;
        bd.note = describe_binding(bd) + (how.empty() ? "" : " (" + how + ")");
        continue;
      }
      // Nothing equal: never bind by name alone.
      bd.status = plan::Binding::Status::Unbound;
      if (const Tensor* same = ckpt.find(in)) {
        // A fold is what the graph shows: a weight of a Conv/Gemm/MatMul that is the checkpoint
        // tensor scaled per output channel, or another weight input of that node. Anything else
        // with the name and other values is the likelier mistake: another checkpoint.
        const bool parametric =
            ops::input_role(n, slot) == ops::InputRole::kWeight &&
            (n.op_type == "Conv" || n.op_type == "ConvTranspose" || n.op_type == "Gemm" || n.op_type == "MatMul");
        const int axis = parametric ? scale_axis(v, *same) : -1;
        if (axis >= 0) {
          bd.note = "checkpoint tensor '" + in + "' of the same name (" + same->describe() +
                    ") scaled per slice of axis " + std::to_string(axis) +
                    ": the exporter folded a scale (BatchNorm) into this " + n.op_type +
                    ", which the checkpoint cannot re-derive exactly";
          folded_nodes[uint32_t(p)] = in;
          folded.insert({uint32_t(p), uint32_t(slot)});
        } else if (parametric && folded_nodes.count(uint32_t(p))) {
          bd.note = "values differ from checkpoint tensor '" + in + "' of the same name (" + same->describe() +
                    "): made by the same fold as '" + folded_nodes[uint32_t(p)] +
                    "' (a scale folded into this node, BatchNorm)";
          folded.insert({uint32_t(p), uint32_t(slot)});
        } else {
          bd.note = "values differ from checkpoint tensor '" + in + "' of the same name (" + same->describe() +
                    "), and the graph shows no fold that would explain it: " + ckpt.description() + " is most likely " +
                    refit::kWrongCheckpointMark;
          mismatched.insert(in);
        }
      } else {
        unmatched[in].push_back({uint32_t(p), uint32_t(slot)});
      }
    }
  }
  if (!quantized.empty() && !o.allow_partial) {
    std::string list;
    for (size_t i = 0; i < quantized.size() && i < 8; ++i) list += "\n  " + quantized[i];
    if (quantized.size() > 8) list += "\n  ... and " + std::to_string(quantized.size() - 8) + " more";
    fail("binding: ", quantized.size(), " source(s) of this model are quantized weights that ", ckpt.description(),
         " cannot derive:", list, "\n", kQuantizedNote,
         ". Refit the plan from a re-quantized ONNX model instead (its sources are taken by position), or build the "
         "float model with --precision int8|int4, whose quantization is a reforge recipe that a checkpoint refit "
         "replays. --allow-partial-binding builds anyway; a checkpoint refit of the plan is then refused");
  }
  if (!ambiguous.empty()) {
    std::string list;
    for (const auto& a : ambiguous) list += "\n  " + a;
    fail("binding: ", ambiguous.size(),
         " source(s) equal several checkpoint tensors and the module scope does not decide:", list,
         "\nsettle each with --bind ONNX_NAME=CHECKPOINT_NAME (or --bind-file)");
  }
  for (const auto& [name, _] : o.binds)
    if (!used_binds.count(name)) {
      std::vector<std::string> names;
      for (const auto& [n, t] : g.initializers)
        if (!literals.count(n) && is_float(t.dtype())) names.push_back(n);
      fail("--bind ", name, "=", o.binds.at(name), ": the model has no refittable initializer or source '", name, "'",
           nearest_hint(name.substr(0, name.find('@')), names));
    }
  // What no checkpoint tensor derives is a constant only by structure or by proof; else unbound.
  bool has_batchnorm = false;
  for (const auto& n : g.nodes) has_batchnorm |= n.op_type == "BatchNormalization";
  for (const auto& [name, its_uses] : unmatched) {
    const Tensor& v = g.initializers.at(name);
    std::string sibling, weight_use, statistics;
    for (const auto& u : its_uses) {
      const ir::Node& n = g.nodes[u.first];
      if (folded_nodes.count(u.first)) sibling = folded_nodes[u.first];
      if (ops::input_role(n, u.second) != ops::InputRole::kWeight) continue;
      weight_use = n.label();
      if (!has_batchnorm && (n.op_type == "Conv" || n.op_type == "ConvTranspose") && v.rank() >= 1)
        statistics = batchnorm_statistics(ckpt, n.op_type == "Conv" || v.rank() == 1 ? v.dim(0) : v.dim(1));
    }
    std::string note;
    std::optional<LiteralProof> proof;
    if (!sibling.empty()) {
      // Made by the same fold as its neighbour (the bias of a BatchNorm-folded Conv).
      note = "matches no checkpoint tensor and feeds the same node as '" + sibling +
             "', which is the checkpoint tensor of that name scaled per channel: made by the same fold (BatchNorm)";
    } else if (!weight_use.empty()) {
      // A weight input is never a constant by its values: an all-equal weight may just be untrained.
      note = "matches no checkpoint tensor under any supported transform, and it is a weight input of " + weight_use +
             (statistics.empty()
                  ? ": the exporter transformed it beyond what binding derives, or the checkpoint is not the one "
                    "the model was exported from"
                  : ", while the checkpoint holds BatchNorm statistics of its channels (" + statistics +
                        ") and the graph has no BatchNormalization: the exporter most likely folded that BatchNorm "
                        "into it");
    } else if (auto related = related_constants(v, ckpt); !related.empty()) {
      std::string list;
      for (size_t i = 0; i < related.size() && i < 4; ++i) list += (i ? ", " : "") + related[i];
      note = "all-equal like checkpoint tensor(s) " + list + (related.size() > 4 ? ", ..." : "") +
             " of a related shape: a concatenation or slice of them could have made it, which values cannot tell; "
             "--bind or --literal settles it";
    } else if ((proof = prove_literal(v))) {
      for (const auto& u : its_uses) r.bindings[u] = constant_binding(v, *proof);
      continue;
    } else {
      note =
          "matches no checkpoint tensor under any supported transform (slice, gather, broadcast, transpose, cast, "
          "concatenation) and is not provably a function of the configuration";
    }
    for (const auto& u : its_uses) r.bindings[u].note = note;
  }
  // --strict-binding: a literal the user declared must also be structural or proven.
  if (o.strict) {
    std::string list;
    for (const auto& name : o.user_literals) {
      auto it = g.initializers.find(name);
      if (it == g.initializers.end() || !is_float(it->second.dtype())) continue;
      if (!prove_literal(it->second)) list += "\n  " + name + " " + it->second.describe();
    }
    if (!list.empty())
      fail(
          "--strict-binding: float initializer(s) declared literal are neither structural nor provably a function of "
          "the "
          "configuration:",
          list);
  }
  // A checkpoint that binds under half of the weight sources is most likely another model's. A
  // fold the graph shows counts as evidence of the right checkpoint; a same-name tensor with other
  // values counts against it (B's checkpoint where A's belongs).
  size_t bound = 0, unbound = 0, folds = 0;
  std::string first_unbound;
  for (const auto& [pos, bd] : r.bindings) {
    if (bd.status == plan::Binding::Status::Bound) ++bound;
    if (bd.status == plan::Binding::Status::Unbound) {
      ++unbound;
      folds += folded.count(pos);
      if (first_unbound.empty())
        first_unbound =
            g.nodes[pos.first].inputs[pos.second] + " (read by " + g.nodes[pos.first].label() + "): " + bd.note;
    }
  }
  if (!o.allow_partial && unbound > 0 && (bound + folds) * 2 < bound + unbound) {
    if (!mismatched.empty()) {
      size_t named = 0;  // initializers the checkpoint holds by name
      for (const auto& [name, _] : uses) named += ckpt.find(name) != nullptr;
      std::string list;
      size_t k = 0;
      for (auto it = mismatched.begin(); it != mismatched.end() && k < 4; ++it, ++k)
        list += (k ? ", '" : "'") + *it + "'";
      if (mismatched.size() > 4) list += ", ...";
      fail(ckpt.description(), " holds different values for ", mismatched.size(), " of ", named,
           " weights than this model was exported with: bind the build to the checkpoint the model was exported "
           "from, then refit from ",
           ckpt.description(), ". Same names, other values: ", list, "; it binds ", bound, " of ", bound + unbound,
           " weight sources. --allow-partial-binding builds anyway; a checkpoint refit of the plan is then refused");
    }
    fail(ckpt.description(), " binds ", bound, " of ", bound + unbound,
         " weight sources of this model: either it is not this model's checkpoint, or the exporter transformed most "
         "weights beyond what binding derives (first unbound: ",
         first_unbound, "). --allow-partial-binding builds anyway; a checkpoint refit of the plan is then refused");
  }
  // Copies of a tied parameter: a checkpoint refit compares each with the tensor a binding reads.
  std::map<std::string, std::vector<std::string>> ties;
  for (auto& [pos, bd] : r.bindings)
    if (bd.status == plan::Binding::Status::Bound)
      for (auto& in : bd.checkpoint) {
        auto [it, fresh] = ties.try_emplace(in.name);
        if (fresh) it->second = b.twins(in.name);
        in.ties = it->second;
      }
  r.bound = bound, r.unbound = unbound;
  r.match_ms = ms_since(t1);
  return r;
}

void BindOptions::add_bind(const std::string& key, const std::string& tensor, const std::string& where) {
  auto [it, inserted] = binds.emplace(key, tensor);
  if (!inserted && it->second != tensor)
    fail(where, ": '", key, "' is bound to '", it->second, "' already (", bind_origin_[key], "); bind it to '", tensor,
         "' or to '", it->second, "', not both");
  bind_origin_.emplace(key, where);
}

namespace {

// The float initializers the user declared literal (`names`) that the checkpoint derives, bound
// as binding binds a source (each use of them bound as if it were one; the first bound use
// decides): a checkpoint refit re-derives each and refuses a value other than the plan's.
std::vector<plan::LiteralBinding> bind_user_literals(const ir::Graph& g, const std::vector<std::string>& names,
                                                     const refit::Checkpoint& ckpt, const BindOptions& bo) {
  std::set<std::string> user;
  for (const auto& n : names) {
    auto it = g.initializers.find(n);
    if (it != g.initializers.end() && is_float(it->second.dtype())) user.insert(n);
  }
  std::set<std::string> structural = literal_initializers(g, {});
  for (const auto& n : user)
    if (structural.count(n)) user.erase(n);
  if (user.empty()) return {};
  BindOptions o;  // the user's binds settle these too; no refusal: only what binds is recorded
  o.binds = bo.binds;
  o.allow_partial = true;
  BindResult r;
  try {
    r = bind_checkpoint(g, structural, ckpt, o);
  } catch (Error& e) {
    throw e.with_context("while binding the initializers declared literal (--literal) to the checkpoint");
  }
  std::vector<plan::LiteralBinding> out;
  for (const auto& [pos, b] : r.bindings) {
    const std::string& name = g.nodes[pos.first].inputs[pos.second];
    if (!user.count(name) || b.status != plan::Binding::Status::Bound) continue;
    if (std::any_of(out.begin(), out.end(), [&](const plan::LiteralBinding& l) { return l.name == name; })) continue;
    const Tensor& v = g.initializers.at(name);
    out.push_back({name, v.dtype(), v.shape(), transforms::hash_tensor(v), b});
  }
  return out;
}

}  // namespace

plan::Plan build_plan_with_checkpoint(const ir::Graph& graph, BuildOptions o, const refit::Checkpoint& ckpt,
                                      const BindOptions& bo, BindResult* result) {
  ir::Graph g = canonicalize(graph);
  std::set<std::string> literals = literal_initializers(g, o.literal_names);
  check_build_request(g, literals, o);  // refuse what the build cannot honour before binding
  BindOptions with_user = bo;
  with_user.user_literals.insert(o.literal_names.begin(), o.literal_names.end());
  if (o.progress) o.progress(Progress{"binding the checkpoint"});
  BindResult r = bind_checkpoint(g, literals, ckpt, with_user);
  const std::vector<plan::LiteralBinding> literal_bindings = bind_user_literals(g, o.literal_names, ckpt, bo);
  // Binding has read every checkpoint tensor; the build reads none. Its pages leave the
  // resident set before the build adds the engine weights to it (the model's bytes once more).
  ckpt.release_pages();
  plan::Plan p = build_plan(graph, o);
  p.literal_bindings = literal_bindings;
  for (auto& s : p.sources) {
    auto it = r.bindings.find({s.node_position, s.slot});
    REFORGE_ASSERT(it != r.bindings.end());
    s.binding = it->second;
  }
  if (result) *result = std::move(r);
  return p;
}

}  // namespace reforge::build
