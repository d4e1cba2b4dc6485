#include "backends/cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "core/error.h"

namespace reforge::cuda {

namespace {

#define REFORGE_STR2(x) #x
#define REFORGE_STR(x) REFORGE_STR2(x)
constexpr const char* kLibrary = "libcublasLt.so." REFORGE_STR(CUBLAS_VER_MAJOR);

CublasLt load() {
  // Local: nothing else in the process sees its symbols; kept open for the process's life.
  void* lib = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = ::dlerror();
    fail("cannot load cuBLASLt (", kLibrary, "), which matrix products on the GPU need: ", why ? why : "unknown reason",
         "; install the CUDA toolkit's cuBLAS libraries or add their folder to LD_LIBRARY_PATH");
  }
  CublasLt api{};
  auto resolve = [&](auto& fn, const char* name) {
    ::dlerror();
    void* p = ::dlsym(lib, name);
    if (!p) fail("cuBLASLt (", kLibrary, ") has no function ", name);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  resolve(api.Create, "cublasLtCreate");
  resolve(api.Destroy, "cublasLtDestroy");
  resolve(api.GetStatusString, "cublasLtGetStatusString");
  resolve(api.Matmul, "cublasLtMatmul");
  resolve(api.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  resolve(api.MatmulDescCreate, "cublasLtMatmulDescCreate");
  resolve(api.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  resolve(api.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  resolve(api.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  resolve(api.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  resolve(api.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  resolve(api.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  resolve(api.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  resolve(api.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  return api;
}

}  // namespace

const CublasLt& cublaslt() {
  static const CublasLt api = load();  // a failed load throws, and the next call tries again
  return api;
}

}  // namespace reforge::cuda
