# Finds LibTorch inside the venv that scripts/setup.sh made (torch.utils.cmake_prefix_path),
# unless Torch_DIR / CMAKE_PREFIX_PATH already point at one. ZEROBENCH_VENV overrides the venv,
# ZEROBENCH_PYTHON the interpreter. Sets ZEROBENCH_PYTHON_EXE (the interpreter whose torch this
# build links: cmake/TorchCudaStack.cmake asks it for torch's NCCL and CUDA versions).
if(DEFINED ENV{ZEROBENCH_PYTHON})
  set(_zb_python $ENV{ZEROBENCH_PYTHON})
elseif(DEFINED ENV{ZEROBENCH_VENV})
  set(_zb_python $ENV{ZEROBENCH_VENV}/bin/python)
else()
  set(_zb_python $ENV{HOME}/.cache/zerobench/venv/bin/python)
endif()
if(NOT EXISTS ${_zb_python})
  find_program(_zb_python python3 REQUIRED)
endif()
set(ZEROBENCH_PYTHON_EXE "${_zb_python}")
if(NOT Torch_DIR)
  execute_process(
    COMMAND ${_zb_python} -c "import torch; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _zb_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _zb_rc)
  if(NOT _zb_rc EQUAL 0)
    message(FATAL_ERROR "zerobench: cannot import torch with ${_zb_python}; run ./scripts/setup.sh")
  endif()
  list(APPEND CMAKE_PREFIX_PATH ${_zb_torch_prefix})
  message(STATUS "zerobench: LibTorch from ${_zb_torch_prefix}")
endif()
