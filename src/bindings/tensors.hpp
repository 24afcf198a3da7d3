#pragma once
// Tensors as the bindings take them: nanobind ndarrays (DLPack: torch, CuPy,
// JAX; the buffer protocol: numpy) or a torch tensor's fields, checked for
// device, dtype and shape and turned into the library's sized views. Each
// message names the argument as the Python API does.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codec/core/dtype.hpp"
#include "codec/engine/attention_io.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "codec/core/error.hpp"
#include "codec/forest/page_table.hpp"

namespace codec::bindings {

namespace nb = nanobind;

using Array = nb::ndarray<nb::ro>;  // any dtype, shape, device: an input
using Writable = nb::ndarray<>;     // an output: read-only arrays are refused
using HostInts = nb::ndarray<const std::int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;  // page tables
using HostBytes = nb::ndarray<const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;  // packed masks

constexpr int kDlCpu = 1, kDlCuda = 2, kDlCudaHost = 3;  // DLPack device types
constexpr int kDlFloat8E4m3fn = 10, kDlFloat8E5m2 = 12;  // DLPack 1.1 dtype codes (torch's float8 dtypes)

[[noreturn]] void type_error(const std::string& message);

// Where work runs: the CPU, or CUDA device `device`.
struct Engine {
  bool cuda = false;
  int device = 0;
  std::string name() const { return cuda ? "cuda:" + std::to_string(device) : "cpu"; }
};

// Makes the engine's CUDA device current for a call's scope, as the caller's
// framework may have another one current (nothing for the CPU).
class DeviceScope {
 public:
  explicit DeviceScope(const Engine& e) {
    if (e.cuda) scope_.emplace(e.device);
  }

 private:
  std::optional<CudaDeviceScope> scope_;
};

// A tensor as the binding reads it: from an ndarray (DLPack or the buffer
// protocol: numpy, CuPy, torch, JAX) or from a torch tensor's fields, which
// torch.Tensor.__dlpack__, a Python method, would take microseconds to export.
struct Tensor {
  static constexpr int kMaxDims = 6;
  void* data_ = nullptr;
  nb::dlpack::dtype dtype_{};
  int ndim_ = 0;
  std::int64_t shape_[kMaxDims] = {};
  std::int64_t strides_[kMaxDims] = {};
  int device_type_ = kDlCpu;
  int device_id_ = 0;

  void* data() const { return data_; }
  nb::dlpack::dtype dtype() const { return dtype_; }
  std::size_t ndim() const { return std::size_t(ndim_); }
  std::size_t shape(std::size_t i) const { return std::size_t(shape_[i]); }
  std::int64_t stride(std::size_t i) const { return strides_[i]; }
  std::size_t itemsize() const { return (std::size_t(dtype_.bits) + 7) / 8; }
  int device_type() const { return device_type_; }
  int device_id() const { return device_id_; }
};

template <typename A>
Tensor tensor_of(const A& a, const char* name) {
  CODEC_CHECK(a.ndim() <= std::size_t(Tensor::kMaxDims), name, " has ", a.ndim(), " dimensions, more than any argument takes");
  Tensor t;
  t.data_ = const_cast<void*>(a.data());
  t.dtype_ = a.dtype();
  t.ndim_ = int(a.ndim());
  for (std::size_t i = 0; i < a.ndim(); ++i) t.shape_[i] = std::int64_t(a.shape(i)), t.strides_[i] = a.stride(i);
  t.device_type_ = a.device_type();
  t.device_id_ = a.device_id();
  return t;
}

// (data_ptr, dtype code, dtype bits, shape, strides, device index or -1 for
// the CPU), as python/codec/_torch_ops.py reads them off a torch tensor.
Tensor tensor_of_fields(nb::handle fields, const char* name);

template <typename T, typename F>
std::optional<Tensor> optional_of(const std::optional<T>& a, const char* name, F&& convert) {
  return a ? std::optional<Tensor>(convert(*a, name)) : std::nullopt;
}

// The engine of a tensor's device.
Engine engine_of(const Tensor& a);
void check_device(const Tensor& a, const Engine& e, const char* name);

// dtypes by their Python names (float16, bfloat16, float32)
DType parse_dtype_name(const std::string& name);
std::string dtype_name(DType d);
std::string dlpack_name(nb::dlpack::dtype t);
// The dtype of a tensor, expected to be `expected`. numpy has no bfloat16:
// bf16 data may come as uint16 or int16 arrays of its bits.
DType dtype_of(const Tensor& a, DType expected, const char* name);

void check_ndim(const Tensor& a, std::size_t ndim, const char* name, const char* shape);
std::string shape_of(const Tensor& a);

// A [batch, heads, dim] tensor with unit stride along dim.
template <typename Rows>
Rows rows_of(const Tensor& a, DType dtype, const char* name) {
  check_ndim(a, 3, name, "(batch, num_qo_heads, head_dim)");
  CODEC_CHECK(a.shape(2) <= 1 || a.stride(2) == 1, name, " must be contiguous in its last dimension (stride ",
              a.stride(2), ")");
  return {const_cast<void*>(static_cast<const void*>(a.data())), dtype, int(a.shape(0)), int(a.shape(1)),
          int(a.shape(2)), a.stride(0), a.stride(1)};
}
LseRows lse_of(const std::optional<Tensor>& a, const char* name);
// A paged KV cache: FlashInfer's single tensor (pages, 2, page, Hkv, D) for
// NHD or (pages, 2, Hkv, page, D) for HND when v is absent; else k and v,
// (pages, page, Hkv, D) or (pages, Hkv, page, D), with equal strides.
PagedKV paged_kv(const Tensor& k, const std::optional<Tensor>& v, bool hnd, DType dtype);
// The workspace as an aligned span: its start rounded up to `align` bytes.
std::span<std::byte> workspace_of(const Tensor& w, std::size_t align);

// A numpy array that owns `v`.
template <typename T>
nb::ndarray<nb::numpy, T> numpy_of(std::vector<T> v, std::vector<std::size_t> shape = {}) {
  if (shape.empty()) shape = {v.size()};
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(heap->data(), shape.size(), shape.data(), owner);
}

}  // namespace codec::bindings
