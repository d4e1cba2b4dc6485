// Reduce* operators: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceSumSquare, ReduceLogSum, ReduceLogSumExp.
//
// Every reduction is planned the same way: size-1 dimensions are dropped and neighbouring
// dimensions that are both reduced or both kept are merged, so any axes set becomes a short
// alternation such as [kept, reduced] (last-axis reduction), [reduced, kept] or
// [kept, reduced, kept] (middle axes). The input is then walked once in memory order, one
// contiguous innermost run at a time: a reduced innermost run collapses into one accumulator
// (a multi-lane loop), a kept innermost run is combined elementwise into a row of accumulators.
// Both are vectorized, so last-axis and middle-axis reductions both stream the input at full
// speed, whatever the axes.
//
// Accumulators: float16/bfloat16/float32/float64 sums and products accumulate in double (so
// float32 sums of millions of elements stay exact to float precision); integer sums and products
// use uint64 arithmetic, which wraps like the element type does (the result is cast back);
// max/min compare in the compute type and propagate NaN like numpy (float and double through
// the explicit vector code of extremum_scan.h, which the compiler would not produce itself; the
// scans are an argument, so the CPU backend runs these kernels with its per-instruction-set ones).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/thread_pool.h"
#include "ops/reduce/extremum_scan.h"
#include "ops/reduce/reduce_setup.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

constexpr int kLanes = 8;
constexpr int64_t kParallelThreshold = 1 << 15;

int thread_count(const KernelContext& ctx) { return ctx.threads() > 0 ? ctx.threads() : omp_get_max_threads(); }

template <typename T>
constexpr bool is_float_storage =
    std::is_floating_point_v<T> || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// Sum/product accumulator: double for all floats, uint64 (wrapping) for integers.
template <typename T>
using sum_acc_t = std::conditional_t<is_float_storage<T>, double, uint64_t>;

