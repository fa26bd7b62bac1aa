# mpistage_add_mpi_test(<target> RANKS <n>... [NAME <name>] [ARGS <arg>...] [TIMEOUT <s>]
#                       [LABELS <l>...])
# Registers one ctest per rank count, named <name>.np<n> (<name> defaults to <target>), run as
# MPIEXEC_EXECUTABLE MPIEXEC_NUMPROC_FLAG <n> --oversubscribe <target> ARGS (more ranks than
# cores is normal in CI). Labels: LABELS, np<n>, and "sanitize" on one rank count (2 when listed,
# else the first): the one the sanitizer suite runs. Exit code 77 (nothing to run in this build)
# is reported as skipped.
function(mpistage_add_mpi_test target)
  cmake_parse_arguments(ARG "" "TIMEOUT;NAME" "RANKS;LABELS;ARGS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(NOT ARG_NAME)
    set(ARG_NAME ${target})
  endif()
  list(GET ARG_RANKS 0 sanitize_np)
  if(2 IN_LIST ARG_RANKS)
    set(sanitize_np 2)
  endif()
  foreach(np ${ARG_RANKS})
    set(labels ${ARG_LABELS} np${np})
    if(np EQUAL sanitize_np)
      list(APPEND labels sanitize)
    endif()
    add_test(NAME ${ARG_NAME}.np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS} ${ARG_ARGS})
    set_tests_properties(${ARG_NAME}.np${np} PROPERTIES
      TIMEOUT ${ARG_TIMEOUT}
      LABELS "${labels}"
      PROCESSORS ${np}
      SKIP_RETURN_CODE 77
      ENVIRONMENT "${MPISTAGE_MPI_TEST_ENV}")
  endforeach()
endfunction()

# mpistage_test_areas(<dir> <out_var> [EXCEPT <name>...])
# The areas of a test folder (tests/serial, tests/mpi): its subfolders holding .cpp files below
# them, as names in <out_var>; for each area <name>, the variable <out_var>_<name> lists those
# files (CONFIGURE_DEPENDS: a new file or area reconfigures). A .cpp directly in <dir> (other
# than EXCEPT) is a configuration error: tests live in <dir>/<area>/, mirroring src/<area>/.
function(mpistage_test_areas dir out_var)
  cmake_parse_arguments(ARG "" "" "EXCEPT" ${ARGN})
  file(GLOB entries LIST_DIRECTORIES true CONFIGURE_DEPENDS ${dir}/*)
  set(areas)
  foreach(entry ${entries})
    get_filename_component(name ${entry} NAME)
    if(NOT IS_DIRECTORY ${entry})
      if(name MATCHES "\\.cpp$" AND NOT name IN_LIST ARG_EXCEPT)
        file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${entry})
        message(FATAL_ERROR "${rel}: tests live in ${dir}/<area>/, where <area> mirrors the "
          "src/ folder of the code under test")
      endif()
      continue()
    endif()
    file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${entry}/*.cpp)
    if(sources)
      list(APPEND areas ${name})
      set(${out_var}_${name} ${sources} PARENT_SCOPE)
    endif()
  endforeach()
  set(${out_var} ${areas} PARENT_SCOPE)
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
# odls_base_sigkill_timeout=0: Open MPI's mpirun otherwise waits about 2 s after a rank exits
# non-zero before it ends the job (measured: `mpirun -np 1 false` 2.1 s, 0.2 s with it), and
# the end-to-end tests run many commands that fail on purpose. Ranks still get SIGTERM
# first, then SIGKILL; the tests that signal ranks do so themselves.
# pml ob1: the tests run on one node, where Open MPI selects ob1 (shared memory) anyway; naming
# it skips probing the cm PML's network MTLs (psm, psm2, ofi), measured at 0.2 s of every
# launch (`mpirun -np 4` of an MPI_Init/MPI_Finalize program: 0.65 s, 0.43 s with ob1), and the
# suites launch mpirun several hundred times. Empty MPISTAGE_TEST_OMPI_PML keeps Open MPI's
# own choice; MPICH ignores the variable.
set(MPISTAGE_TEST_OMPI_PML "ob1" CACHE STRING
    "Open MPI point-to-point layer the tests run with (OMPI_MCA_pml; empty: Open MPI chooses)")
set(MPISTAGE_MPI_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1" "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
    "OMPI_MCA_rmaps_base_oversubscribe=1" "OMPI_MCA_odls_base_sigkill_timeout=0"
    ${MPISTAGE_SANITIZER_ENV})
if(MPISTAGE_TEST_OMPI_PML)
  list(APPEND MPISTAGE_MPI_TEST_ENV "OMPI_MCA_pml=${MPISTAGE_TEST_OMPI_PML}")
endif()
