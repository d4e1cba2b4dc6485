// Shape and type inference of the elementwise family (ops/infer.h): binary arithmetic, PRelu,
// comparisons, logic, bitwise ops, Where, variadic Min/Max/Sum/Mean, Cast, CastLike and BitCast.
//
// Outputs take the numpy broadcast of the inputs' shapes (ONNX "multidirectional"
// broadcasting; Add/Sub/Mul/Div/Pow before opset 7 with broadcast=1 take the first operand's
// shape, the second being aligned at `axis`). Arithmetic on small integer values whose contents
// inference follows (shape arithmetic: Shape(x)[0] * Shape(x)[1]) states its result's contents
// too, so a Reshape target computed that way keeps its symbols.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ops/registry.h"

namespace reforge::ops {
namespace {

bool is_shape_int(DType t) { return t == DType::Int64 || t == DType::Int32; }

// The shapes of every present input; fails when one has an unknown rank (the caller then sets
// an unranked output instead).
bool ranked_inputs(const InferContext& ctx, std::vector<const SymShape*>& shapes) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const ValueType& t = ctx.input_type(i);
    if (!t.rank_known) return false;
    shapes.push_back(&t.shape);
  }
  return true;
}

// Output 0 of dtype `dt` with the broadcast shape of every present input.
void set_broadcast(InferContext& ctx, DType dt) {
  std::vector<const SymShape*> shapes;
  if (!ranked_inputs(ctx, shapes) || shapes.empty()) return ctx.set_output(0, ValueType::unranked(dt));
  SymShape out = *shapes[0];
  for (size_t i = 1; i < shapes.size(); ++i) out = broadcast_shapes(ctx, out, *shapes[i]);
  ctx.set_output(0, ValueType::of(dt, std::move(out)));
}

void require_same_dtype(const InferContext& ctx, size_t a, size_t b, const char* what) {
  const DType da = ctx.input_type(a).dtype, db = ctx.input_type(b).dtype;
  if (da != DType::Undefined && db != DType::Undefined && da != db)
    ctx.fail(std::string(what) + " have different element types (" + dtype_name(da) + " and " + dtype_name(db) + ")");
}

enum class Arith { Add, Sub, Mul, Div, Other };

// a op b on one element of shape arithmetic: numbers on numbers (integer Div truncates, as the
// kernel does), else the canonical symbolic expression of ops/infer.h; a fresh symbol for what
// has no such expression.
SymDim dim_arith(InferContext& ctx, Arith op, const SymDim& a, const SymDim& b) {
  if (a.known() && b.known()) {
    switch (op) {
      case Arith::Add:
        return a.value() + b.value();
      case Arith::Sub:
        return a.value() - b.value();
      case Arith::Mul:
        return a.value() * b.value();
      case Arith::Div:
        if (b.value() != 0) return a.value() / b.value();
        break;
      case Arith::Other:
        break;
    }
    return ctx.fresh_dim();
  }
  switch (op) {
    case Arith::Add:
      return sym_add(a, b);
    case Arith::Sub:
      return sym_sub(a, b);
    case Arith::Mul:
      return sym_mul(a, b);
    case Arith::Div:
      // Floor and truncating division agree on sizes (symbols stand for sizes, never
      // negative); a known divisor that is not positive gives no expression.
      if (!b.known() || b.value() > 0) return sym_div(a, b);
      break;
    case Arith::Other:
      break;
  }
  return ctx.fresh_dim();
}

// States the contents of an integer result of Add/Sub/Mul/Div whose operands' contents are
// known (rank 0 or 1, broadcast against each other).
void propagate_dims(InferContext& ctx, Arith op) {
  if (op == Arith::Other || ctx.num_inputs() < 2) return;
  const SymShape* a = ctx.input_dims_value(0);
  const SymShape* b = ctx.input_dims_value(1);
  if (!a || !b || !is_shape_int(ctx.input_type(0).dtype)) return;
  if (a->size() != b->size() && a->size() != 1 && b->size() != 1) return;
  const size_t n = std::max(a->size(), b->size());
  SymShape out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i)
    out.push_back(dim_arith(ctx, op, (*a)[a->size() == 1 ? 0 : i], (*b)[b->size() == 1 ? 0 : i]));
  ctx.set_output_dims_value(0, std::move(out));
}

