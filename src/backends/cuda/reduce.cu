// Reductions on the GPU: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
// ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare, and ArgMax/ArgMin.
//
// The input is planned as the CPU plans it: size-1 dimensions dropped, neighbouring dimensions
// that are both kept or both reduced merged. Each output element is a row of `count` input
// elements, reduced by one group of threads (a warp for short rows, a whole block for long ones):
// each thread folds a strided share of the row, then the group combines the partials by a tree in
// shared memory, so results are deterministic (no atomics). Accumulators: float32 for float32 and
// the 16-bit floats, float64 for float64 and for float products (as the CPU), uint64 (wrapping
// like the element type) for integer sums and products; max/min compare in the compute type and propagate NaN, and
// integer results of L2/LogSum/LogSumExp saturate as on the CPU (NaN -> 0).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/group_reduce.cuh"
#include "backends/cuda/launch.h"
#include "ops/reduce/reduce_setup.h"

namespace reforge::cuda {

namespace {

constexpr int kThreads = kGroupThreads;
// Rows at least this long get a whole block; shorter ones a warp.
constexpr int64_t kBlockRow = 2048;

// Rows of a reduction: the kept dimensions (outermost first) locate a row's first element, the
// reduced ones the elements within it; both with input element strides.
struct RowPlan {
  int kept_rank = 0;
  int red_rank = 0;
  int64_t kept_dims[kMaxRank] = {};
  int64_t kept_stride[kMaxRank] = {};
  int64_t red_dims[kMaxRank] = {};
  int64_t red_stride[kMaxRank] = {};
  int64_t rows = 1;   // output elements
  int64_t count = 1;  // input elements per output element

