# Compiler flags shared by every qtrain target, applied through one interface target.
add_library(qtrain_flags INTERFACE)
if(NOT QTRAIN_ARCH STREQUAL "none")
  include(CheckCXXCompilerFlag)
  string(MAKE_C_IDENTIFIER "QTRAIN_MARCH_${QTRAIN_ARCH}" march_ok)
  check_cxx_compiler_flag("-march=${QTRAIN_ARCH}" ${march_ok})
  if(NOT ${march_ok})
    message(FATAL_ERROR "QTRAIN_ARCH=${QTRAIN_ARCH}: ${CMAKE_CXX_COMPILER} does not accept -march=${QTRAIN_ARCH}; "
                        "use native, an -march value it knows (e.g. x86-64-v3, x86-64-v4, znver3) or none")
  endif()
  target_compile_options(qtrain_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=${QTRAIN_ARCH}>)
endif()
target_compile_options(qtrain_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
# Every kernel flushes subnormals (--ftz=true), as every CPU thread does (framework/core/float_env.h):
# the quantizers and optimizers stay bit-identical to their CPU loops, the emulator (tests/cuemu) runs
# every kernel so, and no kernel pays for subnormal arithmetic. docs/design.md, "Arithmetic".
target_compile_options(qtrain_flags INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:--ftz=true>)
# Every program flushes subnormals on its main thread from its start (framework/core/float_env_at_load.cpp):
# executables pull that object out of qtrain_core by asking for its symbol; shared objects (the Python
# module) never hold it.
target_link_options(qtrain_flags INTERFACE
  "$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:LINKER:--undefined=qtrain_flush_subnormals_at_load>")
# fmt 9 switches its constexpr support off when it sees __NVCC__, which leaves its consteval
# format-string check calling non-constexpr helpers; nvcc 12+ handles them, so turn it back on (format
# strings stay checked at compile time in .cu files too).
target_compile_definitions(qtrain_flags INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:FMT_USE_CONSTEXPR=1>)
# We use the C API of MPI; keep the deprecated C++ bindings out of every translation unit.
target_compile_definitions(qtrain_flags INTERFACE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
if(QTRAIN_ASAN)
  target_compile_options(qtrain_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address -fno-omit-frame-pointer>)
  target_link_options(qtrain_flags INTERFACE -fsanitize=address)
endif()
if(QTRAIN_FUZZ)
  target_link_libraries(qtrain_flags INTERFACE qtrain_fuzz_instrumentation)
endif()
if(QTRAIN_HAS_CUDA)
  target_compile_definitions(qtrain_flags INTERFACE QTRAIN_HAS_CUDA=1)
else()
  target_compile_definitions(qtrain_flags INTERFACE QTRAIN_HAS_CUDA=0)
endif()