// Converts a double result to the element type without undefined behaviour for integers
// (NaN -> 0, out-of-range saturates), rounding to nearest even for 16-bit floats.
template <typename T>
T from_double(double v) {
  if constexpr (is_float_storage<T>) {
    if constexpr (std::is_same_v<T, double>)
      return v;
    else
      return from_compute<T>(static_cast<float>(v));
  } else {
    if (std::isnan(v)) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

// Integer accumulators hold values modulo 2^64; read them back as signed when T is signed.
template <typename T>
double acc_to_double(sum_acc_t<T> a) {
  if constexpr (is_float_storage<T>)
    return a;
  else if constexpr (std::is_signed_v<T>)
    return static_cast<double>(static_cast<int64_t>(a));
  else
    return static_cast<double>(a);
}

// ---- reduction plan ----

struct ReducePlan {
  std::vector<int64_t> dims;        // merged input dims, outermost first
  std::vector<char> reduced;        // per merged dim
  std::vector<int64_t> out_stride;  // per merged dim: stride in the output, 0 when reduced
  int64_t in_numel = 0;
  int64_t out_numel = 0;
  int64_t count = 0;  // input elements per output element
};

ReducePlan make_plan(const Shape& shape, const std::vector<char>& reduce_axis) {
  ReducePlan p;
  p.in_numel = shape_numel(shape);
  p.out_numel = 1;
  p.count = 1;
  for (size_t a = 0; a < shape.size(); ++a) {
    const int64_t d = shape[a];
    if (reduce_axis[a])
      p.count *= d;
    else
      p.out_numel *= d;
    if (d == 1) continue;  // size-1 dims do not change the memory layout
    if (!p.dims.empty() && p.reduced.back() == reduce_axis[a]) {
      p.dims.back() *= d;
    } else {
      p.dims.push_back(d);
      p.reduced.push_back(reduce_axis[a]);
    }
  }
  if (p.dims.empty()) {  // scalar or all-ones shape: one element reduced into one output
    p.dims.push_back(1);
    p.reduced.push_back(1);
  }
  p.out_stride.assign(p.dims.size(), 0);
  int64_t s = 1;
  for (size_t i = p.dims.size(); i-- > 0;) {
    if (p.reduced[i]) continue;
    p.out_stride[i] = s;
    s *= p.dims[i];
  }
  return p;
}

// Walks the input rows [r0, r1) (a row is one run of the innermost merged dim) and folds them
// into acc: a reduced innermost run collapses with op.row, a kept one is combined elementwise with
// op.col over columns [c0, c1).
template <typename T, typename Op>
void walk_rows(const ReducePlan& p, const T* x, const Op& op, typename Op::Acc* acc, int64_t r0, int64_t r1, int64_t c0,
               int64_t c1) {
  const int m = static_cast<int>(p.dims.size());
  const int64_t len = p.dims[m - 1];
  const bool inner_reduced = p.reduced[m - 1];
  std::vector<int64_t> idx(static_cast<size_t>(m), 0);
  int64_t out_off = 0;
  for (int64_t rest = r0, d = m - 2; d >= 0; --d) {
    idx[d] = rest % p.dims[d];
    rest /= p.dims[d];
    out_off += idx[d] * p.out_stride[d];
  }
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = x + r * len;
    if (inner_reduced)
      acc[out_off] = op.combine(acc[out_off], op.row(row, len, out_off));
    else
      op.col(acc + out_off + c0, row + c0, c1 - c0, out_off + c0);
    for (int d = m - 2; d >= 0; --d) {
      out_off += p.out_stride[d];
      if (++idx[d] < p.dims[d]) break;
      out_off -= p.out_stride[d] * p.dims[d];
      idx[d] = 0;
    }
  }
}

// One long contiguous run reduced by all threads: per-thread partials, combined in order.
template <typename T, typename Op>
typename Op::Acc parallel_row(const T* x, int64_t len, int64_t out_off, const Op& op, int threads) {
  // Not std::vector: vector<bool> packs bits, and threads write neighbouring entries.
  std::unique_ptr<typename Op::Acc[]> part(new typename Op::Acc[static_cast<size_t>(threads)]);
  const int64_t chunk = (len + threads - 1) / threads;
  parallel_tasks(threads, threads, [&](int64_t t) {
    const int64_t b = std::min(len, t * chunk), e = std::min(len, b + chunk);
    part[t] = b < e ? op.row(x + b, e - b, out_off) : op.init();
  });
  typename Op::Acc a = op.init();
  for (int t = 0; t < threads; ++t) a = op.combine(a, part[t]);
  return a;
}

// Runs the whole reduction into acc (out_numel accumulators, already holding op.init()).
// Threads split work so that no two threads write the same accumulator: by ranges of the
// outermost dimension when it is kept, by column ranges when the innermost is kept, or into
// per-thread partials when a few long runs are reduced.
template <typename T, typename Op>
void reduce_into(const ReducePlan& p, const T* x, const Op& op, typename Op::Acc* acc, int threads) {
  if (p.in_numel == 0) return;
  const int m = static_cast<int>(p.dims.size());
  const int64_t len = p.dims[m - 1];
  const int64_t rows = p.in_numel / len;
  const bool inner_reduced = p.reduced[m - 1];
  if (threads <= 1 || p.in_numel < kParallelThreshold) {
    walk_rows(p, x, op, acc, 0, rows, 0, len);
    return;
  }
  if (m >= 2 && !p.reduced[0] && p.dims[0] >= threads) {
    const int64_t per = rows / p.dims[0];  // rows under one index of the outer dim
    const int64_t chunk = (p.dims[0] + threads - 1) / threads;
    parallel_tasks(threads, threads, [&](int64_t t) {
      const int64_t b = std::min(p.dims[0], t * chunk), e = std::min(p.dims[0], b + chunk);
      if (b < e) walk_rows(p, x, op, acc, b * per, e * per, 0, len);
    });
    return;
  }
  if (!inner_reduced && len >= 64 * threads) {
    const int64_t chunk = (len + threads - 1) / threads;
    parallel_tasks(threads, threads, [&](int64_t t) {
      const int64_t c0 = std::min(len, t * chunk), c1 = std::min(len, c0 + chunk);
      if (c0 < c1) walk_rows(p, x, op, acc, 0, rows, c0, c1);
    });
    return;
  }
  if (inner_reduced && (m == 1 || (m == 2 && !p.reduced[0]))) {  // a few long rows, one output each
    for (int64_t r = 0; r < rows; ++r) acc[r] = op.combine(acc[r], parallel_row(x + r * len, len, r, op, threads));
    return;
  }
  walk_rows(p, x, op, acc, 0, rows, 0, len);
}

// ---- reduction operators (each: init, combine, row, col) ----

// Sum of map(x): Sum, Mean, SumSquare, L1, L2, LogSum.
template <typename T, typename Map>
struct SumOp {
  using Acc = sum_acc_t<T>;
  Map map;
  Acc init() const { return Acc(0); }
  Acc combine(Acc a, Acc b) const { return a + b; }
  Acc row(const T* x, int64_t n, int64_t) const {
    Acc lane[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) lane[j] += map(x[i + j]);
    Acc s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    for (; i < n; ++i) s += map(x[i]);
    return s;
  }
  void col(Acc* acc, const T* x, int64_t n, int64_t) const {
    for (int64_t j = 0; j < n; ++j) acc[j] += map(x[j]);
  }
};

template <typename T>
struct MapIdentity {
  sum_acc_t<T> operator()(T v) const { return static_cast<sum_acc_t<T>>(to_compute(v)); }
};
template <typename T>
struct MapSquare {
  sum_acc_t<T> operator()(T v) const {
    auto a = static_cast<sum_acc_t<T>>(to_compute(v));
    return a * a;
  }
};
template <typename T>
struct MapAbs {
  sum_acc_t<T> operator()(T v) const {
    if constexpr (is_float_storage<T>)
      return std::fabs(static_cast<double>(to_compute(v)));
    else if constexpr (std::is_signed_v<T>) {
      auto u = static_cast<uint64_t>(v);
      return v < 0 ? uint64_t(0) - u : u;
    } else {
      return static_cast<uint64_t>(v);
    }
  }
};

template <typename T>
struct ProdOp {
  using Acc = sum_acc_t<T>;
  Acc init() const { return Acc(1); }
  Acc combine(Acc a, Acc b) const { return a * b; }
  Acc row(const T* x, int64_t n, int64_t) const {
    Acc s = 1;
    for (int64_t i = 0; i < n; ++i) s *= static_cast<Acc>(to_compute(x[i]));
    return s;
  }
  void col(Acc* acc, const T* x, int64_t n, int64_t) const {
    for (int64_t j = 0; j < n; ++j) acc[j] *= static_cast<Acc>(to_compute(x[j]));
  }
};

// Max (IsMax) or min, NaN-propagating: once NaN is seen it sticks, since no comparison with it
// is true.
template <typename T, bool IsMax>
struct ExtremumOp {
  using Acc = compute_t<T>;
  const extremum::ExtremumScans* scans;
  static bool better(Acc v, Acc cur) {
    if constexpr (IsMax)
      return v > cur || v != v;
    else
      return v < cur || v != v;
  }
  Acc init() const {
    if constexpr (std::is_floating_point_v<Acc>)
      return IsMax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    else
      return IsMax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
  }
  Acc combine(Acc a, Acc b) const { return better(b, a) ? b : a; }
  Acc row(const T* x, int64_t n, int64_t) const {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      bool nan = false;
      const T m = scans->of<T>().template row<IsMax>(x, n, init(), &nan);
      return nan ? std::numeric_limits<T>::quiet_NaN() : m;
    } else {
      Acc lane[kLanes];
      for (auto& l : lane) l = init();
      int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes)
        for (int j = 0; j < kLanes; ++j) {
          Acc v = to_compute(x[i + j]);
          lane[j] = better(v, lane[j]) ? v : lane[j];
        }
      Acc s = init();
      for (auto l : lane) s = combine(s, l);
      for (; i < n; ++i) s = combine(s, to_compute(x[i]));
      return s;
    }
  }
  void col(Acc* acc, const T* x, int64_t n, int64_t) const {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      scans->of<T>().template col<IsMax>(acc, x, n);
    } else {
      for (int64_t j = 0; j < n; ++j) {
        Acc v = to_compute(x[j]);
        acc[j] = better(v, acc[j]) ? v : acc[j];
      }
    }
  }
};

