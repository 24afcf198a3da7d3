// The L2 flush of `codec bench --flush read`: a read of a buffer several times
// the L2, which leaves it holding clean lines, as a decode step's attention
// finds it after the QKV projection has streamed its weights. A memset flush
// (--flush write) leaves it full of dirty lines, whose write-back then shares
// the memory bus with the timed run's reads.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "codec/engine/cuda_check.hpp"
#include "cuda_flush.hpp"

namespace codec::tools {

namespace {

// The sink is written only if the words' xor is a value the zeroed buffer
// never gives, so the compiler cannot drop the loads.
__global__ void read_all(const uint4* __restrict__ src, std::size_t n, std::uint32_t* sink) {
  std::uint32_t acc = 0;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const uint4 x = src[i];
    acc ^= x.x ^ x.y ^ x.z ^ x.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

}  // namespace

void flush_l2_by_reading(const void* buffer, std::size_t bytes, std::uint32_t* sink, int sms, cudaStream_t stream) {
  read_all<<<4 * sms, 512, 0, stream>>>(static_cast<const uint4*>(buffer), bytes / sizeof(uint4), sink);
  CODEC_CUDA_CHECK_LAUNCH("read_all (L2 flush)", stream);
}

}  // namespace codec::tools
