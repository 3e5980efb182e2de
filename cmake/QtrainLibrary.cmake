# qtrain_library(): one folder's library as host objects plus device sources.
#
#   qtrain_library(NAME
#     HOST src...             C++ that needs no CUDA header (compiled once, shared with the emulator)
#     DEVICE src...           .cu files and *_cuda.cpp glue (nvcc / the CUDA toolkit's headers)
#     DEVICE_DISABLED src...  the same entry points, throwing, for builds without the toolkit
#     LINK lib...             public dependencies   PRIVATE_LINK lib...  private ones
#     HOST_OPTIONS opt...     C++ options of this folder (also given to the emulated device sources)
#     NVCC_OPTIONS opt...)    nvcc options of the .cu files
#
# NAME is a static library of NAME_host's objects and the device sources (or their disabled twins).
# The CUDA emulator (tests/cuemu) builds its twin of NAME from the same NAME_host objects and the
# same DEVICE sources compiled by g++ against its stand-in headers: the properties below tell it how.
function(qtrain_library name)
  cmake_parse_arguments(L "" "" "HOST;DEVICE;DEVICE_DISABLED;LINK;PRIVATE_LINK;HOST_OPTIONS;NVCC_OPTIONS" ${ARGN})
  add_library(${name}_host OBJECT ${L_HOST})
  target_link_libraries(${name}_host PUBLIC ${L_LINK} PRIVATE ${L_PRIVATE_LINK})
  target_compile_options(${name}_host PRIVATE ${L_HOST_OPTIONS})

  add_library(${name} STATIC $<TARGET_OBJECTS:${name}_host>)
  target_link_libraries(${name} PUBLIC ${L_LINK} PRIVATE ${L_PRIVATE_LINK})
  if(QTRAIN_HAS_CUDA)
    target_sources(${name} PRIVATE ${L_DEVICE})
    target_compile_options(${name} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:${L_HOST_OPTIONS}>"
      "$<$<COMPILE_LANGUAGE:CUDA>:${L_NVCC_OPTIONS}>")
  else()
    target_sources(${name} PRIVATE ${L_DEVICE_DISABLED})
    target_compile_options(${name} PRIVATE ${L_HOST_OPTIONS})
  endif()

  set(device "")
  foreach(src IN LISTS L_DEVICE)
    get_filename_component(abs ${src} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    list(APPEND device ${abs})
  endforeach()
  set_target_properties(${name} PROPERTIES
    QTRAIN_DEVICE_SOURCES "${device}"
    QTRAIN_LINK "${L_LINK}"
    QTRAIN_PRIVATE_LINK "${L_PRIVATE_LINK}"
    QTRAIN_HOST_OPTIONS "${L_HOST_OPTIONS}")
endfunction()