// Second pass of ReduceLogSumExp: sum of exp(x - max) with the max of each output.
template <typename T>
struct SumExpOp {
  using Acc = double;
  const double* maxv;
  static double shifted_exp(double v, double m) { return std::isinf(m) ? (v == m ? 1.0 : 0.0) : std::exp(v - m); }
  Acc init() const { return 0; }
  Acc combine(Acc a, Acc b) const { return a + b; }
  Acc row(const T* x, int64_t n, int64_t out_off) const {
    const double m = maxv[out_off];
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += shifted_exp(static_cast<double>(to_compute(x[i])), m);
    return s;
  }
  void col(Acc* acc, const T* x, int64_t n, int64_t out_off) const {
    for (int64_t j = 0; j < n; ++j) acc[j] += shifted_exp(static_cast<double>(to_compute(x[j])), maxv[out_off + j]);
  }
};

enum class Kind { Sum, Mean, SumSquare, L1, L2, LogSum, LogSumExp, Prod, Max, Min };

template <typename Op, typename T, typename Finish>
void run_op(const ReducePlan& p, const T* x, T* y, const Op& op, int threads, Finish finish) {
  // Not std::vector: vector<bool> (ReduceMax of bool) has no data() and packs bits.
  std::unique_ptr<typename Op::Acc[]> acc(new typename Op::Acc[static_cast<size_t>(p.out_numel)]);
  for (int64_t i = 0; i < p.out_numel; ++i) acc[i] = op.init();
  reduce_into(p, x, op, acc.get(), threads);
  for (int64_t i = 0; i < p.out_numel; ++i) y[i] = finish(acc[i]);
}

