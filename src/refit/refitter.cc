#include "refit/refitter.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>

#include "core/dispatch.h"
#include "core/nonfinite.h"
#include "core/timing.h"
#include "ops/tensor/transpose2d.h"
#include "transforms/device_recipe.h"
#include "transforms/recipe.h"

namespace reforge::refit {

namespace {

// One pass over a value: its XXH3 and, for float types, the first NaN/Inf. The bytes are read
// a block at a time so that the finiteness scan finds them in cache after the hash.
struct Scan {
  uint64_t hash = 0;
  int64_t nonfinite = -1;  // flat index of the first NaN/Inf, or -1
};

// The finiteness scan is core/nonfinite.h's, the one a build runs (BuildOptions::check_finite).
Scan scan(const Tensor& t, bool hash, bool check_finite) {
  Scan out;
  check_finite &= is_float(t.dtype());
  if (!hash && !check_finite) return out;
  const auto* bytes = static_cast<const unsigned char*>(t.raw());
  const size_t esize = t.numel() ? t.nbytes() / static_cast<size_t>(t.numel()) : 1;
  const size_t block = (size_t{1} << 18) / esize * esize;
  XXH3_state_t* st = hash ? XXH3_createState() : nullptr;
  if (st) XXH3_64bits_reset(st);
  for (size_t off = 0; off < t.nbytes(); off += block) {
    const size_t len = std::min(block, t.nbytes() - off);
    if (st) XXH3_64bits_update(st, bytes + off, len);
    if (check_finite && out.nonfinite < 0) {
      int64_t i = first_nonfinite(t.dtype(), bytes + off, static_cast<int64_t>(len / esize));
      if (i >= 0) out.nonfinite = static_cast<int64_t>(off / esize) + i;
    }
  }
  if (st) {
    out.hash = XXH3_64bits_digest(st);
    XXH3_freeState(st);
  }
  return out;
}

// The XXH3-64 of the 2-D transpose of `matrix` [R, C] (the bytes transpose_2d would make), made
// a block of the transpose's rows at a time: never the whole transpose in memory.
uint64_t transposed_hash(const Tensor& matrix) {
  REFORGE_CHECK(matrix.rank() == 2 && matrix.on_host(), "refit: transposed_hash of ", matrix.describe());
  const int64_t R = matrix.dim(0), C = matrix.dim(1);
  const size_t e = dtype_size(matrix.dtype());
  const auto* src = static_cast<const unsigned char*>(matrix.raw());
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>((size_t{1} << 18) / std::max<size_t>(1, R * e)));
  std::vector<unsigned char> buffer(static_cast<size_t>(rows * R) * e);
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (int64_t c0 = 0; c0 < C; c0 += rows) {
    const int64_t n = std::min(rows, C - c0);
    // Rows c0 .. c0 + n of the transpose: columns c0 .. c0 + n of the matrix, by the tiles
    // transpose_2d moves.
    ops::transpose_block(buffer.data(), R, src + static_cast<size_t>(c0) * e, C, R, n, e);
    XXH3_64bits_update(st, buffer.data(), static_cast<size_t>(n * R) * e);
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

// Runs scan() on every tensor, in parallel when there are enough bytes to pay for the threads
// (sources are many and independent).
// `hash[i]`: whether to hash ts[i].
// `release`, when set, is called with each tensor once it is scanned.
std::vector<Scan> scan_all(const std::vector<const Tensor*>& ts, const std::vector<bool>& hash, bool check_finite,
                           const std::function<void(const Tensor&)>& release = {}) {
  std::vector<Scan> out(ts.size());
  const int64_t n = static_cast<int64_t>(ts.size());
  size_t bytes = 0;
  for (size_t i = 0; i < ts.size(); ++i) bytes += hash[i] || check_finite ? ts[i]->nbytes() : 0;
  const bool parallel = n > 1 && bytes >= (size_t{8} << 20);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t i = 0; i < n; ++i) {
    out[i] = scan(*ts[i], hash[i], check_finite);
    if (release) release(*ts[i]);
  }
  return out;
}

std::string list_keys(const std::vector<std::string>& keys) {
  std::string list;
  for (size_t i = 0; i < keys.size() && i < 10; ++i) list += "\n  " + keys[i];
  if (keys.size() > 10) list += "\n  ...";
  return list;
}

// Where a source's values come from, for errors: its initializer name(s) and, when bound, the
// checkpoint tensors.
std::string source_origin(const plan::Source& s) {
  std::string o;
  for (const auto& n : s.names) o += (o.empty() ? " (initializer '" : ", '") + n + "'";
  if (!o.empty()) o += ")";
  if (s.binding.status == plan::Binding::Status::Bound && !s.binding.checkpoint.empty()) {
    o += " (from checkpoint tensor";
    for (size_t i = 0; i < s.binding.checkpoint.size(); ++i)
      o += (i ? ", '" : " '") + s.binding.checkpoint[i].name + "'";
    o += ")";
  }
  return o;
}

// Sources whose values the engine keeps after a commit, for a later incremental refit:
// identity weights alias the engine weight; sources of multi-source recipes are kept.
std::set<uint32_t> kept_sources(const plan::Plan& p) {
  std::set<uint32_t> keep;
  for (const auto& w : p.weights)
    if (w.kind == plan::WeightKind::Derived && (w.sources.size() > 1 || w.recipe.steps.empty()))
      keep.insert(w.sources.begin(), w.sources.end());
  return keep;
}

// Copies of `ts` in fresh storage: one pass over the bytes, in 1 MiB blocks over the OpenMP
// threads when there are more than a few MiB (below that, waking the team costs more).
std::vector<Tensor> copy_all(const std::vector<const Tensor*>& ts) {
  struct Block {
    const char* src;
    char* dst;
    size_t n;
  };
  constexpr size_t kBlock = size_t(1) << 20;
  std::vector<Tensor> out;
  std::vector<Block> blocks;
  size_t total = 0;
  for (const Tensor* t : ts) {
    out.push_back(Tensor::uninitialized(t->dtype(), t->shape()));
    const char* src = static_cast<const char*>(t->raw());
    char* dst = static_cast<char*>(out.back().mutable_raw());
    for (size_t off = 0; off < t->nbytes(); off += kBlock)
      blocks.push_back({src + off, dst + off, std::min(kBlock, t->nbytes() - off)});
    total += t->nbytes();
  }
  const auto n = static_cast<int64_t>(blocks.size());
#pragma omp parallel for schedule(static) if (total > (size_t(8) << 20))
  for (int64_t i = 0; i < n; ++i) std::memcpy(blocks[i].dst, blocks[i].src, blocks[i].n);
  return out;
}

// True when the bytes of `t` overlap one of `ranges` ([begin, end) pairs).
bool overlaps(const Tensor& t, const std::vector<std::pair<const char*, const char*>>& ranges) {
  if (!t.defined() || t.nbytes() == 0) return false;
  const char* b = static_cast<const char*>(t.raw());
  const char* e = b + t.nbytes();
  for (const auto& [lo, hi] : ranges)
    if (b < hi && lo < e) return true;
  return false;
}

// What a refit does with the baked sources its new weights hold (`given` of them, `differing`
// with other values than the plan's, each "key (origin)"): refuses when any differ, unless
// options.keep_baked; records the counts in `rep`.
void note_baked(const plan::Plan& p, size_t given, const std::vector<std::string>& differing,
                const CommitOptions& options, CommitReport& rep) {
  rep.baked_given = given;
  rep.baked_differing = differing.size();
  rep.baked_differing_keys = differing;
  if (differing.empty() || options.keep_baked) return;
  size_t baked = 0;
  for (const auto& s : p.sources) baked += !s.refittable;
  std::string patterns;
  for (const auto& pat : p.individual_patterns) patterns += (patterns.empty() ? "" : " ") + ("'" + pat + "'");
  fail("refit: the new weights hold other values than this plan was built with for ", differing.size(), " of its ",
       baked, " baked source(s) (", plan::build_mode_name(p.mode), " build",
       patterns.empty() ? std::string() : ", refittable: " + patterns,
       "); a refit changes only the refittable sources, so the engine would run a mix of the old and the new "
       "weights:",
       list_keys(differing),
       "\nNothing was changed. Rebuild with patterns that make them refittable, or refit with --keep-baked "
       "(Python: keep_baked=True) to keep the plan's values of the baked sources");
}

// The values given for baked sources (`baked`, by source id) against the values the plan was
// built with: a difference refuses the refit, naming each, unless options.keep_baked (then
// counted in `rep` and ignored).
void check_baked(const plan::Plan& p, const std::map<uint32_t, Tensor>& baked, const CommitOptions& options,
                 CommitReport& rep) {
  std::vector<uint32_t> ids;
  std::vector<const Tensor*> values;
  for (const auto& [id, t] : baked) ids.push_back(id), values.push_back(&t);
  const std::vector<Scan> scans = scan_all(values, std::vector<bool>(values.size(), true), false);
  std::vector<std::string> differing;
  for (size_t i = 0; i < ids.size(); ++i)
    if (scans[i].hash != p.sources[ids[i]].hash)
      differing.push_back(p.sources[ids[i]].key + source_origin(p.sources[ids[i]]));
  note_baked(p, ids.size(), differing, options, rep);
}

}  // namespace

Refitter::Refitter(runtime::PlanEngine& engine) : engine_(engine) {}

std::vector<SourceDesc> Refitter::all_sources() const {
  const plan::Plan& p = engine_.plan();
  auto missing_keys = missing();
  std::set<std::string> miss(missing_keys.begin(), missing_keys.end());
  std::vector<SourceDesc> out;
  for (size_t i = 0; i < p.sources.size(); ++i) {
    const auto& s = p.sources[i];
    SourceDesc d;
    d.id = static_cast<uint32_t>(i);
    d.key = s.key;
    d.names = s.names;
    d.consumer = s.consumer;
    d.op_type = s.op_type;
    d.dtype = s.dtype;
    d.shape = s.shape;
    d.refittable = s.refittable;
    d.has_value = s.refittable && !miss.count(s.key);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<std::string> Refitter::missing() const {
  const plan::Plan& p = engine_.plan();
  std::vector<bool> needed(p.sources.size(), false);
  for (const auto& w : p.weights) {
    if (w.kind != plan::WeightKind::Derived) continue;
    bool absent = !engine_.has_weight(w.name);
    bool touched = false;
    for (uint32_t s : w.sources) touched |= pending_.count(s) != 0;
    // A stripped weight needs all its sources; a present weight whose recipe is being replayed
    // because one of its sources changed needs the others too.
    if (absent || touched)
      for (uint32_t s : w.sources) needed[s] = true;
  }
  std::vector<std::string> out;
  for (size_t s = 0; s < p.sources.size(); ++s)
    if (needed[s] && !pending_.count(static_cast<uint32_t>(s)) &&
        !engine_.source_value(static_cast<uint32_t>(s)).defined())
      out.push_back(p.sources[s].key);
  return out;
}

namespace {

// Source `id` of `p`: throws naming the id when there is none.
const plan::Source& source_of(const plan::Plan& p, uint32_t id) {
  REFORGE_CHECK(id < p.sources.size(), "refit: no source with id ", id);
  return p.sources[id];
}

}  // namespace

void Refitter::set_source(uint32_t id, const Tensor& value) {
  const plan::Source& s = source_of(engine_.plan(), id);
  if (value.dtype() != s.dtype || value.shape() != s.shape)
    fail("refit: source '", s.key, "' has ", value.describe(), ", the plan expects ", dtype_name(s.dtype),
         shape_str(s.shape));
  if (!s.refittable) {
    baked_[id] = value;  // compared with the build-time value at commit
    return;
  }
  pending_[id] = value;
  transposed_.erase(id);
}

void Refitter::set_source_transposed(uint32_t id, const Tensor& matrix) {
  const plan::Source& s = source_of(engine_.plan(), id);
  if (matrix.dtype() != s.dtype || matrix.rank() != 2 || s.shape != Shape{matrix.dim(1), matrix.dim(0)})
    fail("refit: source '", s.key, "' transposed from ", matrix.describe(), " would be ", dtype_name(matrix.dtype()),
         matrix.rank() == 2 ? shape_str(Shape{matrix.dim(1), matrix.dim(0)}) : std::string(" (not a matrix)"),
         ", the plan expects ", dtype_name(s.dtype), shape_str(s.shape));
  if (!s.refittable) {
    baked_[id] = transforms::transpose_2d(matrix);
    return;
  }
  pending_[id] = matrix;
  transposed_.insert(id);
}

void Refitter::set(const std::string& name, const Tensor& value) {
  const plan::Plan& p = engine_.plan();
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < p.sources.size(); ++i) {
    const auto& s = p.sources[i];
    bool match = s.key == name;
    for (const auto& n : s.names) match |= n == name;
    if (match) ids.push_back(static_cast<uint32_t>(i));
  }
  if (ids.empty()) fail("refit: '", name, "' is not a source of this plan");
  // An initializer with several uses names several sources. The uses may be one parameter (tied
  // weights) or parameters an exporter merged because their values happened to be equal when it
  // ran (TorchScript merges equal norm scales): which one this is cannot be told, so it is not
  // guessed. Each use is set by its source key.
  if (ids.size() > 1) {
    std::string keys;
    for (uint32_t id : ids) keys += (keys.empty() ? "" : ", ") + p.sources[id].key;
    fail("refit: '", name, "' names ", ids.size(), " sources (", keys,
         "): an initializer used in several places, either one tied parameter or equal parameters the exporter "
         "merged; set each by its source key (the same tensor for each, if they are one parameter)");
  }
  // Validate every use before recording any, so a failing set() changes nothing.
  std::map<uint32_t, Tensor> saved = pending_, saved_baked = baked_;
  try {
    for (uint32_t id : ids) set_source(id, value);
  } catch (...) {
    pending_ = std::move(saved);
    baked_ = std::move(saved_baked);
    throw;
  }
}

std::vector<std::string> Refitter::unset() const {
  const plan::Plan& p = engine_.plan();
  std::vector<std::string> out;
  for (size_t s = 0; s < p.sources.size(); ++s)
    if (p.sources[s].refittable && !pending_.count(static_cast<uint32_t>(s))) out.push_back(p.sources[s].key);
  return out;
}

StagedRefit Refitter::stage(const CommitOptions& options) {
  REFORGE_CHECK(!(options.consume && options.own_values), "refit: CommitOptions::consume excludes own_values");
  const plan::Plan& p = engine_.plan();
  const bool identical = p.mode == plan::BuildMode::RefitIdentical;
  StagedRefit staged_refit;
  CommitReport& rep = staged_refit.report;
  auto t0 = std::chrono::steady_clock::now();
  if (!options.incremental) {
    auto un = unset();
    if (!un.empty()) {
      size_t refittable = 0;
      for (const auto& s : p.sources) refittable += s.refittable;
      fail("refit: ", un.size(), " of ", refittable,
           " refittable source(s) were not given a value; a refit sets every one "
           "(an incremental refit keeps the engine's values of the others: in Python refit(..., incremental=True)):",
           list_keys(un));
    }
  }
  auto miss = missing();
  if (!miss.empty()) fail("refit: ", miss.size(), " source(s) have no value:", list_keys(miss));

  // The values set: finite, and for refit-identical plans the build-time bytes. The hashes of
  // the ones the engine will keep become its record of them (the others are not hashed: nothing
  // could re-check them later).
  const std::set<uint32_t> keep = kept_sources(p);
  // options.skip_unchanged: the values set that hash to what the engine recorded for their source
  // (hashed here once; the scan below reuses the hashes, and the finiteness of the values read
  // here as they are given).
  std::map<uint32_t, uint64_t> early_hash;
  std::map<uint32_t, Scan> early_scan;
  std::set<uint32_t> unchanged;
  if (options.skip_unchanged) {
    std::vector<uint32_t> hashed, hashed_t;
    std::vector<const Tensor*> hashed_values;
    for (const auto& [id, t] : pending_) {
      if (!t.on_host()) continue;  // (never unchanged)
      (transposed_.count(id) ? hashed_t : hashed).push_back(id);
      if (!transposed_.count(id)) hashed_values.push_back(&t);
    }
    const std::vector<Scan> hs = scan_all(hashed_values, std::vector<bool>(hashed.size(), true), options.check_finite);
    for (size_t i = 0; i < hashed.size(); ++i) early_hash[hashed[i]] = hs[i].hash, early_scan[hashed[i]] = hs[i];
    // A value given as its transpose's matrix (a checkpoint's) is hashed as the value it stands for.
    std::vector<uint64_t> ht(hashed_t.size());
#pragma omp parallel for schedule(dynamic, 1) if (hashed_t.size() > 1)
    for (int64_t i = 0; i < static_cast<int64_t>(hashed_t.size()); ++i)
      ht[static_cast<size_t>(i)] = transposed_hash(pending_.at(hashed_t[static_cast<size_t>(i)]));
    for (size_t i = 0; i < hashed_t.size(); ++i) early_hash[hashed_t[i]] = ht[i];
    for (const auto& [id, h] : early_hash) {
      const uint64_t recorded = engine_.source_hash(id);
      if (recorded != 0 && recorded == h) unchanged.insert(id);
    }
    rep.sources_unchanged = unchanged.size();
  }
  auto replayed = [&](const plan::WeightEntry& w) {
    if (w.kind != plan::WeightKind::Derived) return false;
    bool touched = !engine_.has_weight(w.name);
    for (uint32_t s : w.sources) touched |= pending_.count(s) != 0 && !unchanged.count(s);
    return touched;
  };
  if (options.progress) options.progress(Progress{"validating sources"});
  // options.device_replay: the weights replayed on the device (by index), the device, and for each
  // source they read, the last of them to read it (its device copy is dropped after that one).
  std::vector<bool> on_device(p.weights.size(), false);
  const backends::Backend* device = nullptr;
  std::map<uint32_t, size_t> last_device_reader;
  if (options.device_replay)
    for (size_t i = 0; i < p.weights.size(); ++i) {
      const auto& w = p.weights[i];
      if (!replayed(w) || quantized_weight(w)) continue;
      const backends::Backend* d = engine_.weight_device(w.name);
      if (!d || !d->weight_memory || (device && d != device) || !transforms::runs_any_on_device(*d, w.recipe)) continue;
      device = d;
      on_device[i] = true;
      for (uint32_t s : w.sources) last_device_reader[s] = i;
    }
  // Values set as a transpose (set_source_transposed): read straight from the matrix given
  // (`packed_from`, by source id: packed from it, or taken as a Transpose of the value) when every
  // replayed recipe reads the source only as a PackPanels weight or through a 2-D Transpose and
  // neither the value nor its hash is kept; otherwise transposed here.
  // Either way the value is the same set of numbers, so the finiteness scan reads the matrix.
  std::vector<Tensor> packed_from(p.sources.size());
  std::map<uint32_t, Tensor> made;
  // A source given transposed that only weights replayed on the device read, and whose value the
  // engine does not keep, goes to the device as given and is transposed there (`packed_from` holds
  // it too: the host never makes its transpose).
  std::set<uint32_t> device_transposed;
  for (uint32_t id : transposed_) {
    bool direct = !identical && !keep.count(id), on_dev = direct && device;
    for (size_t i = 0; i < p.weights.size(); ++i) {
      const auto& w = p.weights[i];
      if (!replayed(w) || std::find(w.sources.begin(), w.sources.end(), id) == w.sources.end()) continue;
      direct = direct && transforms::reads_source_transposable(w.recipe, id);
      on_dev = on_dev && on_device[i];
    }
    if (on_dev)
      packed_from[id] = pending_.at(id), device_transposed.insert(id);
    else if (direct)
      packed_from[id] = pending_.at(id), ++rep.packed_from_transposed;
    else
      made[id] = transforms::transpose_2d(pending_.at(id)), ++rep.transposed_first;
  }
  std::vector<uint32_t> ids;
  std::vector<const Tensor*> values_set;
  std::vector<bool> hash;
  for (const auto& [id, t] : pending_) {
    ids.push_back(id);
    auto m = made.find(id);
    values_set.push_back(m == made.end() ? &t : &m->second);
    // (a value read straight from the matrix given is not hashed: the matrix is not its bytes)
    hash.push_back((identical || keep.count(id) || (options.skip_unchanged && !packed_from[id].defined())) &&
                   !early_hash.count(id));
    rep.bytes_in += t.nbytes();
  }
  // (the values scanned above as they are given are not read again)
  std::vector<const Tensor*> to_scan;
  std::vector<bool> to_hash;
  for (size_t i = 0; i < ids.size(); ++i)
    if (!early_scan.count(ids[i])) to_scan.push_back(values_set[i]), to_hash.push_back(hash[i]);
  const std::vector<Scan> scanned = scan_all(to_scan, to_hash, options.check_finite, options.release);
  std::vector<Scan> scans(ids.size());
  for (size_t i = 0, k = 0; i < ids.size(); ++i) {
    if (auto e = early_scan.find(ids[i]); e != early_scan.end()) {
      scans[i] = e->second;
      if (options.release) options.release(*values_set[i]);
    } else {
      scans[i] = scanned[k++];
    }
    if (auto h = early_hash.find(ids[i]); h != early_hash.end()) scans[i].hash = h->second;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const plan::Source& s = p.sources[ids[i]];
    if (scans[i].nonfinite >= 0) {
      if (packed_from[ids[i]].defined()) {
        // Named by its place in the source, as for any other value: the first in the transpose.
        const Tensor value = transforms::transpose_2d(*values_set[i]);
        fail_refit_nonfinite("source '" + s.key + "'" + source_origin(s), value, scan(value, false, true).nonfinite);
      }
      fail_refit_nonfinite("source '" + s.key + "'" + source_origin(s), *values_set[i], scans[i].nonfinite);
    }
    if (identical && scans[i].hash != s.hash)
      fail("refit: source '", s.key, "'", source_origin(s),
           " differs from the weights this refit-identical plan was built with; "
           "refit-identical plans accept only the build-time weights (rebuild with --refit to change weights)");
  }
  check_baked(p, baked_, options, rep);
  // The values kept (incremental): every one the engine holds the bytes of must still hash to
  // what was recorded when it entered the engine, and in a refit-identical plan every source
  // must be the build-time one.
  if (options.incremental) {
    std::vector<uint32_t> kept;
    std::vector<Tensor> kept_tensors;  // held here: the engine's State may be replaced meanwhile
    for (size_t s = 0; s < p.sources.size(); ++s) {
      if (!p.sources[s].refittable || pending_.count(static_cast<uint32_t>(s))) continue;
      if (identical && engine_.source_hash(static_cast<uint32_t>(s)) != p.sources[s].hash)
        fail("refit: source '", p.sources[s].key,
             "' (not set in this incremental refit) holds other values than the weights "
             "this refit-identical plan was built with");
      Tensor value = engine_.source_value(static_cast<uint32_t>(s));
      if (!value.defined()) continue;
      kept.push_back(static_cast<uint32_t>(s));
      kept_tensors.push_back(std::move(value));
    }
    std::vector<const Tensor*> kept_values;
    for (const Tensor& t : kept_tensors) kept_values.push_back(&t);
    const std::vector<Scan> kept_scans = scan_all(kept_values, std::vector<bool>(kept.size(), true), false);
    for (size_t i = 0; i < kept.size(); ++i)
      if (kept_scans[i].hash != engine_.source_hash(kept[i]))
        fail("refit: source '", p.sources[kept[i]].key,
             "' (not set in this incremental refit): the value the engine holds no "
             "longer hashes to the value it was given (memory corrupted, or changed outside a refit); set it too, or "
             "refit "
             "every source");
  }
  rep.validate_ms = ms_since(t0);

  auto t1 = std::chrono::steady_clock::now();
  std::vector<Tensor> values(p.sources.size());
  for (size_t s = 0; s < p.sources.size(); ++s) values[s] = engine_.source_value(static_cast<uint32_t>(s));
  for (size_t i = 0; i < ids.size(); ++i) values[ids[i]] = packed_from[ids[i]].defined() ? Tensor() : *values_set[i];
  runtime::WeightUpdate& staged = staged_refit.update;
  // options.release / consume: each value set is released (dropped) after the last replayed
  // recipe that reads it.
  std::map<uint32_t, size_t> last_reader;
  if (options.release || options.consume)
    for (size_t i = 0; i < p.weights.size(); ++i)
      if (replayed(p.weights[i]))
        for (uint32_t s : p.weights[i].sources)
          if (pending_.count(s)) last_reader[s] = i;
  uint64_t replay_bytes = 0;
  for (const auto& w : p.weights)
    if (replayed(w)) replay_bytes += static_cast<uint64_t>(shape_numel(w.shape)) * dtype_size(w.dtype);
  if (options.staging_bytes) {
    // The ring of the device that holds the engine's weights (before anything moves).
    for (const auto& w : p.weights) {
      const backends::Backend* d = w.kind == plan::WeightKind::Derived ? engine_.weight_device(w.name) : nullptr;
      if (d && d->weight_memory) {
        d->weight_memory->set_staging_bytes(options.staging_bytes);
        break;
      }
    }
  }
  // Sources on the device, each streamed there once as given, and the pinned host values streamed
  // from, held until the device's work is waited for.
  std::vector<Tensor> device_values(p.sources.size());
  std::vector<Tensor> streamed_from;
  auto device_source = [&](uint32_t id) -> Tensor {
    Tensor& d = device_values.at(id);
    if (d.defined()) return d;
    const bool transposed = device_transposed.count(id) != 0;
    const Tensor& host = transposed ? packed_from[id] : values.at(id);
    REFORGE_CHECK(host.defined(), "refit: source '", p.sources[id].key, "' has no value to stream to the device");
    d = device->weight_memory->stream_to_device(host);
    if (host.memory() == Memory::Pinned) streamed_from.push_back(host);
    if (host.on_host()) rep.bytes_streamed += host.nbytes();
    if (transposed) {  // as given (a checkpoint's matrix), transposed on the device
      plan::Recipe transpose;
      plan::RecipeStep st;
      st.op_type = "Transpose";
      st.opset = 13;
      st.inputs = {{plan::Operand::Kind::Source, 0}};
      st.attrs["perm"] = ir::ints_attr("perm", {1, 0});
      transpose.steps = {st};
      transpose.result = {plan::Operand::Kind::Step, 0};
      transforms::DeviceReplayOptions o;
      o.wait = false;
      d = transforms::replay_recipe_on(*device, transpose, {d}, {}, o);
      ++rep.transposed_on_device;
    }
    return d;
  };
  transforms::DeviceReplayOptions device_options;
  device_options.device_source = device_source;
  device_options.wait = false;
  // A failure while device work is in flight waits for it before the values it reads go.
  struct DeviceWait {
    const backends::Backend* device;
    ~DeviceWait() {
      if (!device) return;
      try {
        device->streams->synchronize();
      } catch (...) {  // the failure being thrown is the one to report
      }
    }
  } wait_on_failure{device};
  ProgressStep replaying(options.progress, "replaying recipes", replay_bytes, "bytes");
  for (size_t wi = 0; wi < p.weights.size(); ++wi) {
    const auto& w = p.weights[wi];
    if (!replayed(w)) continue;
    Tensor t;
    try {
      if (on_device[wi]) {
        t = transforms::replay_recipe_on(*device, w.recipe, values, p.literals, device_options);
        ++rep.weights_on_device;
        for (uint32_t s : w.sources)
          if (last_device_reader.at(s) == wi) device_values[s] = Tensor();  // freed in stream order
      } else {
        t = transforms::replay_recipe(w.recipe, values, p.literals, 0, &packed_from);
      }
    } catch (Error& e) {
      std::string from;
      for (uint32_t id : w.sources) from += (from.empty() ? "" : ", ") + ("'" + p.sources[id].key + "'");
      throw e.with_context("while replaying the recipe of engine weight '" + w.name + "' (from sources " + from + ")");
    }
    if (t.dtype() != w.dtype || t.shape() != w.shape)
      fail("refit: engine weight '", w.name, "' came out ", t.describe(), ", the plan expects ", dtype_name(w.dtype),
           shape_str(w.shape));
    if (options.replayed) {
      t = options.replayed(w.name, std::move(t));
      if (!t.defined() || t.dtype() != w.dtype || t.shape() != w.shape)
        fail("refit: engine weight '", w.name, "' came back from CommitOptions::replayed as ", t.describe(),
             ", the plan expects ", dtype_name(w.dtype), shape_str(w.shape));
    }
    rep.bytes_out += t.nbytes();
    replaying.advance(t.nbytes());
    if (quantized_weight(w))
      if (auto c = quantized_change(p, w, engine_.weight(w.name), t)) rep.quantized.push_back(std::move(*c));
    staged.set_weight(w.name, std::move(t));
    for (uint32_t s : w.sources) {
      auto it = last_reader.find(s);
      if (it == last_reader.end() || it->second != wi) continue;
      if (options.release) options.release(pending_.at(s));
      if (options.consume && !keep.count(s)) {
        // The last reference the refit holds (a staged weight that is this value keeps it alive).
        values[s] = Tensor();
        pending_.at(s) = Tensor();
        if (auto m = made.find(s); m != made.end()) m->second = Tensor();
        packed_from[s] = Tensor();
      }
    }
  }
  if (device) {
    // The device's work is complete before anything reads the new weights or the values it
    // streamed from go (an asynchronous failure of a step is thrown here).
    wait_on_failure.device = nullptr;
    device->streams->synchronize();
    streamed_from.clear();
  }
  std::vector<Tensor> kept_values(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    if (keep.count(ids[i])) kept_values[i] = *values_set[i];
  if (options.own_values) {
    // Every staged weight or kept value that shares bytes with a value set here (an identity
    // weight, a reshape's view, a kept source) gets storage of its own, copied in one pass; an
    // identity weight and the source it keeps share that copy.
    std::vector<std::pair<const char*, const char*>> given;  // the caller's bytes (not transposes made here)
    for (const auto& [id, t] : pending_)
      if (t.defined() && t.nbytes())
        given.emplace_back(static_cast<const char*>(t.raw()), static_cast<const char*>(t.raw()) + t.nbytes());
    std::vector<std::string> names;
    std::vector<const Tensor*> originals;  // the weights named, then kept values of other bytes
    for (const auto& [name, t] : staged.weights())
      if (overlaps(t, given)) names.push_back(name), originals.push_back(&t);
    using Bytes = std::pair<const void*, size_t>;
    std::set<Bytes> seen;
    for (const Tensor* o : originals) seen.insert({o->raw(), o->nbytes()});
    for (const Tensor& v : kept_values)
      if (overlaps(v, given) && seen.insert({v.raw(), v.nbytes()}).second) originals.push_back(&v);
    std::vector<Tensor> copies = copy_all(originals);
    std::map<Bytes, Tensor> copy_of;  // the same bytes share one copy (an identity weight and its source)
    for (size_t k = 0; k < originals.size(); ++k) copy_of[{originals[k]->raw(), originals[k]->nbytes()}] = copies[k];
    for (auto& v : kept_values)
      if (overlaps(v, given)) v = copy_of.at({v.raw(), v.nbytes()}).reshaped(v.shape());
    for (size_t k = 0; k < names.size(); ++k) staged.set_weight(names[k], copies[k]);
    rep.bytes_copied = 0;
    for (const Tensor& c : copies) rep.bytes_copied += c.nbytes();
  }
  for (size_t i = 0; i < ids.size(); ++i) staged.record_source(ids[i], kept_values[i], scans[i].hash);
  rep.weights_replayed = staged.weights().size();
  rep.sources_set = pending_.size();
  rep.replay_ms = ms_since(t1);
  return staged_refit;
}

CommitReport Refitter::commit(StagedRefit staged) {
  auto t = std::chrono::steady_clock::now();
  engine_.commit(staged.update);  // the one step that changes the engine
  clear();
  staged.report.commit_ms = ms_since(t);
  return staged.report;
}

CommitReport Refitter::commit(const CommitOptions& options) { return commit(stage(options)); }

CommitReport Refitter::commit_rebuilt(const plan::Plan& fresh, const CommitOptions& options) {
  const plan::Plan& p = engine_.plan();
  CommitReport rep;
  auto t0 = std::chrono::steady_clock::now();
  REFORGE_CHECK(fresh.weights.size() == p.weights.size() && fresh.sources.size() == p.sources.size(),
                "refit: the rebuilt plan does not match this engine's weight table");
  if (p.mode == plan::BuildMode::RefitIdentical)
    for (size_t i = 0; i < p.sources.size(); ++i)
      if (fresh.sources[i].hash != p.sources[i].hash)
        fail("refit: source '", p.sources[i].key,
             "' differs from the weights this refit-identical plan was built with");
  {
    // The rebuild read every source of the new model; the baked ones must be the plan's.
    std::vector<std::string> differing;
    size_t given = 0;
    for (size_t i = 0; i < p.sources.size(); ++i) {
      if (p.sources[i].refittable) continue;
      ++given;
      if (fresh.sources[i].hash != p.sources[i].hash)
        differing.push_back(p.sources[i].key + source_origin(p.sources[i]));
    }
    note_baked(p, given, differing, options, rep);
  }
  runtime::WeightUpdate staged;
  for (size_t i = 0; i < p.weights.size(); ++i) {
    const auto& w = p.weights[i];
    const auto& f = fresh.weights[i];
    if (w.kind != plan::WeightKind::Derived) continue;
    if (f.name != w.name || !f.data.defined() || f.data.dtype() != w.dtype || f.data.shape() != w.shape)
      fail("refit: engine weight '", w.name, "' of the rebuilt plan does not match");
    rep.bytes_out += f.data.nbytes();
    if (quantized_weight(w))
      if (auto c = quantized_change(p, w, engine_.weight(w.name), f.data)) rep.quantized.push_back(std::move(*c));
    staged.set_weight(w.name, f.data);
  }
  if (options.check_finite) {
    // The sources are gone in a rebuild; a NaN/Inf in one shows in the weights derived from it.
    std::vector<const Tensor*> ts;
    std::vector<size_t> idx;
    for (size_t i = 0; i < p.weights.size(); ++i)
      if (p.weights[i].kind == plan::WeightKind::Derived) ts.push_back(&fresh.weights[i].data), idx.push_back(i);
    const std::vector<Scan> scans = scan_all(ts, std::vector<bool>(ts.size(), false), true);
    for (size_t k = 0; k < ts.size(); ++k) {
      if (scans[k].nonfinite < 0) continue;
      const auto& w = p.weights[idx[k]];
      std::string from = " (derived from";
      for (size_t j = 0; j < w.sources.size(); ++j) from += (j ? ", '" : " '") + p.sources[w.sources[j]].key + "'";
      fail_refit_nonfinite("engine weight '" + w.name + "' of the rebuilt plan" + from + ")", *ts[k],
                           scans[k].nonfinite);
    }
  }
  rep.validate_ms = ms_since(t0);
  auto t2 = std::chrono::steady_clock::now();
  // What the engine keeps of each source: an identity weight's bytes are its source's; a
  // rebuild leaves no other source value behind. Hashes: the rebuild's, of the new sources.
  std::map<uint32_t, Tensor> kept;
  for (const auto& w : p.weights) {
    if (w.kind != plan::WeightKind::Derived) continue;
    if (w.recipe.steps.empty() && w.recipe.result.kind == plan::Operand::Kind::Source)
      kept[w.recipe.result.index] = *staged.weight(w.name);
  }
  for (size_t i = 0; i < p.sources.size(); ++i) {
    if (!p.sources[i].refittable) continue;
    auto it = kept.find(static_cast<uint32_t>(i));
    staged.record_source(static_cast<uint32_t>(i), it == kept.end() ? Tensor() : it->second, fresh.sources[i].hash);
  }
  engine_.commit(staged);
  clear();
  rep.weights_replayed = staged.weights().size();
  rep.commit_ms = ms_since(t2);
  return rep;
}

}  // namespace reforge::refit
