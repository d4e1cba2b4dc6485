// Shape and type inference of the unary family (ops/infer.h): every op maps each element of its
// one input to one element of the output, so the output has the input's shape; its type is the
// input's, except for the predicates IsNaN and IsInf (bool). Clip's optional min and max inputs
// (opset 11 on) are scalars of the input's type.
#include <string>

#include "ops/registry.h"

namespace reforge::ops {
namespace {

void same_type(InferContext& ctx) { ctx.set_output(0, ctx.input_type(0)); }

void predicate(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (x.dtype != DType::Undefined && !is_float(x.dtype)) ctx.fail("input must be a float tensor, got " + x.str());
  ctx.set_output(0, ValueType{DType::Bool, x.rank_known, x.shape});
}

void clip(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  for (size_t i = 1; i < 3; ++i) {
    if (!ctx.has_input(i)) continue;
    const ValueType& b = ctx.input_type(i);
    const char* what = i == 1 ? "min" : "max";
    if (b.dtype != DType::Undefined && x.dtype != DType::Undefined && b.dtype != x.dtype)
      ctx.fail(std::string(what) + " " + b.str() + " must have the element type of the input " + x.str());
    if (b.fully_known()) {
      int64_t n = 1;
      for (const auto& d : b.shape) n *= d.value();
      if (n != 1) ctx.fail(std::string(what) + " must be a scalar, got " + b.str());
    }
  }
  ctx.set_output(0, x);
}

}  // namespace

void register_unary_inference(OpRegistry& r) {
  for (const char* op : {"Abs", "Neg", "Sqrt", "Reciprocal", "Exp", "Log", "Floor", "Ceil", "Tanh", "Sigmoid", "Relu",
                         "LeakyRelu", "Elu", "Selu", "HardSigmoid", "Softplus", "Softsign"})
    r.set_infer("", op, 1, same_type);
  for (const char* op : {"Sin", "Cos", "Tan", "Asin", "Acos", "Atan"}) r.set_infer("", op, 7, same_type);
  for (const char* op : {"Sign", "Erf", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Shrink"})
    r.set_infer("", op, 9, same_type);
  r.set_infer("", "ThresholdedRelu", 10, same_type);
  r.set_infer("", "Round", 11, same_type);
  r.set_infer("", "Celu", 12, same_type);
  r.set_infer("", "HardSwish", 14, same_type);
  r.set_infer("", "Mish", 18, same_type);
  r.set_infer("", "Gelu", 20, same_type);
  r.set_infer("", "Swish", 24, same_type);
  r.set_infer("", "IsNaN", 9, predicate);
  r.set_infer("", "IsInf", 10, predicate);
  r.set_infer("", "Clip", 1, clip);
}

}  // namespace reforge::ops
