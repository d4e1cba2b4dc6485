// Plan files: writing a Plan to disk and reading it back (memory-mapped).
//
// A plan file is a versioned binary container (full spec: docs/plan-format.md):
//
//   [0, 64)              header: magic "\x89RFPLAN\n", format version, the metadata and data
//                        section ranges, XXH3-64 of the metadata, XXH3-64 of the header itself;
//                        all integers little-endian
//   [64, 64+M)           metadata: compact JSON (UTF-8) with the whole Plan except tensor bytes:
//                        mode, producer, graph (nodes, attributes, value infos), weight table with
//                        recipes, sources, literal descriptors, fingerprint
//   [D, D+N), D%64 == 0  data section: the bytes of every weight, literal and tensor-valued
//                        attribute, each 64-byte aligned, referenced from the metadata by
//                        (offset, nbytes) relative to D, each with its XXH3-64
//
// Invariants the reader enforces on untrusted files (every violation is an Error that names the
// file and what is wrong; never a crash, never an out-of-bounds read):
//  * a file from a newer format version is refused ("plan 'x.plan' has format version 7; this
//    reforge reads up to 2"); a damaged header or metadata fails its checksum;
//  * every data reference lies inside the data section and its size equals dtype size x
//    element count; every index (recipe operands, weight sources) is in range;
//  * tensors wrap the mapping (no copy) and keep it alive; they are 64-byte aligned.
// Floats in attributes are stored as their bit patterns, so NaN payloads and -0.0 survive.
// Weight data that is undefined (stripped) is stored as no data at all.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/progress.h"
#include "plan/plan.h"

namespace reforge::plan {

// Writes atomically through AtomicFile (core/atomic_file.h): an unnamed temporary file in the
// destination folder where the filesystem allows, else "<path>.tmp.<pid>.<n>"; fsync, rename. An
// error or a kill never leaves a partial file at `path`, and an error leaves no temporary file
// (a kill on the named path leaves one, which the next write to `path` removes). Throws an Error for graphs with
// subgraph attributes, tensors of types without a fixed byte size, and weight data whose dtype/shape differ from the
// entry's.
// `progress` (core/progress.h), when set, is told the steps: "encoding the plan" (the metadata and
// the hash of every weight), "writing the plan" (counts the file's bytes), "syncing to disk".
void write_plan(const Plan& plan, const std::string& path, const ProgressCallback& progress = {});

// The exact bytes write_plan writes.
std::string serialize_plan(const Plan& plan);

struct ReadOptions {
  // false: WeightEntry::data stays undefined (nothing of the weight data is touched); everything
  // else (graph, attribute tensors, literals, recipes, sources, hashes) is filled in.
  bool load_weights = true;
  // true: every loaded weight's data is hashed (in parallel, over the OpenMP threads) and
  // compared with the file's recorded hash of those bytes and with WeightEntry::hash; a mismatch
  // is an Error naming each corrupted weight. This reads every weight page, which a run would
  // touch anyway. false skips it: a damaged weight section then loads and runs on wrong bytes.
  // Attribute tensors and literals are always verified; they are small.
  bool verify_weight_hashes = true;
};

// Memory-maps the file; weight tensors wrap the mapping (no copy). Every malformed input is an
// Error naming the file and what is wrong (never a crash, never an out-of-bounds read).
Plan read_plan(const std::string& path, const ReadOptions& options = {});

// Parses plan bytes held by `owner` (which must keep [data, data+size) alive; tensors share it).
// `what` names the input in errors, e.g. "plan 'x.plan'". If `data` is not 64-byte aligned the
// bytes are first copied into an aligned buffer, so tensors are always 64-byte aligned.
Plan parse_plan(std::shared_ptr<const void> owner, const void* data, size_t size, const ReadOptions& options = {},
                const std::string& what = "plan");

}  // namespace reforge::plan
