// Shared pieces of shape and type inference (ops/infer.h).
#include "ops/infer.h"

#include <algorithm>

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

int64_t normalize_axis(InferContext& ctx, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

}  // namespace reforge::ops