  __device__ __forceinline__ int64_t base(int64_t o) const {
    int64_t off = 0;
    for (int d = kept_rank - 1; d >= 0; --d) {
      const int64_t q = o / kept_dims[d];
      off += (o - q * kept_dims[d]) * kept_stride[d];
      o = q;
    }
    return off;
  }
  __device__ __forceinline__ int64_t offset(int64_t k) const {
    if (red_rank == 1) return k * red_stride[0];
    int64_t off = 0;
    for (int d = red_rank - 1; d >= 0; --d) {
      const int64_t q = k / red_dims[d];
      off += (k - q * red_dims[d]) * red_stride[d];
      k = q;
    }
    return off;
  }
};

// The plan of reducing `shape` over the axes flagged in `reduced`.
RowPlan make_row_plan(const Shape& shape, const std::vector<char>& reduced, const std::string& where) {
  std::vector<int64_t> dims;
  std::vector<char> red;
  RowPlan p;
  for (size_t a = 0; a < shape.size(); ++a) {
    if (reduced[a])
      p.count *= shape[a];
    else
      p.rows *= shape[a];
    if (shape[a] == 1) continue;
    if (!dims.empty() && red.back() == reduced[a]) {
      dims.back() *= shape[a];
    } else {
      dims.push_back(shape[a]);
      red.push_back(reduced[a]);
    }
  }
  std::vector<int64_t> stride(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    stride[i] = s;
    s *= dims[i];
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    int& r = red[i] ? p.red_rank : p.kept_rank;
    REFORGE_CHECK(r < kMaxRank, where, ": reduction of ", shape_str(shape), " exceeds the CUDA backend's rank ",
                  kMaxRank);
    (red[i] ? p.red_dims : p.kept_dims)[r] = dims[i];
    (red[i] ? p.red_stride : p.kept_stride)[r] = stride[i];
    ++r;
  }
  if (p.red_rank == 0) {  // nothing of size > 1 reduced: rows of one element (or none)
    p.red_rank = 1;
    p.red_dims[0] = 1;
    p.red_stride[0] = 0;
  }
  return p;
}

template <typename T>
__device__ __forceinline__ T lowest_of() {
  if constexpr (std::is_same_v<T, bool>)
    return false;
  else if constexpr (std::is_floating_point_v<T>)
    return -std::numeric_limits<T>::infinity();
  else
    return std::numeric_limits<T>::lowest();
}
template <typename T>
__device__ __forceinline__ T highest_of() {
  if constexpr (std::is_same_v<T, bool>)
    return true;
  else if constexpr (std::is_floating_point_v<T>)
    return std::numeric_limits<T>::infinity();
  else
    return std::numeric_limits<T>::max();
}

// A double result as element type T: integers NaN -> 0 and saturating, floats rounded.
template <typename T>
__device__ __forceinline__ T from_double(double v) {
  if constexpr (std::is_integral_v<T>) {
    if (v != v) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return store_c<T>(v);
  }
}

enum class Kind { Sum, Mean, SumSquare, L1, L2, LogSum, Prod, Max, Min };

// Sums and products of mapped elements.
template <typename T, Kind K>
struct SumLike {
  using C = compute_t<T>;
  // Float products accumulate in float64 as on the CPU, so that partial products do not overflow
  // or underflow where the CPU's do not.
  using Acc = std::conditional_t<std::is_integral_v<T>, uint64_t, std::conditional_t<K == Kind::Prod, double, C>>;
  using Out = T;
  int64_t count;
  __device__ Acc init() const { return K == Kind::Prod ? Acc(1) : Acc(0); }
  __device__ Acc combine(Acc a, Acc b) const { return K == Kind::Prod ? a * b : a + b; }
  __device__ Acc map(const T* x, int64_t off, int64_t) const {
    const C c = load_c(x, off);
    if constexpr (K == Kind::SumSquare || K == Kind::L2) {
      const Acc a = static_cast<Acc>(c);
      return a * a;
    } else if constexpr (K == Kind::L1) {
      if constexpr (!std::is_integral_v<T>)
        return fabs(c);
      else if constexpr (std::is_signed_v<T>)
        return c < 0 ? uint64_t(0) - static_cast<uint64_t>(c) : static_cast<uint64_t>(c);
      else
        return static_cast<uint64_t>(c);
    } else {
      return static_cast<Acc>(c);
    }
  }
  __device__ T finish(Acc a) const {
    if constexpr (std::is_integral_v<T>) {
      [[maybe_unused]] const double d =
          std::is_signed_v<T> ? static_cast<double>(static_cast<int64_t>(a)) : static_cast<double>(a);
      if constexpr (K == Kind::Mean) {
        if (count == 0) return T(0);
        if constexpr (std::is_signed_v<T>)
          return static_cast<T>(static_cast<int64_t>(a) / count);
        else
          return static_cast<T>(a / static_cast<uint64_t>(count));
      } else if constexpr (K == Kind::L2) {
        return from_double<T>(sqrt(d));
      } else if constexpr (K == Kind::LogSum) {
        return from_double<T>(log(d));
      } else {
        return static_cast<T>(a);
      }
    } else {
      if constexpr (K == Kind::Mean)
        return store_c<T>(a / static_cast<Acc>(count));
      else if constexpr (K == Kind::L2)
        return store_c<T>(sqrt(a));
      else if constexpr (K == Kind::LogSum)
        return store_c<T>(log(a));
      else
        return store_c<T>(a);
    }
  }
};

// Max (IsMax) or min; NaN sticks once seen, since no comparison with it is true.
template <typename T, bool IsMax>
struct Extremum {
  using Acc = compute_t<T>;
  using Out = T;
  __device__ static bool better(Acc v, Acc cur) {
    if constexpr (std::is_same_v<T, bool>)
      return IsMax ? (v && !cur) : (!v && cur);
    else if constexpr (IsMax)
      return v > cur || v != v;
    else
      return v < cur || v != v;
  }
  __device__ Acc init() const { return IsMax ? lowest_of<Acc>() : highest_of<Acc>(); }
  __device__ Acc combine(Acc a, Acc b) const { return better(b, a) ? b : a; }
  __device__ Acc map(const T* x, int64_t off, int64_t) const { return load_c(x, off); }
  __device__ T finish(Acc a) const { return store_c<T>(a); }
};

// ArgMax/ArgMin: the winning value and its index along the axis. NaN beats numbers; among equal
// values (NaNs included) the first index wins, or the last with select_last_index.
template <typename T, bool IsMax, bool Last>
struct ArgOp {
  using C = compute_t<T>;
  struct Acc {
    C v;
    int64_t i;  // -1: nothing seen
  };
  using Out = int64_t;
  __device__ Acc init() const { return Acc{C{}, -1}; }
  __device__ static bool index_wins(int64_t i, int64_t j) { return Last ? i > j : i < j; }
  // Whether b beats a.
  __device__ static bool beats(const Acc& b, const Acc& a) {
    if (b.i < 0) return false;
    if (a.i < 0) return true;
    const bool bn = b.v != b.v, an = a.v != a.v;
    if (bn || an) return bn && (!an || index_wins(b.i, a.i));
    if (b.v == a.v) return index_wins(b.i, a.i);
    if constexpr (std::is_same_v<T, bool>)
      return IsMax ? b.v : !b.v;
    else
      return IsMax ? b.v > a.v : b.v < a.v;
  }
  __device__ Acc combine(Acc a, Acc b) const { return beats(b, a) ? b : a; }
  __device__ Acc map(const T* x, int64_t off, int64_t k) const { return Acc{load_c(x, off), k}; }
  __device__ int64_t finish(Acc a) const { return a.i; }
};

// One group of G threads per row; rows walked grid-stride with uniform control flow.
template <int G, typename T, typename Op>
__global__ void reduce_rows(const T* x, typename Op::Out* y, RowPlan p, Op op) {
  using Acc = typename Op::Acc;
  constexpr int groups = kThreads / G;
  const int lane = threadIdx.x % G;
  for (int64_t first = int64_t{blockIdx.x} * groups; first < p.rows; first += int64_t{gridDim.x} * groups) {
    const int64_t row = first + threadIdx.x / G;
    Acc a = op.init();
    if (row < p.rows) {
      const int64_t b = p.base(row);
      for (int64_t k = lane; k < p.count; k += G) a = op.combine(a, op.map(x, b + p.offset(k), k));
    }
    const Acc r = group_combine<G>(a, [&](const Acc& u, const Acc& v) { return op.combine(u, v); });
    if (lane == 0 && row < p.rows) y[row] = op.finish(r);
  }
}

// ReduceLogSumExp: per row, the max m, then log(sum exp(x - m)) + m (m = +-inf: the max itself
// where any element equals it). Sums in float32 (float64 for float64 and integer inputs).
template <int G, typename T>
__global__ void log_sum_exp_rows(const T* x, T* y, RowPlan p) {
  using C = compute_t<T>;
  using S = std::conditional_t<std::is_same_v<C, float>, float, double>;
  Extremum<T, true> mx;
  constexpr int groups = kThreads / G;
  const int lane = threadIdx.x % G;
  for (int64_t first = int64_t{blockIdx.x} * groups; first < p.rows; first += int64_t{gridDim.x} * groups) {
    const int64_t row = first + threadIdx.x / G;
    const bool live = row < p.rows;
    const int64_t b = live ? p.base(row) : 0;
    C m = mx.init();
    if (live)
      for (int64_t k = lane; k < p.count; k += G) m = mx.combine(m, mx.map(x, b + p.offset(k), k));
    m = group_combine<G>(m, [&](C u, C v) { return mx.combine(u, v); });
    const S ms = static_cast<S>(m);
    const bool inf = isinf(ms);
    S s = 0;
    if (live)
      for (int64_t k = lane; k < p.count; k += G) {
        const S v = static_cast<S>(load_c(x, b + p.offset(k)));
        s += inf ? (v == ms ? S(1) : S(0)) : exp(v - ms);
      }
    s = group_combine<G>(s, [](S u, S v) { return u + v; });
    if (lane == 0 && live) y[row] = from_double<T>(static_cast<double>(inf && s > 0 ? ms : log(s) + ms));
  }
}

template <typename T, typename Op>
void launch_rows(const T* x, typename Op::Out* y, const RowPlan& p, const Op& op, const char* where) {
  if (p.rows == 0) return;
  if (p.count >= kBlockRow)
    reduce_rows<kThreads, T, Op><<<row_grid(p.rows, 1), kThreads, 0, stream()>>>(x, y, p, op);
  else
    reduce_rows<32, T, Op><<<row_grid(p.rows, kThreads / 32), kThreads, 0, stream()>>>(x, y, p, op);
  check_launch(where);
}

template <typename T>
void run_reduce(Kind kind, bool lse, const Tensor& x, Tensor& y, const RowPlan& p, const char* where) {
  const T* in = x.data<T>();
  T* out = y.mutable_data<T>();
  if constexpr (std::is_same_v<T, bool>) {
    REFORGE_CHECK(!lse, where, ": ReduceLogSumExp of bool is not defined");
  } else if (lse) {
    if (p.rows == 0) return;
    if (p.count >= kBlockRow)
      log_sum_exp_rows<kThreads, T><<<row_grid(p.rows, 1), kThreads, 0, stream()>>>(in, out, p);
    else
      log_sum_exp_rows<32, T><<<row_grid(p.rows, kThreads / 32), kThreads, 0, stream()>>>(in, out, p);
    check_launch(where);
    return;
  }
  switch (kind) {
    case Kind::Max:
      return launch_rows(in, out, p, Extremum<T, true>{}, where);
    case Kind::Min:
      return launch_rows(in, out, p, Extremum<T, false>{}, where);
    default:
      break;
  }
  if constexpr (!std::is_same_v<T, bool>) {
    switch (kind) {
      case Kind::Sum:
        return launch_rows(in, out, p, SumLike<T, Kind::Sum>{p.count}, where);
      case Kind::Mean:
        return launch_rows(in, out, p, SumLike<T, Kind::Mean>{p.count}, where);
      case Kind::SumSquare:
        return launch_rows(in, out, p, SumLike<T, Kind::SumSquare>{p.count}, where);
      case Kind::L1:
        return launch_rows(in, out, p, SumLike<T, Kind::L1>{p.count}, where);
      case Kind::L2:
        return launch_rows(in, out, p, SumLike<T, Kind::L2>{p.count}, where);
      case Kind::LogSum:
        return launch_rows(in, out, p, SumLike<T, Kind::LogSum>{p.count}, where);
      case Kind::Prod:
        return launch_rows(in, out, p, SumLike<T, Kind::Prod>{p.count}, where);
      default:
        break;
    }
  }
  fail(where, ": reduction of ", dtype_name(x.dtype()), " is not defined");
}

// The CPU's reduce_kernel (ops/reduce/reduce.cc) on the device, with its axes (ops::reduce_setup).
void reduce_kernel(ops::KernelContext& ctx, Kind kind, bool lse, int axes_input_since) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const ops::ReduceSetup s = ops::reduce_setup(ctx, axes_input_since, !lse && (kind == Kind::Max || kind == Kind::Min));
  if (s.identity) {
    ctx.set_output(0, x);
    return;
  }
  const RowPlan plan = make_row_plan(x.shape(), s.flags, label);
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), s.out);
  dispatch_device(x.dtype(), label.c_str(),
                  [&](auto tag) { run_reduce<typename decltype(tag)::type>(kind, lse, x, y, plan, label.c_str()); });
}

