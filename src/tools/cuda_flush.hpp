#pragma once
// L2 flushes between timed runs (cuda_bench.cpp).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace codec::tools {

// Reads `bytes` of `buffer` on `stream` with 4 blocks per SM of a device of
// `sms` SMs; `sink` is a device word it may write.
void flush_l2_by_reading(const void* buffer, std::size_t bytes, std::uint32_t* sink, int sms, cudaStream_t stream);

}  // namespace codec::tools
