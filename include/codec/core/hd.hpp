#pragma once
// Functions shared by host code and CUDA kernels are marked CODEC_HD.
#if defined(__CUDACC__)
#define CODEC_HD __host__ __device__ __forceinline__
#else
#define CODEC_HD inline
#endif
