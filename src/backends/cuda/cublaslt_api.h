// cuBLASLt, loaded when the first matrix product on the GPU needs it.
//
// libcublasLt is large (over 500 MB) and relocating it at program start made every process of a
// CUDA-enabled build hold ~150 MB more resident memory, CPU-only runs included. reforge therefore
// does not link it: cublaslt() opens the library of the toolkit it was compiled against
// (libcublasLt.so.<major>, found as the dynamic linker finds any library) on first use and
// resolves the functions the CUDA backend calls. Their types are the header's, so a changed
// signature fails the build, not a run.
#pragma once

#include <cublasLt.h>

namespace reforge::cuda {

struct CublasLt {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtMatmul) Matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute;
};

// The library's functions, loaded once per process (thread-safe). Throws an Error naming the
// library and the loader's reason when it cannot be opened or lacks a function.
const CublasLt& cublaslt();

}  // namespace reforge::cuda
