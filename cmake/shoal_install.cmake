# Install rules, the CMake package, the pkg-config file and the Debian package (cpack -G DEB).
#
#   cmake --install build/release --prefix /opt/shoal
#   # an outside project: find_package(shoal CONFIG REQUIRED) + target_link_libraries(x shoal::kv)
#   cd build/release && cpack -G DEB      # shoal_<version>_amd64.deb and libshoal-dev_<...>.deb
#
# Headers go to include/shoal/<layer>/; both include/ (for <shoal/core/app.hh>) and
# include/shoal/ (so the headers' own "core/future.hh" includes resolve) are on the consumer's
# include path.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(shoal_install_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/shoal)

# Library targets and the names consumers see (shoal::<name>).
set(shoal_exported
  shoal_core:core shoal_net:net shoal_tcp:tcp shoal_rdma:rdma shoal_rdma_services:rdma_services
  shoal_transport:transport shoal_http:http shoal_rpc:rpc shoal_kv_store:kv_store
  shoal_kv_protocol:kv_protocol shoal_kv:kv shoal_kv_messages:kv_messages shoal_kv_client:kv_client)
set(shoal_exported_targets)
foreach(pair IN LISTS shoal_exported)
  string(REPLACE ":" ";" pair "${pair}")
  list(GET pair 0 target)
  list(GET pair 1 export_name)
  # The targets add the source root as a plain include directory; keep it for the build tree
  # only and point installed consumers at the installed headers.
  set_property(TARGET ${target} PROPERTY INTERFACE_INCLUDE_DIRECTORIES
    "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>"
    "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>"
    "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/shoal>")
  set_property(TARGET ${target} PROPERTY EXPORT_NAME ${export_name})
  list(APPEND shoal_exported_targets ${target})
endforeach()

install(TARGETS ${shoal_exported_targets}
  EXPORT shoalTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
# The C ABI: libshoal_c.so.N in the runtime package, its link and header in the dev package.
set_property(TARGET shoal_c PROPERTY EXPORT_NAME c)
install(TARGETS shoal_c
  EXPORT shoalTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
install(FILES capi/include/shoal/shoal_c.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/shoal COMPONENT dev)
# Public headers only: a folder's internal/ headers are the implementation's own.
install(DIRECTORY core net rpc kv
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/shoal COMPONENT dev
  FILES_MATCHING PATTERN "*.hh"
  PATTERN "internal" EXCLUDE)
install(EXPORT shoalTargets
  NAMESPACE shoal::
  DESTINATION ${shoal_install_cmakedir} COMPONENT dev)
configure_package_config_file(cmake/shoalConfig.cmake.in ${CMAKE_BINARY_DIR}/shoalConfig.cmake
  INSTALL_DESTINATION ${shoal_install_cmakedir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/shoalConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/shoalConfig.cmake ${CMAKE_BINARY_DIR}/shoalConfigVersion.cmake
  DESTINATION ${shoal_install_cmakedir} COMPONENT dev)
file(RELATIVE_PATH shoal_pc_to_prefix "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(cmake/shoal.pc.in ${CMAKE_BINARY_DIR}/shoal.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/shoal.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The programs.
install(TARGETS shoal-echo shoal-kv shoal-kv-bench shoal-kv-cli shoal-rpc-bench
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)

# Debian packages: `shoal` (the programs; its dependencies come from dpkg-shlibdeps, so they are
# the Debian 12 library packages the binaries were linked against) and `libshoal-dev` (headers,
# static libraries, CMake package, pkg-config file; depends on Debian's -dev packages).
set(CPACK_PACKAGE_NAME shoal)
set(CPACK_PACKAGE_VENDOR "shoal")
set(CPACK_PACKAGE_CONTACT "shoal developers <shoal@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "shard-per-core C++20 framework with TCP and RDMA stacks")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON) # the programs (CMake strips no static library)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME shoal)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION net)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
# The package holds libshoal_c.so.N: our own maintainer scripts run ldconfig (instead of CPack's),
# skipping it when dpkg installs into another root with chrootless scripts (DPKG_ROOT).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/cmake/deb/postinst ${PROJECT_SOURCE_DIR}/cmake/deb/postrm)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libshoal-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "liburing-dev, libibverbs-dev, librdmacm-dev, libfmt-dev, libboost-context-dev, pkg-config")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CPACK_PACKAGE_CONTACT}")
include(CPack)
