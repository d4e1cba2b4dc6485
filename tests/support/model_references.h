// The tiny exported models (models/manifest.json) against their framework reference outputs:
// the loop the precision tests share (LinearPlan.Bf16ModelsMatchFrameworkReference,
// Fp16Plan.ModelsMatchFrameworkReference).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "runtime/plan_engine.h"
#include "support/plan_round_trip.h"

namespace reforge::test_support {

// max |a - b| / max |b| (b the reference; a norm-wise relative error, defined where b has zeros).
inline double relative_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double diff = 0, mag = 0;
  for (int64_t k = 0; k < b.numel() && k < a.numel(); ++k) {
    diff = std::max(diff, std::fabs(a.as_double(k) - b.as_double(k)));
    mag = std::max(mag, std::fabs(b.as_double(k)));
  }
  return mag > 0 ? diff / mag : diff;
}

// Builds every export of models/manifest.json with `o` (through the plan file format), runs it
// on each of its input sets and calls check(export id, output name, output, reference) for each
// output that has a reference. Returns how many were checked, or -1 when the manifest is absent.
inline int check_model_references(
    const build::BuildOptions& o,
    const std::function<void(const std::string&, const std::string&, const Tensor&, const Tensor&)>& check) {
  namespace fs = std::filesystem;
  const fs::path models = fs::path(REFORGE_SOURCE_DIR) / "models";
  std::ifstream f(models / "manifest.json");
  if (!f) return -1;
  const nlohmann::json j = nlohmann::json::parse(f);
  int checked = 0;
  for (const auto& e : j.at("exports")) {
    const std::string id = e.at("model").get<std::string>() + "_" + e.at("export").get<std::string>() + "_" +
                           e.at("weights").get<std::string>();
    SCOPED_TRACE(id);
    runtime::PlanEngine engine(
        round_trip(build::build_plan(onnx::import_model_file((models / e.at("path").get<std::string>()).string()), o)));
    for (const auto& set : e.at("input_sets")) {
      std::map<std::string, Tensor> in;
      for (const auto& [n, v] : set.at("inputs").items()) in[n] = read_npy((models / v.get<std::string>()).string());
      const auto outs = engine.run(in);
      for (size_t i = 0; i < outs.size(); ++i) {
        const std::string& name = engine.outputs()[i].name;
        if (!set.at("reference").contains(name)) continue;
        check(id, name, outs[i], read_npy((models / set.at("reference").at(name).get<std::string>()).string()));
        ++checked;
      }
    }
  }
  return checked;
}

}  // namespace reforge::test_support
