#include "builder/builder.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include "backends/backend.h"
#include "backends/placement.h"
#include "builder/fingerprint.h"
#include "core/file_pages.h"
#include "core/nearest_names.h"
#include "core/nonfinite.h"
#include "core/version.h"
#include "ops/infer_graph.h"
#include "ops/numerics.h"
#include "passes/build_state.h"
#include "runtime/lowered_graph.h"
#include "transforms/recipe.h"

namespace reforge::build {

bool glob_match(const std::string& p, const std::string& s) {
  size_t pi = 0, si = 0, star = std::string::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

void BuildOptions::validate() const {
  if (strip_weights && mode == plan::BuildMode::Baked)
    fail("--strip-weights needs a refit mode (--refit, --refit-identical or --refit-individual)");
  if (mode == plan::BuildMode::RefitIndividual && individual_patterns.empty())
    fail("--refit-individual needs at least one pattern");
  if (mode != plan::BuildMode::RefitIndividual && !individual_patterns.empty())
    fail("--refit-individual patterns are given, but the build mode is ", plan::build_mode_name(mode),
         " (patterns choose sources only in refit-individual mode)");
  if (!plan::activations_allowed(precision, activations)) {
    if (activations == plan::Precision::Bf16)
      fail("--activations bf16 needs --precision bf16 (the plan's precision is ", plan::precision_name(precision), ")");
    fail("--activations must be fp32 or bf16, not ", plan::precision_name(activations));
  }
  if (block_size != 0 && precision != plan::Precision::Int4)
    fail("--block-size applies to --precision int4 only (the precision is ", plan::precision_name(precision), ")");
  if (block_size != 0 && (block_size < 16 || block_size > (int64_t{1} << 20) || (block_size & (block_size - 1)) != 0))
    fail("--block-size ", block_size, " is not a power of two >= 16");
  if (layouts && layouts->half_panels && !layouts->linear_panels)
    fail("weight layouts: 16-bit panels (half_panels) need float32 panels (linear_panels)");
}

namespace {

// A source's display key: initializer name, node position and input slot.
std::string source_key(const std::string& initializer, size_t position, size_t slot) {
  return initializer + "@" + std::to_string(position) + ":" + std::to_string(slot);
}

bool pattern_matches_source(const std::string& pattern, const std::vector<std::string>& names, const std::string& key) {
  for (const auto& n : names)
    if (glob_match(pattern, n)) return true;
  return glob_match(pattern, key);
}

bool refittable_source(const BuildOptions& o, const plan::Source& s) {
  switch (o.mode) {
    case plan::BuildMode::Baked:
      return false;
    case plan::BuildMode::Refit:
    case plan::BuildMode::RefitIdentical:
      return true;
    case plan::BuildMode::RefitIndividual:
      if (o.refittable_positions) return o.refittable_positions->count({s.node_position, s.slot}) != 0;
      for (const auto& p : o.individual_patterns)
        if (pattern_matches_source(p, s.names, s.key)) return true;
      return false;
  }
  return false;
}

// " (nearest: 'a', 'b')", or `otherwise` when no candidate is close.
std::string nearest_note(const std::string& query, const std::vector<std::string>& candidates,
                         const std::string& otherwise) {
  auto near = nearest_names(query, candidates);
  return near.empty() ? otherwise : " (nearest: " + quoted_list(near) + ")";
}

// " (no <what> has a similar name; of N, the first: 'a', 'b', 'c')": shows how names look
// when the query was written in another scheme (a checkpoint name instead of an ONNX one).
std::string no_similar(const std::string& what, const std::vector<std::string>& candidates) {
  if (candidates.empty()) return " (the model has no " + what + ")";
  std::vector<std::string> first(candidates.begin(), candidates.begin() + std::min<size_t>(3, candidates.size()));
  return str_cat(" (no ", what, " has a similar name; of ", candidates.size(), ", the first: ", quoted_list(first),
                 ")");
}

std::vector<std::string> unmatched_literal_names(const ir::Graph& g, const BuildOptions& o) {
  std::vector<std::string> problems, initializers;
  for (const auto& [name, t] : g.initializers) initializers.push_back(name);
  std::set<std::string> graph_inputs, node_outputs;
  for (const auto& in : g.inputs) graph_inputs.insert(in.name);
  for (const auto& n : g.nodes) node_outputs.insert(n.outputs.begin(), n.outputs.end());
  for (const auto& name : o.literal_names) {
    if (g.initializers.count(name)) continue;
    std::string what = graph_inputs.count(name)   ? "is a graph input, not an initializer"
                       : node_outputs.count(name) ? "is computed by a node, not an initializer"
                                                  : "names no initializer of the model";
    problems.push_back("--literal '" + name + "' " + what +
                       nearest_note(name, initializers, no_similar("initializer", initializers)));
  }
  return problems;
}

std::vector<std::string> unmatched_skip_passes(const BuildOptions& o) {
  std::vector<std::string> problems, names;
  for (const auto& pass : passes::default_passes()) names.push_back(pass.name);
  for (const auto& pattern : o.skip_passes) {
    bool any = false;
    for (const auto& n : names) any |= glob_match(pattern, n);
    if (!any)
      problems.push_back("--skip-pass '" + pattern + "' matches no build pass" +
                         nearest_note(pattern, names, " (the passes: " + quoted_list(names) + ")"));
  }
  return problems;
}

// Each pattern must make at least one source refittable: a plan with no refittable source the
// user asked for is not the plan they meant.
std::vector<std::string> unmatched_individual_patterns(const ir::Graph& g, const std::set<std::string>& literals,
                                                       const BuildOptions& o) {
  if (o.mode != plan::BuildMode::RefitIndividual || o.refittable_positions) return {};
  struct Use {
    std::vector<std::string> names;
    std::string key;
  };
  std::vector<Use> uses;  // every source, as make_state() will name it
  std::vector<std::string> source_names;
  for (size_t p = 0; p < g.nodes.size(); ++p)
    for (size_t slot = 0; slot < g.nodes[p].inputs.size(); ++slot) {
      const std::string& in = g.nodes[p].inputs[slot];
      if (in.empty() || !g.initializers.count(in) || literals.count(in)) continue;
      uses.push_back({{in}, source_key(in, p, slot)});
      if (std::find(source_names.begin(), source_names.end(), in) == source_names.end()) source_names.push_back(in);
    }
  std::vector<std::string> problems;
  for (const auto& pattern : o.individual_patterns) {
    bool any = false;
    for (const auto& u : uses) any = any || pattern_matches_source(pattern, u.names, u.key);
    if (any) continue;
    std::vector<std::string> matched_literals, matched_unused;
    for (const auto& [name, t] : g.initializers)
      if (glob_match(pattern, name)) (literals.count(name) ? matched_literals : matched_unused).push_back(name);
    std::string why =
        !matched_literals.empty()
            ? " matches only literals (" + quoted_list(matched_literals) + "), which are never refittable"
        : !matched_unused.empty()
            ? " matches only initializers that no node reads (" + quoted_list(matched_unused) + ")"
            : " matches no source" + nearest_note(pattern, source_names, no_similar("source", source_names));
    problems.push_back("--refit-individual '" + pattern + "'" + why);
  }
  return problems;
}

// Turns initializers into constants with provenance: literals stay shared by name; every use
// of any other initializer becomes its own source and its own value.
// The target part of the build record: the weight layouts for this build on this machine, as the
// target backend's layout policy chooses them (the host's where the target has none: weights are
// made on the host), and the machine features it consulted (options.layouts, when set, decides
// alone).
plan::BuildRecord target_record(const BuildOptions& o) {
  plan::BuildRecord r;
  r.weight_packing = o.weight_packing;
  r.skip_passes = o.skip_passes;
  r.verify_recipes = o.verify_recipes;
  r.backend = o.backend;
  r.host_fallback = o.host_fallback;
  r.reference_rounding = o.reference_rounding;
  const backends::Backend* target = backends::find_backend(o.backend);
  const backends::Backend* host = backends::find_backend(backends::kDefaultBackend);
  const backends::WeightLayoutPolicy* policy = target && target->layouts ? target->layouts : host->layouts;
  REFORGE_CHECK(policy != nullptr, "internal error: the host backend has no weight layout policy");
  backends::LayoutRequest q;
  q.packing = o.weight_packing == WeightPacking::Panels ? backends::LayoutRequest::Packing::Panels
              : o.weight_packing == WeightPacking::Auto ? backends::LayoutRequest::Packing::Auto
                                                        : backends::LayoutRequest::Packing::Plain;
  q.weights = o.precision == plan::Precision::Fp16   ? backends::LayoutRequest::Weights::Float16
              : o.precision == plan::Precision::Bf16 ? backends::LayoutRequest::Weights::BFloat16
              : o.precision == plan::Precision::Fp32 ? backends::LayoutRequest::Weights::Float32
                                                     : backends::LayoutRequest::Weights::Other;
  if (o.layouts) {
    q.weights = backends::LayoutRequest::Weights::Other;  // the features only
    r.isa = policy->choose(q).features;
    r.layouts = *o.layouts;
    return r;
  }
  const backends::LayoutChoice c = policy->choose(q);
  r.isa = c.features;
  r.layouts.linear_panels = c.linear_panels;
  r.layouts.half_panels = c.half_panels;
  r.layouts.linear_transposed = c.linear_transposed;
  return r;
}

passes::BuildState make_state(ir::Graph g, const BuildOptions& o, const plan::WeightLayouts& layouts,
                              const std::set<std::string>& literals) {
  passes::BuildState s;
  s.mode = o.mode;
  s.precision = o.precision;
  s.block_size = o.precision == plan::Precision::Int4 ? (o.block_size ? o.block_size : 32) : 0;
  s.bf16_activations = o.activations == plan::Precision::Bf16;
  s.backend = o.backend;
  s.pack_linear_panels = layouts.linear_panels;
  s.pack_half_panels = layouts.half_panels;
  s.transpose_linear_weights = layouts.linear_transposed;
  for (size_t p = 0; p < g.nodes.size(); ++p) {
    ir::Node& n = g.nodes[p];
    for (size_t slot = 0; slot < n.inputs.size(); ++slot) {
      const std::string in = n.inputs[slot];
      auto it = g.initializers.find(in);
      if (in.empty() || it == g.initializers.end()) continue;
      if (literals.count(in)) {
        if (!s.consts.count(in)) s.consts[in] = passes::ConstValue{it->second, plan::WeightKind::Literal, {}, {}};
        continue;
      }
      plan::Source src;
      src.key = source_key(in, p, slot);  // display key; matched by position
      src.names = {in};
      src.consumer = n.name;
      src.op_type = n.op_type;
      src.node_position = static_cast<uint32_t>(p);
      src.slot = static_cast<uint32_t>(slot);
      src.dtype = it->second.dtype();
      src.shape = it->second.shape();
      src.hash = transforms::hash_tensor(it->second);
      src.refittable = refittable_source(o, src);
      uint32_t id = static_cast<uint32_t>(s.sources.size());
      passes::ConstValue cv;
      cv.value = it->second;
      if (src.refittable) {
        cv.kind = plan::WeightKind::Derived;
        cv.recipe.result = {plan::Operand::Kind::Source, id};
        cv.sources = {id};
      } else {
        cv.kind = plan::WeightKind::Baked;
      }
      n.inputs[slot] = src.key;
      s.consts[src.key] = std::move(cv);
      s.sources.push_back(std::move(src));
      s.source_values.push_back(it->second);
    }
  }
  for (const auto& out : g.outputs) {
    auto it = g.initializers.find(out.name);
    if (it != g.initializers.end() && !s.consts.count(out.name))
      s.consts[out.name] = passes::ConstValue{it->second, plan::WeightKind::Literal, {}, {}};
  }
  g.initializers.clear();
  s.graph = std::move(g);
  return s;
}

// Renames every constant to "w<k>", k in order of first use in the optimized graph, so two
// builds of structurally equal models name their engine weights identically whatever the
// initializer names were (slow refit matches weights by these names).
void canonical_constant_names(passes::BuildState& s) {
  std::map<std::string, std::string> rename;
  std::set<std::string> kept;  // constant graph outputs: they keep their names, also where nodes read them
  for (auto& o : s.graph.outputs)
    if (s.consts.count(o.name)) rename.emplace(o.name, o.name), kept.insert(o.name);
  size_t next = 0;
  auto visit = [&](std::string& v) {
    if (v.empty() || !s.consts.count(v)) return;
    auto [it, inserted] = rename.emplace(v, "");
    if (inserted) {
      // (Not "w" + std::to_string(...): GCC 12 warns falsely (-Wrestrict) on that inlined concat.)
      do it->second = std::string(1, 'w').append(std::to_string(next++));
      while (kept.count(it->second));
    }
    v = it->second;
  };
  for (auto& n : s.graph.nodes)
    for (auto& in : n.inputs) visit(in);
  std::map<std::string, passes::ConstValue> renamed;
  for (auto& [old, cv] : s.consts) {
    auto it = rename.find(old);
    if (it != rename.end()) renamed[it->second] = std::move(cv);
  }
  s.consts = std::move(renamed);
}

// The first op among those `pass` emits that `backend` has no kernel for (as "domain::Op"), or "".
std::string missing_emitted_op(const passes::Pass& pass, const std::string& backend) {
  const backends::Backend* b = backends::find_backend(backend);
  REFORGE_ASSERT(b != nullptr);  // check_build_request checked it
  for (const auto& op : pass.emits) {
    const ops::OpDef* def = ops::OpRegistry::global().find(op.domain, op.op_type, op.opset);
    REFORGE_ASSERT(def != nullptr);
    const bool runs = backends::kernels().find(backend, op.domain, op.op_type, op.opset) != nullptr ||
                      (b->runs_reference_kernels && def->kernel);
    if (!runs) return *op.domain ? std::string(op.domain) + "::" + op.op_type : std::string(op.op_type);
  }
  return "";
}

// Placement, the build's last step (backends/placement.h): every node of the optimized graph on
// the backend, or on the host where placement says, with the transfers between them. The request
// was checked on the imported graph before the passes; a device kernel's shape check may still
// decline a node the passes made (a fused node whose inputs take a form that kernel refuses), and
// then the build fails naming it, or, with host fallback, runs it on the host.
std::vector<std::string> place_nodes(ir::Graph& g, const plan::Plan& plan, const BuildOptions& o) {
  std::map<std::string, Tensor> constants;
  for (const auto& w : plan.weights) constants.emplace(w.name, w.data);
  const std::string model =
      plan.model_name.empty() ? std::string("the optimized model") : "the optimized model '" + plan.model_name + "'";
  try {
    backends::PlaceOptions po{o.backend, o.host_fallback, model};
    po.constants = &constants;
    return backends::place_graph(g, po).node_backend;
  } catch (Error& e) {
    throw e.with_context("placing the optimized graph");
  }
}

// Every source (a use of an initializer that is not a literal) holding NaN or Inf, scanned once
// per initializer, with refit's scan (core/nonfinite.h), so that a build and a refit of the same
// values agree. Each is named with its first non-finite element and the first node that reads it.
void check_finite_sources(const ir::Graph& g, const std::set<std::string>& literals, const std::string& model) {
  struct Use {
    const Tensor* value;
    std::string name, reader;
  };
  std::vector<Use> uses;
  std::set<std::string> seen;
  for (const auto& n : g.nodes)
    for (const auto& in : n.inputs) {
      auto it = in.empty() || literals.count(in) ? g.initializers.end() : g.initializers.find(in);
      if (it == g.initializers.end() || !is_float(it->second.dtype()) || !seen.insert(in).second) continue;
      uses.push_back({&it->second, in, n.label()});
    }
  std::vector<int64_t> first(uses.size(), -1);
  size_t bytes = 0;
  for (const auto& u : uses) bytes += u.value->nbytes();
  const int64_t count = static_cast<int64_t>(uses.size());
#pragma omp parallel for schedule(dynamic, 1) if (count > 1 && bytes >= (size_t{8} << 20))
  for (int64_t i = 0; i < count; ++i) {
    const Tensor& t = *uses[static_cast<size_t>(i)].value;
    first[static_cast<size_t>(i)] = first_nonfinite(t);
    // External data is memory-mapped: the scan need not leave the model resident.
    release_file_pages(t.raw(), t.nbytes());
  }
  std::vector<std::string> found;
  for (size_t i = 0; i < uses.size(); ++i) {
    if (first[i] < 0) continue;
    const Tensor& t = *uses[i].value;
    found.push_back(
        str_cat("initializer '", uses[i].name, "' ", nonfinite_at(t, first[i]), ", read by ", uses[i].reader));
  }
  if (found.empty()) return;
  const char* rule =
      "a build refuses non-finite weight values, as refit does (--allow-nonfinite accepts them; in Python "
      "allow_nonfinite=True)";
  if (found.size() == 1) fail(model, ": ", found[0], "; ", rule);
  std::string msg = str_cat(found.size(), " initializers of ", model, " hold non-finite values; ", rule, ":");
  for (size_t i = 0; i < found.size() && i < 10; ++i) msg += "\n  " + found[i];
  if (found.size() > 10) msg += str_cat("\n  ... and ", found.size() - 10, " more");
  fail(msg);
}

}  // namespace

void check_build_request(const ir::Graph& g, const std::set<std::string>& literals, const BuildOptions& o) {
  std::string model = g.name.empty() ? std::string("the model") : "model '" + g.name + "'";
  if (!backends::find_backend(o.backend)) {
    std::string known;
    for (const auto& n : backends::backend_names()) known += (known.empty() ? "" : ", ") + n;
    fail("backend '", o.backend, "' is not registered (registered: ", known, ")");
  }
  {
    // Placement of the model as imported: every node that cannot run where it would be placed.
    ir::Graph copy = g;
    (void)backends::place_graph(copy, {o.backend, o.host_fallback, model});
  }
  std::vector<std::string> problems = unmatched_literal_names(g, o);
  for (auto& p : unmatched_skip_passes(o)) problems.push_back(std::move(p));
  for (auto& p : unmatched_individual_patterns(g, literals, o)) problems.push_back(std::move(p));
  if (!problems.empty()) {
    std::string msg = str_cat(problems.size(), " build option(s) match nothing in ", model, ":");
    for (const auto& p : problems) msg += "\n  " + p;
    fail(msg);
  }
  // Last: it reads every weight byte, the options' checks read none.
  if (o.check_finite) check_finite_sources(g, literals, model);
}

namespace {

// Plan::values: the type and symbolic shape of every graph input and node output of the
// optimized graph, inferred with the engine weights as its constants.
std::vector<ir::ValueInfo> infer_value_types(const plan::Plan& plan) {
  ir::Graph g = plan.graph;
  for (const auto& w : plan.weights) g.initializers[w.name] = w.data;
  ops::InferOptions io;
  io.require_all = ops::kEveryOpInferred;
  ops::GraphTypes types;
  try {
    types = ops::infer_graph(g, io);
  } catch (Error& e) {
    throw e.with_context("while inferring the value types of the optimized graph");
  }
  std::vector<ir::ValueInfo> out;
  auto add = [&](const std::string& name) {
    const ops::ValueType* t = types.find(name);
    ir::ValueInfo v;
    v.name = name;
    if (t) {
      v.dtype = t->dtype;
      v.has_shape = t->rank_known;
      for (const auto& d : t->shape) v.shape.push_back(d.known() ? ir::Dim{d.value(), ""} : ir::Dim{-1, d.symbol()});
    }
    out.push_back(std::move(v));
  };
  for (const auto& in : g.inputs) add(in.name);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) add(o);
  return out;
}

}  // namespace

plan::Plan build_plan(ir::Graph input, const BuildOptions& o) {
  o.validate();
  ir::Graph g = canonicalize(std::move(input));
  std::set<std::string> literals = literal_initializers(g, o.literal_names);
  check_build_request(g, literals, o);
  std::string current_step;
  auto step = [&o, &current_step](const std::string& name) {
    current_step = name;
    if (o.progress) o.progress(Progress{name});
  };
  step("shape inference");
  // Every value's type and shape, before any data exists: an inconsistent shape (a Reshape whose
  // element count cannot match, an axis out of range) fails the build here, naming the node.
  try {
    ops::InferOptions io;
    io.require_all = ops::kEveryOpInferred;
    (void)ops::infer_graph(g, io);
  } catch (Error& e) {
    throw e.with_context("in shape inference of " +
                         (g.name.empty() ? std::string("the model") : "model '" + g.name + "'"));
  }
  plan::Plan plan;
  plan.fingerprint = structural_fingerprint(g, literals);
  plan.mode = o.mode;
  plan.precision = o.precision;
  plan.activations = o.activations;
  if (o.precision == plan::Precision::Int4) plan.block_size = o.block_size ? o.block_size : 32;
  plan.individual_patterns = o.individual_patterns;
  plan.literal_names = o.literal_names;
  plan.producer = kProducer;
  plan.model_name = g.name;
  plan.build = target_record(o);

  if (o.reference_rounding) ops::mark_reference_rounding(g);  // after the fingerprint: not part of the structure
  passes::BuildState s = make_state(std::move(g), o, plan.build->layouts, literals);
  s.progress = o.progress;
  // The sources of a model read from external data are memory-mapped, and the caller may keep
  // the model (a refit's verify rebuild, a build bound to a checkpoint), so their pages would stay
  // resident through the build. After hashing them and after each pass, the build drops the
  // resident pages of every source it still holds: a pass pages in what it reads again (from the
  // page cache), and the build holds the engine weights made so far plus what one pass reads.
  auto release_sources = [&s] {
    for (const Tensor& v : s.source_values)
      if (v.defined()) release_file_pages(v.raw(), v.nbytes());
  };
  release_sources();
  for (const auto& pass : passes::default_passes()) {
    bool allowed =
        !pass.reads_weight_values || o.mode == plan::BuildMode::Baked || o.mode == plan::BuildMode::RefitIdentical;
    for (const auto& pattern : o.skip_passes) allowed &= !glob_match(pattern, pass.name);
    // A quantized plan whose weights were not quantized would say int8 / int4 and hold float32.
    const bool quantizes = plan::is_quantized(o.precision) && std::string(pass.name) == "linear-weights-quantize";
    if (!allowed && quantizes)
      fail("--precision ", plan::precision_name(o.precision), " needs the pass '", pass.name,
           "', which --skip-pass skips");
    if (!allowed) continue;
    // A pass that emits ops the backend cannot run leaves the graph to the backend as it is.
    if (const std::string lacking = missing_emitted_op(pass, o.backend); !lacking.empty()) {
      if (quantizes)
        fail("--precision ", plan::precision_name(o.precision), ": backend '", o.backend, "' cannot run ", lacking,
             ", the product on quantized weights (build for the CPU, or with --precision fp32, bf16 or fp16)");
      if (o.print_passes)
        std::cerr << "pass " << pass.name << ": not run (backend '" << o.backend << "' cannot run " << lacking << ")\n";
      continue;
    }
    step(std::string("pass ") + pass.name);
    s.step = current_step;
    try {
      pass.run(s);
    } catch (Error& e) {
      throw e.with_context(std::string("in build pass '") + pass.name + "'");
    }
    release_sources();
    if (o.print_passes) {
      std::cerr << "pass " << pass.name << ": " << s.graph.nodes.size() << " nodes, " << s.consts.size()
                << " constants\n";
      for (const std::string& d : s.declined) std::cerr << "  not fused: " << d << "\n";
      s.declined.clear();
    }
  }

  canonical_constant_names(s);
  // Every recipe, replayed on the build-time sources, must reproduce its engine weight bit for
  // bit (those a pass verified already, before releasing a source, are not replayed again).
  if (o.verify_recipes) {
    current_step = "verifying recipes";
    ProgressStep verifying(o.progress, current_step, s.consts.size(), "weights");
    for (auto& [name, cv] : s.consts) {
      s.verify_recipe(name, cv);
      verifying.advance(1);
    }
  }
  uint64_t weight_bytes = 0;
  for (const auto& [name, cv] : s.consts) weight_bytes += cv.value.nbytes();
  current_step = "hashing weights";
  ProgressStep hashing(o.progress, current_step, weight_bytes, "bytes");
  plan.sources = s.sources;
  plan.literals = s.literals;
  for (auto& [name, cv] : s.consts) {
    plan::WeightEntry w;
    w.name = name;
    w.kind = cv.kind;
    w.dtype = cv.value.dtype();
    w.shape = cv.value.shape();
    w.hash = transforms::hash_tensor(cv.value);
    hashing.advance(cv.value.nbytes());
    w.data = cv.value;
    if (cv.kind == plan::WeightKind::Derived) {
      w.recipe = cv.recipe;
      w.sources.assign(cv.sources.begin(), cv.sources.end());
    }
    plan.weights.push_back(std::move(w));
  }
  plan.graph = std::move(s.graph);
  step("placing nodes");
  plan.placement = place_nodes(plan.graph, plan, o);
  plan.values = infer_value_types(plan);

  if (o.strip_weights) {
    for (auto& w : plan.weights)
      if (w.kind == plan::WeightKind::Derived) w.data = Tensor();
    plan.stripped = true;
  }
  return plan;
}

}  // namespace reforge::build
