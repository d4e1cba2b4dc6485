// What `reforge inspect` shows of a plan, as JSON: producer, build mode and options, target,
// inputs and outputs with symbolic shapes, sizes, the weight table with each derived weight's
// recipe, the sources with their hashes and checkpoint bindings, every literal with why it is
// one, and the sources a checkpoint refit cannot derive. Reads metadata only; the CLI prints it
// (as text or --json) and the Python package returns it as a dict, so both show the same.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>

#include "ir/graph.h"
#include "plan/plan.h"

namespace reforge::plan {

// The inspect document of `p`. `file_bytes`: the size of the file it was read from (null when
// it lives only in memory). `verified`: every stored weight was hashed against the plan's hashes
// when it was read (read_plan with verify_weight_hashes), which adds {"verified": {weights, bytes}}.
nlohmann::json inspect_json(const Plan& p, std::optional<size_t> file_bytes, bool verified);

// A value info as JSON: name, dtype, and shape (each dim a size, a symbol, or null when unknown;
// the shape null when unknown).
nlohmann::json value_info_json(const ir::ValueInfo& v);

// "transpose(val_85)", "bnfoldweight(conv.weight, bn.weight, bn.running_var)"; "" for a weight
// that is not derived.
std::string recipe_summary(const Plan& p, const WeightEntry& w);
// A reader's name for an engine weight made of sources: the checkpoint tensor its first source
// is bound to, else that source's initializer name, with "(+N)" for N more sources; empty for a
// weight of no source (inspect then names it by the node input that reads it).
std::string weight_label(const Plan& p, const WeightEntry& w);

}  // namespace reforge::plan
