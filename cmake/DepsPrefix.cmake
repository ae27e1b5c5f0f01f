# DepsPrefix.cmake — building against Debian packages unpacked into a folder instead of installed
# (scripts/device-bundle.sh gathers the .debs, scripts/gpu-first.sh unpacks them with `dpkg -x`
# into a prefix on a GPU machine that has no -dev packages and no network).
# Owns: ZEROBENCH_DEPS_PREFIX (the dpkg -x root: <prefix>/usr/{include,lib/<multiarch>,share}) put
# first in CMAKE_PREFIX_PATH, with its multiarch include folder (Debian keeps OpenSSL's
# configuration.h/opensslconf.h there) on the include path; and ZEROBENCH_DEPS_ONLY, which hides
# / and /usr from every find_package/find_path/find_library, so a configure sees only the prefix,
# the venv's torch and the CUDA toolkit (/usr/local/cuda) — CI's proof that the bundle is complete
# (tests/test_gpu_readiness.cpp). Must not: download or unpack anything.
set(ZEROBENCH_DEPS_PREFIX "" CACHE PATH "dpkg -x root of the device bundle's .debs (empty: the system's packages)")
option(ZEROBENCH_DEPS_ONLY "Search packages only in ZEROBENCH_DEPS_PREFIX (and torch, CUDA): never / or /usr" OFF)
if(ZEROBENCH_DEPS_PREFIX)
  if(NOT EXISTS "${ZEROBENCH_DEPS_PREFIX}/usr/include")
    message(FATAL_ERROR "zerobench: ZEROBENCH_DEPS_PREFIX=${ZEROBENCH_DEPS_PREFIX} has no usr/include (unpack the bundle's .debs there with dpkg -x)")
  endif()
  list(PREPEND CMAKE_PREFIX_PATH "${ZEROBENCH_DEPS_PREFIX}/usr")
  if(CMAKE_LIBRARY_ARCHITECTURE AND EXISTS "${ZEROBENCH_DEPS_PREFIX}/usr/include/${CMAKE_LIBRARY_ARCHITECTURE}")
    include_directories(SYSTEM "${ZEROBENCH_DEPS_PREFIX}/usr/include/${CMAKE_LIBRARY_ARCHITECTURE}")
  endif()
  message(STATUS "zerobench: packages from ${ZEROBENCH_DEPS_PREFIX}")
endif()
if(ZEROBENCH_DEPS_ONLY)
  if(NOT ZEROBENCH_DEPS_PREFIX)
    message(FATAL_ERROR "zerobench: ZEROBENCH_DEPS_ONLY=ON needs ZEROBENCH_DEPS_PREFIX")
  endif()
  # Prefixes (find_package's <prefix>/lib/<arch>/cmake, <prefix>/share/cmake, ...) and the system
  # folders find_path/find_library walk (CMAKE_SYSTEM_INCLUDE_PATH, CMAKE_SYSTEM_LIBRARY_PATH).
  set(CMAKE_IGNORE_PREFIX_PATH "/;/usr")
  set(CMAKE_SYSTEM_IGNORE_PREFIX_PATH "/;/usr")
  set(CMAKE_FIND_USE_PACKAGE_REGISTRY OFF)
  set(CMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY OFF)
  set(_zb_ignore /include /usr/include /lib /usr/lib /lib64 /usr/lib64)
  if(CMAKE_LIBRARY_ARCHITECTURE)
    list(APPEND _zb_ignore /usr/include/${CMAKE_LIBRARY_ARCHITECTURE} /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}
                           /lib/${CMAKE_LIBRARY_ARCHITECTURE})
  endif()
  set(CMAKE_IGNORE_PATH ${_zb_ignore})
  set(CMAKE_SYSTEM_IGNORE_PATH ${_zb_ignore})
  message(STATUS "zerobench: package search limited to ${ZEROBENCH_DEPS_PREFIX}, torch and the CUDA toolkit")
endif()
