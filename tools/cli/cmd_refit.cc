// `reforge refit PLAN --weights NEW.onnx [-o OUT.plan] [--strip-weights | --full] [--slow | --verify] [--keep-baked]
//                   [--skip-unchanged] [--lora ADAPTER [--lora-scale S]]`
// Refits the plan's engine from new weights and writes the refit plan (to PLAN itself when no
// -o is given; atomically either way): stripped when PLAN was (a weight-stripped plan stays the
// small file it was shipped as) or --strip-weights asks, with every weight when --full asks. The engine runs on the device the plan was built for (no
// --device): a plan whose device cannot run here is refused before any work, naming the plan. The plan's stored weights
// are always verified against their hashes first (there is no --no-verify here): the written plan re-hashes every
// weight it carries over, so a corrupted literal or baked weight would otherwise leave with a valid hash.
#include <iostream>
#include <nlohmann/json.hpp>

#include "common.h"
#include "plan_loading.h"
#include "progress.h"

namespace reforge::cli {

namespace {
struct RefitArgs {
  std::string plan, out;
  std::vector<std::string> weights;
  KeyPrefixes prefixes;
  LoraOptions lora;
  bool strip = false, full = false, slow = false, verify = false, allow_nonfinite = false, keep_baked = false,
       skip_unchanged = false, host_replay = false, json = false;
};
}  // namespace

Runner add_refit(CLI::App& app) {
  auto a = std::make_shared<RefitArgs>();
  app.add_option("plan", a->plan, "plan file")->required();
  app.add_option("--weights,-w", a->weights,
                 "new weights: a re-exported ONNX model, or a checkpoint the plan was bound to (safetensors file(s), "
                 "a sharded checkpoint's index or its folder); each file is read as what its content is, whatever its "
                 "name")
      ->required();
  add_key_prefix_options(app, a->prefixes);
  add_lora_options(app, a->lora);
  app.add_option("-o,--output", a->out, "plan file to write (default: overwrite PLAN)");
  auto* strip = app.add_flag("--strip-weights", a->strip,
                             "write the refit plan without refittable weight data (the default for a stripped PLAN)");
  app.add_flag("--full", a->full, "write the refit plan with every weight, also when PLAN was stripped")->excludes(strip);
  auto* s = app.add_flag("--slow", a->slow, "re-import and rebuild instead of replaying recipes");
  auto* v = app.add_flag("--verify", a->verify, "run fast and slow refit, compare every engine weight bit for bit");
  s->excludes(v);
  app.add_flag("--allow-nonfinite", a->allow_nonfinite, "accept NaN/Inf in the new weights (refused by default)");
  app.add_flag("--keep-baked", a->keep_baked,
               "where the new weights hold other values for sources this plan holds baked (a --refit-individual "
               "plan's), keep the plan's (refused by default: the engine would run a mix of old and new weights)");
  app.add_flag("--skip-unchanged", a->skip_unchanged,
               "hash every new weight and leave alone the engine weights made only from weights whose bytes the "
               "engine already had (one more pass over the new weights; the result is the same)")
      ->excludes(s);
  app.add_flag("--host-replay", a->host_replay,
               "replay every recipe on the host (a GPU plan's refit otherwise makes the weights the GPU holds alone "
               "there, from the new weights streamed to it; the bytes are the same)");
  app.add_flag("--json", a->json, "print one JSON document on stdout (phases and counts); other text goes to stderr");
  return [a]() {
    std::string out = a->out.empty() ? a->plan : a->out;
    check_output_file(out, a->out.empty() ? "plan" : "-o");
    LoadOptions o;
    o.weights = a->weights;
    o.prefixes = a->prefixes;
    o.lora = a->lora;
    o.slow = a->slow;
    o.verify = a->verify;
    o.allow_nonfinite = a->allow_nonfinite;
    o.keep_baked = a->keep_baked;
    o.skip_unchanged = a->skip_unchanged;
    o.host_replay = a->host_replay;
    LoadOptions lo;
    lo.verify_weights = true;
    session::Session loaded = load_session(a->plan, lo);
    const bool strip = a->strip || (loaded.engine().plan().stripped && !a->full);
    refit::RefitReport rep = refit_session(loaded, o);
    PhaseObserver observer;
    loaded.save(out, strip, &observer);
    // The device follows the plan (there is no --device here): its weights were replayed there or
    // on the host (--host-replay) and uploaded to that device by the commit.
    (a->json ? std::cerr : std::cout) << "refit plan written to " << out << (strip ? " (stripped)" : "")
                                      << (rep.device != "cpu" ? " for device " + rep.device : std::string()) << "\n";
    if (a->json) {
      // The written file, then the refit report's one schema (RefitReport::json, docs/refit.md).
      nlohmann::ordered_json j = {{"plan", out}, {"stripped", strip}};
      j.update(rep.json());
      std::cout << j.dump(2) << "\n";
    }
    return 0;
  };
}

}  // namespace reforge::cli
