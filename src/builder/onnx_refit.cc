#include "builder/onnx_refit.h"

#include <chrono>

#include "backends/backend.h"
#include "builder/builder.h"
#include "builder/fingerprint.h"
#include "core/file_pages.h"
#include "core/nonfinite.h"
#include "core/timing.h"
#include "onnx/importer.h"
#include "refit/source_readers.h"
#include "transforms/recipe.h"

namespace reforge::build {

namespace {
void check_structure(const plan::Plan& plan, const std::vector<std::string>& fp) {
  std::string diff = fingerprint_difference(plan.fingerprint, fp);
  if (!diff.empty())
    fail("refit: the new model's structure differs from the plan's (", diff,
         ")\n  a refit can only change weights; rebuild the plan for a changed model");
}
}  // namespace

std::map<uint32_t, Tensor> read_sources_from_onnx(const plan::Plan& plan, const ir::Graph& model) {
  ir::Graph g = canonicalize(model);
  std::set<std::string> literals = literal_initializers(g, plan.literal_names);
  check_structure(plan, structural_fingerprint(g, literals));
  std::map<uint32_t, Tensor> out;
  for (size_t id = 0; id < plan.sources.size(); ++id) {
    // Baked sources too: the refit compares them with the plan's (refit/refitter.h).
    const plan::Source& s = plan.sources[id];
    REFORGE_ASSERT(s.node_position < g.nodes.size());  // the fingerprint matched
    const ir::Node& n = g.nodes[s.node_position];
    if (n.op_type != s.op_type || s.slot >= n.inputs.size())
      fail("refit: node ", s.node_position, " of the new model is ", n.label(), ", the plan expects a ", s.op_type);
    auto it = g.initializers.find(n.inputs[s.slot]);
    if (it == g.initializers.end())
      fail("refit: input ", s.slot, " of ", n.label(), " is not an initializer in the new model (source '", s.key,
           "')");
    const Tensor& t = it->second;
    if (t.dtype() != s.dtype || t.shape() != s.shape)
      fail("refit: source '", s.key, "' is ", t.describe(), " in the new model (initializer '", it->first,
           "'), the plan expects ", dtype_name(s.dtype), shape_str(s.shape));
    out[static_cast<uint32_t>(id)] = t;
  }
  return out;
}

std::map<uint32_t, Tensor> read_sources_from_onnx(const plan::Plan& plan, const std::string& path) {
  try {
    return read_sources_from_onnx(plan, onnx::import_model_file(path));
  } catch (Error& e) {
    throw e.with_context("while reading new weights from '" + path + "'");
  }
}

BuildOptions rebuild_options(const plan::Plan& plan, const ir::Graph& model, std::string* note) {
  BuildOptions o;
  o.mode = plan.mode;
  o.precision = plan.precision;
  o.activations = plan.activations;
  o.block_size = plan.precision == plan::Precision::Int4 ? plan.block_size : 0;
  o.individual_patterns = plan.individual_patterns;
  if (plan.mode == plan::BuildMode::RefitIndividual) {
    // The plan's split, not the patterns' verdict on the new model's names (BuildOptions).
    o.refittable_positions.emplace();
    for (const auto& s : plan.sources)
      if (s.refittable) o.refittable_positions->insert({s.node_position, s.slot});
  }
  // Non-finite new values are the refit's to refuse or accept (CommitOptions::check_finite,
  // refit_from), not the rebuild's.
  o.check_finite = false;
  // Names the new model lacks are left out rather than refused (the build refuses a --literal
  // that names nothing): a re-export may rename an initializer that is a literal anyway, and a
  // literal really missing shows up as a structural difference below.
  for (const auto& name : plan.literal_names)
    if (model.initializers.count(name)) o.literal_names.push_back(name);
  if (plan.build) {
    const plan::BuildRecord& r = *plan.build;
    // Rebuilt for the plan's backend, which this reforge must have.
    if (!backends::find_backend(r.backend)) {
      std::string known;
      for (const auto& n : backends::backend_names()) known += (known.empty() ? "" : ", ") + n;
      fail("refit: the plan was built for backend '", r.backend, "', which this reforge does not have (it has: ", known,
           ")");
    }
    o.backend = r.backend;
    o.host_fallback = r.host_fallback;
    o.reference_rounding = r.reference_rounding;
    o.weight_packing = r.weight_packing;
    o.skip_passes = r.skip_passes;
    o.verify_recipes = r.verify_recipes;
    // The plan's layouts, not the ones this CPU would choose: they are byte arrangements that
    // every CPU runs (generic kernel variants) and replays (Cast, PackPanels), so no ISA the
    // building CPU had is needed here, and the rebuild matches the plan's engine weights.
    o.layouts = r.layouts;
    return o;
  }
  // A plan without a build record (written before reforge recorded one): its Linear weights are
  // packed exactly when it has packed Linear nodes, and 16-bit ones when a packed node reads a
  // 16-bit weight. Passes skipped at its build cannot be known.
  plan::WeightLayouts layouts;
  std::map<std::string, DType> weight_dtypes;
  for (const auto& w : plan.weights) weight_dtypes[w.name] = w.dtype;
  for (const auto& n : plan.graph.nodes) {
    if (n.domain == "reforge" && n.op_type == "MatMulGroup" && n.attrs.count("transposed") &&
        n.attrs.at("transposed").i != 0)
      layouts.linear_transposed = true;
    if (n.domain != "reforge" || n.op_type != "MatMulAddPacked") continue;
    layouts.linear_panels = true;
    for (const auto& in : n.inputs) {
      auto it = weight_dtypes.find(in);
      if (it != weight_dtypes.end() && (it->second == DType::BFloat16 || it->second == DType::Float16))
        layouts.half_panels = true;
    }
  }
  o.layouts = layouts;
  if (note)
    *note =
        "the plan has no build record (written by an older reforge): rebuilding with its mode and precision, "
        "the weight layouts of its nodes, and every build pass";
  return o;
}

plan::Plan rebuild_from_onnx(const plan::Plan& plan, const ir::Graph& model, std::string* note,
                             const ProgressCallback& progress) {
  BuildOptions o = rebuild_options(plan, model, note);
  o.progress = progress;
  plan::Plan fresh;
  try {
    fresh = build_plan(model, o);
  } catch (Error& e) {
    throw e.with_context("while rebuilding the plan with its build options");
  }
  check_structure(plan, fresh.fingerprint);
  if (fresh.weights.size() != plan.weights.size())
    fail("refit: the rebuilt plan has ", fresh.weights.size(), " engine weights, the plan has ", plan.weights.size());
  for (size_t i = 0; i < plan.weights.size(); ++i) {
    const auto& a = plan.weights[i];
    const auto& b = fresh.weights[i];
    if (a.name != b.name || a.kind != b.kind || a.dtype != b.dtype || a.shape != b.shape)
      fail("refit: engine weight '", a.name, "' does not match the rebuilt plan's '", b.name, "'");
  }
  return fresh;
}

refit::RefitReport refit_from(runtime::PlanEngine& engine, const refit::RefitRequest& req) {
  if (req.files.empty() || refit::read_weight_files(req.files, "refit").form != refit::WeightForm::Model)
    return refit::refit_from(engine, req);
  const plan::Plan& p = engine.plan();
  if (p.mode == plan::BuildMode::Baked) fail("this plan was built without a refit flag; it cannot be refit");
  if (req.files.size() != 1) fail("refit from ONNX takes exactly one model file (got ", req.files.size(), ")");
  if (!req.tensors.empty() || !req.checkpoint_tensors.empty())
    fail("refit: give new weights either as files or as tensors, not both");
  if (!req.strip_prefix.empty() || !req.add_prefix.empty())
    fail("refit from '", req.files[0],
         "': --strip-prefix and --add-prefix rename a checkpoint's tensors; an ONNX model's sources are read by "
         "graph position");
  if (req.lora.given())
    fail("refit from '", req.files[0],
         "': a LoRA adapter merges into a checkpoint's tensors by module name, and an ONNX model's sources are read "
         "by graph position; give the base weights as the checkpoint the plan was bound to");
  const std::string& src = req.files[0];
  refit::RefitReport rep;
  rep.from = "onnx";
  rep.reader = "onnx";
  rep.device = plan::backend_of(p);
  rep.mode = req.mode;
  refit::Refitter r(engine);
  auto t0 = std::chrono::steady_clock::now();
  // The model is imported once: fast refit, verify's rebuild and a slow refit all read the one
  // mapping of its external data (importing it twice would map, and page in, every weight twice).
  ir::Graph model;
  if (req.commit.progress) req.commit.progress(Progress{"importing the model"});
  try {
    model = onnx::import_model_file(src);
  } catch (Error& e) {
    throw e.with_context("while reading new weights from '" + src + "'");
  }
  auto rebuild = [&] {
    try {
      return rebuild_from_onnx(p, model, &rep.note, req.commit.progress);
    } catch (Error& e) {
      throw e.with_context("while rebuilding from '" + src + "'");
    }
  };
  if (req.mode != refit::RefitMode::Fast && req.commit.check_finite) {
    // The new model's sources, as a fast refit scans them: a value the rebuilt weights do not
    // show (a row of a position table the model slices off) is refused all the same.
    try {
      for (const auto& [id, t] : read_sources_from_onnx(p, model)) {
        const int64_t i = first_nonfinite(t);
        if (i < 0) continue;
        fail_refit_nonfinite("source '" + p.sources[id].key + "'", t, i);
      }
    } catch (Error& e) {
      throw e.with_context("while reading new weights from '" + src + "'");
    }
  }
  if (req.mode == refit::RefitMode::Slow) {
    if (req.into_version)
      fail("refit from '", src, "': a slow refit replaces the engine's weights; a named version comes from a fast ",
           "or verifying refit");
    plan::Plan fresh = rebuild();
    rep.read_ms = ms_since(t0);
    rep.commit = r.commit_rebuilt(fresh, req.commit);
    return rep;
  }
  try {
    for (const auto& [id, t] : read_sources_from_onnx(p, model)) r.set_source(id, t);  // the map goes here
  } catch (Error& e) {
    throw e.with_context("while reading new weights from '" + src + "'");
  }
  rep.read_ms = ms_since(t0);
  refit::CommitOptions options = req.commit;
  // The model stays imported to the end (verify's rebuild reads it too): each source's pages
  // leave the resident set once the refit is done with them, as a checkpoint's do.
  if (!options.release) options.release = [](const Tensor& t) { release_file_pages(t.raw(), t.nbytes()); };
  if (req.mode != refit::RefitMode::Verify) {
    // The refitter now holds the only references to the weights parsed from the file (unless
    // they are external data, mapped): it drops each once replayed, so a stripped plan's refit
    // holds about the new weights, not the file's weights as well.
    model = ir::Graph();
    options.consume = !options.own_values;
    rep.commit = refit::apply_staged(engine, r, r.stage(options), req);
    return rep;
  }
  // Verify: rebuild first, then replay the fast refit weight by weight against the rebuild. Each
  // replayed weight is compared with the rebuilt one bit for bit and the rebuilt one (the same
  // bytes) is staged, so the refit holds one derived weight set and one replayed weight, never
  // two sets. The derived weights the fast refit does not replay are compared with the engine's.
  auto t1 = std::chrono::steady_clock::now();
  plan::Plan fresh = rebuild();
  std::map<std::string, Tensor> rebuilt;
  for (auto& w : fresh.weights)
    if (w.kind == plan::WeightKind::Derived) rebuilt[w.name] = std::move(w.data);
  fresh = plan::Plan();
  double compare_ms = 0;
  auto mismatch = [](const std::string& name) {
    fail("refit --verify: engine weight '", name,
         "' differs between fast refit and a fresh build; nothing was changed");
  };
  options.replayed = [&](const std::string& name, Tensor t) {
    auto c0 = std::chrono::steady_clock::now();
    auto it = rebuilt.find(name);
    if (it == rebuilt.end()) fail("refit --verify: engine weight '", name, "' is not a derived weight of the rebuild");
    // A weight replayed on the device (CommitOptions::device_replay) is compared on the host.
    if (!transforms::bit_equal(t.on_host() ? t : to_host(t), it->second)) mismatch(name);
    ++rep.verified;
    Tensor same = std::move(it->second);
    rebuilt.erase(it);
    compare_ms += ms_since(c0);
    return same;
  };
  rep.verify_ms = ms_since(t1);
  refit::StagedRefit staged = r.stage(options);
  auto t2 = std::chrono::steady_clock::now();
  for (const auto& [name, t] : rebuilt) {
    if (!transforms::bit_equal(engine.weight(name), t)) mismatch(name);
    ++rep.verified;
  }
  rep.verify_ms += compare_ms + ms_since(t2);
  rep.commit = refit::apply_staged(engine, r, std::move(staged), req);
  return rep;
}

}  // namespace reforge::build
