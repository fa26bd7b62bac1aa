# Where the tests and fuzz seeds find their data (included by tests/ and fuzz/).
include_guard(GLOBAL)
# The shared test data (../shared/data next to the checkout, see its SOURCES.md). A clone
# elsewhere finds it through $MPISTAGE_TEST_DATA_DIR or the workplace's /work/shared/data.
set(_data_candidates "$ENV{MPISTAGE_TEST_DATA_DIR}" "${PROJECT_SOURCE_DIR}/../shared/data"
    "/work/shared/data")
set(_data_found "")
foreach(dir ${_data_candidates})
  if(dir AND EXISTS "${dir}/SOURCES.md" AND _data_found STREQUAL "")
    get_filename_component(_data_found "${dir}" REALPATH)
  endif()
endforeach()
if(_data_found STREQUAL "")
  message(WARNING "mpistage: shared test data not found (tried: ${_data_candidates}); tests that "
                  "read it will fail. Set MPISTAGE_TEST_DATA_DIR.")
  set(_data_found "${PROJECT_SOURCE_DIR}/../shared/data")
endif()
set(MPISTAGE_TEST_DATA_DIR "${_data_found}" CACHE PATH
    "Directory of the shared test data (SOURCES.md)")
message(STATUS "mpistage: test data in ${MPISTAGE_TEST_DATA_DIR}")
set(MPISTAGE_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist" CACHE PATH
    "Directory of Debian's dataset-fashion-mnist")