// Before opset 7, broadcast=1 aligns B inside A at `axis` and the result has A's shape. Returns
// false when the node broadcasts the numpy way.
bool legacy_broadcast(InferContext& ctx, DType dt) {
  if (ctx.opset() >= 7 || ctx.attr_int("broadcast", 0) == 0) return false;
  const ValueType& a = ctx.input_type(0);
  const ValueType& b = ctx.input_type(1);
  if (a.rank_known && b.rank_known) {
    const int64_t ra = static_cast<int64_t>(a.shape.size()), rb = static_cast<int64_t>(b.shape.size());
    int64_t axis = ctx.node().has_attr("axis") ? ctx.attr_int("axis", 0) : ra - rb;
    if (axis < 0) axis += ra;
    if (rb > ra || axis < 0 || axis + rb > ra)
      ctx.fail("cannot broadcast " + sym_shape_str(b.shape) + " into " + sym_shape_str(a.shape) + " at axis " +
               std::to_string(axis));
  }
  ctx.set_output(0, ValueType{dt, a.rank_known, a.shape});
  return true;
}

InferFn binary_arith(Arith op) {
  return [op](InferContext& ctx) {
    if (ctx.node().op_type != "Pow") require_same_dtype(ctx, 0, 1, "inputs");
    const DType dt = ctx.input_type(0).dtype;
    if (legacy_broadcast(ctx, dt)) return;
    set_broadcast(ctx, dt);
    propagate_dims(ctx, op);
  };
}

void prelu(InferContext& ctx) {
  require_same_dtype(ctx, 0, 1, "X and slope");
  const ValueType& x = ctx.input_type(0);
  const ValueType& s = ctx.input_type(1);
  if (x.rank_known && s.rank_known) {
    // The slope broadcasts unidirectionally: the broadcast must be X's shape.
    const SymShape out = broadcast_shapes(ctx, x.shape, s.shape);
    if (out.size() != x.shape.size())
      ctx.fail("slope " + sym_shape_str(s.shape) + " does not broadcast to X " + sym_shape_str(x.shape));
  }
  ctx.set_output(0, x);
}

// A symbol that stands for a size (a dimension of an input, or one inference made), never
// negative; expressions with a difference in them may be.
bool is_size_symbol(const SymDim& d) { return !d.known() && d.symbol().find('-') == std::string::npos; }

enum class Cmp { Equal, Less, Greater, LessOrEqual, GreaterOrEqual };

// a <cmp> b as 0 or 1 when it is decided: numbers against numbers, and a size against a negative
// number (torch exports compare shapes with -1 before an Expand); else nullopt.
std::optional<int64_t> decide(Cmp op, const SymDim& a, const SymDim& b) {
  if (a.known() && b.known()) {
    const int64_t x = a.value(), y = b.value();
    switch (op) {
      case Cmp::Equal:
        return x == y;
      case Cmp::Less:
        return x < y;
      case Cmp::Greater:
        return x > y;
      case Cmp::LessOrEqual:
        return x <= y;
      case Cmp::GreaterOrEqual:
        return x >= y;
    }
  }
  if (a == b) return op == Cmp::Equal || op == Cmp::LessOrEqual || op == Cmp::GreaterOrEqual;
  // size >= 0 > negative number
  const bool a_above = is_size_symbol(a) && b.known() && b.value() < 0;
  const bool b_above = is_size_symbol(b) && a.known() && a.value() < 0;
  if (!a_above && !b_above) return std::nullopt;
  switch (op) {
    case Cmp::Equal:
      return 0;
    case Cmp::Less:
    case Cmp::LessOrEqual:
      return b_above ? 1 : 0;
    case Cmp::Greater:
    case Cmp::GreaterOrEqual:
      return a_above ? 1 : 0;
  }
  return std::nullopt;
}