template <typename T>
void reduce_typed(Kind kind, const ReducePlan& p, const T* x, T* y, int threads, const extremum::ExtremumScans& scans) {
  using Acc = sum_acc_t<T>;
  const int64_t count = p.count;
  switch (kind) {
    case Kind::Sum:
      return run_op(p, x, y, SumOp<T, MapIdentity<T>>{}, threads, [](Acc a) {
        if constexpr (is_float_storage<T>)
          return from_double<T>(a);
        else
          return static_cast<T>(a);
      });
    case Kind::Mean:
      return run_op(p, x, y, SumOp<T, MapIdentity<T>>{}, threads, [count](Acc a) {
        if constexpr (is_float_storage<T>) {
          return from_double<T>(a / static_cast<double>(count));
        } else {
          if (count == 0) return T(0);
          if constexpr (std::is_signed_v<T>)
            return static_cast<T>(static_cast<int64_t>(a) / count);
          else
            return static_cast<T>(a / static_cast<uint64_t>(count));
        }
      });
    case Kind::SumSquare:
      return run_op(p, x, y, SumOp<T, MapSquare<T>>{}, threads, [](Acc a) {
        if constexpr (is_float_storage<T>)
          return from_double<T>(a);
        else
          return static_cast<T>(a);
      });
    case Kind::L1:
      return run_op(p, x, y, SumOp<T, MapAbs<T>>{}, threads, [](Acc a) {
        if constexpr (is_float_storage<T>)
          return from_double<T>(a);
        else
          return static_cast<T>(a);
      });
    case Kind::L2:
      return run_op(p, x, y, SumOp<T, MapSquare<T>>{}, threads,
                    [](Acc a) { return from_double<T>(std::sqrt(acc_to_double<T>(a))); });
    case Kind::LogSum:
      return run_op(p, x, y, SumOp<T, MapIdentity<T>>{}, threads,
                    [](Acc a) { return from_double<T>(std::log(acc_to_double<T>(a))); });
    case Kind::Prod:
      return run_op(p, x, y, ProdOp<T>{}, threads, [](Acc a) {
        if constexpr (is_float_storage<T>)
          return from_double<T>(a);
        else
          return static_cast<T>(a);
      });
    case Kind::Max:
      return run_op(p, x, y, ExtremumOp<T, true>{&scans}, threads, [](compute_t<T> a) { return from_compute<T>(a); });
    case Kind::Min:
      return run_op(p, x, y, ExtremumOp<T, false>{&scans}, threads, [](compute_t<T> a) { return from_compute<T>(a); });
    case Kind::LogSumExp: {
      // Two passes for stability: the max of each output, then log(sum(exp(x - max))) + max.
      ExtremumOp<T, true> max_op{&scans};
      std::unique_ptr<compute_t<T>[]> mx(new compute_t<T>[static_cast<size_t>(p.out_numel)]);
      for (int64_t i = 0; i < p.out_numel; ++i) mx[i] = max_op.init();
      reduce_into(p, x, max_op, mx.get(), threads);
      std::vector<double> maxd(mx.get(), mx.get() + p.out_numel);
      SumExpOp<T> sum_op{maxd.data()};
      std::vector<double> acc(static_cast<size_t>(p.out_numel), 0.0);
      reduce_into(p, x, sum_op, acc.data(), threads);
      for (int64_t i = 0; i < p.out_numel; ++i) {
        const double m = maxd[static_cast<size_t>(i)];
        const double s = acc[static_cast<size_t>(i)];
        y[i] = from_double<T>(std::isinf(m) && s > 0 ? m : std::log(s) + m);
      }
      return;
    }
  }
}

