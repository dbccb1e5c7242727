# hakmem's CMake package: find_package(hakmem) gives
#   hakmem::hakmem         libhakmem.so
#   hakmem::hakmem-static  libhakmem.a (with -pthread and the dl library)
#   hakmem::hardened       libhakmem_hardened.so
# each with hakmem.h's directory and the link flags of hakmem.pc.
# Installed by `make install` as PREFIX/lib/cmake/hakmem/hakmem-config.cmake.

# The prefix is found from this file's own place (PREFIX/lib/cmake/hakmem),
# so a tree staged with DESTDIR or moved elsewhere works as installed.
get_filename_component(_hakmem_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

foreach(_hakmem_file include/hakmem.h lib/libhakmem.so lib/libhakmem.a lib/libhakmem_hardened.so)
  if(NOT EXISTS "${_hakmem_prefix}/${_hakmem_file}")
    set(hakmem_FOUND FALSE)
    set(hakmem_NOT_FOUND_MESSAGE "${_hakmem_prefix}/${_hakmem_file} is missing (reinstall hakmem)")
    unset(_hakmem_prefix)
    unset(_hakmem_file)
    return()
  endif()
endforeach()

# A second find_package() in the same project must not define them again.
if(NOT TARGET hakmem::hakmem)
  # The shared libraries have no SONAME: IMPORTED_NO_SONAME links them as
  # -lhakmem, so programs record "libhakmem.so" and not this tree's path.
  add_library(hakmem::hakmem SHARED IMPORTED)
  set_target_properties(hakmem::hakmem PROPERTIES
    IMPORTED_LOCATION "${_hakmem_prefix}/lib/libhakmem.so"
    IMPORTED_NO_SONAME TRUE
    INTERFACE_INCLUDE_DIRECTORIES "${_hakmem_prefix}/include"
    INTERFACE_LINK_OPTIONS "-pthread")

  add_library(hakmem::hardened SHARED IMPORTED)
  set_target_properties(hakmem::hardened PROPERTIES
    IMPORTED_LOCATION "${_hakmem_prefix}/lib/libhakmem_hardened.so"
    IMPORTED_NO_SONAME TRUE
    INTERFACE_INCLUDE_DIRECTORIES "${_hakmem_prefix}/include"
    INTERFACE_LINK_OPTIONS "-pthread")

  # Static: the archive comes before libc on the link line, so its malloc
  # wins; it needs the thread and dl libraries after it (Libs.private).
  add_library(hakmem::hakmem-static STATIC IMPORTED)
  set_target_properties(hakmem::hakmem-static PROPERTIES
    IMPORTED_LOCATION "${_hakmem_prefix}/lib/libhakmem.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "C"
    INTERFACE_INCLUDE_DIRECTORIES "${_hakmem_prefix}/include"
    INTERFACE_LINK_OPTIONS "-pthread"
    INTERFACE_LINK_LIBRARIES "${CMAKE_DL_LIBS}")
endif()

set(hakmem_INCLUDE_DIRS "${_hakmem_prefix}/include")
unset(_hakmem_prefix)
unset(_hakmem_file)
