# CPack: `cpack -G DEB` in the build directory makes four packages.
#
#   bulkhead       bulkheadd, its unit, sysusers file, /etc/bulkhead/bulkhead.toml
#                  (a conffile), README; postinst creates the user and group
#   libbulkhead0   libbulkhead.so.0 alone (with a shlibs file), what a
#                  program that links it depends on
#   bulkhead-dev   headers, libbulkhead.so and .a, the CMake package, bulkhead.pc
#   python3-bulkhead  `import bulkhead`: the binding (ctypes), for any
#                  architecture, over libbulkhead0
#
# Depends of bulkhead and libbulkhead0 come from dpkg-shlibdeps (Debian's
# dpkg-dev package); bulkhead-dev depends on the libbulkhead0 of its version.
set(CPACK_PACKAGE_NAME bulkhead)
set(CPACK_PACKAGE_VENDOR "bulkhead")
set(CPACK_PACKAGE_CONTACT "bulkhead maintainers <bulkhead@localhost>")
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPackDeb would put that one line
# before every package's description, making it the synopsis of all four
# (dpkg -l and apt search could not tell them apart). Each component's
# description below starts with its own synopsis; its other lines begin
# without a space, since CPackDeb indents each by one (a line it finds
# already indented gets two, which makes it a verbatim line in apt show).
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Installs with DESTDIR, so that the install rules see the prefix /usr and
# put the unit, sysusers file and config in the system's places.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_COMPONENTS_ALL daemon lib dev python)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Programs and the shared library stripped, as Debian ships them (the build
# directory keeps the debug information).
set(CPACK_STRIP_FILES ON)
# Files outside control/ keep their modes (0644, 0755 for programs).
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(deb ${CMAKE_CURRENT_SOURCE_DIR}/deb)
set(CPACK_DEBIAN_DAEMON_PACKAGE_NAME bulkhead)
set(CPACK_DEBIAN_DAEMON_PACKAGE_SECTION admin)
set(CPACK_COMPONENT_DAEMON_DESCRIPTION "host-wide bulkheads and adaptive concurrency limits: the daemon
bulkheadd learns a safe concurrency limit for every named dependency from
the latencies that the host's processes observe, and publishes the limits
in shared memory, where libbulkhead admits each call against them.")
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_EXTRA "${deb}/conffiles;${deb}/postinst;${deb}/prerm;${deb}/postrm")

set(CPACK_DEBIAN_LIB_PACKAGE_NAME libbulkhead${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# A shlibs file for libbulkhead.so.0 (only this package holds a shared
# object): programs built against it depend on libbulkhead0 (>= the version
# they were built with), which has every symbol version they may use, since
# new functions only ever join in new version nodes.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_COMPONENT_LIB_DESCRIPTION "host-wide bulkheads and adaptive concurrency limits: the client library
libbulkhead admits or rejects each outgoing call against the limit that
bulkheadd publishes, lock-free in shared memory; without a daemon it
admits against a static limit of its own.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME bulkhead-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libbulkhead${PROJECT_VERSION_MAJOR} (= ${PROJECT_VERSION})")
set(CPACK_COMPONENT_DEV_DESCRIPTION "host-wide bulkheads and adaptive concurrency limits: development files
Headers (C: bulkhead/bulkhead.h, C++: bulkhead/client.hpp), the static
library, the CMake package (find_package(bulkhead) gives bulkhead::client)
and bulkhead.pc for pkg-config.")

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-bulkhead)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
# Any libbulkhead0 from this version on: the module calls only functions of
# the version nodes this one has, and a later library keeps them.
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3, libbulkhead${PROJECT_VERSION_MAJOR} (>= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA "${deb}/python/postinst;${deb}/python/prerm")
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "host-wide bulkheads and adaptive concurrency limits: Python binding
import bulkhead: permits as context managers, admitted against the limits
bulkheadd publishes for every process on the host. Pure Python over
libbulkhead's C ABI (ctypes).")

include(CPack)
