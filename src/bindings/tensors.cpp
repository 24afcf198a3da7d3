#include "bindings/tensors.hpp"

#include "codec/core/error.hpp"

namespace codec::bindings {

void type_error(const std::string& message) { throw nb::type_error(message.c_str()); }

Tensor tensor_of_fields(nb::handle fields, const char* name) {
  const nb::tuple f = nb::borrow<nb::tuple>(fields);
  CODEC_CHECK(nb::len(f) == 6, name, ": expected (data_ptr, code, bits, shape, strides, device)");
  Tensor t;
  t.data_ = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(f[0]));
  t.dtype_ = {nb::cast<std::uint8_t>(f[1]), nb::cast<std::uint8_t>(f[2]), 1};
  const nb::handle shape = f[3], strides = f[4];
  t.ndim_ = int(nb::len(shape));
  CODEC_CHECK(t.ndim_ <= Tensor::kMaxDims, name, " has ", t.ndim_, " dimensions, more than any argument takes");
  for (int i = 0; i < t.ndim_; ++i) {
    t.shape_[i] = nb::cast<std::int64_t>(shape[i]);
    t.strides_[i] = nb::cast<std::int64_t>(strides[i]);
  }
  const int device = nb::cast<int>(f[5]);
  t.device_type_ = device < 0 ? kDlCpu : kDlCuda;
  t.device_id_ = device < 0 ? 0 : device;
  return t;
}

namespace {

std::string where(const Tensor& a) {
  return a.device_type() == kDlCuda ? "cuda:" + std::to_string(a.device_id()) : "cpu";
}

}  // namespace

void check_device(const Tensor& a, const Engine& e, const char* name) {
  const bool on_cpu = a.device_type() == kDlCpu || a.device_type() == kDlCudaHost;
  const bool ok = e.cuda ? a.device_type() == kDlCuda && a.device_id() == e.device : on_cpu;
  CODEC_CHECK(ok, name, " is on ", where(a), ", but the plan runs on ", e.name());
}

Engine engine_of(const Tensor& a) {
  CODEC_CHECK(a.device_type() == kDlCpu || a.device_type() == kDlCudaHost || a.device_type() == kDlCuda,
              "tensors must be on the CPU or a CUDA device, not DLPack device type ", a.device_type());
  return {a.device_type() == kDlCuda, a.device_type() == kDlCuda ? a.device_id() : 0};
}

