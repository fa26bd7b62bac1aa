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
      ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endforeach()
endfunction()
