// Shared pieces of shape and type inference (ops/infer.h).
#include "ops/infer.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace reforge::ops {

std::string sym_shape_str(const SymShape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ",";
    r += s[i].str();
  }
  return r + "]";
}

bool ValueType::fully_known() const {
  if (!rank_known) return false;
  for (const auto& d : shape)
    if (!d.known()) return false;
  return true;
}

std::string ValueType::str() const { return dtype_name(dtype) + (rank_known ? sym_shape_str(shape) : "[?]"); }

SymShape broadcast_shapes(InferContext& ctx, const SymShape& a, const SymShape& b) {
  const size_t rank = std::max(a.size(), b.size());
  SymShape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const SymDim* da = i < rank - a.size() ? nullptr : &a[i - (rank - a.size())];
    const SymDim* db = i < rank - b.size() ? nullptr : &b[i - (rank - b.size())];
    if (!da) {
      out[i] = *db;
      continue;
    }
    if (!db) {
      out[i] = *da;
      continue;
    }
    if (*da == *db) {
      out[i] = *da;
      continue;
    }
    if (da->known() && da->value() == 1) {
      out[i] = *db;
      continue;
    }
    if (db->known() && db->value() == 1) {
      out[i] = *da;
      continue;
    }
    if (da->known() && db->known())
      ctx.fail("shapes " + sym_shape_str(a) + " and " + sym_shape_str(b) + " do not broadcast");
    // A known size other than 1 against a symbol: the symbol must be that size or 1.
    if (da->known()) {
      out[i] = *da;
      continue;
    }
    if (db->known()) {
      out[i] = *db;
      continue;
    }
    out[i] = ctx.fresh_dim();
  }
  return out;
}

namespace {

// A dimension as coefficient * product of symbol factors (sorted, repeats kept).
struct Factors {
  int64_t coef = 1;
  std::vector<std::string> syms;
};

// Splits `s` at `op` outside parentheses; one part when `op` does not occur at the top level.
std::vector<std::string> split_top(const std::string& s, char op) {
  std::vector<std::string> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '(') ++depth;
    if (s[i] == ')') --depth;
    if (depth == 0 && s[i] == op) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(s.substr(start));
  return parts;
}

// The inside of "(...)" when the parentheses enclose the whole string, else "".
std::string inner_of(const std::string& s) {
  if (s.size() < 2 || s.front() != '(' || s.back() != ')') return "";
  int depth = 0;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] == '(') ++depth;
    if (s[i] == ')') --depth;
    if (depth == 0) return "";  // closes before the end: "(a)+(b)"
  }
  return s.substr(1, s.size() - 2);
}

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

Factors factors_of(const SymDim& d) {
  Factors f;
  if (d.known()) {
    f.coef = d.value();
    return f;
  }
  std::string in = inner_of(d.symbol());
  std::vector<std::string> parts = in.empty() ? std::vector<std::string>{} : split_top(in, '*');
  if (parts.size() < 2) {
    f.syms.push_back(d.symbol());
    return f;
  }
  for (const auto& p : parts) {
    if (is_number(p) && !__builtin_mul_overflow(f.coef, std::strtoll(p.c_str(), nullptr, 10), &f.coef)) continue;
    f.syms.push_back(p);
  }
  std::sort(f.syms.begin(), f.syms.end());
  return f;
}

SymDim from_factors(const Factors& f) {
  if (f.syms.empty() || f.coef == 0) return SymDim(f.syms.empty() ? f.coef : 0);
  if (f.coef == 1 && f.syms.size() == 1) return SymDim::symbol(f.syms[0]);
  std::string s = "(";
  if (f.coef != 1) s += std::to_string(f.coef) + "*";
  for (size_t i = 0; i < f.syms.size(); ++i) s += (i ? "*" : "") + f.syms[i];
  return SymDim::symbol(s + ")");
}