DType parse_dtype_name(const std::string& name) {
  if (name == "float16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "float32") return DType::f32;
  if (name == "float8_e4m3fn") return DType::e4m3;
  if (name == "float8_e5m2") return DType::e5m2;
  type_error("dtype '" + name + "' is not one CoDec takes (float16, bfloat16, float32; float8_e4m3fn, float8_e5m2 "
             "for a KV cache)");
}

std::string dlpack_name(nb::dlpack::dtype t) {
  if (t.code == kDlFloat8E4m3fn) return "float8_e4m3fn";
  if (t.code == kDlFloat8E5m2) return "float8_e5m2";
  const char* kinds[] = {"int", "uint", "float", "?", "bfloat", "complex", "bool"};
  return std::string(t.code < 7 ? kinds[t.code] : "?") + std::to_string(t.bits);
}

std::string dtype_name(DType d) {
  switch (d) {
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f32: return "float32";
    case DType::e4m3: return "float8_e4m3fn";
    case DType::e5m2: return "float8_e5m2";
  }
  return "?";
}

DType dtype_of(const Tensor& a, DType expected, const char* name) {
  const nb::dlpack::dtype t = a.dtype();
  const auto code = nb::dlpack::dtype_code(t.code);
  std::optional<DType> d;
  if (t.lanes == 1 && t.bits == 16 && code == nb::dlpack::dtype_code::Float) d = DType::f16;
  else if (t.lanes == 1 && t.bits == 16 && code == nb::dlpack::dtype_code::Bfloat) d = DType::bf16;
  else if (t.lanes == 1 && t.bits == 32 && code == nb::dlpack::dtype_code::Float) d = DType::f32;
  else if (t.lanes == 1 && t.bits == 16 && expected == DType::bf16 &&
           (code == nb::dlpack::dtype_code::UInt || code == nb::dlpack::dtype_code::Int))
    d = DType::bf16;  // the bits of bfloat16 values
  else if (t.lanes == 1 && t.bits == 8 && t.code == kDlFloat8E4m3fn) d = DType::e4m3;
  else if (t.lanes == 1 && t.bits == 8 && t.code == kDlFloat8E5m2) d = DType::e5m2;
  else if (t.lanes == 1 && t.bits == 8 && is_fp8(expected) && code == nb::dlpack::dtype_code::UInt)
    d = expected;  // the bits of fp8 values (numpy has no fp8 type)
  if (!d)
    type_error(std::string(name) + " has dtype " + dlpack_name(t) + "; expected " + dtype_name(expected) +
               " (float16, bfloat16 or float32; bfloat16 may come as uint16 bits; an fp8 cache as torch's float8 "
               "or uint8 bits)");
  return *d;
}



void check_ndim(const Tensor& a, std::size_t ndim, const char* name, const char* shape) {
  CODEC_CHECK(a.ndim() == ndim, name, " has ", a.ndim(), " dimensions; expected ", ndim, " ", shape);
}

std::string shape_of(const Tensor& a) {
  std::string s = "(";
  for (std::size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

LseRows lse_of(const std::optional<Tensor>& a, const char* name) {
  if (!a) return {};
  check_ndim(*a, 2, name, "(batch, num_heads)");
  if (a->dtype() != nb::dtype<float>()) type_error(std::string(name) + " has dtype " + dlpack_name(a->dtype()) + "; expected float32");
  return {static_cast<float*>(a->data()), int(a->shape(0)), int(a->shape(1)), a->stride(0), a->stride(1)};
}

PagedKV paged_kv(const Tensor& k, const std::optional<Tensor>& v, bool hnd, DType dtype) {
  const std::size_t elem = dtype_size(dtype);
  const int page_dim = hnd ? 2 : 1, head_dim = hnd ? 1 : 2;  // within (pages, [2,] ..., D)
  PagedKV kv;
  kv.dtype = dtype;
  if (!v) {
    check_ndim(k, 5, "paged_kv_cache", hnd ? "(num_pages, 2, num_kv_heads, page_size, head_dim)"
                                           : "(num_pages, 2, page_size, num_kv_heads, head_dim)");
    CODEC_CHECK(k.shape(1) == 2, "paged_kv_cache has ", k.shape(1), " in dimension 1; expected 2 (K, V)");
    kv.k = k.data();
    kv.v = static_cast<const std::byte*>(k.data()) + k.stride(1) * std::int64_t(elem);
    kv.num_pages = std::int64_t(k.shape(0));
    kv.page_size = int(k.shape(2 + page_dim - 1));
    kv.num_kv_heads = int(k.shape(2 + head_dim - 1));
    kv.head_dim = int(k.shape(4));
    kv.stride_page = k.stride(0);
    kv.stride_token = k.stride(2 + page_dim - 1);
    kv.stride_head = k.stride(2 + head_dim - 1);
    CODEC_CHECK(kv.head_dim <= 1 || k.stride(4) == 1, "paged_kv_cache must be contiguous in its last dimension");
  } else {
    const char* shape = hnd ? "(num_pages, num_kv_heads, page_size, head_dim)" : "(num_pages, page_size, num_kv_heads, head_dim)";
    check_ndim(k, 4, "k_cache", shape);
    check_ndim(*v, 4, "v_cache", shape);
    for (std::size_t i = 0; i < 4; ++i) {
      CODEC_CHECK(k.shape(i) == v->shape(i), "k_cache is ", shape_of(k), " but v_cache is ", shape_of(*v));
      // a dimension of extent 1 is never stepped along: its strides may differ (torch leaves them as they fall)
      CODEC_CHECK(k.shape(i) <= 1 || k.stride(i) == v->stride(i), "k_cache and v_cache must have the same strides (",
                  k.stride(0), ", ", k.stride(1), ", ", k.stride(2), ", ", k.stride(3), " against ", v->stride(0), ", ",
                  v->stride(1), ", ", v->stride(2), ", ", v->stride(3), ")");
    }
    kv.k = k.data();
    kv.v = v->data();
    kv.num_pages = std::int64_t(k.shape(0));
    kv.page_size = int(k.shape(page_dim));
    kv.num_kv_heads = int(k.shape(head_dim));
    kv.head_dim = int(k.shape(3));
    kv.stride_page = k.stride(0);
    kv.stride_token = k.stride(page_dim);
    kv.stride_head = k.stride(head_dim);
    CODEC_CHECK(kv.head_dim <= 1 || k.stride(3) == 1, "k_cache must be contiguous in its last dimension");
  }
  return kv;
}

std::span<std::byte> workspace_of(const Tensor& w, std::size_t align) {
  CODEC_CHECK(w.ndim() == 1 && (w.shape(0) <= 1 || w.stride(0) == 1), "workspace_buffer must be a contiguous 1-D buffer, not ",
              shape_of(w));
  const std::size_t bytes = w.shape(0) * w.itemsize();
  const auto base = reinterpret_cast<std::uintptr_t>(w.data());
  const std::size_t skip = (align - base % align) % align;
  if (skip >= bytes) return {};
  return {reinterpret_cast<std::byte*>(base + skip), bytes - skip};
}

}  // namespace codec::bindings
