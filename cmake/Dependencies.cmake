# Third-party dependencies, all from Debian 12 packages (tools/install_deps.sh installs them), plus the
# CUDA toolkit under /usr/local/cuda when present.

find_package(MPI REQUIRED COMPONENTS C)
find_package(yaml-cpp REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
find_package(Catch2 REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(ZLIB REQUIRED)
# libjpeg-turbo (libjpeg62-turbo-dev) decodes the imagefolder dataset's JPEG files.
find_package(JPEG REQUIRED)
# FFTW (single precision) for the speech features in data/.
find_package(PkgConfig REQUIRED)
pkg_check_modules(FFTW3F REQUIRED IMPORTED_TARGET fftw3f)

# OpenBLAS: link it by name (not the generic libblas alternative) so that openblas_set_num_threads and
# openblas_get_corename are available; tools and the trainer use them.
find_library(OPENBLAS_LIBRARY NAMES openblas REQUIRED)
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas REQUIRED
          PATHS /usr/include/x86_64-linux-gnu /usr/include)
add_library(qtrain_openblas INTERFACE)
target_link_libraries(qtrain_openblas INTERFACE ${OPENBLAS_LIBRARY})
target_include_directories(qtrain_openblas SYSTEM INTERFACE ${OPENBLAS_INCLUDE_DIR})

# CUDA: AUTO turns on when nvcc is found.
set(QTRAIN_HAS_CUDA OFF)
if(NOT QTRAIN_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(QTRAIN_HAS_CUDA ON)
  elseif(QTRAIN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "QTRAIN_CUDA=ON but no CUDA compiler was found (looked for nvcc)")
  endif()
endif()

if(QTRAIN_HAS_CUDA)
  # sm_80 and sm_90 machine code plus compute_90 PTX for newer GPUs.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
  endif()
  enable_language(CUDA)
  # Kernels include the same C++20 core headers as the CPU code. CMake 3.25 knows no C++20 flag for
  # nvcc (CUDA_STANDARD 20 fails with "does not support this"), although nvcc has -std=c++20 since
  # CUDA 12: tell CMake the flag once, for every target.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  find_library(CUDNN_LIBRARY NAMES cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  find_library(NCCL_LIBRARY NAMES nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  # cuBLAS is opened on the first call, not linked: loading it costs every process 0.37 s and 210 MB
  # before main, GPU or not (framework/core/cublas_on_demand.cpp).
  add_library(qtrain_cublas_on_demand STATIC ${PROJECT_SOURCE_DIR}/framework/core/cublas_on_demand.cpp)
  target_link_libraries(qtrain_cublas_on_demand PRIVATE qtrain_flags CUDA::toolkit ${CMAKE_DL_LIBS})
  add_library(qtrain_cuda_libs INTERFACE)
  target_link_libraries(qtrain_cuda_libs INTERFACE CUDA::cudart qtrain_cublas_on_demand CUDA::curand ${CUDNN_LIBRARY})
  target_include_directories(qtrain_cuda_libs SYSTEM INTERFACE ${CUDNN_INCLUDE_DIR})
  # NCCL apart: only the transports (comm/) link it (tools/check_includes.py).
  add_library(qtrain_nccl INTERFACE)
  target_link_libraries(qtrain_nccl INTERFACE qtrain_cuda_libs ${NCCL_LIBRARY})
  target_include_directories(qtrain_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
  message(STATUS "qtrain: CUDA paths ON (${CMAKE_CUDA_COMPILER}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  add_library(qtrain_cuda_libs INTERFACE)
  add_library(qtrain_nccl INTERFACE)
  message(STATUS "qtrain: CUDA paths OFF")
endif()