// Shapes come from untrusted models: arithmetic on known sizes that would overflow int64 gives
// the expression as a symbol (a size no tensor can have; the kernel refuses it at run time).
SymDim overflowed(const SymDim& a, char op, const SymDim& b) {
  return SymDim::symbol("(" + a.str() + op + b.str() + ")");
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

SymDim sym_add(const SymDim& a, const SymDim& b) {
  if (a.known() && b.known()) {
    int64_t r;
    return __builtin_add_overflow(a.value(), b.value(), &r) ? overflowed(a, '+', b) : SymDim(r);
  }
  if (a.known() && a.value() == 0) return b;
  if (b.known() && b.value() == 0) return a;
  // Canonical order: symbols sorted, a number last.
  std::vector<std::string> terms;
  for (const SymDim* d : {&a, &b}) {
    std::string in = d->known() ? "" : inner_of(d->symbol());
    std::vector<std::string> parts = in.empty() ? std::vector<std::string>{} : split_top(in, '+');
    if (parts.size() > 1 && in.find_first_of("-") == std::string::npos)
      terms.insert(terms.end(), parts.begin(), parts.end());
    else
      terms.push_back(d->str());
  }
  int64_t number = 0;
  std::vector<std::string> syms;
  for (const auto& t : terms) {
    if (is_number(t) && !__builtin_add_overflow(number, std::strtoll(t.c_str(), nullptr, 10), &number)) continue;
    syms.push_back(t);
  }
  std::sort(syms.begin(), syms.end());
  if (syms.size() == 1 && number == 0) return SymDim::symbol(syms[0]);
  std::string s = "(";
  for (size_t i = 0; i < syms.size(); ++i) s += (i ? "+" : "") + syms[i];
  if (number != 0) s += (number > 0 ? "+" : "") + std::to_string(number);
  return SymDim::symbol(s + ")");
}

SymDim sym_sub(const SymDim& a, const SymDim& b) {
  if (a.known() && b.known()) {
    int64_t r;
    return __builtin_sub_overflow(a.value(), b.value(), &r) ? overflowed(a, '-', b) : SymDim(r);
  }
  if (b.known() && b.value() == 0) return a;
  if (a == b) return SymDim(0);
  // (x+y) - y = x
  if (!a.known()) {
    std::string in = inner_of(a.symbol());
    std::vector<std::string> parts = in.empty() ? std::vector<std::string>{} : split_top(in, '+');
    if (parts.size() > 1 && in.find('-') == std::string::npos) {
      auto it = std::find(parts.begin(), parts.end(), b.str());
      if (it != parts.end()) {
        parts.erase(it);
        SymDim rest =
            is_number(parts[0]) ? SymDim(std::strtoll(parts[0].c_str(), nullptr, 10)) : SymDim::symbol(parts[0]);
        for (size_t i = 1; i < parts.size(); ++i)
          rest = sym_add(rest, is_number(parts[i]) ? SymDim(std::strtoll(parts[i].c_str(), nullptr, 10))
                                                   : SymDim::symbol(parts[i]));
        return rest;
      }
    }
  }
  return SymDim::symbol("(" + a.str() + "-" + b.str() + ")");
}

SymDim sym_mul(const SymDim& a, const SymDim& b) {
  if (a.known() && b.known()) {
    int64_t r;
    return __builtin_mul_overflow(a.value(), b.value(), &r) ? overflowed(a, '*', b) : SymDim(r);
  }
  if ((a.known() && a.value() == 0) || (b.known() && b.value() == 0)) return SymDim(0);
  Factors fa = factors_of(a), fb = factors_of(b);
  if (__builtin_mul_overflow(fa.coef, fb.coef, &fa.coef)) return overflowed(a, '*', b);
  fa.syms.insert(fa.syms.end(), fb.syms.begin(), fb.syms.end());
  std::sort(fa.syms.begin(), fa.syms.end());
  return from_factors(fa);
}

SymDim sym_div(const SymDim& a, const SymDim& b) {
  if (b.known() && b.value() == 0) return SymDim::symbol("(" + a.str() + "/0)");
  if (a.known() && b.known())
    return a.value() == INT64_MIN && b.value() == -1 ? overflowed(a, '/', b) : SymDim(floor_div(a.value(), b.value()));
  if (b.known() && b.value() == 1) return a;
  if (a == b) return SymDim(1);  // a size divided by itself (a zero size never reaches a division)
  Factors fa = factors_of(a), fb = factors_of(b);
  bool exact = fb.coef != 0 && fb.coef != -1 && fa.coef % fb.coef == 0;
  std::vector<std::string> rest = fa.syms;
  for (const auto& s : fb.syms) {
    auto it = exact ? std::find(rest.begin(), rest.end(), s) : rest.end();
    if (it == rest.end()) {
      exact = false;
      break;
    }
    rest.erase(it);
  }
  if (exact) return from_factors({fa.coef / fb.coef, rest});
  return SymDim::symbol("(" + a.str() + "/" + b.str() + ")");
}

SymDim sym_product(const SymShape& s, size_t begin, size_t end) {
  SymDim p(1);
  for (size_t i = begin; i < s.size() && i < end; ++i) p = sym_mul(p, s[i]);
  return p;
}

SymDim merge_dims(InferContext& ctx, const SymDim& a, const SymDim& b, const std::string& what) {
  if (a.known() && b.known()) {
    if (a.value() != b.value())
      ctx.fail(what + ": " + std::to_string(a.value()) + " and " + std::to_string(b.value()) + " differ");
    return a;
  }
  return a.known() ? a : b;
}

std::optional<std::vector<int64_t>> known_ints(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return std::nullopt;
  if (const SymShape* d = ctx.input_dims_value(i)) {
    std::vector<int64_t> v;
    for (const auto& x : *d) {
      if (!x.known()) return std::nullopt;
      v.push_back(x.value());
    }
    return v;
  }
  if (const Tensor* t = ctx.input_constant(i))
    if (is_integer(t->dtype())) return t->to_int64_vector();
  return std::nullopt;
}

std::optional<std::vector<double>> known_doubles(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return std::nullopt;
  if (const Tensor* t = ctx.input_constant(i)) {
    if (!is_integer(t->dtype()) && !is_float(t->dtype())) return std::nullopt;
    std::vector<double> v(static_cast<size_t>(t->numel()));
    for (int64_t k = 0; k < t->numel(); ++k) v[static_cast<size_t>(k)] = t->as_double(k);
    return v;
  }
  if (auto ints = known_ints(ctx, i)) return std::vector<double>(ints->begin(), ints->end());
  return std::nullopt;
}

SymShape reshape_shape(InferContext& ctx, const SymShape& in, bool in_known, const SymShape& spec, bool allowzero) {
  const std::string in_str = in_known ? sym_shape_str(in) : std::string("[?]");
  SymShape out(spec.size());
  int64_t infer_at = -1;
  bool has_zero = false;
  for (size_t i = 0; i < spec.size(); ++i) {
    const SymDim& v = spec[i];
    if (!v.known()) {
      out[i] = v;
      continue;
    }
    if (v.value() == -1) {
      if (infer_at >= 0) ctx.fail("shape " + sym_shape_str(spec) + " has more than one -1");
      infer_at = static_cast<int64_t>(i);
      out[i] = 1;
      continue;
    }
    if (v.value() < -1) ctx.fail("shape " + sym_shape_str(spec) + " has invalid dimension " + v.str());
    if (v.value() == 0 && !allowzero) {
      if (!in_known) {
        out[i] = ctx.fresh_dim();
        continue;
      }
      if (i >= in.size())
        ctx.fail("shape " + sym_shape_str(spec) + " copies dimension " + std::to_string(i) + " (0) but the input " +
                 in_str + " has rank " + std::to_string(in.size()));
      out[i] = in[i];
      continue;
    }
    if (v.value() == 0) has_zero = true;
    out[i] = v;
  }
  if (infer_at >= 0) {
    if (allowzero && has_zero) ctx.fail("shape " + sym_shape_str(spec) + " has both 0 and -1 with allowzero=1");
    SymDim& slot = out[static_cast<size_t>(infer_at)];
    if (!in_known) {
      slot = ctx.fresh_dim();
    } else {
      const SymDim total = sym_product(in), rest = sym_product(out);
      if (total.known() && rest.known() && (rest.value() == 0 || total.value() % rest.value() != 0))
        ctx.fail("cannot reshape " + in_str + " to " + sym_shape_str(spec) + " (the -1 cannot be inferred)");
      slot = rest.known() && rest.value() == 0 ? ctx.fresh_dim() : sym_div(total, rest);
    }
  } else if (in_known) {
    const SymDim a = sym_product(in), b = sym_product(out);
    if (a.known() && b.known() && a.value() != b.value())
      ctx.fail("cannot reshape " + in_str + " to " + sym_shape_str(spec) + " (resolved " + sym_shape_str(out) +
               ", element counts differ)");
  }
  return out;
}

SymShape matmul_shape(InferContext& ctx, const SymShape& a0, const SymShape& b0) {
  if (a0.empty() || b0.empty())
    ctx.fail("MatMul operands must have rank >= 1, got " + sym_shape_str(a0) + " and " + sym_shape_str(b0));
  SymShape a = a0, b = b0;
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), SymDim(1));
  if (b_vec) b.push_back(SymDim(1));
  merge_dims(ctx, a.back(), b[b.size() - 2],
             "the contracted dimensions of " + sym_shape_str(a0) + " and " + sym_shape_str(b0));
  SymShape out = broadcast_shapes(ctx, SymShape(a.begin(), a.end() - 2), SymShape(b.begin(), b.end() - 2));
  if (!a_vec) out.push_back(a[a.size() - 2]);
  if (!b_vec) out.push_back(b.back());
  return out;
}

int64_t normalize_axis(InferContext& ctx, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

}  // namespace reforge::ops
