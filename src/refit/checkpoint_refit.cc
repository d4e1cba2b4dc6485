#include "refit/checkpoint_refit.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "transforms/recipe.h"

namespace reforge::refit {

std::string unbound_report(const plan::Plan& p, size_t limit) {
  std::string list;
  size_t n = 0;
  for (const auto& s : p.sources) {
    if (!s.refittable || s.binding.status == plan::Binding::Status::Bound ||
        s.binding.status == plan::Binding::Status::Constant)
      continue;
    if (++n > limit) continue;
    std::string name = s.names.empty() ? s.key : s.names[0];
    list += "\n  '" + name + "' (source " + s.key + ", read by " + s.op_type + " node '" + s.consumer + "', " +
            dtype_name(s.dtype) + shape_str(s.shape) + "): " +
            (s.binding.status == plan::Binding::Status::None ? "the plan was built without a checkpoint (--checkpoint)"
                                                             : s.binding.note);
  }
  if (n > limit) list += str_cat("\n  ... and ", n - limit, " more (reforge inspect PLAN lists them all)");
  return n ? str_cat(n, " refittable source(s) are not bound to checkpoint tensors:", list) : "";
}

namespace {

// The copies of one tied parameter that the build's checkpoint held (plan::Binding::Input::ties)
// must hold one value in `ckpt` too: copies that now differ make a checkpoint whose model cannot be
// told, whichever copy the binding reads. A checkpoint without a copy holds one value.
// `read`: every checkpoint tensor a binding of the plan reads (leaving one out is no way forward).
void check_ties(const plan::Binding::Input& in, const Tensor& t, const Checkpoint& ckpt,
                const std::set<std::string>& read) {
  for (const auto& name : in.ties) {
    const Tensor* u = ckpt.find(name);
    if (!u) continue;
    std::string how;
    if (u->dtype() != t.dtype() || u->shape() != t.shape()) {
      how = t.describe() + " and " + u->describe();
    } else {
      const bool same = std::memcmp(t.raw(), u->raw(), t.nbytes()) == 0;
      ckpt.release_pages_of(*u);  // read only for this comparison
      if (same) continue;
      const size_t e = dtype_size(t.dtype());
      const auto* a = static_cast<const unsigned char*>(t.raw());
      const auto* b = static_cast<const unsigned char*>(u->raw());
      int64_t i = 0;
      while (i + 1 < t.numel() && std::memcmp(a + i * e, b + i * e, e) == 0) ++i;
      how = str_cat("first at element ", i, ": ", t.as_double(i), " and ", u->as_double(i));
    }
    fail("refit from ", ckpt.description(), ": checkpoint tensors '", in.name, "' and '", name,
         "' held the same values when the plan was built (one tied parameter) and now differ (", how,
         "): which one the model reads cannot be told; nothing was changed. Give both copies the same values",
         read.count(name) ? "" : " or leave '" + name + "' out of the checkpoint");
  }
}

// When the names the plan was bound to and the checkpoint's keys differ by a prefix (a module
// saved under another attribute name: "transformer.h.0..." against "m.h.0..."), the two prefixes
// and how many of the names missing from the checkpoint they explain (each by a key the plan does
// not read otherwise); {"", "", 0} otherwise. Only a hint for the message of a refusal: the refit
// reads names as they are.
struct PrefixHint {
  std::string plan_prefix, ckpt_prefix;
  size_t explained = 0, missing = 0;
};

PrefixHint prefix_hint(const std::set<std::string>& names, const Checkpoint& ckpt) {
  std::vector<std::string> missing;
  for (const auto& n : names)
    if (!ckpt.find(n)) missing.push_back(n);
  PrefixHint best;
  best.missing = missing.size();
  if (missing.empty()) return best;
  // Candidates from the first missing name: each of its prefixes ending in '.' (or none), against
  // each checkpoint key that ends with the rest.
  const std::string& first = missing.front();
  std::vector<size_t> cuts = {0};
  for (size_t dot = first.find('.'); dot != std::string::npos; dot = first.find('.', dot + 1)) cuts.push_back(dot + 1);
  std::set<std::pair<std::string, std::string>> tried;
  for (size_t cut : cuts) {
    const std::string rest = first.substr(cut);
    if (rest.empty()) break;
    for (const auto& [key, _] : ckpt.tensors()) {
      if (key.size() < rest.size() || key.compare(key.size() - rest.size(), rest.size(), rest) != 0) continue;
      const std::string to = key.substr(0, key.size() - rest.size());
      if (!to.empty() && to.back() != '.') continue;
      const std::string from = first.substr(0, cut);
      if (from == to || !tried.insert({from, to}).second) continue;
      // A key the plan reads under its own name explains nothing (the layer beside a missing one).
      size_t explained = 0;
      for (const auto& n : missing) {
        if (n.rfind(from, 0) != 0) continue;
        const std::string renamed = to + n.substr(from.size());
        explained += ckpt.find(renamed) != nullptr && !names.count(renamed);
      }
      if (explained > best.explained) best = {from, to, explained, missing.size()};
    }
  }
  return best;
}

}  // namespace

CheckpointSources sources_from_checkpoint(const plan::Plan& p, const Checkpoint& ckpt) {
  std::string unbound = unbound_report(p, 24);
  // Sources left unbound because the build's checkpoint held other values under their names: the
  // plan was bound to the wrong checkpoint, and binding the right one is the way forward.
  size_t wrong = 0;
  for (const auto& s : p.sources)
    wrong += s.refittable && s.binding.status == plan::Binding::Status::Unbound &&
             s.binding.note.find(kWrongCheckpointMark) != std::string::npos;
  const std::string rebind =
      wrong ? str_cat("\n  - ", wrong,
                      " of them are unbound because the checkpoint the plan was built with holds other values under "
                      "their names: rebuild bound to the checkpoint the model was exported from (reforge build "
                      "MODEL.onnx --refit --checkpoint ITS_CHECKPOINT), then refit from this one;")
            : "";
  if (!unbound.empty())
    fail("refit from ", ckpt.description(), ": this plan has ", unbound,
         "\nA checkpoint cannot refit this plan; nothing was changed. Ways forward:", rebind,
         "\n  - bind each at build time: reforge build ... --checkpoint CKPT --bind ONNX_NAME=CHECKPOINT_NAME (or "
         "--bind-file);"
         "\n  - declare it structure, if its values never change with the weights: --literal ONNX_NAME (or "
         "\"literals\" in --bind-file);"
         "\n  - refit from a re-exported ONNX model instead: reforge refit PLAN --weights NEW.onnx");
  CheckpointSources out;
  std::set<std::string> used, read;
  for (const auto& s : p.sources)
    if (s.binding.status == plan::Binding::Status::Bound)
      for (const auto& in : s.binding.checkpoint) read.insert(in.name);
  for (size_t i = 0; i < p.sources.size(); ++i) {
    const auto& s = p.sources[i];
    // A baked source bound to the checkpoint is read too, and compared with the plan's value by
    // the commit (refit/refitter.h); a checkpoint without its tensors (one holding only the
    // refittable weights) leaves it as built.
    if (!s.refittable && s.binding.status != plan::Binding::Status::Bound) continue;
    if (!s.refittable && std::any_of(s.binding.checkpoint.begin(), s.binding.checkpoint.end(),
                                     [&](const plan::Binding::Input& in) { return !ckpt.find(in.name); }))
      continue;
    std::vector<Tensor> ins;
    for (const auto& in : s.binding.checkpoint) {
      const Tensor* t = ckpt.find(in.name);
      if (!t) {
        const PrefixHint h = prefix_hint(read, ckpt);
        std::string hint;
        if (h.explained * 2 > h.missing)
          hint = str_cat("\n  the checkpoint's keys differ from the names the plan was bound to by a prefix: '",
                         h.plan_prefix, "' in the plan is '", h.ckpt_prefix, "' in the checkpoint (", h.explained,
                         " of the ", h.missing, " missing names, e.g. '", in.name, "' would be '",
                         in.name.rfind(h.plan_prefix, 0) == 0 ? h.ckpt_prefix + in.name.substr(h.plan_prefix.size())
                                                               : in.name,
                         "'): rename its keys with ",
                         h.ckpt_prefix.empty() ? "" : "--strip-prefix '" + h.ckpt_prefix + "' ",
                         h.plan_prefix.empty() ? "" : "--add-prefix '" + h.plan_prefix + "' ",
                         "(Python: strip_prefix=, add_prefix=), or save the checkpoint under the module the model "
                         "was exported from");
        fail("refit from ", ckpt.description(), ": checkpoint tensor '", in.name, "' (bound to source '", s.key,
             "') is missing from the checkpoint", hint);
      }
      if (t->dtype() != in.dtype || t->shape() != in.shape)
        fail("refit from ", ckpt.description(), ": checkpoint tensor '", in.name, "' is ", t->describe(),
             ", the plan expects ", dtype_name(in.dtype), shape_str(in.shape), " (bound to source '", s.key, "')");
      check_ties(in, *t, ckpt, read);
      used.insert(in.name);
      for (const auto& tie : in.ties) used.insert(tie);  // compared, not ignored
      ins.push_back(*t);
    }
    if (transforms::is_transpose_binding(s.binding, s.shape)) {
      out.transposed[static_cast<uint32_t>(i)] = ins[0];
      continue;
    }
    try {
      out.sources[static_cast<uint32_t>(i)] = transforms::apply_binding(s.binding, ins, s.dtype, s.shape);
      if (!s.binding.steps.empty()) out.read.insert(out.read.end(), ins.begin(), ins.end());
    } catch (Error& e) {
      throw e.with_context("while deriving source '" + s.key + "' from " + ckpt.description());
    }
  }
  for (const auto& [name, _] : ckpt.tensors())
    if (!used.count(name)) out.unused.push_back(name);
  return out;
}

LiteralCheck check_literals(const plan::Plan& p, const Checkpoint& ckpt) {
  LiteralCheck out;
  for (const auto& b : p.literal_bindings) {
    std::vector<Tensor> ins;
    for (const auto& in : b.binding.checkpoint) {
      const Tensor* t = ckpt.find(in.name);
      if (!t) break;  // a checkpoint without it offers no value for the literal
      if (t->dtype() != in.dtype || t->shape() != in.shape)
        fail("refit from ", ckpt.description(), ": checkpoint tensor '", in.name, "' is ", t->describe(),
             ", the plan expects ", dtype_name(in.dtype), shape_str(in.shape), " (it derives '", b.name,
             "', which the plan holds as a literal: --literal)");
      ins.push_back(*t);
    }
    if (ins.size() != b.binding.checkpoint.size()) continue;
    Tensor v;
    try {
      v = transforms::apply_binding(b.binding, ins, b.dtype, b.shape);
    } catch (Error& e) {
      throw e.with_context("while deriving literal '" + b.name + "' from " + ckpt.description());
    }
    ++out.given;
    if (transforms::hash_tensor(v) != b.hash) out.differing.push_back(b.name);
  }
  return out;
}

void set_sources(Refitter& r, const CheckpointSources& cs) {
  for (const auto& [id, t] : cs.sources) r.set_source(id, t);
  for (const auto& [id, t] : cs.transposed) r.set_source_transposed(id, t);
}

std::string unused_summary(const std::vector<std::string>& unused) {
  if (unused.empty()) return "";
  std::string s = str_cat(unused.size(), " checkpoint tensor(s) are not used by this plan (ignored):");
  for (size_t i = 0; i < unused.size() && i < 8; ++i) s += (i ? ", " : " ") + unused[i];
  if (unused.size() > 8) s += ", ...";
  return s;
}

}  // namespace reforge::refit
