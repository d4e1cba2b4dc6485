// Operator registry: one entry per (domain, op type, opset version range): the op's schema (input
// roles, determinism, shape inference, a checker of the attributes reforge supports at all) and
// its reference kernel, portable C++ that every backend may fall back on and that tests compare
// backends against. Backends register their own kernels by the same key plus the backend's name
// (backends/backend.h); nothing here depends on any backend.
//
// The checker answers "can reforge run this node?" from the node alone (attributes, opset),
// before any data exists: `reforge check` and the engine builder call it (with the chosen
// backend's kernel checker), so an unsupported attribute value is reported up front instead of
// failing mid-run. Kernels receive a
// KernelContext: inputs (absent optional inputs are null), the node (attributes), and they
// allocate or alias their outputs. Shapes are computed by the kernel from its actual inputs, so
// symbolic dimensions resolve at run time.
//
// The entry is also the one place that says what each input *is* and whether the op is
// deterministic. Binding (which initializers are learned weights), literal classification and
// the structural fingerprint (which inputs are read as structure), constant folding and the
// engine's shape-subgraph memoization (which nodes may be evaluated once) all ask the registry
// through input_role() and is_deterministic(); no other table of op knowledge exists.
#pragma once

#include <climits>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "ops/infer.h"

namespace reforge::ops {

// Where kernel outputs live. The executor plugs in its activation arena; without one, outputs
// are fresh heap allocations. `zero` asks for zero-filled memory.
class OutputAllocator {
 public:
  virtual ~OutputAllocator() = default;
  virtual Tensor allocate(size_t output_index, DType dtype, Shape shape, bool zero) = 0;
};

class KernelContext {
 public:
  KernelContext(const ir::Node& node, std::vector<const Tensor*> inputs, int threads,
                OutputAllocator* allocator = nullptr, const void* prepared = nullptr)
      : node_(node),
        inputs_(std::move(inputs)),
        outputs_(node.outputs.size()),
        threads_(threads),
        allocator_(allocator),
        prepared_(prepared) {}

  const ir::Node& node() const { return node_; }
  int opset() const { return node_.opset; }
  int threads() const { return threads_; }

  size_t num_inputs() const { return inputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr; }
  // Throws an Error naming the node when a required input is absent.
  const Tensor& input(size_t i) const;

  size_t num_outputs() const { return outputs_.size(); }
  bool output_wanted(size_t i) const { return i < node_.outputs.size() && !node_.outputs[i].empty(); }
  // Allocates output i (zero-filled) and returns it for writing.
  Tensor& allocate_output(size_t i, DType dtype, Shape shape);
  // Allocates output i with undefined contents: for kernels that write every element (the
  // common case; saves a pass over the output).
  Tensor& allocate_output_uninit(size_t i, DType dtype, Shape shape);
  // Sets output i to an existing tensor (aliasing is fine: tensors are immutable once produced).
  void set_output(size_t i, Tensor t);
  std::vector<Tensor>& outputs() { return outputs_; }

  // What the op's `prepare` made from this node's constant inputs (e.g. packed weights), or
  // null when the op has no prepare step or it prepared nothing.
  template <typename T>
  const T* prepared() const {
    return static_cast<const T*>(prepared_);
  }

  // Attribute shortcuts.
  int64_t attr_int(const std::string& n, int64_t def) const { return node_.attr_int(n, def); }
  float attr_float(const std::string& n, float def) const { return node_.attr_float(n, def); }
  std::string attr_string(const std::string& n, const std::string& def) const { return node_.attr_string(n, def); }
  std::vector<int64_t> attr_ints(const std::string& n, std::vector<int64_t> def = {}) const {
    return node_.attr_ints(n, std::move(def));
  }
  std::vector<float> attr_floats(const std::string& n, std::vector<float> def = {}) const {
    return node_.attr_floats(n, std::move(def));
  }

