#pragma once
// Every CUDA call and kernel launch is checked: a failure throws codec::CudaError
// with the call, the CUDA error string, file and line. Debug builds (no NDEBUG)
// also synchronise after each launch so a fault names the kernel that caused
// it, except while the stream is being captured into a graph (a synchronise
// there would invalidate the capture).
#include <cuda_runtime_api.h>

#include "codec/core/error.hpp"

#define CODEC_CUDA_CHECK(call)                                                                              \
  do {                                                                                                      \
    const cudaError_t codec_err_ = (call);                                                                  \
    if (codec_err_ != cudaSuccess)                                                                          \
      ::codec::detail::fail<::codec::CudaError>(__FILE__, __LINE__, "CUDA error in ", #call, ": ",              \
                                                cudaGetErrorName(codec_err_), " (", cudaGetErrorString(codec_err_), ")"); \
  } while (0)

namespace codec::cuda {

inline void check_launch(const char* kernel, cudaStream_t stream, const char* file, int line) {
  cudaError_t err = cudaGetLastError();
#ifndef NDEBUG
  if (err == cudaSuccess) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    err = cudaStreamIsCapturing(stream, &capture);
    if (err == cudaSuccess && capture == cudaStreamCaptureStatusNone) err = cudaStreamSynchronize(stream);
  }
#else
  (void)stream;
#endif
  if (err != cudaSuccess)
    detail::fail<CudaError>(file, line, "CUDA error in launch of ", kernel, ": ", cudaGetErrorName(err), " (",
                            cudaGetErrorString(err), ")");
}

}  // namespace codec::cuda

// After kernel<<<...>>>(...): CODEC_CUDA_CHECK_LAUNCH("pac_kernel", stream);
#define CODEC_CUDA_CHECK_LAUNCH(kernel, stream) ::codec::cuda::check_launch(kernel, stream, __FILE__, __LINE__)
