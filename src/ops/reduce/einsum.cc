// Einsum: general Einstein summation over any number of operands.
//
// The equation is parsed into one label list per operand ("..." expands to right-aligned
// broadcast labels) and an output label list (explicit after "->", or implicitly the ellipsis
// labels followed by every letter used exactly once, in ASCII order, as numpy does). Each operand
// becomes a strided view with one stride per distinct label: a label repeated inside one operand
// (a diagonal, "ii->i") sums the strides of its positions, and a size-1 dimension against a
// larger one broadcasts with stride 0.
//
// Evaluation contracts the operands left to right. Each pairwise step first sums away labels
// that neither the other operand nor anything later needs, then classifies labels as batch
// (both operands, kept), m (left only), n (right only) and k (both, summed) and runs a batched
// GEMM [B,M,K] x [B,K,N]; an operand already laid out that way (or transposed) is used in place,
// otherwise it is gathered once. float GEMMs of useful size go to oneDNN's sgemm, the rest to a
// plain loop. A single operand (transpose, trace, sum) is one strided reduction. Arithmetic runs
// in float for 16-bit floats and float32, double for float64 and uint64 (wrapping like the
// element type) for integers.
#include "ops/reduce/einsum.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <array>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/thread_pool.h"
#include "ops/registry.h"

namespace reforge::ops {

namespace einsum {

Equation parse_equation(const std::string& raw, const std::string& label) {
  std::string eq;
  for (char c : raw)
    if (c != ' ' && c != '\t' && c != '\n') eq += c;
  auto parse_term = [&](const std::string& t) {
    std::vector<int> term;
    bool ellipsis = false;
    for (size_t i = 0; i < t.size();) {
      const char c = t[i];
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        term.push_back(static_cast<unsigned char>(c));
        ++i;
      } else if (c == '.') {
        REFORGE_CHECK(t.compare(i, 3, "...") == 0, label, ": malformed ellipsis in einsum equation '", raw, "'");
        REFORGE_CHECK(!ellipsis, label, ": more than one ellipsis in a term of einsum equation '", raw, "'");
        ellipsis = true;
        term.push_back(kEllipsis);
        i += 3;
      } else {
        fail(label, ": invalid character '", c, "' in einsum equation '", raw, "'");
      }
    }
    return term;
  };
  Equation e;
  std::string lhs = eq;
  const size_t arrow = eq.find("->");
  if (arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    const std::string rhs = eq.substr(arrow + 2);
    REFORGE_CHECK(rhs.find("->") == std::string::npos && rhs.find(',') == std::string::npos, label,
                  ": einsum equation '", raw, "' has a malformed output");
    e.explicit_output = true;
    e.output = parse_term(rhs);
    for (size_t i = 0; i < e.output.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        REFORGE_CHECK(e.output[i] != e.output[j], label, ": label repeated in the output of einsum equation '", raw,
                      "'");
  }
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    e.inputs.push_back(parse_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (e.explicit_output) {
    for (int l : e.output) {
      bool found = false;
      for (const auto& t : e.inputs) found = found || std::find(t.begin(), t.end(), l) != t.end();
      REFORGE_CHECK(found, label, ": output ", l == kEllipsis ? std::string("...") : std::string(1, char(l)),
                    " of einsum equation '", raw, "' does not appear in any input");
    }
  }
  return e;
}

}  // namespace einsum

namespace {

using einsum::Equation;
using einsum::kEllipsis;
using einsum::kEllipsisBase;
using einsum::kMaxLabels;
using einsum::parse_equation;
using einsum::Sizes;

// ---- strided operands in the compute type ----

template <typename C>
struct Operand {
  std::vector<int> labels;       // distinct labels, in layout order
  std::vector<int64_t> strides;  // one per label
  std::vector<C> storage;        // owns the data unless it points into an input
  const C* data = nullptr;

