#include "builder/binding_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <unordered_map>

#include "core/half.h"
#include "refit/checkpoint_refit.h"
#include "transforms/recipe.h"

namespace reforge::build {

namespace {

using ir::int_attr;
using ir::ints_attr;

Shape strides_of(const Shape& s) {
  Shape st(s.size(), 1);
  for (int64_t k = int64_t(s.size()) - 2; k >= 0; --k) st[k] = st[k + 1] * s[k + 1];
  return st;
}

Shape squeezed(const Shape& s) {
  Shape out;
  for (int64_t d : s)
    if (d != 1) out.push_back(d);
  return out;
}

bool widening(DType from, DType to) {
  return to == DType::Float32 && (from == DType::BFloat16 || from == DType::Float16);
}
bool narrowing(DType from, DType to) {
  return from == DType::Float32 && (to == DType::BFloat16 || to == DType::Float16);
}

// Element i of a checkpoint tensor as the bits of the source's dtype: the same bytes, the exact
// float32 of a bfloat16/float16 value, or a float32 rounded to bfloat16/float16 by the rounding
// the Cast kernel uses (core/half.h). The final replay confirms every candidate anyway.
struct Reader {
  const unsigned char* p;
  size_t esz;
  DType from, to;
  Reader(const Tensor& t, DType target)
      : p(static_cast<const unsigned char*>(t.raw())), esz(dtype_size(t.dtype())), from(t.dtype()), to(target) {}
  uint64_t operator()(int64_t i) const {
    if (from == to) {
      uint64_t b = 0;
      std::memcpy(&b, p + i * esz, esz);
      return b;
    }
    if (from == DType::Float32) {
      float f;
      std::memcpy(&f, p + i * 4, 4);
      return to == DType::BFloat16 ? bfloat16::from_float(f) : float16::from_float(f);
    }
    uint16_t h;
    std::memcpy(&h, p + i * 2, 2);
    float f = from == DType::BFloat16 ? bfloat16::to_float(h) : float16::to_float(h);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  }
};

// Calls f(index, flat offset under `strides`) for every multi-index of `dims`, in row-major
// order; stops when f returns false. Returns false when stopped.
bool for_each_index(const Shape& dims, const Shape& strides, const std::function<bool(const Shape&, int64_t)>& f) {
  Shape idx(dims.size(), 0);
  int64_t off = 0;
  const int64_t n = shape_numel(dims);
  for (int64_t c = 0; c < n; ++c) {
    if (!f(idx, off)) return false;
    for (int64_t k = int64_t(dims.size()) - 1; k >= 0; --k) {
      if (++idx[k] < dims[k]) {
        off += strides[k];
        break;
      }
      off -= strides[k] * (dims[k] - 1);
      idx[k] = 0;
    }
  }
  return true;
}

Tensor int64_tensor(const std::vector<int64_t>& v, Shape shape) {
  return Tensor::copy_of(DType::Int64, std::move(shape), v.data());
}

// Builds the steps of one binding from a checkpoint tensor, keeping track of the current shape.
struct StepWriter {
  plan::Binding b;
  Shape shape;
  StepWriter(const std::string& name, const Tensor& t) : shape(t.shape()) {
    b.status = plan::Binding::Status::Bound;
    b.checkpoint.push_back({name, t.dtype(), t.shape()});
  }
  plan::Operand prev() const {
    return b.steps.empty() ? plan::Operand{plan::Operand::Kind::Source, 0}
                           : plan::Operand{plan::Operand::Kind::Step, uint32_t(b.steps.size() - 1)};
  }
  plan::Operand literal(Tensor t) {
    b.literals.push_back(std::move(t));
    return {plan::Operand::Kind::Literal, uint32_t(b.literals.size() - 1)};
  }
  void add(const std::string& op, int opset, std::map<std::string, ir::Attribute> attrs,
           std::vector<plan::Operand> ins) {
    plan::RecipeStep s;
    s.op_type = op;
    s.opset = opset;
    s.attrs = std::move(attrs);
    s.inputs = std::move(ins);
    b.steps.push_back(std::move(s));
  }
  void cast(DType to) { add("Cast", 13, {{"to", int_attr("to", int64_t(to))}}, {prev()}); }
  void reshape(const Shape& s) {
    if (s == shape) return;
    auto p = prev();
    add("Reshape", 14, {}, {p, literal(int64_tensor(s, {int64_t(s.size())}))});
    shape = s;
  }
  void transpose(const std::vector<int64_t>& perm) {
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == int64_t(i);
    if (identity) return;
    add("Transpose", 13, {{"perm", ints_attr("perm", perm)}}, {prev()});
    Shape s(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) s[i] = shape[perm[i]];
    shape = s;
  }
  void expand(const Shape& s) {
    auto p = prev();
    add("Expand", 13, {}, {p, literal(int64_tensor(s, {int64_t(s.size())}))});
    shape = s;
  }
};

// True when the binding, replayed as a refit replays it, gives exactly `v`.
bool confirmed(const plan::Binding& b, const Tensor& t, const Tensor& v) {
  try {
    return transforms::bit_equal(transforms::apply_binding(b, {t}, v.dtype(), v.shape()), v);
  } catch (const Error&) {
    return false;
  }
}

// The source with the axes along which it is constant reduced to one element.
struct Reduced {
  Tensor r;  // v with its broadcast axes reduced to size 1
  bool broadcast = false;
};

Reduced reduce_broadcast(const Tensor& v) {
  Reduced out{v, false};
  const size_t e = dtype_size(v.dtype());
  for (int64_t k = 0; k < out.r.rank(); ++k) {
    const Shape& s = out.r.shape();
    if (s[k] <= 1) continue;
    int64_t outer = 1, inner = int64_t(e);
    for (int64_t i = 0; i < k; ++i) outer *= s[i];
    for (int64_t i = k + 1; i < int64_t(s.size()); ++i) inner *= s[i];
    const auto* p = static_cast<const unsigned char*>(out.r.raw());
    bool same = true;
    for (int64_t o = 0; o < outer && same; ++o)
      for (int64_t j = 1; j < s[k] && same; ++j)
        same = std::memcmp(p + (o * s[k] + j) * inner, p + o * s[k] * inner, size_t(inner)) == 0;
    if (!same) continue;
    Shape rs = s;
    rs[k] = 1;
    Tensor n = Tensor::uninitialized(v.dtype(), rs);
    auto* q = static_cast<unsigned char*>(n.mutable_raw());
    for (int64_t o = 0; o < outer; ++o) std::memcpy(q + o * inner, p + o * s[k] * inner, size_t(inner));
    out.r = n;
    out.broadcast = true;
  }
  return out;
}

// One checkpoint tensor tried against the reduced, squeezed source.
class Candidate {
 public:
  Candidate(const std::string& name, const Tensor& t, const Tensor& v, const Reduced& red)
      : name_(name), t_(t), v_(v), red_(red), rd_(t, v.dtype()), rv_(red.r, v.dtype()) {
    S_ = squeezed(red.r.shape());
    T_ = squeezed(t.shape());
    ss_ = strides_of(S_);
    ts_ = strides_of(T_);
  }

