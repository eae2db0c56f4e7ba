# Compiler flags shared by every target, the sanitizer configuration, and the
# per-file ISA flags that runtime CPU dispatch relies on.

set(DS4_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter)

# Line tables only (-g1) where the build type asks for debug info, for every
# C/C++ file: full -g roughly doubles the compile time of template-heavy code
# (GoogleTest, JSON, CLI11; the tile kernels: dot_tile_kquant_avx512.cpp
# 51 s -> 23 s, hf_checkpoint.cpp 12 -> 8 s), and line numbers are what
# backtraces, perf and the sanitizers' reports need. (Variables in a debugger
# need -DCMAKE_CXX_FLAGS=-g.) DS4_LIGHT_DEBUG stays for the targets that name it.
set(DS4_LIGHT_DEBUG $<$<OR:$<CONFIG:Debug>,$<CONFIG:RelWithDebInfo>>:-g1>)
add_compile_options($<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<OR:$<CONFIG:Debug>,$<CONFIG:RelWithDebInfo>>>:-g1>)

# Test programs' own sources (not the support libraries they link, where the
# work is done) at -Og in GCC's optimized builds: GoogleTest and JSON
# templates cost most of their compile time at -O2 (test_server_http.cpp
# 15.8 s at -O2, 10.7 s at -Og; -O0 is slower still, 13.2 s).
set(DS4_TEST_PROGRAM_OPT $<$<AND:$<CXX_COMPILER_ID:GNU>,$<NOT:$<CONFIG:Debug>>>:-Og>)

# No silent a*b+c -> fma contraction: scalar reference kernels must round the
# same way in every build, whatever -march a user adds.
add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-ffp-contract=off>)

# GCC's -O2 vectorizes only loops its "very cheap" model accepts (no runtime
# alias checks, no epilogues), which left the per-element loops of the forward
# pass (HC, norms, routing sums) scalar. The dynamic model vectorizes them as
# -O3 would. Results do not change: without -ffast-math GCC never reorders a
# floating-point reduction, and contraction stays off. (warm 512-token ds4-q4
# prefill, 5 alternating pairs: +1 to +16 %, every pair faster)
add_compile_options($<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-fvect-cost-model=dynamic>)

# LLVM's lld links where the toolchain can use it (Debian `lld`, installed by
# scripts/install-deps.sh): the ~100 test programs each link every static
# library with its debug info, and lld does it 3x faster than GNU ld
# (test_server_tools: 2.6 -> 0.8 s, its ASan build 5.3 -> 1.9 s). nvcc's own
# links (none today) keep their default.
option(DS4_LLD "Link with lld when the compiler accepts -fuse-ld=lld" ON)
if(DS4_LLD)
  include(CheckLinkerFlag)
  check_linker_flag(CXX -fuse-ld=lld DS4_HAVE_LLD)
  if(DS4_HAVE_LLD)
    add_link_options($<$<LINK_LANGUAGE:C,CXX>:-fuse-ld=lld>)
  endif()
endif()

if(DS4_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

if(DS4_FUZZ)
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

# Sources named *_avx2.cpp / *_avx512.cpp hold kernels for one ISA level; only
# those files get the ISA flags, the dispatcher picks them at run time. The
# AVX-512 files serve the avx512, avx512vnni and avx512vbmi levels and get the
# flags of the highest: code for a lower level uses explicit intrinsics only.
set(DS4_AVX2_FLAGS -mavx2 -mfma -mf16c -mbmi2)
set(DS4_AVX512_FLAGS -mavx2 -mfma -mf16c -mbmi2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx512vbmi -mavx512bitalg)

# The fuzz and sanitizer builds leave these kernel files uninstrumented:
# clang's ASan+UBSan instrumentation of their unrolled intrinsics took ~15x
# their plain compile time (dot_tile_q8_avx512.cpp: 76 s against 5 s), and
# left at -O0 instead they were a third of the time of the sanitizer tests
# that run the forward pass (perf of SessionPayloadTest: vec_dot_4x16,
# load8, tinyblas_dot, float_acc_pass...). Uninstrumented, the sanitizer
# build compiles them at -O2. What goes unchecked is the kernels' own loads;
# their callers stay instrumented, and every kernel is checked bit for bit
# against its scalar reference in the main build.
if(DS4_FUZZ OR DS4_SANITIZE)
  list(APPEND DS4_AVX2_FLAGS -fno-sanitize=address,undefined)
  list(APPEND DS4_AVX512_FLAGS -fno-sanitize=address,undefined)
endif()
if(DS4_SANITIZE)
  list(APPEND DS4_AVX2_FLAGS -O2)
  list(APPEND DS4_AVX512_FLAGS -O2)
endif()

function(ds4_apply_isa_flags)
  foreach(src ${ARGN})
    if(src MATCHES "_avx512\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${DS4_AVX512_FLAGS}")
    elseif(src MATCHES "_avx2\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${DS4_AVX2_FLAGS}")
    endif()
  endforeach()
endfunction()

# The sanitizer build (Debug, -O0) compiles the libraries' portable files
# optimized, still instrumented: the quant folder's at -O2 (the scalar
# replicas of ggml's kernels (--quality) and the scalar reference dots run per
# element in the parity and Default-vs-Quality tests, and the quantizers'
# scale searches run per block whenever a test writes a model; at -O0 a
# `small` model in Q6_K or IQ4_XS took over 5 minutes), every other library
# file at -O1, as ASan advises (the synthetic models' random weights, the
# forward pass's glue, JSON and HTTP code; -O1 costs 20-40 % more compile
# time per file: engine_requests.cpp 5.4 -> 6.5 s, hf_checkpoint.cpp 7.3 ->
# 10.5 s). Test programs stay at -O0: at -O1 their GoogleTest and JSON
# templates took clang 2.4x longer (test_server_reply.cpp 12.7 -> 30.7 s).
# The SIMD kernel files are not instrumented (above).
set(DS4_SANITIZE_O2_SOURCES "quant/[a-z0-9_]+\\.cpp")
set(DS4_SIMD_SOURCES "_avx(2|512)\\.cpp")

# A library's sources in the sanitizer build, as described above.
function(ds4_sanitize_optimize)
  if(NOT DS4_SANITIZE)
    return()
  endif()
  foreach(src ${ARGN})
    if(src MATCHES "${DS4_SIMD_SOURCES}$")
      continue()
    elseif(src MATCHES "/${DS4_SANITIZE_O2_SOURCES}$")
      set_property(SOURCE ${src} APPEND PROPERTY COMPILE_OPTIONS -O2)
    else()
      set_property(SOURCE ${src} APPEND PROPERTY COMPILE_OPTIONS -O1)
    endif()
  endforeach()
endfunction()

# One static library per source folder, from every .cpp in it.
function(ds4_library name dir)
  file(GLOB srcs CONFIGURE_DEPENDS ${dir}/*.cpp)
  ds4_apply_isa_flags(${srcs})
  ds4_sanitize_optimize(${srcs})
  add_library(${name} STATIC ${srcs})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${DS4_WARNINGS})
  target_link_libraries(${name} PUBLIC Threads::Threads)
endfunction()
