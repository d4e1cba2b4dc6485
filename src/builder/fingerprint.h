// Structure of a model independent of initializer names: the canonical node order, which
// initializers are literals, and the structural fingerprint that refit from ONNX compares.
//
// The fingerprint covers topology, op types, domains, opsets, attributes and literal values,
// but not which initializer name feeds which slot, so a re-export that merged or split equal
// initializers differently still matches, and each use is found again by (node position, slot).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace reforge::build {

// Returns `g` in canonical form: Identity nodes over initializers bypassed, absent optional
// biases of Gemm/Conv/ConvTranspose made explicit zero initializers, and nodes in canonical
// topological order (ties broken by file order). Exporters produce either form depending on
// the weight values, so both build and refit work on this form.
ir::Graph canonicalize(ir::Graph g);

// Initializers that are literals: integer/bool tensors (except the integer codes and zero
// points of quantized weights, read by an input ops::is_quantized_input names: those are sources,
// so that a re-quantized model refits), tensors that feed only inputs whose
// registry role is shape-like (ops::InputRole::kShape: Reshape shape, Slice bounds, axes, Expand
// shape, Range bounds, Resize scales, ...), and the names in `literal_names`.
std::set<std::string> literal_initializers(const ir::Graph& g, const std::vector<std::string>& literal_names);

// One line per node of a canonicalized graph.
std::vector<std::string> structural_fingerprint(const ir::Graph& g, const std::set<std::string>& literals);

// Explains the first difference between two fingerprints ("" if equal).
std::string fingerprint_difference(const std::vector<std::string>& expected, const std::vector<std::string>& actual);

}  // namespace reforge::build