// Reads the axes (reduce_setup), applies noop_with_empty_axes and keepdims, and runs the
// reduction.
void reduce_kernel(KernelContext& ctx, Kind kind, int axes_input_since, const extremum::ExtremumScans& scans) {
  const Tensor& x = ctx.input(0);
  const ReduceSetup s = reduce_setup(ctx, axes_input_since, kind == Kind::Max || kind == Kind::Min);
  if (s.identity) {
    ctx.set_output(0, x);
    return;
  }
  const DType dt = x.dtype();
  const ReducePlan plan = make_plan(x.shape(), s.flags);
  Tensor& y = ctx.allocate_output(0, dt, s.out);
  const int threads = thread_count(ctx);
  if (dt == DType::Bool) {
    reduce_typed<bool>(kind, plan, x.data<bool>(), y.mutable_data<bool>(), threads, scans);
    return;
  }
  dispatch_numeric(
      dt,
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        reduce_typed<T>(kind, plan, x.data<T>(), y.mutable_data<T>(), threads, scans);
      },
      ctx.node().op_type.c_str());
}

}  // namespace

namespace extremum {
void reduce_extremum_kernel(KernelContext& ctx, bool is_max, const ExtremumScans& scans) {
  reduce_kernel(ctx, is_max ? Kind::Max : Kind::Min, 18, scans);
}
void reduce_log_sum_exp_kernel(KernelContext& ctx, const ExtremumScans& scans) {
  reduce_kernel(ctx, Kind::LogSumExp, 18, scans);
}
}  // namespace extremum

// Axes became an input at opset 13 for ReduceSum and at opset 18 for the others.
void register_reduce_kernels(OpRegistry& r) {
  struct Entry {
    const char* name;
    Kind kind;
    int axes_input_since;
  };
  const Entry entries[] = {
      {"ReduceSum", Kind::Sum, 13},
      {"ReduceMean", Kind::Mean, 18},
      {"ReduceSumSquare", Kind::SumSquare, 18},
      {"ReduceL1", Kind::L1, 18},
      {"ReduceL2", Kind::L2, 18},
      {"ReduceLogSum", Kind::LogSum, 18},
      {"ReduceLogSumExp", Kind::LogSumExp, 18},
      {"ReduceProd", Kind::Prod, 18},
      {"ReduceMax", Kind::Max, 18},
      {"ReduceMin", Kind::Min, 18},
  };
  for (const Entry& e : entries) {
    const Kind kind = e.kind;
    const int since = e.axes_input_since;
    r.add({"",
           e.name,
           1,
           INT_MAX,
           [kind, since](KernelContext& ctx) { reduce_kernel(ctx, kind, since, extremum::reference_scans()); },
           nullptr,
           nullptr,
           {InputRole::kData, InputRole::kShape}});
  }
}

}  // namespace reforge::ops
