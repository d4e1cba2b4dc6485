#include "refit/refit_from.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <set>
#include <sstream>

#include "core/nearest_names.h"
#include "core/nonfinite.h"
#include "core/timing.h"
#include "refit/checkpoint_refit.h"
#include "refit/safetensors.h"
#include "refit/source_readers.h"

namespace reforge::refit {

const char* refit_mode_name(RefitMode m) {
  switch (m) {
    case RefitMode::Fast:
      return "fast";
    case RefitMode::Slow:
      return "slow";
    case RefitMode::Verify:
      return "verify";
  }
  return "?";
}

std::string RefitReport::summary() const {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  const CommitReport& c = commit;
  if (!note.empty()) os << "refit (" << (mode == RefitMode::Slow ? "slow" : "verify") << "): " << note << "\n";
  if (from == "checkpoint") {
    os << "refit (checkpoint): read+bind " << read_ms << " ms, validate " << c.validate_ms << " ms, replay "
       << c.replay_ms << " ms, commit " << c.commit_ms << " ms; " << c.sources_set << " sources -> "
       << c.weights_replayed << " engine weights";
    if (c.packed_from_transposed) os << " (" << c.packed_from_transposed << " read straight from transposed tensors)";
    os << "\n";
    if (!unused.empty()) os << unused_summary(unused) << "\n";
    if (literals_given)
      os << "literals (--literal) in the checkpoint: " << literals_given << ", "
         << (literals_differing.empty()
                 ? std::string("all equal to the plan's")
                 : str_cat(literals_differing.size(), " with other values than the plan's were ignored (--keep-baked)"))
         << "\n";
  } else if (mode == RefitMode::Slow) {
    os << "refit (slow): import+build " << read_ms << " ms, validate " << c.validate_ms << " ms, commit " << c.commit_ms
       << " ms, " << c.weights_replayed << " weights, " << c.bytes_out << " bytes\n";
  } else {
    os << "refit (" << (from == "tensors" ? "tensors" : "fast") << "): read " << read_ms << " ms, validate "
       << c.validate_ms << " ms, replay " << c.replay_ms << " ms, commit " << c.commit_ms << " ms; " << c.sources_set
       << " sources (" << c.bytes_in << " bytes) -> " << c.weights_replayed << " engine weights (" << c.bytes_out
       << " bytes)\n";
    if (mode == RefitMode::Verify)
      os << "refit --verify: fast == slow for all " << verified << " derived engine weights, bit for bit (" << verify_ms
         << " ms)\n";
  }
  if (lora)
    os << "lora: merged " << lora->merged.size() << " matrices of " << lora->adapter << " (r " << lora->r << ", scale "
       << std::setprecision(6) << std::defaultfloat << lora->scale << std::fixed << std::setprecision(2) << ") in "
       << lora->merge_ms << " ms\n";
  if (c.sources_unchanged)
    os << "unchanged: " << c.sources_unchanged << " of " << c.sources_set
       << " sources hold the bytes the engine's weights were made from; the weights that read only those stay\n";
  if (c.baked_given)
    os << "baked sources: " << c.baked_given << " given, "
       << (c.baked_differing
               ? str_cat(c.baked_differing, " with other values than the plan's were ignored (--keep-baked)")
               : std::string("all equal to the plan's"))
       << "\n";
  if (!c.quantized.empty()) {
    // One line per part: values changed, and in how many weights any changed.
    os << "quantized values changed:";
    bool first = true;
    for (const char* part : {"q", "scales", "zero_points"}) {
      size_t values = 0, changed = 0, weights = 0, touched = 0;
      bool compared = true;
      for (const QuantizedChange& q : c.quantized) {
        if (q.part != part) continue;
        values += q.values;
        changed += q.changed;
        ++weights;
        touched += q.changed != 0;
        compared &= q.compared;
      }
      if (!weights) continue;
      os << (first ? " " : "; ")
         << (std::string(part) == "q"        ? "weights"
             : part == std::string("scales") ? "scales"
                                             : "zero points")
         << " " << changed << " of " << values << " (in " << touched << " of " << weights << " engine weights)";
      if (!compared) os << " [no previous values to compare: a stripped plan]";
      first = false;
    }
    os << "\n";
  }
  return os.str();
}

nlohmann::ordered_json RefitReport::json() const {
  const CommitReport& c = commit;
  nlohmann::ordered_json quantized_changes = nlohmann::ordered_json::array();
  for (const QuantizedChange& q : c.quantized)
    quantized_changes.push_back(
        {{"weight", q.weight}, {"part", q.part}, {"values", q.values}, {"changed", q.changed}, {"compared", q.compared}});
  return {{"from", from},
          {"reader", reader},
          {"mode", refit_mode_name(mode)},
          {"device", device},
          {"sources_set", c.sources_set},
          {"sources_unchanged", c.sources_unchanged},
          {"weights_replayed", c.weights_replayed},
          {"bytes_in", c.bytes_in},
          {"bytes_out", c.bytes_out},
          {"bytes_copied", c.bytes_copied},
          {"packed_from_transposed", c.packed_from_transposed},
          {"weights_on_device", c.weights_on_device},
          {"bytes_streamed", c.bytes_streamed},
          {"transposed_on_device", c.transposed_on_device},
          {"read_ms", read_ms},
          {"validate_ms", c.validate_ms},
          {"replay_ms", c.replay_ms},
          {"commit_ms", c.commit_ms},
          {"verify_ms", verify_ms},
          {"verified_weights", verified},
          {"unused_checkpoint_tensors", unused},
          {"baked_given", c.baked_given},
          {"baked_differing_kept", c.baked_differing_keys},
          {"literals_given", literals_given},
          {"literals_differing_kept", literals_differing},
          {"quantized", std::move(quantized_changes)},
          {"lora", lora ? nlohmann::ordered_json{{"adapter", lora->adapter},
                                                  {"merged", lora->merged},
                                                  {"r", lora->r},
                                                  {"scale", lora->scale},
                                                  {"merge_ms", lora->merge_ms}}
                        : nlohmann::ordered_json(nullptr)},
          {"note", note},
          {"summary", summary()}};
}

namespace {

// The checkpoint tensors that bindings derive sources from by a transform that may leave elements
// out (a slice of a position table, a gather of rows): NaN or Inf anywhere in them is refused, as
// in a tensor a source is (the commit scans those), whether or not the model reads that element.
void check_finite_read(const plan::Plan& p, const Checkpoint& ckpt) {
  std::set<std::string> seen;
  for (const auto& s : p.sources) {
    if (s.binding.status != plan::Binding::Status::Bound || s.binding.steps.empty()) continue;
    for (const auto& in : s.binding.checkpoint) {
      const Tensor* t = ckpt.find(in.name);
      if (!t || !seen.insert(in.name).second) continue;
      const int64_t i = first_nonfinite(*t);
      if (i >= 0)
        fail_refit_nonfinite("checkpoint tensor '" + in.name + "' of " + ckpt.description() + " (source '" + s.key +
                                 "' is derived from it)",
                             *t, i);
    }
  }
}

// Merges the adapter `source` into `ckpt` (refit/lora.h), refusing NaN or Inf in its matrices
// when `check_finite`.
RefitReport::Lora merge_adapter(Checkpoint& ckpt, const LoraSource& source, bool check_finite) {
  const auto t = std::chrono::steady_clock::now();
  const LoraAdapter adapter = read_lora_adapter(source);
  if (check_finite)
    for (const LoraPair& pair : adapter.pairs)
      for (const auto& [key, m] : {std::pair{&pair.a_key, &pair.a}, std::pair{&pair.b_key, &pair.b}})
        if (const int64_t i = first_nonfinite(*m); i >= 0)
          fail_refit_nonfinite("tensor '" + *key + "' of " + adapter.description, *m, i);
  ckpt = merge_lora(ckpt, adapter);
  RefitReport::Lora rep;
  rep.adapter = adapter.description;
  for (const LoraPair& pair : adapter.pairs) rep.merged.push_back(pair.target);
  rep.r = adapter.config.r;
  rep.scale = adapter.scale();
  rep.merge_ms = ms_since(t);
  return rep;
}

// An adapter that changes a checkpoint tensor no binding of the plan reads would be dropped
// unseen: refused, naming it.
void check_lora_used(const RefitReport::Lora& lora, const std::vector<std::string>& unused, const Checkpoint& ckpt) {
  std::vector<std::string> dropped;
  for (const auto& name : lora.merged)
    if (std::find(unused.begin(), unused.end(), name) != unused.end()) dropped.push_back(name);
  if (!dropped.empty())
    fail("refit: ", lora.adapter, " adapts ", quoted_list(dropped), " of ", ckpt.description(),
         ", which no source of this plan reads: the adapter would be ignored there. Nothing was changed");
}

}  // namespace

RefitReport refit_from(runtime::PlanEngine& engine, const RefitRequest& req) {
  const plan::Plan& p = engine.plan();
  if (p.mode == plan::BuildMode::Baked) fail("this plan was built without a refit flag; it cannot be refit");
  const int kinds = !req.files.empty() + !req.tensors.empty() + !req.checkpoint_tensors.empty();
  if (kinds != 1)
    fail("refit: give new weights either as files, as tensors or as checkpoint tensors (", req.files.size(),
         " file(s), ", req.tensors.size(), " tensor(s), ", req.checkpoint_tensors.size(),
         " checkpoint tensor(s) given)");
  const bool in_memory_checkpoint = !req.checkpoint_tensors.empty();
  WeightFiles files;
  if (!req.files.empty()) {
    files = read_weight_files(req.files, "refit");
    if (files.form == WeightForm::Model)
      fail("refit from '", req.files[0],
           "': an ONNX model, which is read on the build side (build::refit_from in builder/onnx_refit.h)");
  }
  const bool checkpoint = in_memory_checkpoint || !req.files.empty();
  if (!checkpoint && (!req.strip_prefix.empty() || !req.add_prefix.empty()))
    fail("refit: --strip-prefix and --add-prefix rename a checkpoint's tensors; these weights are tensors by "
         "initializer name or source key");
  if (req.lora.given() && !checkpoint)
    fail("refit: a LoRA adapter merges into a checkpoint's tensors by module name; give the base weights as the "
         "checkpoint the plan was bound to (safetensors, or a state dict by checkpoint names), not tensors by "
         "initializer name");
  if (req.mode != RefitMode::Fast)
    fail("refit: a ", refit_mode_name(req.mode), " refit (--slow, --verify) needs a re-exported ONNX model, not ",
         checkpoint ? "a checkpoint" : "tensors");
  RefitReport rep;
  rep.from = checkpoint ? "checkpoint" : "tensors";
  rep.reader = req.files.empty() ? req.memory_reader : files.reader_names();
  rep.device = plan::backend_of(p);
  Refitter r(engine);
  auto t0 = std::chrono::steady_clock::now();
  CommitOptions commit = req.commit;
  Checkpoint ckpt;
  if (checkpoint) {
    if (commit.progress) commit.progress(Progress{"reading the checkpoint"});
    ckpt = (in_memory_checkpoint ? Checkpoint::from_tensors(req.checkpoint_tensors, "state dict")
                                 : open_checkpoint(files))
               .with_key_prefix(req.strip_prefix, req.add_prefix);
    if (req.lora.given()) {
      if (commit.progress) commit.progress(Progress{"merging the LoRA adapter"});
      rep.lora = merge_adapter(ckpt, req.lora, commit.check_finite);
    }
    auto cs = sources_from_checkpoint(p, ckpt);
    if (commit.check_finite) check_finite_read(p, ckpt);
    const LiteralCheck lits = check_literals(p, ckpt);
    if (!lits.differing.empty() && !req.commit.keep_baked) {
      std::string list;
      for (const auto& n : lits.differing) list += "\n  " + n;
      fail("refit from ", ckpt.description(), ": the checkpoint holds other values than this plan was built with for ",
           lits.differing.size(),
           " initializer(s) the build declared literal (--literal), which a refit never "
           "changes, so the engine would run a mix of the old and the new weights:",
           list,
           "\nNothing was changed. Rebuild without --literal for them, or refit with --keep-baked (Python: "
           "keep_baked=True) to keep the plan's values");
    }
    rep.literals_given = lits.given;
    rep.literals_differing = lits.differing;
    for (const auto& b : p.literal_bindings)  // compared above, not unused
      for (const auto& in : b.binding.checkpoint)
        cs.unused.erase(std::remove(cs.unused.begin(), cs.unused.end(), in.name), cs.unused.end());
    if (rep.lora) check_lora_used(*rep.lora, cs.unused, ckpt);
    rep.read_ms = ms_since(t0);
    set_sources(r, cs);
    rep.unused = std::move(cs.unused);
    if (!in_memory_checkpoint && !commit.release) {
      // A mapped checkpoint's pages leave the resident set as the refit is done with them: those
      // that deriving the sources read into new tensors, then each value set after its last use,
      // so the refit holds about the new engine weights and the sources in use.
      for (const Tensor& t : cs.read) ckpt.release_pages_of(t);
      commit.release = [&ckpt](const Tensor& t) { ckpt.release_pages_of(t); };
    }
  } else {
    for (const auto& [name, t] : req.tensors) r.set(name, t);
    rep.read_ms = ms_since(t0);
  }
  rep.commit = apply_staged(engine, r, r.stage(commit), req);
  return rep;
}

CommitReport apply_staged(runtime::PlanEngine& engine, Refitter& r, StagedRefit staged, const RefitRequest& req) {
  if (!req.into_version) return r.commit(std::move(staged));
  auto t = std::chrono::steady_clock::now();
  *req.into_version = engine.derive_version(engine.current_version(), staged.update);
  r.clear();
  staged.report.commit_ms = ms_since(t);
  return staged.report;
}

}  // namespace reforge::refit