  bool has(int l) const { return std::find(labels.begin(), labels.end(), l) != labels.end(); }
  int64_t stride_of(int l) const {
    for (size_t i = 0; i < labels.size(); ++i)
      if (labels[i] == l) return strides[i];
    return 0;
  }
};

// Copies the strided view (sizes per dim, src strides) into contiguous dst, converting each element.
template <typename S, typename D, typename Conv>
void strided_copy(const S* src, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, D* dst,
                  Conv conv) {
  const int m = static_cast<int>(sizes.size());
  const int64_t total = shape_numel(sizes);
  if (total == 0) return;
  if (m == 0) {
    dst[0] = conv(src[0]);
    return;
  }
  const int64_t inner = sizes[m - 1], is = strides[m - 1];
  std::vector<int64_t> idx(static_cast<size_t>(m), 0);
  int64_t off = 0;
  for (int64_t o = 0; o < total; o += inner) {
    const S* s = src + off;
    if (is == 1)
      for (int64_t j = 0; j < inner; ++j) dst[o + j] = conv(s[j]);
    else
      for (int64_t j = 0; j < inner; ++j) dst[o + j] = conv(s[j * is]);
    for (int d = m - 2; d >= 0; --d) {
      off += strides[d];
      if (++idx[d] < sizes[d]) break;
      off -= strides[d] * sizes[d];
      idx[d] = 0;
    }
  }
}

// Sums `a` over every label not in `keep` (given in the result's layout order) into a new
// contiguous operand.
template <typename C>
Operand<C> sum_to(const Operand<C>& a, const std::vector<int>& keep, const Sizes& size) {
  Operand<C> r;
  r.labels = keep;
  std::vector<int64_t> ksz, kst, rsz, rst;
  for (int l : keep) {
    ksz.push_back(size[l]);
    kst.push_back(a.stride_of(l));
  }
  for (size_t i = 0; i < a.labels.size(); ++i)
    if (std::find(keep.begin(), keep.end(), a.labels[i]) == keep.end()) {
      rsz.push_back(size[a.labels[i]]);
      rst.push_back(a.strides[i]);
    }
  const int64_t n_out = shape_numel(ksz), n_red = shape_numel(rsz);
  r.storage.assign(static_cast<size_t>(n_out), C(0));
  r.data = r.storage.data();
  r.strides.assign(keep.size(), 0);
  for (int64_t s = 1, i = static_cast<int64_t>(keep.size()) - 1; i >= 0; --i) {
    r.strides[i] = s;
    s *= ksz[i];
  }
  if (n_out == 0 || n_red == 0) return r;
  std::vector<int64_t> kidx(ksz.size(), 0), ridx(rsz.size(), 0);
  const int rm = static_cast<int>(rsz.size());
  int64_t koff = 0;
  for (int64_t o = 0; o < n_out; ++o) {
    C acc = 0;
    if (rm == 0) {
      acc = a.data[koff];
    } else {
      const int64_t inner = rsz[rm - 1], is = rst[rm - 1];
      std::fill(ridx.begin(), ridx.end(), 0);
      int64_t roff = 0;
      for (int64_t q = 0; q < n_red; q += inner) {
        const C* p = a.data + koff + roff;
        for (int64_t j = 0; j < inner; ++j) acc += p[j * is];
        for (int d = rm - 2; d >= 0; --d) {
          roff += rst[d];
          if (++ridx[d] < rsz[d]) break;
          roff -= rst[d] * rsz[d];
          ridx[d] = 0;
        }
      }
    }
    r.storage[static_cast<size_t>(o)] = acc;
    for (int d = static_cast<int>(ksz.size()) - 1; d >= 0; --d) {
      koff += kst[d];
      if (++kidx[d] < ksz[d]) break;
      koff -= kst[d] * ksz[d];
      kidx[d] = 0;
    }
  }
  return r;
}

// True if `a` restricted to `order` is dense row-major in that order (size-1 labels ignored).
template <typename C>
bool dense_in(const Operand<C>& a, const std::vector<int>& order, const Sizes& size) {
  int64_t s = 1;
  for (size_t i = order.size(); i-- > 0;) {
    const int l = order[i];
    if (size[l] == 1) continue;
    if (a.stride_of(l) != s) return false;
    s *= size[l];
  }
  return true;
}

// Gives a pointer to `a` laid out densely as the concatenation of `g1` then `g2` (after the batch
// labels), or as `g2` then `g1` with *swapped set, gathering a copy only when neither fits.
template <typename C>
const C* as_matrix(const Operand<C>& a, const std::vector<int>& batch, const std::vector<int>& g1,
                   const std::vector<int>& g2, const Sizes& size, std::vector<C>& buf, bool* swapped) {
  std::vector<int> o12 = batch, o21 = batch;
  o12.insert(o12.end(), g1.begin(), g1.end());
  o12.insert(o12.end(), g2.begin(), g2.end());
  o21.insert(o21.end(), g2.begin(), g2.end());
  o21.insert(o21.end(), g1.begin(), g1.end());
  *swapped = false;
  if (dense_in(a, o12, size)) return a.data;
  if (dense_in(a, o21, size)) {
    *swapped = true;
    return a.data;
  }
  std::vector<int64_t> sz, st;
  for (int l : o12) {
    sz.push_back(size[l]);
    st.push_back(a.stride_of(l));
  }
  const int64_t n = shape_numel(sz);
  buf.resize(static_cast<size_t>(n));
  strided_copy(a.data, sz, st, buf.data(), [](C v) { return v; });
  return buf.data();
}

// C[b] = op(A[b]) x op(B[b]) for dense row-major matrices; A is [M,K] ([K,M] if ta), B is [K,N]
// ([N,K] if tb), C is [M,N] and starts zeroed.
template <typename C>
void gemm_batched(int64_t nb, int64_t M, int64_t N, int64_t K, const C* A, bool ta, const C* B, bool tb, C* out,
                  int threads) {
  if (nb == 0 || M == 0 || N == 0 || K == 0) return;
  if constexpr (std::is_same_v<C, float>) {
    if (M * N * K >= (1 << 15)) {
      auto one = [&](int64_t b) {
        const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A + b * M * K, ta ? M : K,
                                            B + b * K * N, tb ? K : N, 0.0f, out + b * M * N, N);
        return st == dnnl_success;
      };
      bool ok = true;
      if (nb >= threads && threads > 1) {  // one GEMM per task, each run serially by oneDNN
        // A pool thread is outside any OpenMP team, so oneDNN would start a full team of its own
        // for every task; one thread per call keeps the cores to the tasks.
        std::vector<char> task_ok(static_cast<size_t>(nb), 0);
        parallel_for(nb, threads, 1, [&](int64_t b0, int64_t b1) {
          const int saved = omp_get_max_threads();
          omp_set_num_threads(1);
          for (int64_t b = b0; b < b1; ++b) task_ok[static_cast<size_t>(b)] = one(b);
          omp_set_num_threads(saved);
        });
        for (int64_t b = 0; b < nb; ++b) ok = task_ok[static_cast<size_t>(b)] && ok;
      } else {
        // oneDNN sizes its OpenMP team from omp_get_max_threads(); cap it at the engine's
        // thread count for these calls (the setting is per calling thread) and restore it.
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        for (int64_t b = 0; b < nb; ++b) ok = one(b) && ok;
        omp_set_num_threads(saved);
      }
      REFORGE_CHECK(ok, "einsum: oneDNN sgemm failed for M=", M, " N=", N, " K=", K);
      return;
    }
  }
  const bool par = threads > 1 && nb * M * N * K >= (1 << 16);
  parallel_for(nb * M, par ? threads : 1, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / M, i = r % M;
      const C* a = A + b * M * K;
      const C* bm = B + b * K * N;
      C* c = out + b * M * N + i * N;
      const int64_t ask = ta ? M : 1, ai = ta ? 1 : K;  // A(i,p) = a[i*ai + p*ask]
      if (!tb) {
        for (int64_t p = 0; p < K; ++p) {
          const C av = a[i * ai + p * ask];
          const C* brow = bm + p * N;
          for (int64_t j = 0; j < N; ++j) c[j] += av * brow[j];
        }
      } else {
        for (int64_t j = 0; j < N; ++j) {
          const C* bcol = bm + j * K;
          C s = 0;
          for (int64_t p = 0; p < K; ++p) s += a[i * ai + p * ask] * bcol[p];
          c[j] = s;
        }
      }
    }
  });
}

