# CUDA tests and benchmarks, included by CMakeLists.txt when -DSNN_CUDA=ON.
# The library's CUDA sources (src/backend/cuda/*.cu) are the object library snn_cuda, part of
# libsnn (CMakeLists.txt).

# The top-level warning flags are meant for the C compiler; hand them to nvcc's host compiler
# instead of nvcc itself (nvcc rejects -Wall / -Wextra as its own options).
get_target_property(_snn_opts snn_cuda COMPILE_OPTIONS)
if(_snn_opts)
  set(_snn_fixed "")
  foreach(_o ${_snn_opts})
    if(_o MATCHES "^-W" OR _o MATCHES "^-f")
      list(APPEND _snn_fixed "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${_o}>")
    else()
      list(APPEND _snn_fixed "${_o}")
    endif()
  endforeach()
  set_target_properties(snn_cuda PROPERTIES COMPILE_OPTIONS "${_snn_fixed}")
endif()

# The architecture of the library's CUDA objects (CMakeLists.txt sets the default, 90).
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
set_target_properties(snn_cuda PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")

set(SNN_CUDA_FLAGS -std=c++17 -O3 --expt-relaxed-constexpr -Xcompiler=-Wall,-Wno-unused-parameter,-Wno-unknown-pragmas)
target_compile_options(snn_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${SNN_CUDA_FLAGS}>)

# GPU tests: exit 77 (skipped) when no GPU is usable, so a CUDA build without a GPU still passes.
# They, the emulation test and the benchmarks link libsnn.so (every symbol of the library is
# visible there, internal ones included): one copy of the CUDA kernels for two dozen programs
# instead of one each, which is what lets scripts/gpu-pack carry all of them to a GPU machine.
file(GLOB _snn_cuda_tests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/cuda/test_cuda_*.c)
foreach(_src ${_snn_cuda_tests})
  get_filename_component(t ${_src} NAME_WE)
  add_executable(${t} ${_src} ${PROJECT_SOURCE_DIR}/tests/harness.c)
  target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests
                                          ${PROJECT_SOURCE_DIR}/tests/cuda)
  target_link_libraries(${t} PRIVATE snn_shared ${SNN_DEPS})
  add_test(NAME ${t} COMMAND ${t} WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()

# Host emulation of kernel bodies (the neurons; the convolution, pooling and BatchNorm walks):
# needs nvcc, runs without a GPU.
foreach(t test_cuda_emul test_cuda_emul_conv)
  add_executable(${t} ${PROJECT_SOURCE_DIR}/tests/cuda/${t}.cu ${PROJECT_SOURCE_DIR}/tests/harness.c)
  target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests
                                          ${PROJECT_SOURCE_DIR}/tests/cuda)
  target_compile_options(${t} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++17 -Xcompiler=-Wno-unknown-pragmas>)
  target_link_libraries(${t} PRIVATE snn_shared ${SNN_DEPS})
  add_test(NAME ${t} COMMAND ${t} WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endforeach()

# Benchmarks (not tests): bench/cuda/*_bench.cu
foreach(b neuron_bench fcsnn_bench linear_bench)
  add_executable(snn_${b} ${PROJECT_SOURCE_DIR}/bench/cuda/${b}.cu)
  target_include_directories(snn_${b} PRIVATE ${PROJECT_SOURCE_DIR}/bench/cuda)
  target_compile_options(snn_${b} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++17>)
  target_link_libraries(snn_${b} PRIVATE snn_shared ${SNN_DEPS})
endforeach()

# The engine against the runner on FC-SNN (C, public API only): bench/cuda/engine_bench.c
add_executable(snn_engine_bench ${PROJECT_SOURCE_DIR}/bench/cuda/engine_bench.c)
target_link_libraries(snn_engine_bench PRIVATE snn_shared ${SNN_DEPS})

# Whole-model GPU throughput (C, over the public API): bench/cuda/model_bench.c
add_executable(snn_model_bench ${PROJECT_SOURCE_DIR}/bench/cuda/model_bench.c)
target_include_directories(snn_model_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(snn_model_bench PRIVATE snn_shared ${SNN_DEPS} CUDA::cudart)
