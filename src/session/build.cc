#include "session/build.h"

#include <set>

#include "builder/binding.h"
#include "core/nearest_names.h"
#include "core/omp_threads.h"
#include "onnx/importer.h"
#include "refit/source_readers.h"

namespace reforge::session {

namespace {

// Adds the values `marks` names (BuildRequest::mark_outputs) to the graph's outputs, in the
// order the nodes make them; throws naming a value no node makes.
void mark_outputs(ir::Graph& g, const std::vector<std::string>& marks, const std::string& model) {
  if (marks.empty()) return;
  const bool all = marks.size() == 1 && marks[0] == "all";
  std::set<std::string> made, outputs, wanted(marks.begin(), marks.end());
  for (const auto& o : g.outputs) outputs.insert(o.name);
  for (const ir::Node& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) made.insert(o);
  if (!all)
    for (const auto& m : marks)
      if (!made.count(m)) {
        if (m == "all") fail("--mark-outputs: 'all' stands alone (every value), not among names");
        const auto near = nearest_names(m, std::vector<std::string>(made.begin(), made.end()));
        fail("--mark-outputs: no node of '", model, "' makes a value named '", m, "'",
             near.empty() ? std::string() : " (nearest: " + quoted_list(near) + ")");
      }
  for (const ir::Node& n : g.nodes) {
    if (all && n.domain.empty() && n.op_type == "Constant") continue;
    for (const auto& o : n.outputs)
      if (!o.empty() && (all || wanted.count(o)) && outputs.insert(o).second)
        g.outputs.push_back({o, DType::Undefined, false, {}});
  }
}

ir::Graph import_model(const BuildRequest& req, Observer* observer) {
  ir::Graph g;
  {
    PhaseScope phase(observer, "importing '" + req.model + "'");
    g = onnx::import_model_file(req.model);
  }
  mark_outputs(g, req.mark_outputs, req.model);
  if (req.imported) req.imported(g);
  return g;
}

BindingSummary summarize(const plan::Plan& p, const refit::Checkpoint& ckpt, const build::BindResult& r) {
  BindingSummary s;
  s.checkpoint = ckpt.description();
  s.sources = p.sources.size();
  for (const auto& src : p.sources)
    (src.binding.status == plan::Binding::Status::Bound      ? s.bound
     : src.binding.status == plan::Binding::Status::Constant ? s.constant
                                                             : s.unbound)++;
  s.checkpoint_bytes = ckpt.total_bytes();
  s.index_ms = r.index_ms;
  s.match_ms = r.match_ms;
  return s;
}

}  // namespace

void BuildRequest::validate() const {
  options.validate();
  const CheckpointBinding& c = checkpoint;
  if (!c.given() && (!c.binds.empty() || !c.bind_file.empty() || c.strict || c.allow_partial))
    fail("binds, a bind file, strict binding and partial binding need a checkpoint to bind to");
  if (!c.given() && (!c.strip_prefix.empty() || !c.add_prefix.empty()))
    fail("--strip-prefix and --add-prefix rename a checkpoint's tensors: they need a checkpoint (--checkpoint)");
  if (!c.files.empty() && !c.tensors.empty()) fail("give the checkpoint as files or as tensors, not both");
}

Built build_plan(const BuildRequest& req, Observer* observer) {
  req.validate();
  // The build's kernels (constant folding, packing) on req.threads; the caller's setting comes back.
  const OmpThreads omp_threads(req.threads);
  build::BuildOptions o = req.options;
  Built out;
  if (!req.checkpoint.given()) {
    ir::Graph g = import_model(req, observer);
    PhaseScope phase(observer, "building '" + req.model + "'");
    o.progress = phase.steps();
    out.plan = build::build_plan(std::move(g), o);
    return out;
  }
  const CheckpointBinding& c = req.checkpoint;
  build::BindOptions bo;
  if (!c.bind_file.empty()) {
    build::BindFile bf = build::read_bind_file(c.bind_file);
    for (const auto& [k, v] : bf.binds) bo.add_bind(k, v, "bind file '" + c.bind_file + "'");
    o.literal_names.insert(o.literal_names.end(), bf.literals.begin(), bf.literals.end());
  }
  for (const Bind& b : c.binds) bo.add_bind(b.key, b.tensor, b.origin);
  bo.strict = c.strict;
  bo.allow_partial = c.allow_partial;
  const refit::Checkpoint ckpt = (c.files.empty() ? refit::Checkpoint::from_tensors(c.tensors, "state dict")
                                                  : refit::open_checkpoint(c.files, "checkpoint"))
                                     .with_key_prefix(c.strip_prefix, c.add_prefix);
  ir::Graph g = import_model(req, observer);
  build::BindResult r;
  {
    PhaseScope phase(observer, "building '" + req.model + "' bound to " + ckpt.description());
    o.progress = phase.steps();
    out.plan = build::build_plan_with_checkpoint(std::move(g), o, ckpt, bo, &r);
  }
  out.binding = summarize(out.plan, ckpt, r);
  return out;
}

}  // namespace reforge::session
