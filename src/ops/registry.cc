#include "ops/registry.h"

#include <algorithm>

namespace reforge::ops {

Tensor HostPrepareContext::upload(const Tensor& t) {
  fail("internal error: a prepare step on the host asked for a device copy of ", t.describe(),
       " (only a device backend's prepare steps make device weights)");
}

const Tensor& KernelContext::input(size_t i) const {
  if (!has_input(i)) fail(node_.label(), ": required input ", i, " is missing");
  return *inputs_[i];
}

Tensor& KernelContext::allocate_output(size_t i, DType dtype, Shape shape) {
  REFORGE_ASSERT(i < outputs_.size());
  outputs_[i] =
      allocator_ ? allocator_->allocate(i, dtype, std::move(shape), true) : Tensor::empty(dtype, std::move(shape));
  return outputs_[i];
}

Tensor& KernelContext::allocate_output_uninit(size_t i, DType dtype, Shape shape) {
  REFORGE_ASSERT(i < outputs_.size());
  outputs_[i] = allocator_ ? allocator_->allocate(i, dtype, std::move(shape), false)
                           : Tensor::uninitialized(dtype, std::move(shape));
  return outputs_[i];
}

void KernelContext::set_output(size_t i, Tensor t) {
  REFORGE_ASSERT(i < outputs_.size());
  outputs_[i] = std::move(t);
}

const OpRegistry& OpRegistry::global() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_elementwise_ops(r);
    register_unary_ops(r);
    register_tensor_ops(r);
    register_reduce_ops(r);
    register_nn_ops(r);
    register_transformer_ops(r);
    register_reforge_ops(r);
    register_quant_ops(r);
    register_training_ops(r);
    register_ml_ops(r);
    register_control_ops(r);
    register_elementwise_inference(r);
    register_unary_inference(r);
    register_tensor_inference(r);
    register_reduce_inference(r);
    register_nn_inference(r);
    register_transformer_inference(r);
    register_reforge_inference(r);
    register_quant_inference(r);
    register_training_inference(r);
    register_ml_inference(r);
    register_control_inference(r);
    return r;
  }();
  return registry;
}

void OpRegistry::add(OpDef def) {
  REFORGE_ASSERT(def.since_version <= def.end_version);
  auto& v = defs_[{def.domain, def.op_type}];
  for (const auto& d : v)
    REFORGE_CHECK(def.end_version < d.since_version || def.since_version > d.end_version,
                  "internal error: overlapping registrations for ", def.op_type);
  v.push_back(std::move(def));
}

void OpRegistry::set_infer(const std::string& domain, const std::string& op_type, int since_version, InferFn fn) {
  auto it = defs_.find({domain, op_type});
  REFORGE_CHECK(it != defs_.end(), "internal error: inference for unregistered op ", domain, "::", op_type);
  for (auto& d : it->second) {
    if (d.since_version != since_version) continue;
    REFORGE_CHECK(d.infer == nullptr, "internal error: second inference for ", op_type, " since ", since_version);
    d.infer = std::move(fn);
    return;
  }
  fail("internal error: inference for ", op_type, " since opset ", since_version, ", which no registration starts at");
}

const OpDef* OpRegistry::find(const std::string& domain, const std::string& op_type, int opset) const {
  auto it = defs_.find({domain, op_type});
  if (it == defs_.end()) return nullptr;
  for (const auto& d : it->second)
    if (opset >= d.since_version && opset <= d.end_version) return &d;
  return nullptr;
}

std::string OpRegistry::why_unsupported(const ir::Node& node) const {
  auto it = defs_.find({node.domain, node.op_type});
  if (it == defs_.end())
    return "operator " + (node.domain.empty() ? std::string() : node.domain + "::") + node.op_type +
           " is not implemented";
  const OpDef* def = find(node.domain, node.op_type, node.opset);
  if (!def) return "operator " + node.op_type + " is not implemented for opset " + std::to_string(node.opset);
  if (def->check) {
    try {
      return def->check(node);
    } catch (const Error& e) {
      return e.what();
    }
  }
  return "";
}

InputRole input_role(const std::string& domain, const std::string& op_type, int opset, size_t slot) {
  const OpDef* d = OpRegistry::global().find(domain, op_type, opset);
  if (!d || slot >= d->input_roles.size()) return InputRole::kData;
  return d->input_roles[slot];
}

bool is_deterministic(const ir::Node& n) {
  const OpDef* d = OpRegistry::global().find(n.domain, n.op_type, n.opset);
  return d && !(d->draws_random && d->draws_random(n));
}

bool is_quantized_input(const ir::Node& n, size_t slot) {
  const OpDef* d = OpRegistry::global().find(n.domain, n.op_type, n.opset);
  return d && std::find(d->quantized_inputs.begin(), d->quantized_inputs.end(), slot) != d->quantized_inputs.end();
}

std::vector<const OpDef*> OpRegistry::entries() const {
  std::vector<const OpDef*> v;
  for (const auto& [k, defs] : defs_)
    for (const auto& d : defs) v.push_back(&d);
  return v;
}

std::vector<std::string> OpRegistry::op_types() const {
  std::vector<std::string> v;
  for (const auto& [k, d] : defs_) v.push_back(k.first.empty() ? k.second : k.first + "::" + k.second);
  return v;
}

}  // namespace reforge::ops
