# The CUDA backend (docs/cuda.md) is compiled whenever nvcc is found;
# -DDS4_CUDA=OFF skips it. The sanitizer and fuzz builds skip it too: the
# CUDA runtime needs ASan's shadow-gap protection off, and its host logic
# (placement, option parsing) lives in plain C++ libraries they do check.
option(DS4_CUDA "Build the CUDA backend when nvcc is found" ON)
set(DS4_HAVE_CUDA OFF)
if(DS4_CUDA AND NOT DS4_SANITIZE AND NOT DS4_FUZZ)
  # The toolkit's standard place, when nvcc is not on PATH.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "nvcc")
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Ampere (sm_80, sm_86), Ada (sm_89), Hopper (sm_90), Blackwell (sm_100,
    # sm_120) as machine code, and PTX of the newest for later GPUs.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80-real 86-real 89-real 90-real 100-real 120-real 120-virtual)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc 13's C++20 flag; targets take C++20 from
    # CMAKE_CXX_STANDARD for their CUDA sources too.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION -std=c++20)
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION -std=c++20)
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(DS4_HAVE_CUDA ON)
    message(STATUS "CUDA backend: nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  else()
    message(STATUS "CUDA backend: nvcc not found, not built (CPU backend only)")
  endif()
endif()

# Device code keeps each a*b+c a multiply and an add (no fma contraction), as
# the host's -ffp-contract=off: the reference-order kernels then round as the
# CPU's scalar ones, bit for bit. Warnings are errors in device and host code.
set(DS4_CUDA_FLAGS --fmad=false --Werror all-warnings -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-Werror)