// Contracts a and b, keeping the labels in `keep` (needed by the output or later operands).
template <typename C>
Operand<C> contract(const Operand<C>& a0, const Operand<C>& b0, const std::vector<int>& keep, const Sizes& size,
                    int threads) {
  auto kept = [&](int l) { return std::find(keep.begin(), keep.end(), l) != keep.end(); };
  // Sum away labels private to one side and not needed later.
  auto presum = [&](const Operand<C>& x, const Operand<C>& other, Operand<C>& tmp) -> const Operand<C>& {
    std::vector<int> need;
    for (int l : x.labels)
      if (kept(l) || other.has(l)) need.push_back(l);
    if (need.size() == x.labels.size()) return x;
    tmp = sum_to(x, need, size);
    return tmp;
  };
  Operand<C> ta_, tb_;
  const Operand<C>& a = presum(a0, b0, ta_);
  const Operand<C>& b = presum(b0, a0, tb_);
  std::vector<int> batch, ml, kl, nl;
  for (int l : a.labels) {
    if (b.has(l))
      (kept(l) ? batch : kl).push_back(l);
    else
      ml.push_back(l);
  }
  for (int l : b.labels)
    if (!a.has(l)) nl.push_back(l);
  auto prod = [&](const std::vector<int>& ls) {
    Shape dims;
    for (int l : ls) dims.push_back(size[l]);
    return shape_numel(dims);  // throws on overflow
  };
  const int64_t nb = prod(batch), M = prod(ml), K = prod(kl), N = prod(nl);
  (void)shape_numel({nb, M, N});  // the result must be addressable too
  std::vector<C> abuf, bbuf;
  bool ta = false, tb = false;
  const C* ap = as_matrix(a, batch, ml, kl, size, abuf, &ta);
  const C* bp = as_matrix(b, batch, kl, nl, size, bbuf, &tb);
  Operand<C> r;
  r.labels = batch;
  r.labels.insert(r.labels.end(), ml.begin(), ml.end());
  r.labels.insert(r.labels.end(), nl.begin(), nl.end());
  r.storage.assign(static_cast<size_t>(nb * M * N), C(0));
  r.data = r.storage.data();
  r.strides.assign(r.labels.size(), 0);
  for (int64_t s = 1, i = static_cast<int64_t>(r.labels.size()) - 1; i >= 0; --i) {
    r.strides[i] = s;
    s *= size[r.labels[i]];
  }
  gemm_batched<C>(nb, M, N, K, ap, ta, bp, tb, r.storage.data(), threads);
  return r;
}

