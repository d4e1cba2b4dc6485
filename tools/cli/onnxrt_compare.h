// `reforge run --compare-onnxrt`: the same ONNX model on the same inputs in ONNX Runtime, and the
// per-output error between the two.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace reforge::cli {

// Runs `onnx_model` in ONNX Runtime through tools/onnxrt_run.py in `python` (the interpreter; ""
// is $REFORGE_PYTHON, else the source tree's .venv/bin/python), with `inputs` written as .npy to a
// temporary folder (removed afterwards). Returns the outputs by name. Throws an Error saying why
// when the interpreter, onnxruntime or the run fails.
// `marked`: values of the model ONNX Runtime returns too (--mark-outputs: the names, or "all").
std::map<std::string, Tensor> run_onnxrt(const std::string& onnx_model, const std::map<std::string, Tensor>& inputs,
                                         const std::string& python, const std::vector<std::string>& marked = {});

// Error of `actual` against `expected` (same shape): the largest |a - e|, the largest |a - e| / |e|
// over the elements where e != 0, the mean |a - e|, and whether every element has
// |a - e| <= atol + rtol * |e| (numpy.allclose; NaN matches only NaN, infinities only themselves).
struct ErrorStats {
  double max_abs = 0, max_rel = 0, mean_abs = 0;
  int64_t failing = 0;  // elements outside the tolerance
  bool pass = true;
};
ErrorStats compare_tensors(const Tensor& actual, const Tensor& expected, double atol, double rtol);

// Per-output tolerances from `--atol`/`--rtol` values: "X" for every output, "NAME=X" for one
// (which wins). Errors name the value and, for an unknown NAME, the outputs.
double tolerance_for(const std::vector<std::string>& specs, const std::string& output, double def,
                     const std::vector<std::string>& outputs, const char* flag);

}  // namespace reforge::cli