// The CPU's arg_kernel (ops/reduce/reduce_arg.cc) on the device.
template <bool IsMax>
void arg_kernel(ops::KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const ops::ArgSetup s = ops::arg_setup(ctx, IsMax);
  const bool last = s.last;
  const std::vector<char>& flags = s.flags;
  Tensor& y = ctx.allocate_output_uninit(0, DType::Int64, s.out);
  if (y.numel() == 0) return;
  const RowPlan plan = make_row_plan(x.shape(), flags, label);
  dispatch_device(x.dtype(), label.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (last)
      launch_rows(x.data<T>(), y.mutable_data<int64_t>(), plan, ArgOp<T, IsMax, true>{}, label.c_str());
    else
      launch_rows(x.data<T>(), y.mutable_data<int64_t>(), plan, ArgOp<T, IsMax, false>{}, label.c_str());
  });
}

}  // namespace

void register_reduce_kernels(backends::KernelRegistry& r) {
  struct Entry {
    const char* name;
    Kind kind;
    bool lse;
    int axes_input_since;
  };
  // Axes became an input at opset 13 for ReduceSum and at opset 18 for the others.
  const Entry entries[] = {
      {"ReduceSum", Kind::Sum, false, 13},
      {"ReduceMean", Kind::Mean, false, 18},
      {"ReduceSumSquare", Kind::SumSquare, false, 18},
      {"ReduceL1", Kind::L1, false, 18},
      {"ReduceL2", Kind::L2, false, 18},
      {"ReduceLogSum", Kind::LogSum, false, 18},
      {"ReduceLogSumExp", Kind::Max, true, 18},
      {"ReduceProd", Kind::Prod, false, 18},
      {"ReduceMax", Kind::Max, false, 18},
      {"ReduceMin", Kind::Min, false, 18},
  };
  for (const Entry& e : entries) {
    const Kind kind = e.kind;
    const bool lse = e.lse;
    const int since = e.axes_input_since;
    add_kernel(r, "", e.name, [kind, lse, since](ops::KernelContext& ctx) { reduce_kernel(ctx, kind, lse, since); });
  }
  add_kernel(r, "", "ArgMax", arg_kernel<true>);
  add_kernel(r, "", "ArgMin", arg_kernel<false>);
}

}  // namespace reforge::cuda