template <typename T>
using einsum_compute_t = std::conditional_t<std::is_integral_v<T>, uint64_t, compute_t<T>>;

template <typename T>
void einsum_typed(KernelContext& ctx, const std::vector<std::vector<int>>& terms, const std::vector<int>& out_labels,
                  const Sizes& size) {
  using C = einsum_compute_t<T>;
  const int threads = ctx.threads() > 0 ? ctx.threads() : omp_get_max_threads();
  const size_t n_in = terms.size();
  std::vector<Operand<C>> ops(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    const Tensor& x = ctx.input(i);
    Operand<C>& op = ops[i];
    if constexpr (std::is_same_v<T, C>) {
      op.data = x.data<T>();
    } else {
      op.storage.resize(static_cast<size_t>(x.numel()));
      const T* src = x.data<T>();
      for (int64_t j = 0; j < x.numel(); ++j) op.storage[static_cast<size_t>(j)] = static_cast<C>(to_compute(src[j]));
      op.data = op.storage.data();
    }
    int64_t stride = 1;
    for (int64_t d = x.rank() - 1; d >= 0; --d) {
      const int l = terms[i][static_cast<size_t>(d)];
      const int64_t s = (x.dim(d) == 1 && size[l] != 1) ? 0 : stride;  // broadcast
      auto it = std::find(op.labels.begin(), op.labels.end(), l);
      if (it == op.labels.end()) {
        op.labels.insert(op.labels.begin(), l);
        op.strides.insert(op.strides.begin(), s);
      } else {
        op.strides[static_cast<size_t>(it - op.labels.begin())] += s;  // diagonal
      }
      stride *= x.dim(d);
    }
  }
  Operand<C> cur;
  if (n_in == 1) {
    std::vector<int> keep;
    for (int l : ops[0].labels)
      if (std::find(out_labels.begin(), out_labels.end(), l) != out_labels.end()) keep.push_back(l);
    if (keep.size() == ops[0].labels.size())
      cur = std::move(ops[0]);
    else
      cur = sum_to(ops[0], keep, size);
  } else {
    cur = std::move(ops[0]);
    for (size_t j = 1; j < n_in; ++j) {
      std::vector<int> keep = out_labels;
      for (size_t q = j + 1; q < n_in; ++q)
        for (int l : ops[q].labels)
          if (std::find(keep.begin(), keep.end(), l) == keep.end()) keep.push_back(l);
      Operand<C> next = contract(cur, ops[j], keep, size, threads);
      cur = std::move(next);
    }
    // Labels neither operand needed were summed inside contract; anything left that the output
    // lacks (only possible with one operand left) is summed here.
    std::vector<int> keep;
    for (int l : cur.labels)
      if (std::find(out_labels.begin(), out_labels.end(), l) != out_labels.end()) keep.push_back(l);
    if (keep.size() != cur.labels.size()) cur = sum_to(cur, keep, size);
  }
  Shape out_shape;
  std::vector<int64_t> sz, st;
  for (int l : out_labels) {
    out_shape.push_back(size[l]);
    sz.push_back(size[l]);
    st.push_back(cur.stride_of(l));
  }
  Tensor& y = ctx.allocate_output(0, ctx.input(0).dtype(), out_shape);
  strided_copy(cur.data, sz, st, y.mutable_data<T>(), [](C v) { return from_compute<T>(v); });
}

}  // namespace

