# Resolves ZEROBENCH_CUDA (auto|ON|OFF) into ZEROBENCH_WITH_CUDA and finds Torch accordingly.
# The pip wheel's TorchConfig wants the CUDA toolkit when it was built with CUDA; with OFF we
# still link the same libraries but compile none of zerobench's CUDA code paths.
# With the CUDA path, cmake/TorchCudaStack.cmake checks the toolkit and nccl.h against torch and
# sets ZEROBENCH_NCCL_INCLUDE (the torch wheel's NCCL headers, ahead of the toolkit's).
include(CheckLanguage)
include(${CMAKE_CURRENT_LIST_DIR}/TorchCudaStack.cmake)
set(ZEROBENCH_NCCL_INCLUDE_DIR "" CACHE PATH "nccl.h folder (empty: the torch wheel's nvidia/nccl/include)")
set(ZEROBENCH_WITH_CUDA OFF)
if(ZEROBENCH_CUDA STREQUAL "ON" OR ZEROBENCH_CUDA STREQUAL "auto")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(ZEROBENCH_WITH_CUDA ON)
  elseif(ZEROBENCH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "zerobench: ZEROBENCH_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
if(ZEROBENCH_WITH_CUDA)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  zb_check_cuda_stack("${ZEROBENCH_PYTHON_EXE}" "${ZEROBENCH_NCCL_INCLUDE_DIR}" "${CUDAToolkit_VERSION}"
                      ZEROBENCH_NCCL_INCLUDE)
  # A100 and H100/H200; TorchConfig reads TORCH_CUDA_ARCH_LIST (it ignores CMAKE_CUDA_ARCHITECTURES).
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES OFF)
endif()
find_package(Torch REQUIRED)
message(STATUS "zerobench: CUDA path ${ZEROBENCH_WITH_CUDA}")
