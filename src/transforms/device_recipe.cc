#include "transforms/device_recipe.h"

#include "ops/registry.h"
#include "transforms/recipe.h"

namespace reforge::transforms {

namespace {

// The steps whose device kernels give the host's bytes: the ONNX ops among those that move data
// (copies of elements, and Cast's correctly rounded conversions; the CPU's panels stay on the host).
bool device_exact(const plan::RecipeStep& st) { return st.domain.empty() && moves_data(st); }

ir::Node step_node(const plan::RecipeStep& st) {
  return recipe_node(st.domain, st.op_type, st.opset, st.attrs, std::vector<bool>(st.inputs.size(), true),
                     step_outputs(st));
}

}  // namespace

bool runs_on_device(const backends::Backend& device, const plan::RecipeStep& st) {
  if (device.memory != Memory::Device || !device.streams || !device_exact(st)) return false;
  backends::Resolved r;
  return backends::resolve(step_node(st), device.name, &r).empty() && !r.reference;
}

bool runs_any_on_device(const backends::Backend& device, const plan::Recipe& recipe) {
  for (const auto& st : recipe.steps)
    if (runs_on_device(device, st)) return true;
  return false;
}

Tensor replay_recipe_on(const backends::Backend& device, const plan::Recipe& recipe, const std::vector<Tensor>& sources,
                        const std::vector<Tensor>& literals, const DeviceReplayOptions& options) {
  REFORGE_CHECK(device.memory == Memory::Device && device.streams, "replay_recipe_on: '", device.name,
                "' is not a device backend");
  const size_t n = recipe.steps.size();
  std::vector<Tensor> steps(n);
  std::vector<Tensor> on_device(sources.size());  // sources copied to the device, once
  auto operand = [&](const plan::Operand& o, Memory want) -> Tensor {
    const Tensor* t = nullptr;
    switch (o.kind) {
      case plan::Operand::Kind::Source:
        if (options.device_source && (want == Memory::Device || o.index >= sources.size() ||
                                      !sources[o.index].defined())) {
          Tensor d = options.device_source(o.index);
          REFORGE_CHECK(d.defined(), "recipe: source ", o.index, " has no value");
          return want == Memory::Device ? d : to_host(d);
        }
        REFORGE_CHECK(o.index < sources.size() && sources[o.index].defined(), "recipe: source ", o.index,
                      " has no value");
        if (want == Memory::Device) {
          Tensor& d = on_device[o.index];
          if (!d.defined()) d = to_memory(sources[o.index], Memory::Device);
          return d;
        }
        t = &sources[o.index];
        break;
      case plan::Operand::Kind::Literal:
        REFORGE_CHECK(o.index < literals.size(), "recipe: literal ", o.index, " out of range");
        t = &literals[o.index];
        break;
      case plan::Operand::Kind::Step:
        REFORGE_CHECK(o.index < n && steps[o.index].defined(), "recipe: step ", o.index, " read before it ran");
        t = &steps[o.index];
        break;
    }
    return want == Memory::Device ? to_memory(*t, Memory::Device) : to_host(*t);
  };
  for (size_t s = 0; s < n; ++s) {
    const plan::RecipeStep& st = recipe.steps[s];
    if (!runs_on_device(device, st)) {
      std::vector<Tensor> held;
      for (const auto& o : st.inputs) held.push_back(operand(o, Memory::Host));
      std::vector<const Tensor*> ins;
      for (const Tensor& t : held) ins.push_back(&t);
      steps[s] = std::move(evaluate_op(st.domain, st.op_type, st.opset, st.attrs, ins, step_outputs(st))[st.output]);
      continue;
    }
    const ir::Node node = step_node(st);
    std::vector<Tensor> held;
    for (size_t i = 0; i < st.inputs.size(); ++i)
      held.push_back(
          operand(st.inputs[i], ops::input_role(node, i) == ops::InputRole::kShape ? Memory::Host : Memory::Device));
    std::vector<const Tensor*> ins;
    for (const Tensor& t : held) ins.push_back(&t);
    backends::Resolved r;
    const std::string why = backends::resolve(node, device.name, &r);
    REFORGE_CHECK(why.empty(), node.label(), ": ", why);
    ops::KernelContext ctx(node, ins, 1, &device.streams->allocator());
    try {
      (*r.kernel)(ctx);
    } catch (Error& e) {
      throw e.with_context("while replaying recipe step " + std::to_string(s) + " on '" + device.name + "'");
    }
    REFORGE_CHECK(ctx.outputs()[st.output].defined(), node.label(), ": kernel did not produce output ", st.output);
    steps[s] = std::move(ctx.outputs()[st.output]);
  }
  Tensor result = operand(recipe.result, Memory::Device);
  if (options.wait) device.streams->synchronize();
  return result;
}

}  // namespace reforge::transforms
