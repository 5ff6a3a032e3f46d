#!/usr/bin/env bash
# Installs nodeipc's C/C++ library as distributions ship one: every header
# under include/, libnodeipc.a, libnodeipc.so.X.Y.Z with its SONAME link
# libnodeipc.so.X and its development link libnodeipc.so, two pkg-config
# files and a CMake package config.
#
#   cargo build --release -p nodeipc-capi
#   capi/install.sh --prefix /usr/local            # or any DIR
#
# Options:
#   --prefix DIR       where to install (required)
#   --profile NAME     the cargo profile whose target/NAME/ to take: release
#                      (the default), debug, profiling...
#   --target-dir DIR   the cargo target folder (default: $CARGO_TARGET_DIR,
#                      else the workspace's target/)
#   --strip, --no-strip
#                      remove debug information from the installed copies
#                      (strip --strip-debug; $STRIP names another strip).
#                      The default strips a release install only: cargo's
#                      release profile strips the .so, but an archive keeps
#                      the debug information of Rust's std (its line
#                      tables, ~8 MB) whatever the profile says.
#   --no-rpath         leave the rpath out of nodeipc.pc (a packager's
#                      choice for a prefix the dynamic linker searches)
# Afterwards:
#   cc prog.c $(pkg-config --cflags --libs nodeipc-static)  # the archive
#   cc prog.c $(pkg-config --cflags --libs nodeipc)         # the .so
#   find_package(nodeipc REQUIRED)
#   target_link_libraries(app PRIVATE nodeipc::nodeipc)     # or nodeipc::shared
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="" profile="release" target_dir="${CARGO_TARGET_DIR:-${here}/../target}"
strip_="" rpath=1
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        --profile) profile="$2"; shift 2 ;;
        --target-dir) target_dir="$2"; shift 2 ;;
        --strip) strip_=1; shift ;;
        --no-strip) strip_=0; shift ;;
        --no-rpath) rpath=0; shift ;;
        *) echo "install.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "${prefix}" ] || { echo "install.sh: --prefix DIR is required" >&2; exit 2; }
[ -n "${strip_}" ] || { [ "${profile}" = release ] && strip_=1 || strip_=0; }
lib_dir="${target_dir}/${profile}"
for f in libnodeipc.a libnodeipc.so; do
    [ -f "${lib_dir}/${f}" ] || {
        echo "install.sh: ${lib_dir}/${f} is missing: build it first (cargo build -p nodeipc-capi$([ "${profile}" = debug ] || echo " --profile ${profile}"))" >&2
        exit 1
    }
done
strip_tool="${STRIP:-strip}"
if [ "${strip_}" = 1 ] && ! command -v "${strip_tool}" >/dev/null 2>&1; then
    echo "install.sh: ${strip_tool} is missing (binutils), needed to strip a ${profile} install; or give --no-strip" >&2
    exit 1
fi
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "${here}/../Cargo.toml" | head -n1)"
major="${version%%.*}"
# The .so's SONAME (set by capi/build.rs from the same version).
soname="libnodeipc.so.${major}"
prefix="$(mkdir -p "${prefix}" && cd "${prefix}" && pwd)"

# Every header, in its place under include/ (nodeipc.hpp includes
# nodeipc/channel.hpp; nodeipc/*.hpp include ../nodeipc.hpp).
(cd "${here}/include" && find . -type f -name '*.h*' | sort) | while read -r header; do
    install -D -m 0644 "${here}/include/${header}" "${prefix}/include/${header}"
done

install -d "${prefix}/lib/pkgconfig" "${prefix}/lib/cmake/nodeipc"
install -m 0644 "${lib_dir}/libnodeipc.a" "${prefix}/lib/libnodeipc.a"
install -m 0755 "${lib_dir}/libnodeipc.so" "${prefix}/lib/libnodeipc.so.${version}"
if [ "${strip_}" = 1 ]; then
    "${strip_tool}" --strip-debug "${prefix}/lib/libnodeipc.a" "${prefix}/lib/libnodeipc.so.${version}"
fi
ln -sfn "libnodeipc.so.${version}" "${prefix}/lib/${soname}"
ln -sfn "${soname}" "${prefix}/lib/libnodeipc.so"

# nodeipc.pc: the shared library. Its rpath lets a program run from any
# prefix without LD_LIBRARY_PATH (left out for /usr, which the dynamic
# linker searches, and with --no-rpath).
rpath_flag=""
if [ "${rpath}" = 1 ] && [ "${prefix}" != /usr ]; then
    rpath_flag=" -Wl,-rpath,\${libdir}"
fi
cat > "${prefix}/lib/pkgconfig/nodeipc.pc" <<PC
prefix=${prefix}
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: nodeipc
Description: Shared memory, semaphores, fd passing, rank groups, the execute channel and a monitor client for processes on one Linux node (shared library)
Version: ${version}
Cflags: -I\${includedir}
Libs: -L\${libdir}${rpath_flag} -lnodeipc
PC

# nodeipc-static.pc: the archive by its path (with -lnodeipc the linker
# would take the .so beside it, --static or not), and the system libraries
# it needs, in Libs so that --static is not needed either.
cat > "${prefix}/lib/pkgconfig/nodeipc-static.pc" <<PC
prefix=${prefix}
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: nodeipc-static
Description: nodeipc linked statically (libnodeipc.a)
Version: ${version}
Cflags: -I\${includedir}
Libs: \${libdir}/libnodeipc.a -lpthread -ldl -lm -lrt
PC

cat > "${prefix}/lib/cmake/nodeipc/nodeipc-config.cmake" <<CMAKE
# find_package(nodeipc): the imported targets nodeipc::nodeipc (the static
# library) and nodeipc::shared (libnodeipc.so; CMake gives a program built
# against it an rpath to this prefix's lib/ in the build tree).
get_filename_component(_nodeipc_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET nodeipc::nodeipc)
  add_library(nodeipc::nodeipc STATIC IMPORTED)
  set_target_properties(nodeipc::nodeipc PROPERTIES
    IMPORTED_LOCATION "\${_nodeipc_prefix}/lib/libnodeipc.a"
    INTERFACE_INCLUDE_DIRECTORIES "\${_nodeipc_prefix}/include"
    INTERFACE_LINK_LIBRARIES "pthread;dl;m;rt")
  add_library(nodeipc::shared SHARED IMPORTED)
  set_target_properties(nodeipc::shared PROPERTIES
    IMPORTED_LOCATION "\${_nodeipc_prefix}/lib/libnodeipc.so.${version}"
    IMPORTED_SONAME "${soname}"
    INTERFACE_INCLUDE_DIRECTORIES "\${_nodeipc_prefix}/include")
endif()
unset(_nodeipc_prefix)
CMAKE

cat > "${prefix}/lib/cmake/nodeipc/nodeipc-config-version.cmake" <<CMAKE
set(PACKAGE_VERSION "${version}")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
CMAKE
echo "installed nodeipc ${version} under ${prefix}$([ "${strip_}" = 1 ] && echo ' (debug information stripped)')"
