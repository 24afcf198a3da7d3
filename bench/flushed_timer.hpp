#pragma once
// Timing for the CUDA bench programs: a launch timed with CUDA events after
// the L2 flush of `codec bench` (a 256 MB read, src/tools/cuda_flush.hpp),
// the median of its runs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/engine/cuda_check.hpp"
#include "cuda_flush.hpp"

namespace codec::bench {

class FlushedTimer {
 public:
  FlushedTimer() {
    CODEC_CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, 0));
    CODEC_CUDA_CHECK(cudaMalloc(&flush_, kFlushBytes));
    CODEC_CUDA_CHECK(cudaMemset(flush_, 0, kFlushBytes));
    CODEC_CUDA_CHECK(cudaMalloc(&sink_, sizeof(std::uint32_t)));
    CODEC_CUDA_CHECK(cudaEventCreate(&start_));
    CODEC_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~FlushedTimer() {  // at the program's end: nothing left to report a failure to
    cudaEventDestroy(stop_);
    cudaEventDestroy(start_);
    cudaFree(sink_);
    cudaFree(flush_);
  }
  FlushedTimer(const FlushedTimer&) = delete;
  FlushedTimer& operator=(const FlushedTimer&) = delete;

  int sms() const { return sms_; }
  // A device word that a timed kernel may write, on a value its data never gives, so that no load is dropped.
  std::uint32_t* sink() const { return sink_; }

  // The median time in µs of `runs` launches after `warmup` untimed ones, each
  // launch (on the default stream) after a flush; a launch's error is reported.
  template <class Launch>
  float median_us(Launch&& launch, int runs, int warmup) {
    std::vector<float> times;
    for (int i = 0; i < warmup + runs; ++i) {
      tools::flush_l2_by_reading(flush_, kFlushBytes, sink_, sms_, nullptr);
      CODEC_CUDA_CHECK(cudaEventRecord(start_));
      launch();
      CODEC_CUDA_CHECK(cudaEventRecord(stop_));
      CODEC_CUDA_CHECK(cudaEventSynchronize(stop_));
      CODEC_CUDA_CHECK(cudaGetLastError());
      float ms = 0;
      CODEC_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      if (i >= warmup) times.push_back(1e3f * ms);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }

 private:
  static constexpr std::size_t kFlushBytes = std::size_t(256) << 20;
  int sms_ = 0;
  void* flush_ = nullptr;
  std::uint32_t* sink_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace codec::bench
