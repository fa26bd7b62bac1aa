# mpistage_add_mpi_test(<target> RANKS <n>... [TIMEOUT <s>] [LABELS <l>...])
# Registers one ctest per rank count, named <target>.np<n>, run with MPIEXEC_EXECUTABLE,
# MPIEXEC_NUMPROC_FLAG and --oversubscribe (more ranks than cores is normal in CI).
function(mpistage_add_mpi_test target)
  cmake_parse_arguments(ARG "" "TIMEOUT" "RANKS;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  foreach(np ${ARG_RANKS})
    add_test(NAME ${target}.np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${target}.np${np} PROPERTIES
      TIMEOUT ${ARG_TIMEOUT}
      LABELS "${ARG_LABELS};np${np}"
      PROCESSORS ${np}
      ENVIRONMENT "${MPISTAGE_MPI_TEST_ENV}")
  endforeach()
endfunction()

# Run-time options of the sanitizer build (cmake/MpistageSanitize.cmake) for tests under
# mpiexec. Leak detection is off there: Open MPI is built without frame pointers, so with
# LSan's fast unwinder its allocations show a single unattributable frame ("unknown module")
# that no suppression can match; the slow unwinder (fast_unwind_on_malloc=0) makes
# tests/sanitizers/lsan.supp match and the runs clean, but costs about 10x the run time.
# ASan's other checks and UBSan stay on, and the serial tests keep leak detection.
set(MPISTAGE_SANITIZER_ENV "")
if(MPISTAGE_SANITIZER_FLAGS)
  set(MPISTAGE_SANITIZER_ENV
    "ASAN_OPTIONS=detect_leaks=0"
    "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/sanitizers/lsan.supp:print_suppressions=0"
    "UBSAN_OPTIONS=print_stacktrace=1"
    "OMPI_MCA_mca_base_component_disable_dlclose=1")
endif()
set(MPISTAGE_MPI_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1" "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
    "OMPI_MCA_rmaps_base_oversubscribe=1" ${MPISTAGE_SANITIZER_ENV})
