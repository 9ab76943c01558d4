# liblpo_probe.so: the CUPTI tracer that `lpo trace` injects into a program (CUDA_INJECTION64_PATH and
# NVTX_INJECTION64_PATH) and that lpo's engine loads in-process (include/lpo/probe.h). Built next to the
# lpo binary, which finds it there. Needs the CUDA toolkit's CUPTI; NVTX3 is header-only.
set(LPO_HAVE_PROBE OFF)
if(LPO_HAVE_CUDA AND TARGET CUDA::cupti)
  add_library(lpo_probe SHARED ${CMAKE_SOURCE_DIR}/src/probe/capture/probe_core.c
              ${CMAKE_SOURCE_DIR}/src/probe/capture/probe_cupti.c ${CMAKE_SOURCE_DIR}/src/probe/capture/probe_nvtx.c
              ${CMAKE_SOURCE_DIR}/src/probe/trace_raw.c ${CMAKE_SOURCE_DIR}/src/probe/trace_clock.c)
  target_include_directories(lpo_probe PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include
                                               ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_options(lpo_probe PRIVATE ${LPO_C_WARNINGS} -fvisibility=hidden)
  target_compile_definitions(lpo_probe PRIVATE _GNU_SOURCE)
  target_link_libraries(lpo_probe PRIVATE CUDA::cupti Threads::Threads ${CMAKE_DL_LIBS})
  set_target_properties(lpo_probe PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR} C_VISIBILITY_PRESET hidden)
  add_dependencies(lpo lpo_probe)
  set(LPO_HAVE_PROBE ON)
else()
  message(STATUS "lpo: no CUPTI; `lpo trace` will not be able to trace programs")
endif()

# The PyTorch shim of `lpo trace --torch-ops`: a sitecustomize lpo puts first on the traced program's
# PYTHONPATH (lpo finds it next to itself, in lpo_torch/).
configure_file(${CMAKE_SOURCE_DIR}/src/probe/torch/sitecustomize.py ${CMAKE_BINARY_DIR}/lpo_torch/sitecustomize.py
               COPYONLY)
