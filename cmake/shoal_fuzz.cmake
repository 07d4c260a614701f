# Fuzz targets (libFuzzer). A target is one source that defines
#   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
# plus the libraries it needs, and a corpus directory kept in the repository. core/small_pool.cc
# is compiled into every target: net::temporary_buffer's heap storage takes small buffers from it.
#
#   shoal_add_fuzzer(NAME <name> SOURCES <files...> [LIBRARIES <targets...>] CORPUS <dir>)
#
# With SHOAL_FUZZ=ON (clang, scripts/run-fuzzers.sh) it builds `<name>` with
# -fsanitize=fuzzer and adds it to the `fuzzers` target. In every other build it links the same
# source with tests/fuzz_replay_main.cc into `<name>_replay` and adds the ctest
# `fuzz_replay.<name>` (label `fuzz`), which feeds every corpus file through the target once: the
# corpus is a regression suite under g++ and the ASan/UBSan build too.
option(SHOAL_FUZZ "Build libFuzzer targets (needs clang)" OFF)

if(SHOAL_FUZZ AND NOT TARGET fuzzers)
  add_custom_target(fuzzers)
endif()

function(shoal_add_fuzzer)
  cmake_parse_arguments(F "" "NAME;CORPUS" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT F_NAME OR NOT F_SOURCES OR NOT F_CORPUS)
    message(FATAL_ERROR "shoal_add_fuzzer: NAME, SOURCES and CORPUS are required")
  endif()
  get_filename_component(corpus "${F_CORPUS}" ABSOLUTE)
  list(APPEND F_SOURCES ${PROJECT_SOURCE_DIR}/core/small_pool.cc)
  if(SHOAL_FUZZ)
    add_executable(${F_NAME} ${F_SOURCES})
    target_compile_options(${F_NAME} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(${F_NAME} PRIVATE ${F_LIBRARIES})
    target_include_directories(${F_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
    add_dependencies(fuzzers ${F_NAME})
    set_property(GLOBAL APPEND PROPERTY SHOAL_FUZZERS "$<TARGET_FILE:${F_NAME}>=${corpus}")
  else()
    add_executable(${F_NAME}_replay ${F_SOURCES} ${PROJECT_SOURCE_DIR}/tests/fuzz_replay_main.cc)
    target_link_libraries(${F_NAME}_replay PRIVATE ${F_LIBRARIES})
    target_include_directories(${F_NAME}_replay PRIVATE ${PROJECT_SOURCE_DIR})
    add_test(NAME fuzz_replay.${F_NAME} COMMAND ${F_NAME}_replay ${corpus})
    set_tests_properties(fuzz_replay.${F_NAME} PROPERTIES LABELS fuzz TIMEOUT 300)
  endif()
endfunction()
