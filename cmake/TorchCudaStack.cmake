# TorchCudaStack.cmake — the CUDA stack zerobench compiles against must be the one torch runs with.
# Owns: the NCCL include directory (the torch wheel's own nvidia/nccl/include, put ahead of the
# CUDA toolkit's), and the configure-time check that fails with one line when nccl.h's
# NCCL_VERSION_CODE differs from torch.cuda.nccl.version() or the toolkit's CUDA major differs
# from torch.version.cuda.
# Why: ProcessGroupNCCL::Options holds an ncclConfig_t by value (torch/csrc/distributed/c10d/
# ProcessGroupNCCL.hpp, `struct Options`: `ncclConfig_t config = NCCL_CONFIG_INITIALIZER;`), so
# compiling against another nccl.h than libtorch_cuda's changes the object's layout; a toolkit of
# another CUDA major links a second libcudart next to the wheel's.
# Must not: find the toolkit or torch (cmake/CudaOption.cmake and FindTorchFromVenv.cmake do).
# Inputs: the cache variable ZEROBENCH_NCCL_INCLUDE_DIR (empty: the wheel's; tests plant a folder).
# Used by CudaOption.cmake and by the tiny project tests/cmake/nccl_check (configure-only test).

# NCCL_VERSION(X,Y,Z) as nccl.h defines it: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after.
set(_zb_torch_facts_py [=[
import os, torch
try:
    v = torch.cuda.nccl.version()  # (2, 28, 9); needs no GPU, only a torch built with NCCL
except Exception:
    v = None
if isinstance(v, int):
    code = v
elif v:
    x, y, z = v[0], v[1], v[2]
    code = x * 1000 + y * 100 + z if (x <= 2 and y <= 8) else x * 10000 + y * 100 + z
else:
    code = 0
inc = ""
try:
    import nvidia.nccl
    for p in nvidia.nccl.__path__:
        if os.path.isfile(os.path.join(p, "include", "nccl.h")):
            inc = os.path.join(p, "include")
except ImportError:
    pass
print(code)
print(".".join(str(i) for i in v) if isinstance(v, tuple) else str(v))
print(torch.version.cuda or "")
print(inc)
]=])

# zb_check_cuda_stack(PYTHON NCCL_INCLUDE_DIR TOOLKIT_VERSION OUT_VAR): checks, then sets OUT_VAR
# (in the caller's scope) to the NCCL include directory to compile against.
function(zb_check_cuda_stack python nccl_dir toolkit_version out_var)
  execute_process(COMMAND "${python}" -c "${_zb_torch_facts_py}" OUTPUT_VARIABLE facts
                  ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "zerobench: cannot read torch's NCCL/CUDA versions with ${python}: ${err}")
  endif()
  string(REPLACE "\n" ";" facts "${facts}")
  list(GET facts 0 torch_nccl_code)
  list(GET facts 1 torch_nccl)
  list(GET facts 2 torch_cuda)
  list(LENGTH facts n)
  set(wheel_nccl_dir "")
  if(n GREATER 3)
    list(GET facts 3 wheel_nccl_dir)
  endif()
  if(torch_cuda STREQUAL "" OR torch_nccl_code EQUAL 0)
    message(FATAL_ERROR "zerobench: the torch of ${python} has no CUDA/NCCL (torch.version.cuda='${torch_cuda}', "
                        "torch.cuda.nccl.version()=${torch_nccl}): build with ZEROBENCH_CUDA=OFF or use a CUDA wheel")
  endif()
  # The toolkit's CUDA major must be torch's: another major loads a second libcudart.
  string(REGEX MATCH "^[0-9]+" toolkit_major "${toolkit_version}")
  string(REGEX MATCH "^[0-9]+" torch_major "${torch_cuda}")
  if(NOT toolkit_major STREQUAL torch_major)
    message(FATAL_ERROR "zerobench: the CUDA toolkit is ${toolkit_version} but torch was built with CUDA ${torch_cuda} "
                        "(torch.version.cuda): a different CUDA major loads two CUDA runtimes; use a ${torch_major}.x "
                        "toolkit (CUDAToolkit_ROOT, CMAKE_CUDA_COMPILER)")
  endif()
  if(nccl_dir STREQUAL "")
    set(nccl_dir "${wheel_nccl_dir}")
  endif()
  if(nccl_dir STREQUAL "" OR NOT EXISTS "${nccl_dir}/nccl.h")
    message(FATAL_ERROR "zerobench: no nccl.h in '${nccl_dir}' (the torch wheel's nvidia/nccl/include, or "
                        "ZEROBENCH_NCCL_INCLUDE_DIR): install the nvidia-nccl wheel torch depends on")
  endif()
  file(STRINGS "${nccl_dir}/nccl.h" code_line REGEX "^#define NCCL_VERSION_CODE ")
  string(REGEX MATCH "[0-9]+" header_code "${code_line}")
  if(NOT header_code STREQUAL torch_nccl_code)
    message(FATAL_ERROR "zerobench: ${nccl_dir}/nccl.h has NCCL_VERSION_CODE ${header_code} but torch runs NCCL "
                        "${torch_nccl} (code ${torch_nccl_code}, torch.cuda.nccl.version()): a different nccl.h changes "
                        "ProcessGroupNCCL::Options' layout; set ZEROBENCH_NCCL_INCLUDE_DIR to the torch wheel's nvidia/nccl/include")
  endif()
  message(STATUS "zerobench: NCCL ${torch_nccl} headers from ${nccl_dir} (torch.cuda.nccl.version() agrees); "
                 "CUDA toolkit ${toolkit_version}, torch CUDA ${torch_cuda}")
  set(${out_var} "${nccl_dir}" PARENT_SCOPE)
endfunction()