  std::optional<plan::Binding> find() {
    if (S_.empty() || T_.empty()) return std::nullopt;
    if (auto b = permutation()) return b;
    return gather();
  }

 private:
  // rs axis i <- T axis perm[i], same element count.
  std::optional<plan::Binding> permutation() {
    if (T_.size() != S_.size() || shape_numel(T_) != shape_numel(S_)) return std::nullopt;
    std::vector<int64_t> p(T_.size());
    std::iota(p.begin(), p.end(), 0);
    do {
      bool fits = true;
      for (size_t i = 0; i < p.size(); ++i) fits &= T_[p[i]] == S_[i];
      if (!fits) continue;
      Shape tstr(p.size());
      for (size_t i = 0; i < p.size(); ++i) tstr[i] = ts_[p[i]];
      // Compare element by element: rs in its order, t through the permuted strides.
      int64_t n = 0;
      bool equal = for_each_index(S_, tstr, [&](const Shape&, int64_t toff) { return rv_(n++) == rd_(toff); });
      if (!equal) continue;
      StepWriter w(name_, t_);
      if (t_.dtype() != v_.dtype()) w.cast(v_.dtype());
      w.reshape(T_);
      w.transpose(p);
      if (auto b = finish(w)) return b;
    } while (std::next_permutation(p.begin(), p.end()));
    return std::nullopt;
  }