 private:
  const ir::Node& node_;
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor> outputs_;
  int threads_;
  OutputAllocator* allocator_;
  const void* prepared_;
};

using KernelFn = std::function<void(KernelContext&)>;
// Returns "" when the node can run, else the reason (e.g. "mode 'cubic' is not supported").
using CheckFn = std::function<std::string(const ir::Node&)>;
// What a prepare step works with besides its node and constants: the means of the backend the
// node runs on to make device weights. The engine makes one per weight version and backend
// (runtime/weight_store.h); a host backend's steps use none of it.
class PrepareContext {
 public:
  virtual ~PrepareContext() = default;
  // A device tensor with `t`'s dtype, shape and bytes, placed in the weight version's one device
  // allocation. The copy is asynchronous (from pageable memory through the backend's pinned
  // staging buffer, from pinned memory directly; a device tensor is copied on the device): the
  // bytes are there once the version is complete, and the engine waits for every copy of the
  // version once, before anything can run with it. `t` may go as soon as this returns. Throws on a
  // backend that has no device weights.
  virtual Tensor upload(const Tensor& t) = 0;
  // The backend's stream of work that the version's copies are ordered on (a cudaStream_t on the
  // CUDA backend), for a prepare step that launches device work of its own; null on the host.
  virtual void* stream() = 0;
  // Where a prepare step's scratch or derived device tensors come from (the backend's allocator);
  // null on the host.
  virtual OutputAllocator* allocator() = 0;
};

// The context of a host backend's prepare steps: no device weights.
class HostPrepareContext final : public PrepareContext {
 public:
  Tensor upload(const Tensor& t) override;  // throws
  void* stream() override { return nullptr; }
  OutputAllocator* allocator() override { return nullptr; }
};

// Derives per-node state from the node's constant inputs, e.g. weights packed in the layout a
// kernel wants, or uploaded to the device. `constants[i]` is input i when it is an engine
// constant, else null. The engine calls it when it is made and again whenever a refit replaces
// one of those constants, before the new constants become visible: re-packing is part of the
// refit transaction, so a kernel never sees packed data from other weights than its inputs. A
// null result means "nothing prepared" (the kernel takes its generic path).
using PrepareFn = std::function<std::shared_ptr<const void>(
    const ir::Node&, const std::vector<const Tensor*>& constants, PrepareContext& context)>;

// What an input of an op holds. Binding, literal classification, constant folding and the
// fingerprint derive their decisions from it.
enum class InputRole : uint8_t {
  kData,    // values flow through the computation (activations, biases of elementwise ops, ...)
  kWeight,  // learned parameters of a parametric op (Conv/Gemm/MatMul weights, norm scales)
  kShape,   // read as structure: shapes, axes, counts, bounds, scales (Reshape shape, Slice
            // starts, Range bounds, TopK k, ...); a constant feeding only these is a literal
};

// True when this node may draw random numbers (so equal inputs can give different outputs).
using DrawsRandomFn = std::function<bool(const ir::Node&)>;

// How a kernel's output may share an input's memory, declared with the kernel (ONNX Runtime's
// Alias and MayInplace in a kernel definition are the model). The runtime plans with these
// declarations before any run and still checks every output where it lands (runtime/arena.h).
//   kView     output `output` is always a view of input `input`: the same bytes, another shape
//             (Identity, Reshape, Flatten, Squeeze, Unsqueeze). The arena gives it no slot and
//             keeps the input's slot for as long as the view is read.
//   kInPlace  the kernel is correct when the memory handed to it for output `output` already
//             holds input `input` at its start, with room for the whole output: it then writes
//             only what changes (a KV-cache append, a scatter into a cache). A kernel declaring
//             it compares the output's address with the input's to know which case it is in;
//             the runtime hands such memory only under the state contract (runtime/state.h),
//             where the input's last reader is this step.
struct Sharing {
  enum Kind : uint8_t { kView, kInPlace };
  size_t input = 0, output = 0;
  Kind kind = kView;
};

// Roles are per registration (per opset range). input_roles[i] is the role of input i in the
// newest opset of the range; inputs past the end of the list (variadic tails such as Concat's,
// trailing optional inputs left unlisted) are data, and an absent optional input has no role to
// ask for. A slot that later opsets added (Slice starts/ends/axes/steps from opset 10, Squeeze
// and Unsqueeze axes from 13, Reduce axes from 13 or 18, Pad pads from 11, TopK k from 10) does
// not exist in the older opsets of the range, so one list serves them all; a slot that changes
// *meaning* between opsets needs its own registration per meaning.
struct OpDef {
  std::string domain;  // "" = default ONNX domain
  std::string op_type;
  int since_version = 1;
  int end_version = INT_MAX;  // inclusive
  // The reference kernel; null for an op that only backends implement (the fused ops that a
  // backend's passes emit where that backend has a kernel for them).
  KernelFn kernel;
  CheckFn check;                            // optional: the schema's checker
  PrepareFn prepare;                        // optional, for the reference kernel
  std::vector<InputRole> input_roles = {};  // empty: every input is data
  DrawsRandomFn draws_random = nullptr;     // null: deterministic
  InferFn infer = nullptr;                  // shape and type inference (ops/infer.h)
  // Inputs whose values a quantizer computed from float weights: integer codes, scales and zero
  // points of a quantized weight (DequantizeLinear's, MatMulNBits' B/scales/zero_points, the
  // QLinear ops' weight parameters). No float checkpoint tensor derives them exactly, so
  // checkpoint binding refuses them (build/binding.h).
  std::vector<size_t> quantized_inputs = {};
  // How the reference kernel's outputs may share its inputs' memory (Sharing).
  std::vector<Sharing> sharing = {};
};

// `def` with its kernel's sharing declarations: r.add(with_sharing({...}, {{0, 0, Sharing::kView}})).
inline OpDef with_sharing(OpDef def, std::vector<Sharing> sharing) {
  def.sharing = std::move(sharing);
  return def;
}

class OpRegistry {
 public:
  // The registry with every built-in op; built once, thread-safe to read.
  static const OpRegistry& global();

