#include "passes/linear_layer.h"

namespace reforge::passes {

namespace {

bool float_matrix(const BuildState& s, const std::string& v) {
  if (v.empty() || !s.is_const(v)) return false;
  const Tensor& t = s.consts.at(v).value;
  return t.dtype() == DType::Float32 && t.rank() == 2 && t.numel() > 0;
}

}  // namespace

std::optional<LinearLayer> match_linear(const BuildState& s, const ir::Node& n) {
  if (n.inputs.size() < 2 || !float_matrix(s, n.inputs[1])) return std::nullopt;
  LinearLayer l;
  l.x = n.inputs[0];
  l.w = n.inputs[1];
  if (n.domain.empty() && n.op_type == "MatMul") {
  } else if (n.domain == "reforge" && n.op_type == "MatMulAdd") {
    if (n.inputs.size() > 2) l.bias = n.inputs[2];
  } else if (n.domain.empty() && n.op_type == "Gemm") {
    if (n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.0f) != 1.0f) return std::nullopt;
    l.trans_b = n.attr_int("transB", 0) != 0;
    const bool has_c = n.inputs.size() > 2 && !n.inputs[2].empty() && n.attr_float("beta", 1.0f) != 0.0f;
    if (has_c) {
      const std::string& c = n.inputs[2];
      if (!s.is_const(c) || n.attr_float("beta", 1.0f) != 1.0f) return std::nullopt;
      const Tensor& cv = s.consts.at(c).value;
      const int64_t N = s.consts.at(l.w).value.dim(l.trans_b ? 0 : 1);
      if (cv.dtype() != DType::Float32 || cv.rank() != 1 || cv.dim(0) != N) return std::nullopt;
      l.bias = c;
    }
  } else {
    return std::nullopt;
  }
  const Tensor& w = s.consts.at(l.w).value;
  l.K = w.dim(l.trans_b ? 1 : 0);
  l.N = w.dim(l.trans_b ? 0 : 1);
  return l;
}

std::string fold_into(BuildState& s, const std::string& input, const std::string& base, const char* domain,
                      const char* op, int opset, std::map<std::string, ir::Attribute> attrs) {
  std::string name = s.fresh_name(base);
  s.consts[name] = s.fold(domain, op, opset, attrs, {input}, 1, 0);
  return name;
}

ir::Node linear_node(const ir::Node& from, const char* op_type, std::vector<std::string> inputs,
                     std::map<std::string, ir::Attribute> attrs) {
  ir::Node n;
  n.name = from.name;
  n.op_type = op_type;
  n.domain = "reforge";
  n.opset = 1;
  n.inputs = std::move(inputs);
  n.outputs = {from.outputs.empty() ? std::string() : from.outputs[0]};
  n.attrs = std::move(attrs);
  n.metadata = from.metadata;
  return n;
}

}  // namespace reforge::passes
