#include "ops/tensor/tensor_common.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"
#include "ops/tensor/transpose2d.h"

namespace reforge::ops {

int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& where) {
  if (axis < -rank || axis >= rank) fail(where, ": axis ", axis, " is out of range for a tensor of rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> read_int_tensor(const Tensor& t, const std::string& where, const char* what) {
  if (!is_integer(t.dtype())) fail(where, ": ", what, " must be an integer tensor, got ", t.describe());
  if (t.rank() > 1) fail(where, ": ", what, " must be a scalar or 1-D tensor, got ", t.describe());
  return t.to_int64_vector();
}

std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const std::string& where) {
  std::vector<int64_t> out;
  out.reserve(axes.size());
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(rank, 0)), false);
  for (int64_t a : axes) {
    int64_t n = normalize_axis(a, rank, where);
    if (seen[static_cast<size_t>(n)]) fail(where, ": axis ", a, " is given more than once");
    seen[static_cast<size_t>(n)] = true;
    out.push_back(n);
  }
  return out;
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

namespace {

// Rows of the merged iteration space are split into chunks of about this many elements; above
// one chunk the rows run in parallel.
constexpr int64_t kCopyChunk = int64_t{1} << 15;

constexpr int64_t kTile = 32;

// Transpose-like copies: the innermost output dim reads the source with a large stride, but
// outer dim `p` reads it contiguously. Each (p, inner) plane is a strided 2-D transpose, done by
// transpose_2d's tile kernel (transpose_block), so both reads and writes stay within a few cache
// lines instead of striding through the source once per output row.
template <typename T>
void tiled_copy(T* dst, const T* src, const std::vector<int64_t>& dims, const std::vector<int64_t>& st, size_t p,
                int64_t inner, int64_t istride, int64_t offset) {
  const size_t nd = dims.size();
  std::vector<int64_t> ost(nd);  // output element strides of the outer dims
  for (size_t d = nd, acc = static_cast<size_t>(inner); d-- > 0;) {
    ost[d] = static_cast<int64_t>(acc);
    acc *= static_cast<size_t>(dims[d]);
  }
  const int64_t A = dims[p], osp = ost[p];
  int64_t rows = 1;  // all outer positions except dim p
  for (size_t d = 0; d < nd; ++d)
    if (d != p) rows *= dims[d];
  const int threads = rows * A * inner > (int64_t{1} << 16) && rows > 1 ? omp_get_max_threads() : 1;
  parallel_for(rows, threads, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t sbase = offset, dbase = 0;
      for (int64_t rr = r, d = static_cast<int64_t>(nd) - 1; d >= 0; --d) {
        if (static_cast<size_t>(d) == p) continue;
        const int64_t i = rr % dims[static_cast<size_t>(d)];
        rr /= dims[static_cast<size_t>(d)];
        sbase += i * st[static_cast<size_t>(d)];
        dbase += i * ost[static_cast<size_t>(d)];
      }
      // dst[dbase + a * osp + b] = src[sbase + a + b * istride]: a [inner, A] matrix with row pitch
      // istride, transposed into rows of pitch osp, by transpose_2d's tile kernel.
      transpose_block(dst + dbase, osp, src + sbase, istride, inner, A, sizeof(T));
    }
  });
}

template <typename T>
void strided_copy_typed(T* dst, const T* src, const std::vector<int64_t>& dims, const std::vector<int64_t>& st,
                        int64_t inner, int64_t istride, int64_t offset) {
  const size_t nd = dims.size();
  if (istride != 1 && inner >= kTile / 2) {
    for (size_t p = 0; p < nd; ++p)
      if (st[p] == 1 && dims[p] >= kTile / 2) return tiled_copy(dst, src, dims, st, p, inner, istride, offset);
  }
  int64_t rows = 1;
  for (int64_t d : dims) rows *= d;
  const int64_t rows_per_chunk = std::max<int64_t>(1, kCopyChunk / inner);
  const int64_t nchunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  parallel_tasks(nchunks, nchunks > 1 ? omp_get_max_threads() : 1, [&](int64_t c) {
    const int64_t r0 = c * rows_per_chunk;
    const int64_t r1 = std::min(rows, r0 + rows_per_chunk);
    // Odometer over the outer dims: consecutive rows cost additions, not divisions.
    std::vector<int64_t> idx(nd);
    int64_t base = offset;
    for (int64_t r = r0, d = static_cast<int64_t>(nd) - 1; d >= 0; --d) {
      idx[static_cast<size_t>(d)] = r % dims[static_cast<size_t>(d)];
      r /= dims[static_cast<size_t>(d)];
      base += idx[static_cast<size_t>(d)] * st[static_cast<size_t>(d)];
    }
    for (int64_t r = r0; r < r1; ++r) {
      T* out = dst + r * inner;
      const T* in = src + base;
      if (istride == 1) {
        std::memcpy(out, in, static_cast<size_t>(inner) * sizeof(T));
      } else {
        for (int64_t i = 0; i < inner; ++i) out[i] = in[i * istride];
      }
      for (size_t d = nd; d-- > 0;) {
        base += st[d];
        if (++idx[d] < dims[d]) break;
        base -= dims[d] * st[d];
        idx[d] = 0;
      }
    }
  });
}

}  // namespace

void strided_copy(void* dst, const void* src, size_t elem, const Shape& out_shape,
                  const std::vector<int64_t>& src_strides, int64_t src_offset) {
  REFORGE_ASSERT(out_shape.size() == src_strides.size());
  if (shape_numel(out_shape) == 0) return;
  // Drop size-1 dims and merge a dim into the previous one when the source walks both as one
  // (stride[prev] == stride[d] * dim[d]); a plain contiguous copy becomes a single memcpy.
  std::vector<int64_t> dims, st;
  for (size_t d = 0; d < out_shape.size(); ++d) {
    if (out_shape[d] == 1) continue;
    if (!dims.empty() && st.back() == src_strides[d] * out_shape[d]) {
      dims.back() *= out_shape[d];
      st.back() = src_strides[d];
    } else {
      dims.push_back(out_shape[d]);
      st.push_back(src_strides[d]);
    }
  }
  int64_t inner = 1, istride = 1;
  if (!dims.empty()) {
    inner = dims.back();
    istride = st.back();
    dims.pop_back();
    st.pop_back();
  }
  switch (elem) {
    case 1:
      return strided_copy_typed(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), dims, st, inner, istride,
                                src_offset);
    case 2:
      return strided_copy_typed(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), dims, st, inner,
                                istride, src_offset);
    case 4:
      return strided_copy_typed(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), dims, st, inner,
                                istride, src_offset);
    case 8:
      return strided_copy_typed(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src), dims, st, inner,
                                istride, src_offset);
    default:
      fail("strided copy: unsupported element size ", elem);
  }
}

}  // namespace reforge::ops