  std::optional<plan::Binding> gather() {
    const int64_t m = int64_t(T_.size()), q = int64_t(S_.size());
    for (int64_t a = 0; a < m; ++a) {
      if (m - 1 > q) return std::nullopt;
      std::vector<int64_t> O;
      for (int64_t o = 0; o < m; ++o)
        if (o != a) O.push_back(o);
      // The other axes of t must all be axes of the source, by size.
      std::vector<int64_t> need, have(S_.begin(), S_.end());
      for (int64_t o : O) need.push_back(T_[o]);
      std::sort(need.begin(), need.end());
      std::sort(have.begin(), have.end());
      if (!std::includes(have.begin(), have.end(), need.begin(), need.end())) continue;
      // The source's first element starts its first row whatever the axis assignment: unless some
      // slice of t along a starts with it, no gather along a can work (one pass, no allocation).
      const uint64_t lead = rv_(0);
      bool any = false;
      for (int64_t i = 0; i < T_[a] && !any; ++i) any = rd_(i * ts_[a]) == lead;
      if (!any) continue;
      // Slices of t along a by their first element's bits.
      std::unordered_multimap<uint64_t, int64_t> first;
      for (int64_t i = 0; i < T_[a]; ++i) first.emplace(rd_(i * ts_[a]), i);
      std::vector<int64_t> f(O.size(), -1);
      std::vector<bool> used(size_t(q), false);
      std::optional<plan::Binding> found;
      std::function<void(size_t)> assign = [&](size_t k) {
        if (found) return;
        if (k == O.size()) {
          found = try_gather(a, O, f, first);
          return;
        }
        for (int64_t s = 0; s < q && !found; ++s) {
          if (used[s] || S_[s] != T_[O[k]]) continue;
          used[s] = true, f[k] = s;
          assign(k + 1);
          used[s] = false;
        }
      };
      assign(0);
      if (found) return found;
    }
    return std::nullopt;
  }

