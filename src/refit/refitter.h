// Refitter: gives a PlanEngine new weights, as one transaction.
//
//   Refitter r(engine);
//   r.set("model.layers.0.mlp.up_proj.weight", view);   // validated at once: name, dtype, shape
//   r.commit();                                          // all or nothing
//
// commit() first validates everything: completeness (by default the values set must cover
// every refittable source, set equality; an incremental commit keeps the engine's values of
// the others and re-hashes the ones the engine holds against the hash recorded for them), for
// refit-identical plans that every source, set or kept, hashes to the build-time hash, and
// that no value holds NaN or Inf. Then it replays only the recipes whose sources changed, with
// the same kernels the builder used (transforms/recipe.h), and swaps the new engine weights in
// at once through the engine's one weight transaction (runtime::WeightUpdate). Any failure
// leaves the engine exactly as it was.
//
// Values given for *baked* sources (the sources a refit-individual plan holds fixed) are not
// refit: they are compared with the values the plan was built with (the hash the builder recorded
// for every source). A refit whose new weights hold other values for a baked source would leave
// a model that is neither the old nor the new one, so commit() refuses it, naming each such
// source, unless CommitOptions::keep_baked says to keep the plan's values (the report counts
// them). Equal values are accepted and counted.
//
// Most callers want refit_from() (refit/refit_from.h), which reads the sources too.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/progress.h"
#include "refit/quant_changes.h"
#include "runtime/plan_engine.h"

namespace reforge::refit {

struct SourceDesc {
  uint32_t id;
  std::string key;                 // "<initializer>@<node position>:<slot>"
  std::vector<std::string> names;  // initializer name(s)
  std::string consumer, op_type;
  DType dtype;
  Shape shape;
  bool refittable;
  bool has_value;  // the engine has a value for it, or one is set in this transaction
};

struct CommitOptions {
  // Refuse NaN/Inf in float sources; the error names the source, the index and the value of
  // the first one. Off: non-finite values are accepted (what the weights then compute is the
  // caller's business).
  bool check_finite = true;
  // Off (default): the values set must cover every refittable source; a missing one is an
  // error that lists them. On: only the sources set change; every other refittable source keeps
  // the engine's value, and each one the engine holds the bytes of (identity weights, sources of
  // multi-source recipes) is re-hashed against the hash recorded when it entered the engine, so
  // a corrupted or stale value is refused rather than replayed into new weights.
  bool incremental = false;
  // Off (default): a value given for a baked source (not refittable in this plan's build mode)
  // must equal the value the plan was built with, or the refit is refused naming each that
  // differs: the new weights would otherwise be applied only in part. On: such values are
  // ignored and the engine keeps the plan's (counted in CommitReport::baked_differing).
  bool keep_baked = false;
  // On: a source set to the bytes the engine's weights were made from (its value hashes to the
  // XXH3-64 the engine recorded for it, which it knows after a build or after a refit that hashed
  // it) changes nothing, and the recipes that read only such sources are not replayed: their
  // engine weights stay as they are, shared with the current version. The weights are those a
  // refit of every source makes (bit for bit, but for a collision of the 64-bit hash). Every
  // value set is hashed (one more pass over it) and the hashes are recorded, so that the next
  // such refit can compare. For weight updates that change a part of the model (some layers
  // trained, an adapter merged into a few matrices). Off: every recipe reading a source set is
  // replayed.
  bool skip_unchanged = false;
  // On: no engine weight and no value the engine keeps shares memory with a value given to this
  // refit. An engine weight that would (an identity recipe, a reshape's view) and a kept source
  // value are copied into storage the engine owns, in one parallel pass, so that the caller may
  // change or free its buffers after the commit (a training loop's state dict). Off: they alias
  // the given tensors, which must then stay unchanged (a memory-mapped checkpoint).
  bool own_values = false;
  // Set: called with each value set in this transaction once validation and every recipe replay
  // that reads it are done with it (from several threads at once during validation). refit_from
  // passes Checkpoint::release_pages_of, so that a refit from a memory-mapped checkpoint holds about
  // the new engine weights plus the sources in use, not the whole checkpoint as well. It must not
  // change the value's bytes.
  std::function<void(const Tensor&)> release;
  // On: the values set are the refitter's alone (read from a file for this refit; no caller holds
  // them): stage() drops each once validation and the last replayed recipe that reads it are
  // done with it, unless the engine keeps it, so that a refit holds about the new engine weights
  // plus the values still to replay, not every value as well (a refit from an ONNX file, whose
  // weights are parsed into memory). The refitter's values are gone after such a stage: it
  // commits once. Not with own_values (nothing would be left to copy from).
  bool consume = false;
  // Set: called with each engine weight the refit replays (its name and the replayed value)
  // before it is staged; the refit stages what it returns, which must be a tensor of the same
  // dtype, shape and bytes (checked: dtype and shape), and it may throw to refuse the refit.
  // build::refit_from's verify compares each weight with the rebuilt plan's and returns that
  // one, so that the replayed copy is freed at once and two derived weight sets are never held.
  std::function<Tensor(const std::string& name, Tensor replayed)> replayed;
  // On (the default): a replayed engine weight that a device holds alone (PlanEngine::weight_device:
  // its one reader is its upload, as in a CUDA plan) and whose recipe has steps that run there
  // (transforms/device_recipe.h: Transpose, Cast, Slice, Concat, Gather, Expand) is replayed on the
  // device. Each source such recipes read goes there once, as given, streamed through the device's
  // staging ring on its copy stream while the device runs the steps of the sources before; the
  // weight is made there, its bytes those of the host replay, and uploaded into the new version
  // on the device. Other weights, and every weight with this off, replay on the host. Quantized
  // weights always replay on the host (their report compares the values). CommitOptions::replayed
  // then gets such a weight in device memory. A failure half-way through the device work leaves
  // the serving version as it was and gives back the device memory the refit took
  // (tests/cuda_device_refit_test.cc).
  bool device_replay = true;
  // Non-zero: the size in bytes of the device's staging ring (backends::WeightMemory::
  // set_staging_bytes: one ring per process, kept for later uploads), set before this refit moves
  // any bytes; 0: the ring as it is (64 MiB unless set). Never a copy of the model: the ring is
  // reused chunk by chunk.
  size_t staging_bytes = 0;
  // Set: told the steps of the refit as they start and advance, on the calling thread:
  // "validating sources", then "replaying recipes" (counts the bytes of the engine weights
  // replayed) (core/progress.h). refit_from reports its reading before those ("reading the
  // checkpoint", "importing the model") and a slow or verifying refit its rebuild's steps.
  ProgressCallback progress;
};

struct CommitReport {
  size_t sources_set = 0;
  size_t weights_replayed = 0;
  size_t bytes_in = 0;      // bytes of sources read
  size_t bytes_out = 0;     // bytes of engine weights written
  size_t bytes_copied = 0;  // own_values: bytes copied out of the given values
  // Values set transposed (Refitter::set_source_transposed): how many the recipes read straight
  // from the matrix given (packed from it, or the matrix itself as a Transpose of the value), and
  // how many were transposed first.
  size_t packed_from_transposed = 0, transposed_first = 0;
  // CommitOptions::device_replay: engine weights replayed on the device, and the bytes of the
  // sources streamed there for them.
  size_t weights_on_device = 0, bytes_streamed = 0;
  // Sources given transposed (a checkpoint's matrix) that went to the device as given and were
  // transposed there: their host transpose was never made.
  size_t transposed_on_device = 0;
  double validate_ms = 0, replay_ms = 0, commit_ms = 0;
  // Quantized plans: each replayed weight made by reforge::QuantizeWeight, and how many of its
  // values changed (refit/quant_changes.h), in plan weight order.
  std::vector<QuantizedChange> quantized;
  // Values given for baked sources: how many, and how many of those differ from the plan's
  // build-time values (non-zero only with keep_baked, which keeps the plan's values), with their
  // source keys.
  size_t baked_given = 0, baked_differing = 0;
  // CommitOptions::skip_unchanged: sources set to the bytes the engine already had (their recipes
  // not replayed unless another of their sources changed).
  size_t sources_unchanged = 0;
  std::vector<std::string> baked_differing_keys;
};

// A refit validated and replayed but not applied: the new engine weights and source records,
// staged. Refitter::commit(StagedRefit) applies it; until then the engine is unchanged, so a
// caller can inspect the new weights first (refit_from's verify compares them with a rebuild).
struct StagedRefit {
  runtime::WeightUpdate update;
  CommitReport report;
};

class Refitter {
 public:
  explicit Refitter(runtime::PlanEngine& engine);

