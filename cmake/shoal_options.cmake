# Build options shared by every target of the project.
option(SHOAL_WERROR "Treat warnings as errors" OFF)
option(SHOAL_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(SHOAL_BUILD_TESTS "Build the GoogleTest suites" ON)

# Never -march=native: binaries must also run inside the Soft-RoCE qemu guest, whose CPU model
# stops at AVX2 (AVX-512 code dies there with SIGILL).
add_compile_options(-Wall -Wextra -Wno-missing-field-initializers)
# GCC 12 reports -Wmaybe-uninitialized for the exception_ptr in future_state's union once
# continuations are inlined deep enough (the status byte guards every access; the warning comes
# and goes with inlining decisions). It is a known false-positive family, so it stays a warning
# and never breaks a -Werror build.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-Wno-error=maybe-uninitialized)
endif()
# libshoal_c (capi/) is a shared library made of the static layers, so every object is
# position-independent. -fno-semantic-interposition lets GCC keep inlining and cloning global
# functions as it does without -fPIC (nothing in shoal is meant to be interposed).
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-fno-semantic-interposition)
endif()
if(SHOAL_WERROR)
  add_compile_options(-Werror)
endif()

if(SHOAL_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  # core/fiber.cc tells ASan about every stack switch when this is defined.
  add_compile_definitions(SHOAL_ASAN=1)
endif()