  // O[k] (a t axis) maps to rs axis f[k]; the other rs axes (J, in order) index t along a.
  std::optional<plan::Binding> try_gather(int64_t a, const std::vector<int64_t>& O, const std::vector<int64_t>& f,
                                          const std::unordered_multimap<uint64_t, int64_t>& first) {
    const int64_t q = int64_t(S_.size());
    std::vector<int64_t> J;
    for (int64_t s = 0; s < q; ++s)
      if (std::find(f.begin(), f.end(), s) == f.end()) J.push_back(s);
    Shape jdims, jstr, odims, ostr_s, ostr_t;
    for (int64_t s : J) jdims.push_back(S_[s]), jstr.push_back(ss_[s]);
    for (size_t k = 0; k < O.size(); ++k)
      odims.push_back(T_[O[k]]), ostr_s.push_back(ss_[f[k]]), ostr_t.push_back(ts_[O[k]]);
    std::vector<int64_t> index;
    index.reserve(size_t(shape_numel(jdims)));
    bool ok = for_each_index(jdims, jstr, [&](const Shape&, int64_t base) {
      auto [lo, hi] = first.equal_range(rv_(base));
      int64_t hit = -1, hits = 0;
      for (auto it = lo; it != hi && hits < 2; ++it) {
        const int64_t tbase = it->second * ts_[a];
        bool eq = true;
        if (!odims.empty()) {
          // Walk the row in rs and t together.
          Shape idx(odims.size(), 0);
          const int64_t n = shape_numel(odims);
          int64_t so = 0, to = 0;
          for (int64_t c = 0; c < n && eq; ++c) {
            eq = rv_(base + so) == rd_(tbase + to);
            for (int64_t k = int64_t(odims.size()) - 1; k >= 0; --k) {
              if (++idx[k] < odims[k]) {
                so += ostr_s[k], to += ostr_t[k];
                break;
              }
              so -= ostr_s[k] * (odims[k] - 1), to -= ostr_t[k] * (odims[k] - 1);
              idx[k] = 0;
            }
          }
        }
        if (eq) ++hits, hit = it->second;
      }
      if (hits != 1) return false;  // no slice, or several equal ones: no index by guess
      index.push_back(hit);
      return true;
    });
    if (!ok) return std::nullopt;
    StepWriter w(name_, t_);
    if (t_.dtype() != v_.dtype()) w.cast(v_.dtype());
    w.reshape(T_);
    // Layout after the gather: rs axis of each position.
    std::vector<int64_t> layout;
    bool contiguous = J.size() == 1;
    for (size_t i = 1; i < index.size() && contiguous; ++i) contiguous = index[i] == index[i - 1] + 1;
    if (contiguous && !index.empty()) {
      w.add("Slice", 1,
            {{"starts", ints_attr("starts", {index[0]})},
             {"ends", ints_attr("ends", {index[0] + int64_t(index.size())})},
             {"axes", ints_attr("axes", {a})}},
            {w.prev()});
      for (int64_t pos = 0, k = 0; pos < int64_t(T_.size()); ++pos) layout.push_back(pos == a ? J[0] : f[k++]);
    } else {
      auto p = w.prev();
      w.add("Gather", 13, {{"axis", int_attr("axis", a)}}, {p, w.literal(int64_tensor(index, jdims))});
      size_t k = 0;
      for (; k < O.size() && O[k] < a; ++k) layout.push_back(f[k]);
      for (int64_t s : J) layout.push_back(s);
      for (; k < O.size(); ++k) layout.push_back(f[k]);
    }
    w.shape.clear();
    for (int64_t s : layout) w.shape.push_back(S_[s]);
    std::vector<int64_t> perm(layout.size());
    for (size_t i = 0; i < layout.size(); ++i) perm[size_t(layout[i])] = int64_t(i);
    w.transpose(perm);
    return finish(w);
  }

  std::optional<plan::Binding> finish(StepWriter& w) {
    if (red_.broadcast) {
      w.reshape(red_.r.shape());
      w.expand(v_.shape());
    }
    if (!confirmed(w.b, t_, v_)) return std::nullopt;
    return w.b;
  }