  std::vector<SourceDesc> all_sources() const;
  // Keys of refittable sources that have no value (in the engine or set here).
  std::vector<std::string> missing() const;
  // Sets the source `name` names: its source key, or the name of an initializer with one use.
  // A baked source's value is only compared with the plan's at commit (see above). Throws on an
  // unknown name, on an initializer name with several uses (each
  // use is set by its key: nothing tells a tied parameter from equal ones an exporter merged), or
  // on a dtype/shape that differs from the plan's.
  void set(const std::string& name, const Tensor& value);
  void set_source(uint32_t id, const Tensor& value);
  // Sets source `id` to the 2-D transpose of `matrix` (a checkpoint tensor stored transposed)
  // without making that transpose here. Where every recipe the refit replays reads the source
  // only as a PackPanels weight or through a 2-D Transpose, and the engine keeps neither the
  // value nor its hash, the recipes read `matrix` directly: PackPanels packs it (one pass over
  // the weight instead of two), a Transpose of the source is `matrix` itself (none). Otherwise
  // the commit makes the transpose first. Validation and results are the same either way.
  void set_source_transposed(uint32_t id, const Tensor& matrix);
  size_t pending() const { return pending_.size(); }
  void clear() {
    pending_.clear();
    transposed_.clear();
    baked_.clear();
  }
  // Keys of refittable sources not set in this transaction (what a non-incremental commit
  // refuses), sorted by source id.
  std::vector<std::string> unset() const;
  // Validates, replays, swaps: commit(stage(options)). Throws (engine unchanged) on any
  // problem; clears the pending values on success.
  CommitReport commit(const CommitOptions& options = {});
  // Validates the pending values and replays the recipes they change; the engine is unchanged.
  // Throws on any problem.
  StagedRefit stage(const CommitOptions& options = {});
  // Applies `staged`, made by stage() on this refitter with no change to the engine since, in
  // one runtime::PlanEngine::commit; clears the pending values.
  CommitReport commit(StagedRefit staged);
  // Slow path: swaps in the derived engine weights of `fresh`, a new build of the same
  // structure (same weight table). For refit-identical plans every source hash must match, and
  // every baked source's unless options.keep_baked;
  // with options.check_finite no derived engine weight may hold NaN or Inf (`incremental` does
  // not apply: a rebuild replaces every derived weight). Pending values are ignored and cleared.
  CommitReport commit_rebuilt(const plan::Plan& fresh, const CommitOptions& options = {});

 private:
  runtime::PlanEngine& engine_;
  std::map<uint32_t, Tensor> pending_;
  std::set<uint32_t> transposed_;  // pending_ holds the matrix whose transpose the value is
  std::map<uint32_t, Tensor> baked_;  // values given for baked sources, compared at commit
};

}  // namespace reforge::refit