  void add(OpDef def);
  // Sets the inference of the entry of (domain, op_type) whose range starts at since_version.
  // An entry that does not exist, or that already has an inference, is an internal error: a
  // family's inference file names exactly the registrations it covers.
  void set_infer(const std::string& domain, const std::string& op_type, int since_version, InferFn fn);
  // The entry covering `opset` for (domain, op_type), or nullptr.
  const OpDef* find(const std::string& domain, const std::string& op_type, int opset) const;
  // "" if the node can run, else why not (unknown op, version outside every range, checker).
  std::string why_unsupported(const ir::Node& node) const;
  std::vector<std::string> op_types() const;
  // Every entry, ordered by (domain, op type), then as registered.
  std::vector<const OpDef*> entries() const;

 private:
  std::map<std::pair<std::string, std::string>, std::vector<OpDef>> defs_;
};

// The role of input `slot` of (domain, op_type) at `opset`, from the registry entry covering
// that opset. An op without such an entry (unknown op, opset outside every range) has only data
// inputs: it cannot be built anyway, and nothing is classified by guessing.
InputRole input_role(const std::string& domain, const std::string& op_type, int opset, size_t slot);
inline InputRole input_role(const ir::Node& n, size_t slot) { return input_role(n.domain, n.op_type, n.opset, slot); }
// True when the node's op is registered for its opset and the node cannot draw random numbers.
// Unregistered ops (RandomNormal, RandomUniform(Like), Bernoulli, Multinomial, ...) are not
// deterministic: nothing is known about them.
bool is_deterministic(const ir::Node& n);
// True when input `slot` of `n` is one of its op's quantized_inputs (false for unregistered ops).
bool is_quantized_input(const ir::Node& n, size_t slot);

// Each op family registers itself here (one file or folder per family).
void register_elementwise_ops(OpRegistry& r);  // binary math, compare, logic, Cast, Where, Min/Max/Sum/Mean
void register_unary_ops(OpRegistry& r);        // unary math and activations
void register_tensor_ops(OpRegistry& r);       // shape, layout, gather/scatter, Pad, Range, ...
void register_reduce_ops(OpRegistry& r);       // Reduce*, ArgMax/Min, Softmax, TopK, CumSum, Einsum
void register_nn_ops(OpRegistry& r);           // MatMul, Gemm, Conv, pools, normalizations
void register_transformer_ops(OpRegistry& r);  // Attention, RotaryEmbedding, RMSNormalization, Resize
void register_reforge_ops(OpRegistry& r);      // reforge domain: recipe transforms and fused kernels
void register_quant_ops(OpRegistry& r);        // Quantize/DequantizeLinear, QLinear*, *Integer
void register_training_ops(OpRegistry& r);     // ai.onnx.preview.training: Adagrad, Adam, Momentum
void register_ml_ops(OpRegistry& r);           // ai.onnx.ml ops and TfIdfVectorizer
void register_control_ops(OpRegistry& r);      // If, Loop, Scan: nodes with subgraphs

// Each family's shape and type inference (ops/infer.h), set on the entries registered above.
void register_elementwise_inference(OpRegistry& r);  // ops/elementwise/infer.cc
void register_unary_inference(OpRegistry& r);        // ops/unary/infer.cc
void register_tensor_inference(OpRegistry& r);       // ops/tensor/infer.cc
void register_reduce_inference(OpRegistry& r);       // ops/reduce/infer.cc
void register_nn_inference(OpRegistry& r);           // ops/nn/infer.cc
void register_transformer_inference(OpRegistry& r);  // ops/transformer/infer.cc
void register_reforge_inference(OpRegistry& r);      // ops/reforge/infer.cc
void register_quant_inference(OpRegistry& r);        // ops/quant/infer.cc
void register_training_inference(OpRegistry& r);     // ops/training/infer.cc
void register_ml_inference(OpRegistry& r);           // ops/ml/infer.cc
void register_control_inference(OpRegistry& r);      // ops/control/infer.cc

}  // namespace reforge::ops
