# Sanitizer and fuzzing instrumentation of the project's own targets.
#
# MPISTAGE_SANITIZE=ON: every target this project defines (library, CLI, tests, examples) is
# compiled and linked with ASan + UBSan. Third-party code is not rebuilt: MPI, HDF5, zlib,
# ISA-L, GoogleTest and libtorch come in prebuilt and stay uninstrumented. UBSan findings abort
# (-fno-sanitize-recover) so a test that hits one fails instead of printing and passing.
#
# MPISTAGE_BUILD_FUZZ=ON (clang only): the same, with -fsanitize=fuzzer-no-link on the compile
# lines, so the library carries libFuzzer's coverage hooks; fuzz/CMakeLists.txt links the fuzz
# targets with -fsanitize=fuzzer (libFuzzer's main).
set(MPISTAGE_SANITIZER_FLAGS "")
if(MPISTAGE_BUILD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "MPISTAGE_BUILD_FUZZ needs clang (libFuzzer), e.g. "
      "-DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14")
  endif()
  set(MPISTAGE_SANITIZER_FLAGS -fsanitize=fuzzer-no-link,address,undefined)
elseif(MPISTAGE_SANITIZE)
  set(MPISTAGE_SANITIZER_FLAGS -fsanitize=address,undefined)
endif()
if(MPISTAGE_SANITIZER_FLAGS)
  # add_compile_options/add_link_options reach only the targets defined in this project (the
  # directories below the top level), never imported third-party targets.
  add_compile_options(${MPISTAGE_SANITIZER_FLAGS} -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  string(REPLACE "fuzzer-no-link," "" _mpistage_link_sanitizers "${MPISTAGE_SANITIZER_FLAGS}")
  add_link_options(${_mpistage_link_sanitizers})
  message(STATUS "mpistage: sanitizers ${MPISTAGE_SANITIZER_FLAGS}")
endif()
