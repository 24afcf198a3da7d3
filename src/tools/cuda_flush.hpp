#pragma once
// L2 flushes between timed runs (cuda_bench.cpp).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace codec::tools {

// Reads `bytes` of `buffer` on `stream`; `sink` is a device word it may write.
void flush_l2_by_reading(const void* buffer, std::size_t bytes, std::uint32_t* sink, cudaStream_t stream);

}  // namespace codec::tools
