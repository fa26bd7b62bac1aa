# Installation: headers, libraries, the CLI, the CMake package (components core, torch, cuda)
# and a pkg-config file for the core.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(MPISTAGE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mpistage)

# The installed CLI (and libmpistage_torch) find libmpistage.so beside them without
# LD_LIBRARY_PATH.
file(RELATIVE_PATH _mpistage_bin_to_lib "/${CMAKE_INSTALL_BINDIR}" "/${CMAKE_INSTALL_LIBDIR}")
set_target_properties(mpistage_cli PROPERTIES INSTALL_RPATH "$ORIGIN/${_mpistage_bin_to_lib}")
if(MPISTAGE_HAVE_TORCH)
  set_target_properties(mpistage_torch PROPERTIES INSTALL_RPATH "$ORIGIN")
endif()

install(TARGETS mpistage mpistage_cli EXPORT mpistageTargets)
install(DIRECTORY include/mpistage DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/include/mpistage/config.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mpistage)
install(EXPORT mpistageTargets NAMESPACE mpistage:: DESTINATION ${MPISTAGE_CMAKE_DIR})
# mpistage::torch has its own targets file, loaded only for COMPONENTS torch: a consumer
# without libtorch never sees the name `torch` it links.
if(MPISTAGE_HAVE_TORCH)
  install(TARGETS mpistage_torch EXPORT mpistageTorchTargets)
  install(EXPORT mpistageTorchTargets NAMESPACE mpistage:: DESTINATION ${MPISTAGE_CMAKE_DIR})
endif()

configure_package_config_file(cmake/mpistageConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/mpistageConfig.cmake
  INSTALL_DESTINATION ${MPISTAGE_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/mpistageConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/mpistageConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/mpistageConfigVersion.cmake
  DESTINATION ${MPISTAGE_CMAKE_DIR})

# pkg-config: the core only (libtorch has no pkg-config file). MPI comes from the compiler
# wrapper (mpicxx), as is usual for MPI codes. A static build lists its private dependencies.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(MPISTAGE_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(MPISTAGE_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(MPISTAGE_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(MPISTAGE_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(MPISTAGE_PC_REQUIRES_PRIVATE "")
set(MPISTAGE_PC_LIBS_PRIVATE "-lpthread")
if(NOT BUILD_SHARED_LIBS)
  set(MPISTAGE_PC_REQUIRES_PRIVATE "zlib libisal sqlite3 libxxhash")
  foreach(lib ${HDF5_C_LIBRARIES})
    if(lib MATCHES "^(.*)/lib([^/]+)\\.(so|a)$")
      string(APPEND MPISTAGE_PC_LIBS_PRIVATE " -L${CMAKE_MATCH_1} -l${CMAKE_MATCH_2}")
    endif()
  endforeach()
  if(MPISTAGE_HAVE_CUDA)
    string(APPEND MPISTAGE_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart")
  endif()
endif()
# The prefix is substituted at install time, so `cmake --install --prefix <p>` gets <p>.
set(MPISTAGE_PC_PREFIX "@MPISTAGE_PC_PREFIX@")
configure_file(cmake/mpistage.pc.in ${CMAKE_CURRENT_BINARY_DIR}/mpistage.pc.in.configured @ONLY)
install(CODE "
  set(_pc_in \"${CMAKE_CURRENT_BINARY_DIR}/mpistage.pc.in.configured\")
  file(READ \"\${_pc_in}\" _pc)
  string(REPLACE \"@MPISTAGE_PC_PREFIX@\" \"\${CMAKE_INSTALL_PREFIX}\" _pc \"\${_pc}\")
  file(WRITE \"${CMAKE_CURRENT_BINARY_DIR}/mpistage.pc\" \"\${_pc}\")
")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/mpistage.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})

# Documentation and examples (share/doc/mpistage, share/mpistage/examples): the README and
# docs/ as they are in the repository; the example programs with a CMake project that builds
# them against the installed package, and the install test's consumer projects (what
# `spack test run mpistage` builds and runs at 2 ranks).
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} FILES_MATCHING PATTERN "*.md")
set(MPISTAGE_EXAMPLES_DIR ${CMAKE_INSTALL_DATADIR}/mpistage/examples)
install(FILES examples/first_batch.cpp examples/train_loop.cpp examples/global_shuffle.cpp
  examples/train_fashion_mnist.cpp DESTINATION ${MPISTAGE_EXAMPLES_DIR})
install(FILES examples/installed/CMakeLists.txt DESTINATION ${MPISTAGE_EXAMPLES_DIR})
install(FILES tests/install/staging_check.hpp DESTINATION ${MPISTAGE_EXAMPLES_DIR})
install(DIRECTORY tests/install/consumer DESTINATION ${MPISTAGE_EXAMPLES_DIR})
if(MPISTAGE_HAVE_TORCH)
  install(DIRECTORY tests/install/consumer_torch DESTINATION ${MPISTAGE_EXAMPLES_DIR})
endif()
