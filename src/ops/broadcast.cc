#include "ops/broadcast.h"

namespace reforge::ops {

Shape broadcast_shapes(const std::vector<Shape>& shapes, const std::string& where) {
  REFORGE_ASSERT(!shapes.empty());
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  // Which operand fixed each output dim to a size other than 1, for the error message.
  std::vector<size_t> owner(rank, 0);
  for (size_t k = 0; k < shapes.size(); ++k) {
    const Shape& s = shapes[k];
    for (size_t j = 0; j < s.size(); ++j) {
      const size_t od = rank - 1 - j;
      const int64_t d = s[s.size() - 1 - j];
      REFORGE_CHECK(d >= 0, where, where.empty() ? "" : ": ", "negative dimension in shape ", shape_str(s));
      if (d == 1 || d == out[od]) continue;
      if (out[od] == 1) {
        out[od] = d;
        owner[od] = k;
        continue;
      }
      std::string all;
      for (size_t i = 0; i < shapes.size(); ++i) all += (i ? " and " : "") + shape_str(shapes[i]);
      fail(where, where.empty() ? "" : ": ", "shapes ", all, " are not broadcastable (dimension ",
           static_cast<int64_t>(od) - static_cast<int64_t>(rank), ": ", out[od], " in ", shape_str(shapes[owner[od]]),
           " vs ", d, " in ", shape_str(s), ")");
    }
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t j = 0; j < from.size(); ++j) {
    const int64_t f = from[from.size() - 1 - j];
    const int64_t t = to[to.size() - 1 - j];
    if (f != t && f != 1) return false;
  }
  return true;
}

}  // namespace reforge::ops

namespace reforge::ops {

Shape legacy_broadcast_shape(const Shape& a, const Shape& b, bool has_axis, int64_t axis, const std::string& where) {
  const int64_t ra = static_cast<int64_t>(a.size());
  const int64_t rb = static_cast<int64_t>(b.size());
  if (!has_axis) axis = ra - rb;
  if (axis < 0) axis += ra;
  REFORGE_CHECK(rb <= ra && axis >= 0 && axis + rb <= ra, where, where.empty() ? "" : ": ", "cannot broadcast ",
                shape_str(b), " into ", shape_str(a), " at axis ", axis);
  Shape out(static_cast<size_t>(ra), 1);
  for (int64_t i = 0; i < rb; ++i) {
    const int64_t d = b[static_cast<size_t>(i)];
    REFORGE_CHECK(d == 1 || d == a[static_cast<size_t>(axis + i)], where, where.empty() ? "" : ": ",
                  "cannot broadcast ", shape_str(b), " into ", shape_str(a), " at axis ", axis);
    out[static_cast<size_t>(axis + i)] = d;
  }
  return out;
}

}  // namespace reforge::ops

namespace reforge::ops {

BinaryShapes binary_shapes(const KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const std::string where = ctx.node().label();
  BinaryShapes s{a.shape(), b.shape(), {}};
  if (ctx.opset() < 7 && ctx.attr_int("broadcast", 0) != 0)
    s.b = legacy_broadcast_shape(a.shape(), b.shape(), ctx.node().has_attr("axis"), ctx.attr_int("axis", 0), where);
  s.out = broadcast_shapes({s.a, s.b}, where);
  return s;
}

}  // namespace reforge::ops
