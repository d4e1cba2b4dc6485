// Subgraphs: the graph-valued attributes of control-flow nodes (If's branches, the bodies of Loop
// and Scan), and the values they read from enclosing scopes.
//
// ONNX lets a subgraph read any value of an enclosing graph by name. reforge makes those reads
// explicit once, at import (bind_captures), so that every graph-level stage sees them as ordinary
// uses without knowing about subgraphs: a control-flow node's inputs are its ONNX inputs followed
// by the outer values its subgraphs read, the *captured inputs*: for each graph attribute, in
// attribute-name order, one input per entry of that subgraph's `captures` (ir::Graph), bound by
// position. Dead-code elimination keeps a value read only inside a subgraph, renaming a value
// renames the node's input (the subgraph keeps its own names), the arena keeps a captured value
// alive until the node has run, and constant folding folds the node only when its captured values
// are constants too. Initializers of subgraphs move to the top-level graph (under a unique name)
// and are captured like any other outer value: they become sources, literals and weights exactly
// as top-level initializers do.
#pragma once

#include <cstddef>

#include "ir/graph.h"

namespace reforge::ir {

// Makes every subgraph's outer reads explicit, recursively (see above): appends each subgraph's
// free values to its `captures` and the node's inputs, and moves subgraph initializers into
// `top`. Idempotent: a graph already bound (a plan's) is left as it is. Subgraphs are copied
// before they change (graphs share subgraphs between copies). Throws an Error naming the node
// when a subgraph's captures do not match the node's captured inputs.
void bind_captures(Graph& top);

// True when the node has a graph-valued attribute.
bool has_subgraphs(const Node& n);
// True when some node of the graph has one.
bool has_subgraphs(const Graph& g);
// The number of captured inputs at the end of the node's inputs (0 for a node without
// subgraphs).
size_t num_captured_inputs(const Node& n);
// The node's inputs before its captured ones: what its ONNX schema calls its inputs.
inline size_t num_declared_inputs(const Node& n) { return n.inputs.size() - num_captured_inputs(n); }

}  // namespace reforge::ir
