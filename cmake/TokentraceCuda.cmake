# Turns on CUDA the same way for every part that compiles device code (cuda/, bench/, and the
# standalone cuda/torch/ project): the given architectures unless the caller set
# CMAKE_CUDA_ARCHITECTURES, the C++ compiler as nvcc's host compiler, C++17.
macro(tokentrace_enable_cuda default_architectures)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${default_architectures})
  endif()
  if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
    set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
endmacro()
