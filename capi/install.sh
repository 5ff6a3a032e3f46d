#!/usr/bin/env bash
# Installs nodeipc's C/C++ library: headers, libnodeipc.a and libnodeipc.so,
# a pkg-config file and a CMake package config.
#
#   cargo build --release -p nodeipc-capi
#   capi/install.sh --prefix /usr/local            # or any DIR
#
# Options: --prefix DIR (required), --profile release|debug (default
# release), --target-dir DIR (default: the workspace's target/).
# Afterwards:
#   cc prog.c $(pkg-config --cflags --libs --static nodeipc)
#   find_package(nodeipc REQUIRED) ... target_link_libraries(app nodeipc::nodeipc)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="" profile="release" target_dir="${CARGO_TARGET_DIR:-${here}/../target}"
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        --profile) profile="$2"; shift 2 ;;
        --target-dir) target_dir="$2"; shift 2 ;;
        *) echo "install.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "${prefix}" ] || { echo "install.sh: --prefix DIR is required" >&2; exit 2; }
lib_dir="${target_dir}/${profile}"
for f in libnodeipc.a libnodeipc.so; do
    [ -f "${lib_dir}/${f}" ] || {
        echo "install.sh: ${lib_dir}/${f} is missing: build it first (cargo build [--release] -p nodeipc-capi)" >&2
        exit 1
    }
done
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "${here}/../Cargo.toml" | head -n1)"
prefix="$(mkdir -p "${prefix}" && cd "${prefix}" && pwd)"

# Every header, in its place under include/ (nodeipc.hpp includes
# nodeipc/channel.hpp; nodeipc/*.hpp include ../nodeipc.hpp).
(cd "${here}/include" && find . -type f -name '*.h*' | sort) | while read -r header; do
    install -D -m 0644 "${here}/include/${header}" "${prefix}/include/${header}"
done
install -d "${prefix}/lib/pkgconfig" "${prefix}/lib/cmake/nodeipc"
install -m 0644 "${lib_dir}/libnodeipc.a" "${prefix}/lib/"
install -m 0755 "${lib_dir}/libnodeipc.so" "${prefix}/lib/"

cat > "${prefix}/lib/pkgconfig/nodeipc.pc" <<PC
prefix=${prefix}
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: nodeipc
Description: Shared memory, semaphores, fd passing, rank groups and a monitor client for processes on one Linux node
Version: ${version}
Cflags: -I\${includedir}
Libs: -L\${libdir} -lnodeipc
Libs.private: -lpthread -ldl -lm -lrt
PC

cat > "${prefix}/lib/cmake/nodeipc/nodeipc-config.cmake" <<CMAKE
# find_package(nodeipc): the imported target nodeipc::nodeipc (the static
# library; nodeipc::shared for libnodeipc.so).
get_filename_component(_nodeipc_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET nodeipc::nodeipc)
  add_library(nodeipc::nodeipc STATIC IMPORTED)
  set_target_properties(nodeipc::nodeipc PROPERTIES
    IMPORTED_LOCATION "\${_nodeipc_prefix}/lib/libnodeipc.a"
    INTERFACE_INCLUDE_DIRECTORIES "\${_nodeipc_prefix}/include"
    INTERFACE_LINK_LIBRARIES "pthread;dl;m;rt")
  add_library(nodeipc::shared SHARED IMPORTED)
  set_target_properties(nodeipc::shared PROPERTIES
    IMPORTED_LOCATION "\${_nodeipc_prefix}/lib/libnodeipc.so"
    IMPORTED_NO_SONAME TRUE
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
echo "installed nodeipc ${version} under ${prefix}"
