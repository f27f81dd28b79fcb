# find_package(tsdf): libtsdf, the C client of tsdfd, as the imported
# targets tsdf::tsdf_client (libtsdf.so) and tsdf::tsdf_client_static
# (libtsdf.a).
#
# The static library hands its dependencies to whoever links it, so this
# file finds them the way the build did: nng through its CMake package,
# msgpack-c, libpng and libzstd through pkg-config (the imported targets
# PkgConfig::tsdf_msgpack, _png and _zstd), and Threads. A missing one
# makes find_package(tsdf) report tsdf as not found, saying which.
include(CMakeFindDependencyMacro)
find_dependency(nng CONFIG)
find_dependency(Threads)
find_dependency(PkgConfig)

foreach(_tsdf_dep msgpack:msgpack png:libpng zstd:libzstd)
  string(REPLACE ":" ";" _tsdf_dep "${_tsdf_dep}")
  list(GET _tsdf_dep 0 _tsdf_name)
  list(GET _tsdf_dep 1 _tsdf_module)
  if(NOT TARGET PkgConfig::tsdf_${_tsdf_name})
    pkg_check_modules(tsdf_${_tsdf_name} QUIET IMPORTED_TARGET ${_tsdf_module})
    if(NOT TARGET PkgConfig::tsdf_${_tsdf_name})
      set(tsdf_FOUND FALSE)
      set(tsdf_NOT_FOUND_MESSAGE
        "tsdf: pkg-config module ${_tsdf_module} not found (libtsdf.a needs it)")
      return()
    endif()
  endif()
endforeach()
unset(_tsdf_dep)
unset(_tsdf_name)
unset(_tsdf_module)

include(${CMAKE_CURRENT_LIST_DIR}/tsdfClientTargets.cmake)
