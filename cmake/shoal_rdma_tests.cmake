# Tests that need an RDMA device (ctest label `rdma`), see docs/testing.md.
#
#   shoal_add_rdma_test(<name> COMMAND <target-or-path> [ARGS...] [TIMEOUT <s>]
#                       [WORKING_DIRECTORY <dir>] [ENVIRONMENT VAR=value...] [LABELS <label>...])
#
# Registers ONE ctest test (do not gtest_discover the cases of an rdma binary: each ctest test may
# cost a guest boot) whose command is tests/softroce/rdma-test-wrapper.sh. The wrapper runs the
# test on the host's RDMA device, or inside the Soft-RoCE qemu guest when the host has none, or
# exits 77 (SKIP_RETURN_CODE: reported as skipped, never as passed) when neither is possible.
# The test reads SHOAL_RDMA_DEVICE / SHOAL_RDMA_IP / SHOAL_RDMA_GID_INDEX (tests/softroce/
# rdma_test_env.hh) and must bind/connect rdma_cm to SHOAL_RDMA_IP, never to 127.0.0.1.
# To run all rdma tests in a single guest boot: tests/softroce/run-rdma-tests.sh <build-dir>.
include_guard(GLOBAL)

set(SHOAL_SOFTROCE_DIR "${PROJECT_SOURCE_DIR}/tests/softroce")
set(SHOAL_RDMA_TEST_WRAPPER "${SHOAL_SOFTROCE_DIR}/rdma-test-wrapper.sh")
# 600 s: the ASan/UBSan build runs 2-3x slower than the release build in the guest, and a busy
# CI host slower still; a test binary that takes a minute or two in the release guest needs room.
set(SHOAL_RDMA_TEST_TIMEOUT 600 CACHE STRING
    "Default ctest TIMEOUT in seconds of an rdma-labelled test, guest boot included")
option(SHOAL_ALLOW_MARCH_NATIVE
    "Allow -march=native although rdma tests then die with SIGILL in the Soft-RoCE guest" OFF)

# Trap: the guest's emulated CPU stops at AVX2, so -march=native code (AVX-512 on most CI hosts)
# dies there with SIGILL. Refuse it unless explicitly allowed (e.g. for a benchmark-only build).
set(_shoal_flags "${CMAKE_CXX_FLAGS} ${CMAKE_C_FLAGS}")
if(CMAKE_BUILD_TYPE)
  string(TOUPPER "${CMAKE_BUILD_TYPE}" _shoal_config)
  string(APPEND _shoal_flags " ${CMAKE_CXX_FLAGS_${_shoal_config}}")
endif()
get_directory_property(_shoal_options COMPILE_OPTIONS)
string(APPEND _shoal_flags " ${_shoal_options}")
if(_shoal_flags MATCHES "-march=native|-mcpu=native|-mavx512")
  if(SHOAL_ALLOW_MARCH_NATIVE)
    message(WARNING "shoal: -march=native/AVX-512 flags: rdma tests will die with SIGILL in the Soft-RoCE guest")
  else()
    message(FATAL_ERROR "shoal: the build flags contain -march=native or AVX-512 options. Binaries must also "
                        "run in the Soft-RoCE guest (emulated CPU, up to AVX2), where they would die with "
                        "SIGILL. Remove the flag, or configure with -DSHOAL_ALLOW_MARCH_NATIVE=ON.")
  endif()
endif()
unset(_shoal_flags)
unset(_shoal_options)
unset(_shoal_config)

# Header-only helper for rdma tests: #include "softroce/rdma_test_env.hh".
if(NOT TARGET shoal_rdma_test_env)
  add_library(shoal_rdma_test_env INTERFACE)
  target_include_directories(shoal_rdma_test_env INTERFACE "${PROJECT_SOURCE_DIR}/tests")
endif()

# Fixture of every rdma test: installs missing packages and builds the guest image once, before
# the tests and outside their timeouts (a no-op with a device, in the guest, or once cached).
if(NOT TEST shoal_softroce_prepare)
  add_test(NAME shoal_softroce_prepare COMMAND "${SHOAL_RDMA_TEST_WRAPPER}" --prepare)
  set_tests_properties(shoal_softroce_prepare PROPERTIES
    LABELS "rdma;softroce" FIXTURES_SETUP shoal_softroce SKIP_RETURN_CODE 77 TIMEOUT 1800)
endif()

function(shoal_add_rdma_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "TIMEOUT;WORKING_DIRECTORY" "COMMAND;ENVIRONMENT;LABELS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "shoal_add_rdma_test(${name}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_COMMAND)
    message(FATAL_ERROR "shoal_add_rdma_test(${name}): COMMAND is required")
  endif()
  list(POP_FRONT arg_COMMAND program)
  if(TARGET ${program})
    set(program "$<TARGET_FILE:${program}>")
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT ${SHOAL_RDMA_TEST_TIMEOUT})
  endif()
  if(NOT arg_WORKING_DIRECTORY)
    set(arg_WORKING_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}")
  endif()

  # The guest sees the host's root read-only; the build and source trees are shared read-write.
  add_test(NAME ${name}
    COMMAND "${SHOAL_RDMA_TEST_WRAPPER}" --timeout ${arg_TIMEOUT}
            --share "${PROJECT_BINARY_DIR}" --share "${PROJECT_SOURCE_DIR}" -- ${program} ${arg_COMMAND}
    WORKING_DIRECTORY "${arg_WORKING_DIRECTORY}")
  set(labels rdma ${arg_LABELS})
  # One guest at a time (each emulates 2 vCPUs); native tests still run in parallel.
  set_tests_properties(${name} PROPERTIES
    LABELS "${labels}"
    SKIP_RETURN_CODE 77
    TIMEOUT ${arg_TIMEOUT}
    FIXTURES_REQUIRED shoal_softroce
    RESOURCE_LOCK shoal_rdma
    PROCESSORS 2)
  if(arg_ENVIRONMENT)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${arg_ENVIRONMENT}")
  endif()
endfunction()
