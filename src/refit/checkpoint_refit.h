// Refit from a framework checkpoint: each source's binding (recorded at build time by
// build/binding.h) names checkpoint tensors and the transforms that turn them into the source.
// Runtime side: replays bindings with transforms::apply_binding(), the code the build-time
// search used to prove each binding exact, so a binding cannot drift between build and refit.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "refit/refitter.h"
#include "refit/safetensors.h"

namespace reforge::refit {

// Ends the note of a source whose checkpoint tensor of the same name holds other values and no
// fold the graph shows explains it (build/binding.h): the plan was bound to the wrong checkpoint.
// unbound_report / sources_from_checkpoint then say how to bind the right one.
inline constexpr const char* kWrongCheckpointMark = "not the checkpoint this model was exported from";

struct CheckpointSources {
  // By source id, every refittable source, and every baked one bound to tensors the checkpoint
  // holds (the commit compares those with the plan's values): its value in `sources`, or in `transposed` the
  // checkpoint tensor whose 2-D transpose it is (transforms::is_transpose_binding: an exporter
  // that stored a Linear weight transposed), left for Refitter::set_source_transposed, which packs
  // it without making the transpose where the plan's recipes allow.
  std::map<uint32_t, Tensor> sources;
  std::map<uint32_t, Tensor> transposed;
  // Checkpoint tensors that deriving `sources` read into new tensors (a slice, a concatenation):
  // nothing refers to their bytes any more, so a mapped checkpoint may let their pages go.
  std::vector<Tensor> read;
  std::vector<std::string> unused;  // checkpoint tensors no binding reads
};

// "N refittable source(s) are not bound to checkpoint tensors:" and one line per source (name,
// key, consumer, dtype and shape, why), at most `limit` of them; "" when every refittable source
// is bound or constant.
std::string unbound_report(const plan::Plan& plan, size_t limit);

// Every refittable source's new value from `ckpt` (a constant source: its build-time value). Throws, before anything is
// read, when the plan has refittable sources that are not bound (naming them and why); and when a bound checkpoint
// tensor is missing or has another dtype or shape (naming it).
CheckpointSources sources_from_checkpoint(const plan::Plan& plan, const Checkpoint& ckpt);

// The --literal initializers of `plan` that its build's checkpoint held (plan::LiteralBinding) and
// `ckpt` holds too: how many, and the names of those whose bytes differ from the plan's. Throws,
// naming it, for one of another dtype or shape.
struct LiteralCheck {
  size_t given = 0;
  std::vector<std::string> differing;
};
LiteralCheck check_literals(const plan::Plan& plan, const Checkpoint& ckpt);

// Sets every source of `cs` on `r`: set_source for `sources`, set_source_transposed for
// `transposed`.
void set_sources(Refitter& r, const CheckpointSources& cs);

// "3 checkpoint tensors are not used by this plan: a, b, c" (names elided past 8); "" if none.
std::string unused_summary(const std::vector<std::string>& unused);

}  // namespace reforge::refit