namespace einsum {

Plan plan(const KernelContext& ctx) {
  const std::string label = ctx.node().label();
  REFORGE_CHECK(ctx.node().has_attr("equation"), label, ": attribute 'equation' is required");
  const std::string raw = ctx.attr_string("equation", "");
  const Equation eq = parse_equation(raw, label);
  REFORGE_CHECK(eq.inputs.size() == ctx.num_inputs(), label, ": einsum equation '", raw, "' has ", eq.inputs.size(),
                " operands but the node has ", ctx.num_inputs(), " inputs");
  const DType dt = ctx.input(0).dtype();
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    REFORGE_CHECK(ctx.input(i).dtype() == dt, label, ": einsum inputs must share one type, input ", i, " is ",
                  ctx.input(i).describe(), ", input 0 is ", ctx.input(0).describe());

  // Expand ellipses into right-aligned broadcast labels and check sizes.
  int64_t n_ell = 0;
  std::vector<int64_t> ell(eq.inputs.size(), 0);
  for (size_t i = 0; i < eq.inputs.size(); ++i) {
    const auto& t = eq.inputs[i];
    const bool has_ell = std::find(t.begin(), t.end(), kEllipsis) != t.end();
    const int64_t letters = static_cast<int64_t>(t.size()) - (has_ell ? 1 : 0);
    const int64_t rank = ctx.input(i).rank();
    REFORGE_CHECK(has_ell ? rank >= letters : rank == letters, label, ": einsum term ", i, " of '", raw, "' names ",
                  letters, " dimensions but input ", i, " is ", ctx.input(i).describe());
    ell[i] = rank - letters;
    n_ell = std::max(n_ell, ell[i]);
  }
  REFORGE_CHECK(n_ell <= kMaxLabels - kEllipsisBase, label, ": einsum ellipsis covers ", n_ell,
                " dimensions, more than the supported ", kMaxLabels - kEllipsisBase);
  Plan p;
  p.equation = raw;
  Sizes& size = p.size;
  size.fill(-1);
  std::vector<std::vector<int>>& terms = p.terms;
  terms.resize(eq.inputs.size());
  std::array<int, kMaxLabels> uses{};
  for (size_t i = 0; i < eq.inputs.size(); ++i) {
    const Tensor& x = ctx.input(i);
    for (int l : eq.inputs[i]) {
      if (l == kEllipsis)
        for (int64_t e = 0; e < ell[i]; ++e) terms[i].push_back(kEllipsisBase + static_cast<int>(n_ell - ell[i] + e));
      else
        terms[i].push_back(l);
    }
    std::vector<int64_t> seen(kMaxLabels, -1);
    for (size_t d = 0; d < terms[i].size(); ++d) {
      const int l = terms[i][d];
      const int64_t dim = x.dim(static_cast<int64_t>(d));
      if (l < kEllipsisBase) ++uses[l];
      auto name = [&] { return l >= kEllipsisBase ? std::string("...") : std::string(1, char(l)); };
      REFORGE_CHECK(seen[l] < 0 || seen[l] == dim, label, ": einsum label '", name(), "' repeated in input ", i,
                    " with different sizes (", seen[l], " and ", dim, ")");
      seen[l] = dim;
      if (size[l] < 0 || size[l] == 1)
        size[l] = dim;
      else
        REFORGE_CHECK(dim == size[l] || dim == 1, label, ": einsum label '", name(), "' has size ", size[l],
                      " in one input and ", dim, " in input ", i, " (", x.describe(), ")");
    }
  }
  std::vector<int>& out_labels = p.out_labels;
  if (eq.explicit_output) {
    for (int l : eq.output) {
      if (l == kEllipsis)
        for (int64_t e = 0; e < n_ell; ++e) out_labels.push_back(kEllipsisBase + static_cast<int>(e));
      else
        out_labels.push_back(l);
    }
  } else {
    for (int64_t e = 0; e < n_ell; ++e) out_labels.push_back(kEllipsisBase + static_cast<int>(e));
    for (int l = 0; l < kEllipsisBase; ++l)
      if (uses[l] == 1) out_labels.push_back(l);
  }
  return p;
}

}  // namespace einsum

namespace {

void einsum_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const einsum::Plan p = einsum::plan(ctx);
  const std::string& raw = p.equation;
  const DType dt = ctx.input(0).dtype();
  try {
    dispatch_numeric(
        dt,
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          einsum_typed<T>(ctx, p.terms, p.out_labels, p.size);
        },
        "Einsum");
  } catch (const std::bad_alloc&) {  // intermediates (outer products) can be far larger than the inputs
    fail(label, ": out of memory evaluating einsum '", raw, "' on ", ctx.input(0).describe(),
         ctx.num_inputs() > 1 ? " and others" : "");
  }
}

std::string einsum_check(const ir::Node& node) {
  if (!node.has_attr("equation")) return "attribute 'equation' is missing";
  try {
    const Equation eq = parse_equation(node.attr_string("equation", ""), node.label());
    if (eq.inputs.size() != node.inputs.size())
      return "equation has " + std::to_string(eq.inputs.size()) + " operands but the node has " +
             std::to_string(node.inputs.size()) + " inputs";
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

void register_einsum_kernels(OpRegistry& r) { r.add({"", "Einsum", 12, INT_MAX, einsum_kernel, einsum_check}); }

}  // namespace reforge::ops