// Comparisons of shape values state their result's contents (0 or 1 per element) when every
// element is decided, for a Where that picks between shape values.
InferFn compare(Cmp op) {
  return [op](InferContext& ctx) {
    require_same_dtype(ctx, 0, 1, "inputs");
    if (legacy_broadcast(ctx, DType::Bool)) return;
    set_broadcast(ctx, DType::Bool);
    const SymShape* a = ctx.input_dims_value(0);
    const SymShape* b = ctx.input_dims_value(1);
    if (!a || !b || !is_shape_int(ctx.input_type(0).dtype)) return;
    if (a->size() != b->size() && a->size() != 1 && b->size() != 1) return;
    const size_t n = std::max(a->size(), b->size());
    SymShape out;
    for (size_t i = 0; i < n; ++i) {
      const auto r = decide(op, (*a)[a->size() == 1 ? 0 : i], (*b)[b->size() == 1 ? 0 : i]);
      if (!r) return;
      out.push_back(*r);
    }
    ctx.set_output_dims_value(0, std::move(out));
  };
}

void logic(InferContext& ctx) {
  for (size_t i = 0; i < 2; ++i) {
    const DType t = ctx.input_type(i).dtype;
    if (t != DType::Bool && t != DType::Undefined) ctx.fail("inputs must be bool, got " + ctx.input_type(i).str());
  }
  if (!legacy_broadcast(ctx, DType::Bool)) set_broadcast(ctx, DType::Bool);
}

void not_op(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (x.dtype != DType::Bool && x.dtype != DType::Undefined) ctx.fail("input must be bool, got " + x.str());
  ctx.set_output(0, x);
}

// BitShift and BitwiseAnd/Or/Xor: two integer inputs of one type, broadcast. BitShift takes
// unsigned types only before opset 28.
void bitwise(InferContext& ctx) {
  require_same_dtype(ctx, 0, 1, "inputs");
  const DType t = ctx.input_type(0).dtype;
  if (t != DType::Undefined && !is_integer(t)) ctx.fail("inputs must be integers, got " + ctx.input_type(0).str());
  if (ctx.node().op_type == "BitShift" && ctx.opset() < 28 && t != DType::Undefined && is_signed(t))
    ctx.fail("BitShift takes unsigned integers before opset 28, got " + ctx.input_type(0).str());
  set_broadcast(ctx, t);
}

void bitwise_not(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (x.dtype != DType::Undefined && !is_integer(x.dtype)) ctx.fail("input must be an integer, got " + x.str());
  ctx.set_output(0, x);
}

void where(InferContext& ctx) {
  const DType c = ctx.input_type(0).dtype;
  if (c != DType::Bool && c != DType::Undefined) ctx.fail("condition must be bool, got " + ctx.input_type(0).str());
  require_same_dtype(ctx, 1, 2, "X and Y");
  set_broadcast(ctx, ctx.input_type(1).dtype);
  // Picking between shape values by a decided condition: the picked contents.
  const SymShape* cond = ctx.input_dims_value(0);
  SymShape cond_constant;
  if (const Tensor* t = ctx.input_constant(0); !cond && t && t->dtype() == DType::Bool && t->rank() <= 1) {
    for (int64_t i = 0; i < t->numel(); ++i) cond_constant.push_back(t->data<bool>()[i] ? 1 : 0);
    cond = &cond_constant;
  }
  const SymShape* x = ctx.input_dims_value(1);
  const SymShape* y = ctx.input_dims_value(2);
  if (!cond || !x || !y || !is_shape_int(ctx.input_type(1).dtype)) return;
  size_t n = 1;
  for (const SymShape* v : {cond, x, y}) {
    if (v->size() != 1 && n != 1 && v->size() != n) return;
    n = std::max(n, v->size());
  }
  auto at = [](const SymShape* v, size_t i) { return (*v)[v->size() == 1 ? 0 : i]; };
  SymShape out;
  for (size_t i = 0; i < n; ++i) {
    const SymDim k = at(cond, i);
    if (!k.known()) return;
    out.push_back(k.value() != 0 ? at(x, i) : at(y, i));
  }
  ctx.set_output_dims_value(0, std::move(out));
}

