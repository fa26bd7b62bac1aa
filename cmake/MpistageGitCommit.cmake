# MPISTAGE_GIT_COMMIT: the commit this source tree is, for `mpistage --version` and the JSON
# report. From git in a checkout; in a release tarball (scripts/make-release.sh) from
# cmake/git-commit.txt, which git archive filled in (export-subst); else "unknown". Read at
# configure time: a checkout reconfigured after new commits reports the new one. Only
# src/cli/version.cpp sees it, so a new commit recompiles one file.
set(MPISTAGE_GIT_COMMIT "unknown")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS "${PROJECT_SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse HEAD
    WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}" OUTPUT_VARIABLE _mpistage_commit
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _mpistage_git_rc)
  if(_mpistage_git_rc EQUAL 0 AND _mpistage_commit MATCHES "^[0-9a-f]+$")
    set(MPISTAGE_GIT_COMMIT "${_mpistage_commit}")
  endif()
endif()
if(MPISTAGE_GIT_COMMIT STREQUAL "unknown" AND EXISTS "${PROJECT_SOURCE_DIR}/cmake/git-commit.txt")
  file(STRINGS "${PROJECT_SOURCE_DIR}/cmake/git-commit.txt" _mpistage_commit LIMIT_COUNT 1)
  if(_mpistage_commit MATCHES "^[0-9a-f]+$")  # not the unexpanded placeholder of a checkout
    set(MPISTAGE_GIT_COMMIT "${_mpistage_commit}")
  endif()
endif()
message(STATUS "mpistage: git commit ${MPISTAGE_GIT_COMMIT}")