  const std::string& name_;
  const Tensor& t_;
  const Tensor& v_;
  const Reduced& red_;
  Reader rd_;  // checkpoint tensor elements, as the source's dtype
  Reader rv_;  // reduced source elements
  Shape S_, T_, ss_, ts_;
};

// True when every element of `t`, read as `dtype`, has the bits `value` (stops at the first other).
bool holds_only(const Tensor& t, DType dtype, uint64_t value) {
  Reader rd(t, dtype);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (rd(i) != value) return false;
  return true;
}

bool usable(const Tensor& t, const Tensor& v) {
  return is_float(t.dtype()) && t.numel() > 0 &&
         (t.dtype() == v.dtype() || widening(t.dtype(), v.dtype()) || narrowing(t.dtype(), v.dtype()));
}

}  // namespace

bool all_equal(const Tensor& t) {
  const size_t e = dtype_size(t.dtype());
  const auto* p = static_cast<const unsigned char*>(t.raw());
  for (int64_t i = 1; i < t.numel(); ++i)
    if (std::memcmp(p + i * e, p, e) != 0) return false;
  return true;
}

std::map<std::string, plan::Binding> derive_bindings(const Tensor& v, const refit::Checkpoint& ckpt) {
  std::map<std::string, plan::Binding> out;
  if (v.numel() == 0 || all_equal(v)) return out;
  Reduced red = reduce_broadcast(v);
  for (const auto& [name, t] : ckpt.tensors()) {
    if (!usable(t, v)) continue;
    Candidate c(name, t, v, red);
    if (auto b = c.find()) out[name] = std::move(*b);
  }
  return out;
}

std::map<std::string, plan::Binding> broadcast_bindings(const Tensor& v, const refit::Checkpoint& ckpt) {
  std::map<std::string, plan::Binding> out;
  if (v.numel() <= 1 || !all_equal(v)) return out;
  const uint64_t value = Reader(v, v.dtype())(0);
  for (const auto& [name, t] : ckpt.tensors()) {
    if (!usable(t, v) || t.numel() >= v.numel()) continue;
    // Numpy broadcasting of t's shape (or of t's shape without its size-1 axes) to v's.
    auto broadcasts = [&](const Shape& s) {
      if (s.size() > v.shape().size()) return false;
      for (size_t i = 0; i < s.size(); ++i) {
        int64_t d = s[s.size() - 1 - i], vd = v.shape()[v.shape().size() - 1 - i];
        if (d != 1 && d != vd) return false;
      }
      return true;
    };
    Shape from = t.shape();
    if (!broadcasts(from)) from = squeezed(from);
    if (!broadcasts(from)) continue;
    if (!holds_only(t, v.dtype(), value)) continue;
    StepWriter w(name, t);
    if (t.dtype() != v.dtype()) w.cast(v.dtype());
    w.reshape(from);
    w.expand(v.shape());
    if (confirmed(w.b, t, v)) out[name] = std::move(w.b);
  }
  return out;
}

std::vector<std::string> related_constants(const Tensor& v, const refit::Checkpoint& ckpt) {
  std::vector<std::string> out;
  if (v.numel() <= 1 || !all_equal(v)) return out;
  const uint64_t value = Reader(v, v.dtype())(0);
  const Shape vs = squeezed(v.shape());
  for (const auto& [name, t] : ckpt.tensors()) {
    if (!usable(t, v) || t.numel() <= 1) continue;
    const Shape ts = squeezed(t.shape());
    if (ts.size() != vs.size()) continue;
    int differ = 0;
    for (size_t i = 0; i < vs.size(); ++i) differ += ts[i] != vs[i];
    if (differ > 1) continue;
    if (holds_only(t, v.dtype(), value)) out.push_back(name);
  }
  return out;
}

int scale_axis(const Tensor& v, const Tensor& t) {
  if (!is_float(v.dtype()) || !is_float(t.dtype()) || v.numel() != t.numel() || v.numel() < 2) return -1;
  const bool transposed = t.shape() != v.shape();
  if (transposed && !(v.rank() == 2 && t.rank() == 2 && t.dim(0) == v.dim(1) && t.dim(1) == v.dim(0))) return -1;
  // Read element by element: another checkpoint's tensor differs within the first few, so a
  // wrong checkpoint costs little, and nothing the size of the tensor is allocated.
  auto at_t = [&](int64_t i) { return t.as_double(transposed ? (i % v.dim(1)) * v.dim(0) + i / v.dim(1) : i); };
  // Two float32 roundings (the scale, then the product) put the ratios of one slice within a
  // few ulps of each other; 1e-5 (about 80 ulps) leaves room for a fold computed in another
  // order, and is still far below what independent values give.
  constexpr double kTolerance = 1e-5;
  for (int64_t axis = 0; axis < v.rank(); ++axis) {
    const int64_t d = v.dim(axis);
    int64_t inner = 1;
    for (int64_t k = axis + 1; k < v.rank(); ++k) inner *= v.dim(k);
    std::vector<double> ratio(size_t(d), NAN);
    std::vector<int64_t> nonzero(size_t(d), 0);
    bool ok = true;
    for (int64_t i = 0; i < v.numel() && ok; ++i) {
      const size_t c = size_t((i / inner) % d);
      const double x = at_t(i), y = v.as_double(i);
      if (!std::isfinite(x) || !std::isfinite(y)) return -1;
      if (x == 0) {
        ok = y == 0;
        continue;
      }
      const double r = y / x;
      if (nonzero[c]++ == 0)
        ratio[c] = r;
      else
        ok = std::fabs(r - ratio[c]) <= kTolerance * std::max(std::fabs(r), std::fabs(ratio[c]));
    }
    if (!ok) continue;
    int64_t evidence = 0;
    for (int64_t n : nonzero) evidence += n >= 2;
    if (evidence > 0 && evidence * 2 >= d) return int(axis);
  }
  return -1;
}

}  // namespace reforge::build
