#include "runtime/shape_bucket.h"

namespace reforge::runtime {

int64_t dimension_bucket(int64_t v) {
  if (v <= 1) return v;
  int64_t b = 1;
  while (b < v && b < (int64_t{1} << 62)) b <<= 1;
  return b;
}

ShapeBucket shape_bucket(const std::vector<ir::ValueInfo>& declared, const std::map<std::string, Tensor>& inputs,
                         const KnownBounds* known) {
  ShapeBucket b;
  b.key = "bucket:";
  b.exact = true;
  for (const auto& in : declared) {
    const Tensor& t = inputs.at(in.name);
    Shape bound = t.shape();
    const auto k = known ? known->find(in.name) : KnownBounds::const_iterator();
    for (size_t i = 0; i < bound.size(); ++i) {
      const bool fixed = in.has_shape && i < in.shape.size() && in.shape[i].fixed();
      if (known && k != known->end() && k->second.first == i && bound[i] <= k->second.second)
        bound[i] = k->second.second;
      else if (!fixed)
        bound[i] = dimension_bucket(bound[i]);
      b.exact = b.exact && bound[i] == t.shape()[i];
    }
    b.key += dtype_name(t.dtype()) + shape_str(bound) + ";";
    b.bounds[in.name] = std::move(bound);
  }
  return b;
}

}  // namespace reforge::runtime
