# Sourced by scripts/setup.sh, scripts/test.sh and scripts/wheel_test.sh from the source root:
#   configure DIR [CMAKE ARGUMENTS...]   (re)configures the Ninja build DIR (REFORGE_BUILD_TYPE,
#                                        default Release; REFORGE_CUDA=ON|OFF when set;
#                                        REFORGE_CMAKE_ARGS appended)
#   cuda_state DIR                       "CUDA backend" or "CPU only", as DIR is configured
# Compiles go through ccache where it is installed (REFORGE_CCACHE=0: not), with the source root
# as its base folder, so that another build folder or clone of the same sources (the wheel's
# build, a second checkout) reuses the objects instead of compiling them again.
root=$(pwd)
# The CUDA toolkit's nvcc where CMake looks for it (PATH).
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then export PATH=/usr/local/cuda/bin:$PATH; fi
if [ "${REFORGE_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$root
  reforge_launcher="env;CCACHE_BASEDIR=$root;ccache"
else
  reforge_launcher=""
fi

configure() {
  local dir=$1
  shift
  local args=(-G Ninja --log-level=WARNING --no-warn-unused-cli -DCMAKE_BUILD_TYPE="${REFORGE_BUILD_TYPE:-Release}"
              -DCMAKE_CXX_COMPILER_LAUNCHER="$reforge_launcher" -DCMAKE_CUDA_COMPILER_LAUNCHER="$reforge_launcher")
  [ -n "${REFORGE_CUDA:-}" ] && args+=(-DREFORGE_CUDA="$REFORGE_CUDA")
  # shellcheck disable=SC2086  # REFORGE_CMAKE_ARGS: several arguments
  cmake -S . -B "$dir" "${args[@]}" "$@" ${REFORGE_CMAKE_ARGS:-}
}

cuda_state() {
  if grep -q '^REFORGE_CUDA:BOOL=ON' "$1/CMakeCache.txt"; then echo "CUDA backend"; else echo "CPU only"; fi
}