void variadic(InferContext& ctx) {
  if (!ctx.has_input(0)) ctx.fail("needs at least one input");
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) require_same_dtype(ctx, 0, i, "inputs");
  set_broadcast(ctx, ctx.input_type(0).dtype);
}

// Cast-1..5 name the target type with a string; later opsets use the TensorProto code. A type
// reforge has no DType for gives Undefined (the op's checker refuses the node).
DType cast_target(const InferContext& ctx) {
  const ir::Attribute* a = ctx.node().attr("to");
  if (!a) ctx.fail("attribute 'to' is missing");
  if (a->type == ir::AttrType::String) {
    static const std::pair<const char*, DType> names[] = {
        {"FLOAT", DType::Float32},     {"FLOAT16", DType::Float16}, {"DOUBLE", DType::Float64},
        {"BFLOAT16", DType::BFloat16}, {"INT8", DType::Int8},       {"INT16", DType::Int16},
        {"INT32", DType::Int32},       {"INT64", DType::Int64},     {"UINT8", DType::UInt8},
        {"UINT16", DType::UInt16},     {"UINT32", DType::UInt32},   {"UINT64", DType::UInt64},
        {"BOOL", DType::Bool},         {"STRING", DType::String},
    };
    for (const auto& [n, t] : names)
      if (a->s == n) return t;
    return DType::Undefined;
  }
  return dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("to", 0)));
}

// The cast result's contents: integer shape values stay the same numbers.
void cast_to(InferContext& ctx, DType to) {
  const ValueType& x = ctx.input_type(0);
  ctx.set_output(0, ValueType{to, x.rank_known, x.shape});
  if (is_shape_int(to))
    if (const SymShape* d = ctx.input_dims_value(0); d && is_shape_int(x.dtype)) ctx.set_output_dims_value(0, *d);
}

}  // namespace

void register_elementwise_inference(OpRegistry& r) {
  r.set_infer("", "Add", 1, binary_arith(Arith::Add));
  r.set_infer("", "Sub", 1, binary_arith(Arith::Sub));
  r.set_infer("", "Mul", 1, binary_arith(Arith::Mul));
  r.set_infer("", "Div", 1, binary_arith(Arith::Div));
  r.set_infer("", "Mod", 10, binary_arith(Arith::Other));
  r.set_infer("", "Pow", 1, binary_arith(Arith::Other));
  r.set_infer("", "PRelu", 1, prelu);
  r.set_infer("", "Equal", 1, compare(Cmp::Equal));
  r.set_infer("", "Less", 1, compare(Cmp::Less));
  r.set_infer("", "Greater", 1, compare(Cmp::Greater));
  r.set_infer("", "LessOrEqual", 12, compare(Cmp::LessOrEqual));
  r.set_infer("", "GreaterOrEqual", 12, compare(Cmp::GreaterOrEqual));
  for (const char* op : {"And", "Or", "Xor"}) r.set_infer("", op, 1, logic);
  r.set_infer("", "Not", 1, not_op);
  r.set_infer("", "BitShift", 11, bitwise);
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"}) r.set_infer("", op, 18, bitwise);
  r.set_infer("", "BitwiseNot", 18, bitwise_not);
  r.set_infer("", "Where", 9, where);
  for (const char* op : {"Min", "Max", "Sum", "Mean"}) r.set_infer("", op, 1, variadic);
  r.set_infer("", "Cast", 1, [](InferContext& ctx) { cast_to(ctx, cast_target(ctx)); });
  r.set_infer("", "CastLike", 15, [](InferContext& ctx) { cast_to(ctx, ctx.input_type(1).dtype); });
  r.set_infer("", "BitCast", 26, [](InferContext& ctx) {
    const ValueType& x = ctx.input_type(0);
    ctx.set_output(0, ValueType{dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("to", 0))), x.rank_known, x.shape});
  });
}

}  // namespace reforge::ops
