// codec._codec: the C++ library to Python. Tensors arrive as nanobind
// ndarrays, which take DLPack (torch, CuPy, JAX) and the buffer protocol
// (numpy) alike; each is checked against what the plan was made for and turned
// into the library's sized views. codec::CudaError becomes RuntimeError, every
// other codec::Error ValueError, a dtype the library does not take TypeError.
// The user-facing API (FlashInfer's wrapper shape, torch custom ops) is
// python/codec; this layer keeps no policy beyond picking the planner setup.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "codec/core/error.hpp"
#include "codec/core/heads.hpp"
#include "codec/cost/cost_model.hpp"
#include "codec/engine/cpu_engine.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "codec/forest/forest.hpp"
#include "codec/forest/forest_manager.hpp"
#include "codec/plan/planner.hpp"

#if CODEC_HAS_CUDA
#include <cuda_runtime_api.h>

#include "codec/engine/cuda_check.hpp"
#include "codec/engine/cuda_stream_planner.hpp"
#endif

namespace nb = nanobind;

namespace codec::bindings {

namespace {

using Array = nb::ndarray<nb::ro>;  // any dtype, shape, device: an input
using Writable = nb::ndarray<>;     // an output: read-only arrays are refused
using HostInts = nb::ndarray<const std::int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;  // page tables

constexpr int kDlCpu = 1, kDlCuda = 2, kDlCudaHost = 3;  // DLPack device types
constexpr std::size_t kCudaAlign = 256, kCpuAlign = 16;  // workspace alignment each engine needs

[[noreturn]] void type_error(const std::string& message) { throw nb::type_error(message.c_str()); }

// ------------------------------------------------------------------ devices

// Where work runs: the CPU, or CUDA device `device`.
struct Engine {
  bool cuda = false;
  int device = 0;
  std::string name() const { return cuda ? "cuda:" + std::to_string(device) : "cpu"; }
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

std::string where(const Tensor& a) {
  return a.device_type() == kDlCuda ? "cuda:" + std::to_string(a.device_id()) : "cpu";
}

void check_device(const Tensor& a, const Engine& e, const char* name) {
  const bool on_cpu = a.device_type() == kDlCpu || a.device_type() == kDlCudaHost;
  const bool ok = e.cuda ? a.device_type() == kDlCuda && a.device_id() == e.device : on_cpu;
  CODEC_CHECK(ok, name, " is on ", where(a), ", but the plan runs on ", e.name());
}

#if CODEC_HAS_CUDA
// Makes `device` current for the scope of a call, as the caller's framework
// may have another one current.
class DeviceGuard {
 public:
  explicit DeviceGuard(const Engine& e) {
    if (!e.cuda) return;
    CODEC_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != e.device) CODEC_CUDA_CHECK(cudaSetDevice(e.device));
    else previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};
#else
struct DeviceGuard {
  explicit DeviceGuard(const Engine& e) {
    CODEC_CHECK(!e.cuda, "this CoDec build has no CUDA engine (it was built without nvcc)");
  }
};
#endif

// ------------------------------------------------------------------ dtypes

DType parse(const std::string& name) {
  if (name == "float16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "float32") return DType::f32;
  type_error("dtype '" + name + "' is not one CoDec takes (float16, bfloat16, float32)");
}

std::string dlpack_name(nb::dlpack::dtype t) {
  const char* kinds[] = {"int", "uint", "float", "?", "bfloat", "complex", "bool"};
  return std::string(t.code < 7 ? kinds[t.code] : "?") + std::to_string(t.bits);
}

std::string dtype_name(DType d) {
  return d == DType::f16 ? "float16" : d == DType::bf16 ? "bfloat16" : "float32";
}

// The dtype of a tensor, expected to be `expected`. numpy has no bfloat16:
// bf16 data may come as uint16 or int16 arrays of its bits.
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
  if (!d)
    type_error(std::string(name) + " has dtype " + dlpack_name(t) + "; expected " + dtype_name(expected) +
               " (float16, bfloat16 or float32; bfloat16 may come as uint16 bits)");
  return *d;
}


// ------------------------------------------------------------------ tensors

void check_ndim(const Tensor& a, std::size_t ndim, const char* name, const char* shape) {
  CODEC_CHECK(a.ndim() == ndim, name, " has ", a.ndim(), " dimensions; expected ", ndim, " ", shape);
}

std::string shape_of(const Tensor& a) {
  std::string s = "(";
  for (std::size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// A [batch, heads, dim] tensor with unit stride along dim.
template <typename Rows>
Rows rows_of(const Tensor& a, DType dtype, const char* name) {
  check_ndim(a, 3, name, "(batch, num_qo_heads, head_dim)");
  CODEC_CHECK(a.shape(2) <= 1 || a.stride(2) == 1, name, " must be contiguous in its last dimension (stride ",
              a.stride(2), ")");
  return {const_cast<void*>(static_cast<const void*>(a.data())), dtype, int(a.shape(0)), int(a.shape(1)),
          int(a.shape(2)), a.stride(0), a.stride(1)};
}

LseRows lse_of(const std::optional<Tensor>& a, const char* name) {
  if (!a) return {};
  check_ndim(*a, 2, name, "(batch, num_heads)");
  if (a->dtype() != nb::dtype<float>()) type_error(std::string(name) + " has dtype " + dlpack_name(a->dtype()) + "; expected float32");
  return {static_cast<float*>(a->data()), int(a->shape(0)), int(a->shape(1)), a->stride(0), a->stride(1)};
}

// A paged KV cache: FlashInfer's single tensor (pages, 2, page, Hkv, D) for
// NHD or (pages, 2, Hkv, page, D) for HND when v is absent; else k and v,
// (pages, page, Hkv, D) or (pages, Hkv, page, D), with equal strides.
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
      CODEC_CHECK(k.stride(i) == v->stride(i), "k_cache and v_cache must have the same strides (", k.stride(0), ", ",
                  k.stride(1), ", ", k.stride(2), ", ", k.stride(3), " against ", v->stride(0), ", ", v->stride(1),
                  ", ", v->stride(2), ", ", v->stride(3), ")");
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

// The workspace as an aligned span: its start rounded up to `align` bytes.
std::span<std::byte> workspace_of(const Tensor& w, std::size_t align) {
  CODEC_CHECK(w.ndim() == 1 && (w.shape(0) <= 1 || w.stride(0) == 1), "workspace_buffer must be a contiguous 1-D buffer, not ",
              shape_of(w));
  const std::size_t bytes = w.shape(0) * w.itemsize();
  const auto base = reinterpret_cast<std::uintptr_t>(w.data());
  const std::size_t skip = (align - base % align) % align;
  if (skip >= bytes) return {};
  return {reinterpret_cast<std::byte*>(base + skip), bytes - skip};
}


template <typename T>
nb::ndarray<nb::numpy, T> numpy_of(std::vector<T> v, std::vector<std::size_t> shape = {}) {
  if (shape.empty()) shape = {v.size()};
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(heap->data(), shape.size(), shape.data(), owner);
}

// ------------------------------------------------------------------ plans

struct PyPlan {
  Plan plan;
  Engine engine;
};

nb::dict stats_of(const PlanStats& s) {
  nb::dict d;
  d["num_requests"] = s.num_requests;
  d["num_nodes"] = s.num_nodes;
  d["num_tasks"] = s.num_tasks;
  d["num_wide_tasks"] = s.num_wide_tasks;
  d["num_blocks"] = s.num_blocks;
  d["num_slots"] = s.num_slots;
  d["max_splits"] = s.max_splits;
  d["merged_requests"] = s.merged_requests;
  d["num_tails"] = s.num_tails;
  d["makespan_us"] = s.makespan_us;
  d["lower_bound_us"] = s.lower_bound_us;
  d["merge_us"] = s.merge_us;
  d["plan_ms"] = s.plan_ms;
  d["kv_tokens_read"] = s.kv_tokens_read;
  d["unique_kv_tokens"] = s.unique_kv_tokens;
  return d;
}

// The planner of one wrapper: engine, heads, dtype, page size, cost model and
// the workspace it fills, fixed; plan() then takes page tables. With
// max_requests > 0 every plan is packed at one capacity (CUDA-graph mode).
class Planner {
 public:
  Planner(const std::string& engine, int device, int num_qo_heads, int num_kv_heads, int head_dim, int page_size,
          const std::string& dtype, float sm_scale, std::size_t workspace_bytes, int max_requests,
          std::int64_t max_page_entries, int num_threads, const std::string& cost_table)
      : engine_{engine == "cuda", device}, heads_{num_qo_heads, num_kv_heads, head_dim, sm_scale},
        dtype_(parse(dtype)), page_size_(page_size), workspace_bytes_(workspace_bytes), max_requests_(max_requests),
        max_page_entries_(max_page_entries) {
    CODEC_CHECK(engine == "cpu" || engine == "cuda", "engine '", engine, "' is not cpu or cuda");
    heads_.validate();
    CODEC_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256, "head_dim ", head_dim,
                " is not supported (64, 128 or 256)");
    CODEC_CHECK(page_size >= 1, "page_size ", page_size, " must be >= 1");
    CODEC_CHECK(sm_scale > 0, "sm_scale ", sm_scale, " must be > 0");
    const int threads = num_threads > 0 ? num_threads : omp_get_max_threads();
    RooflineParams roofline = RooflineParams::cpu(threads);
    if (engine_.cuda) {
      CODEC_CHECK(dtype_ != DType::f32, "the CUDA engine takes float16 or bfloat16, not float32");
#if CODEC_HAS_CUDA
      const DeviceGuard guard(engine_);
      options_ = cuda_planner_options(heads_, dtype_);
      device_name_ = cuda_device_info(heads_, dtype_).name;
      roofline = RooflineParams::h200();
      staging_ = std::make_unique<CudaPlanStaging>();
#else
      const DeviceGuard guard(engine_);  // throws: no CUDA engine in this build
#endif
      roofline.concurrent_blocks = options_.num_blocks;
    } else {
      options_ = cpu_planner_options(threads);
    }
    if (!cost_table.empty()) {
      CostTable table = CostTable::load(cost_table);
      CODEC_CHECK(table.head_dim == head_dim && table.dtype == dtype_, "cost table '", cost_table,
                  "' was measured for head_dim ", table.head_dim, " ", to_string(table.dtype), ", not ", head_dim, " ",
                  to_string(dtype_));
      cost_ = std::make_shared<TableCostModel>(std::move(table));
    } else {
      cost_ = std::make_shared<RooflineCostModel>(roofline, heads_, dtype_);
    }
    if (max_requests_ > 0) {
      CODEC_CHECK(engine_.cuda, "a fixed capacity (use_cuda_graph) needs the CUDA engine");
#if CODEC_HAS_CUDA
      options_.capacity = cuda_plan_capacity(workspace_bytes_, max_requests_, max_page_entries_, heads_, options_);
#endif
    }
  }

  std::unique_ptr<PyPlan> plan(const HostInts& indptr, const HostInts& indices, const HostInts& last_page_len,
                               std::int64_t num_pages) {
    const PageTable table{{indptr.data(), indptr.size()}, {indices.data(), indices.size()},
                          {last_page_len.data(), last_page_len.size()}, page_size_, num_pages};
    nb::gil_scoped_release release;
    table.validate();
    const int batch = table.num_requests();
    const auto entries = std::int64_t(indices.size());
    PlannerOptions options = options_;
    if (options.capacity) {
      CODEC_CHECK(batch <= max_requests_, "the batch has ", batch, " requests, more than max_batch_size ",
                  max_requests_, " of this CUDA-graph wrapper");
      CODEC_CHECK(entries <= max_page_entries_, "kv_indices has ", entries, " entries, more than max_num_pages ",
                  max_page_entries_, " of this CUDA-graph wrapper");
    }
    const Forest forest = derive_forest(table);
    // The slots the workspace holds for this batch; a batch that needs more
    // even unsplit is refused naming the bytes it needs.
    const std::int64_t need = min_slots(forest, heads_);
    std::int64_t slots = 0;
    std::size_t need_bytes = 0;
    if (!engine_.cuda) {
      slots = cpu_workspace_slots(workspace_bytes_, heads_.head_dim);
      need_bytes = Plan::workspace_for(need, heads_.head_dim).bytes + kCpuAlign;
    } else {
#if CODEC_HAS_CUDA
      const int cap_requests = options.capacity ? max_requests_ : batch;
      const std::int64_t cap_entries = options.capacity ? max_page_entries_ : std::max<std::int64_t>(entries, 1);
      need_bytes = cuda_workspace_bytes(PlanCapacity::for_batches(cap_requests, cap_entries, heads_,
                                                                  options.max_tile_rows, options.num_blocks, need,
                                                                  options.wide_blocks(), options.max_tail_tokens()),
                                        heads_.head_dim) + kCudaAlign;
      if (options.capacity) slots = options.capacity->slots;
      else if (need_bytes <= workspace_bytes_)
        slots = cuda_plan_capacity(workspace_bytes_ - kCudaAlign, batch, cap_entries, heads_, options).slots;
#endif
    }
    CODEC_CHECK(need <= slots, "workspace_buffer of ", workspace_bytes_, " bytes is too small for this batch: it needs at least ",
                need_bytes, " bytes (", need, " partial slots of head_dim ", heads_.head_dim, ")");
    options.max_slots = slots;
    return std::make_unique<PyPlan>(PyPlan{make_plan(forest, heads_, dtype_, *cost_, options), engine_});
  }

  // Writes the plan into the workspace on `stream` (CUDA); the CPU engine reads the host plan.
  void upload(const PyPlan& p, const Writable& workspace_array, std::uintptr_t stream) {
    const Tensor workspace = tensor_of(workspace_array, "workspace_buffer");
    if (!engine_.cuda) return;
#if CODEC_HAS_CUDA
    check_device(workspace, engine_, "workspace_buffer");
    const DeviceGuard guard(engine_);
    staging_->upload(p.plan, workspace_of(workspace, kCudaAlign), reinterpret_cast<CudaStream>(stream));
#else
    (void)p, (void)workspace, (void)stream;
#endif
  }

  // Plans a device block table in stream order (CudaStreamPlanner): the
  // plan reaches the workspace when the stream gets there, and a CUDA graph
  // capturing this re-plans each replay's batch; run it with capacity_plan().
  void stream_plan(const Array& block_table_array, const Array& seq_lens_array, bool cumulative,
                   std::int64_t num_pages, const Writable& workspace_array, std::uintptr_t stream_handle) {
    const Tensor table = tensor_of(block_table_array, "block_table");
    const Tensor lens = tensor_of(seq_lens_array, "seq_lens");
    const Tensor workspace = tensor_of(workspace_array, "workspace_buffer");
    CODEC_CHECK(engine_.cuda && options_.capacity, "stream_plan needs a CUDA-graph wrapper (use_cuda_graph=True): "
                "its plans are packed at one capacity");
#if CODEC_HAS_CUDA
    check_device(table, engine_, "block_table");
    check_device(lens, engine_, "seq_lens");
    check_device(workspace, engine_, "workspace_buffer");
    check_ndim(table, 2, "block_table", "(batch, max_blocks)");
    CODEC_CHECK(table.dtype() == nb::dtype<std::int32_t>(), "block_table has dtype ", dlpack_name(table.dtype()),
                "; expected int32");
    CODEC_CHECK(lens.dtype() == nb::dtype<std::int32_t>(), "seq_lens has dtype ", dlpack_name(lens.dtype()),
                "; expected int32");
    CODEC_CHECK(table.shape(1) <= 1 || table.stride(1) == 1, "block_table must be contiguous along its rows (stride ",
                table.stride(1), ")");
    CODEC_CHECK(table.shape(1) >= 1, "block_table has no columns: ", shape_of(table));
    const auto rows = std::size_t(table.shape(0)), cols = std::size_t(table.shape(1));
    check_ndim(lens, 1, "seq_lens", cumulative ? "(batch + 1,)" : "(batch,)");
    CODEC_CHECK(lens.shape(0) == rows + (cumulative ? 1 : 0) && (lens.shape(0) <= 1 || lens.stride(0) == 1),
                cumulative ? "cu_seq_lens" : "seq_lens", " is ", shape_of(lens), "; expected a contiguous (",
                rows + (cumulative ? 1 : 0), ",) for the ", rows, " rows of block_table");
    const DeviceGuard guard(engine_);
    const auto stream = reinterpret_cast<CudaStream>(stream_handle);
    if (!stream_)  // an engine may first call this while capturing its step's graph, which the planner allows
      stream_ = std::make_unique<CudaStreamPlanner>(heads_, dtype_, page_size_, cost_, options_, max_requests_,
                                                    int(cols));
    const BlockTable device{static_cast<const std::int32_t*>(table.data()), int(rows), int(cols),
                            std::int64_t(rows > 1 ? table.stride(0) : cols),  // a column view keeps its rows' stride
                            static_cast<const std::int32_t*>(lens.data()), cumulative};
    stream_->enqueue(device, num_pages, workspace_of(workspace, kCudaAlign), stream);
#else
    (void)table, (void)lens, (void)workspace, (void)num_pages, (void)stream_handle;
#endif
  }

  // The plan run takes for every stream_plan (its sizes are the capacity's).
  std::unique_ptr<PyPlan> capacity_plan() const {
    CODEC_CHECK(has_stream(), "capacity_plan: no stream_plan yet");
#if CODEC_HAS_CUDA
    return std::make_unique<PyPlan>(PyPlan{stream_->capacity_plan(), engine_});
#else
    return {};
#endif
  }

  // The first error a stream plan met since the last call (its batch ran as the empty plan), or None.
  std::optional<std::string> take_stream_error() {
#if CODEC_HAS_CUDA
    if (stream_) return stream_->take_error();
#endif
    return std::nullopt;
  }

  nb::dict stream_stats() const {
    CODEC_CHECK(has_stream(), "stream_stats: no stream_plan yet");
#if CODEC_HAS_CUDA
    nb::dict d = stats_of(stream_->last_stats());
    const CudaStreamPlanner::Totals t = stream_->totals();
    d["plans"] = t.plans;
    d["searches"] = t.searches;
    d["plan_ms_total"] = t.plan_ms;
    d["plan_ms_max"] = t.max_plan_ms;
    return d;
#else
    return {};
#endif
  }

  bool has_stream() const {
#if CODEC_HAS_CUDA
    return stream_ != nullptr;
#else
    return false;
#endif
  }

  std::string describe() const {
    std::string s = engine_.name() + ", " + std::to_string(options_.num_blocks) + " blocks, " + cost_->describe();
    if (options_.capacity)
      s += ", capacity " + std::to_string(options_.capacity->requests) + " requests / " +
           std::to_string(options_.capacity->slots) + " slots";
    return s;
  }
  int num_blocks() const { return options_.num_blocks; }
  std::int64_t capacity_slots() const { return options_.capacity ? options_.capacity->slots : 0; }
  const std::string& device_name() const { return device_name_; }

 private:
  Engine engine_;
  HeadConfig heads_;
  DType dtype_;
  int page_size_;
  std::size_t workspace_bytes_;
  int max_requests_;
  std::int64_t max_page_entries_;
  PlannerOptions options_;
  std::shared_ptr<const CostModel> cost_;
  std::string device_name_;
#if CODEC_HAS_CUDA
  std::unique_ptr<CudaPlanStaging> staging_;
  std::unique_ptr<CudaStreamPlanner> stream_;  // made by the first stream_plan
#endif
};

// ------------------------------------------------------------------ run

void run(const PyPlan& p, const Tensor& q, const Tensor& k, const std::optional<Tensor>& v, bool hnd, const Tensor& out,
         const std::optional<Tensor>& lse, const Tensor& workspace, bool lse_base2, std::uintptr_t stream,
         int num_threads) {
  const Plan& plan = p.plan;
  const Engine& e = p.engine;
  check_device(q, e, "q");
  check_device(k, e, v ? "k_cache" : "paged_kv_cache");
  if (v) check_device(*v, e, "v_cache");
  check_device(out, e, "out");
  if (lse) check_device(*lse, e, "lse");
  check_device(workspace, e, "workspace_buffer");
  const DType dtype = plan.dtype();
  const DType kv_dtype = dtype_of(k, dtype, v ? "k_cache" : "paged_kv_cache");
  if (v) dtype_of(*v, dtype, "v_cache");
  const DType q_dtype = dtype_of(q, dtype, "q");
  const DType out_dtype = dtype_of(out, dtype, "out");
  auto wrong = [&](const char* name, DType got) {
    type_error(std::string(name) + " is " + dtype_name(got) + " but the plan was made for " + dtype_name(dtype));
  };
  if (kv_dtype != dtype) wrong(v ? "k_cache" : "paged_kv_cache", kv_dtype);
  if (q_dtype != dtype) wrong("q", q_dtype);
  if (out_dtype != dtype && !(out_dtype == DType::f32 && !e.cuda)) wrong("out", out_dtype);
  const PagedKV kv = paged_kv(k, v, hnd, dtype);
  AttentionIO io{rows_of<QueryRows>(q, q_dtype, "q"), rows_of<OutputRows>(out, out_dtype, "out"), lse_of(lse, "lse"),
                 lse_base2 ? LseBase::two : LseBase::e};
  if (e.cuda) {
#if CODEC_HAS_CUDA
    const DeviceGuard guard(e);
    run_cuda(plan, kv, io, workspace_of(workspace, kCudaAlign), reinterpret_cast<CudaStream>(stream));
#endif
  } else {
    const std::span<std::byte> ws = workspace_of(workspace, kCpuAlign);
    nb::gil_scoped_release release;
    run_cpu(plan, kv, io, ws, {num_threads});
  }
}

template <typename T, typename F>
std::optional<Tensor> optional_of(const std::optional<T>& a, const char* name, F&& convert) {
  return a ? std::optional<Tensor>(convert(*a, name)) : std::nullopt;
}

// run on ndarrays (every framework, through DLPack or the buffer protocol).
void run_arrays(const PyPlan& p, const Array& q, const Array& k, const std::optional<Array>& v, bool hnd,
                const Writable& out, const std::optional<Writable>& lse, const Writable& workspace, bool lse_base2,
                std::uintptr_t stream, int num_threads) {
  const char* k_name = v ? "k_cache" : "paged_kv_cache";
  run(p, tensor_of(q, "q"), tensor_of(k, k_name), optional_of(v, "v_cache", tensor_of<Array>), hnd,
      tensor_of(out, "out"), optional_of(lse, "lse", tensor_of<Writable>), tensor_of(workspace, "workspace_buffer"),
      lse_base2, stream, num_threads);
}

// run on torch tensors' fields (tensor_of_fields).
void run_fields(const PyPlan& p, nb::handle q, nb::handle k, const std::optional<nb::handle>& v, bool hnd,
                nb::handle out, const std::optional<nb::handle>& lse, nb::handle workspace, bool lse_base2,
                std::uintptr_t stream, int num_threads) {
  const char* k_name = v ? "k_cache" : "paged_kv_cache";
  run(p, tensor_of_fields(q, "q"), tensor_of_fields(k, k_name), optional_of(v, "v_cache", tensor_of_fields), hnd,
      tensor_of_fields(out, "out"), optional_of(lse, "lse", tensor_of_fields),
      tensor_of_fields(workspace, "workspace_buffer"), lse_base2, stream, num_threads);
}

Engine engine_of(const Tensor& a) {
  CODEC_CHECK(a.device_type() == kDlCpu || a.device_type() == kDlCudaHost || a.device_type() == kDlCuda,
              "tensors must be on the CPU or a CUDA device, not DLPack device type ", a.device_type());
  return {a.device_type() == kDlCuda, a.device_type() == kDlCuda ? a.device_id() : 0};
}

void merge_state(const Array& v_a, const Array& s_a, const Array& v_b, const Array& s_b, const Writable& v_out,
                 const Writable& s_out, bool base2, std::uintptr_t stream) {
  const Tensor o_a = tensor_of(v_a, "v_a"), lse_a = tensor_of(s_a, "s_a"), o_b = tensor_of(v_b, "v_b"),
               lse_b = tensor_of(s_b, "s_b"), out = tensor_of(v_out, "out"), lse_out = tensor_of(s_out, "lse_out");
  const Engine e = engine_of(o_a);
  check_device(lse_a, e, "lse_a");
  check_device(o_b, e, "v_b");
  check_device(lse_b, e, "lse_b");
  check_device(out, e, "out");
  check_device(lse_out, e, "lse_out");
  const DType d = dtype_of(o_a, DType::f32, "v_a");
  const QueryRows a = rows_of<QueryRows>(o_a, d, "v_a");
  const QueryRows b = rows_of<QueryRows>(o_b, dtype_of(o_b, d, "v_b"), "v_b");
  const OutputRows o = rows_of<OutputRows>(out, dtype_of(out, d, "out"), "out");
  const LseRows la = lse_of(lse_a, "s_a"), lb = lse_of(lse_b, "s_b"), lo = lse_of(lse_out, "lse_out");
  const LseBase base = base2 ? LseBase::two : LseBase::e;
  if (e.cuda) {
#if CODEC_HAS_CUDA
    const DeviceGuard guard(e);
    cuda_merge_states(a, la, b, lb, o, lo, base, reinterpret_cast<CudaStream>(stream));
#else
    (void)stream;
#endif
  } else {
    merge_states_cpu(a, la, b, lb, o, lo, base);
  }
}

void copy_pages(const Array& k_array, const std::optional<Array>& v_array, bool hnd, const HostInts& flat_copies,
                std::uintptr_t stream) {
  const Tensor k = tensor_of(k_array, v_array ? "k_cache" : "paged_kv_cache");
  const std::optional<Tensor> v = optional_of(v_array, "v_cache", tensor_of<Array>);
  const Engine e = engine_of(k);
  if (v) check_device(*v, e, "v_cache");
  CODEC_CHECK(flat_copies.size() % 3 == 0, "copies must be (n, 3) int32 rows (src, dst, num_tokens)");
  std::vector<PageCopy> copies(flat_copies.size() / 3);
  std::memcpy(copies.data(), flat_copies.data(), copies.size() * sizeof(PageCopy));
  static_assert(sizeof(PageCopy) == 3 * sizeof(std::int32_t));
  const DType d = dtype_of(k, DType::bf16, v ? "k_cache" : "paged_kv_cache");
  const PagedKV kv = paged_kv(k, v, hnd, d);
  if (e.cuda) {
#if CODEC_HAS_CUDA
    const DeviceGuard guard(e);
    cuda_copy_pages(kv, copies, reinterpret_cast<CudaStream>(stream));
#else
    (void)stream;
#endif
  } else {
    copy_pages_cpu(kv, copies);
  }
}

// ------------------------------------------------------------------ forests

nb::dict forest_dict(const Forest& f) {
  std::vector<std::int32_t> parent, tokens, page_begin, pages_n, req_begin, reqs_n;
  for (const ForestNode& n : f.nodes) {
    parent.push_back(n.parent);
    tokens.push_back(n.num_tokens);
    page_begin.push_back(std::int32_t(n.page_begin));
    pages_n.push_back(n.num_pages);
    req_begin.push_back(std::int32_t(n.req_begin));
    reqs_n.push_back(n.num_reqs);
  }
  nb::dict d;
  d["page_size"] = f.page_size;
  d["parent"] = numpy_of(std::move(parent));
  d["num_tokens"] = numpy_of(std::move(tokens));
  d["page_begin"] = numpy_of(std::move(page_begin));
  d["num_pages"] = numpy_of(std::move(pages_n));
  d["req_begin"] = numpy_of(std::move(req_begin));
  d["num_reqs"] = numpy_of(std::move(reqs_n));
  d["pages"] = numpy_of(std::vector<std::int32_t>(f.pages));
  d["reqs"] = numpy_of(std::vector<std::int32_t>(f.reqs));
  d["request_node"] = numpy_of(std::vector<std::int32_t>(f.request_node));
  return d;
}

nb::dict derive(const HostInts& indptr, const HostInts& indices, const HostInts& last_page_len, int page_size) {
  std::int64_t num_pages = 1;
  for (std::size_t i = 0; i < indices.size(); ++i) num_pages = std::max<std::int64_t>(num_pages, indices.data()[i] + 1);
  const PageTable table{{indptr.data(), indptr.size()}, {indices.data(), indices.size()},
                        {last_page_len.data(), last_page_len.size()}, page_size, num_pages};
  return forest_dict(derive_forest(table));
}

using Effects = std::tuple<nb::ndarray<nb::numpy, std::int32_t>, std::int64_t, std::int64_t>;
Effects effects_of(KvEffects e) {
  std::vector<std::int32_t> flat;
  for (const PageCopy& c : e.copies) flat.insert(flat.end(), {c.src, c.dst, c.num_tokens});
  const std::size_t n = e.copies.size();
  return {numpy_of(std::move(flat), {n, 3}), e.write_begin, e.write_end};
}

}  // namespace

}  // namespace codec::bindings

NB_MODULE(_codec, m) {
  using namespace codec;
  using namespace codec::bindings;
  m.doc() = "CoDec's C++ core; the API is the codec package.";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const CudaError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.attr("has_cuda") = bool(CODEC_HAS_CUDA);
  m.def("cuda_device_count", [] {
#if CODEC_HAS_CUDA
    return cuda_device_count();
#else
    return 0;
#endif
  });
  m.def("cuda_device_name", [](int device) {
#if CODEC_HAS_CUDA
    cudaDeviceProp prop{};
    CODEC_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    return std::string(prop.name);
#else
    (void)device;
    return std::string();
#endif
  }, nb::arg("device"));
  m.def("cuda_built_architectures", [] {
#if CODEC_HAS_CUDA
    return std::string(cuda_built_architectures());
#else
    return std::string();
#endif
  });

  nb::class_<PyPlan>(m, "Plan")
      .def_prop_ro("num_requests", [](const PyPlan& p) { return p.plan.num_requests(); })
      .def_prop_ro("covered_requests", [](const PyPlan& p) { return p.plan.view().num_requests; })
      .def_prop_ro("dtype", [](const PyPlan& p) { return dtype_name(p.plan.dtype()); })
      .def_prop_ro("page_size", [](const PyPlan& p) { return p.plan.page_size(); })
      .def_prop_ro("num_qo_heads", [](const PyPlan& p) { return p.plan.heads().num_qo_heads; })
      .def_prop_ro("num_kv_heads", [](const PyPlan& p) { return p.plan.heads().num_kv_heads; })
      .def_prop_ro("head_dim", [](const PyPlan& p) { return p.plan.heads().head_dim; })
      .def_prop_ro("max_page", [](const PyPlan& p) { return p.plan.extent().max_page; })
      .def_prop_ro("engine", [](const PyPlan& p) { return p.engine.name(); })
      .def_prop_ro("stats", [](const PyPlan& p) { return stats_of(p.plan.stats()); });

  nb::class_<Planner>(m, "Planner")
      .def(nb::init<const std::string&, int, int, int, int, int, const std::string&, float, std::size_t, int,
                    std::int64_t, int, const std::string&>(),
           nb::arg("engine"), nb::arg("device"), nb::arg("num_qo_heads"), nb::arg("num_kv_heads"), nb::arg("head_dim"),
           nb::arg("page_size"), nb::arg("dtype"), nb::arg("sm_scale"), nb::arg("workspace_bytes"),
           nb::arg("max_requests"), nb::arg("max_page_entries"), nb::arg("num_threads"), nb::arg("cost_table"))
      .def("plan", &Planner::plan, nb::arg("indptr"), nb::arg("indices"), nb::arg("last_page_len"),
           nb::arg("num_pages"))
      .def("upload", &Planner::upload, nb::arg("plan"), nb::arg("workspace"), nb::arg("stream"))
      .def("stream_plan", &Planner::stream_plan, nb::arg("block_table"), nb::arg("seq_lens"), nb::arg("cumulative"),
           nb::arg("num_pages"), nb::arg("workspace"), nb::arg("stream"))
      .def("capacity_plan", &Planner::capacity_plan)
      .def("take_stream_error", &Planner::take_stream_error)
      .def("stream_stats", &Planner::stream_stats)
      .def_prop_ro("num_blocks", &Planner::num_blocks)
      .def_prop_ro("capacity_slots", &Planner::capacity_slots)
      .def_prop_ro("device_name", &Planner::device_name)
      .def("__repr__", [](const Planner& p) { return "<codec._codec.Planner " + p.describe() + ">"; });

  m.def("run", &run_arrays, nb::arg("plan"), nb::arg("q"), nb::arg("k"), nb::arg("v").none(), nb::arg("hnd"),
        nb::arg("out"), nb::arg("lse").none(), nb::arg("workspace"), nb::arg("lse_base2"), nb::arg("stream"),
        nb::arg("num_threads"));
  m.def("run_fields", &run_fields, nb::arg("plan"), nb::arg("q"), nb::arg("k"), nb::arg("v").none(),
        nb::arg("hnd"), nb::arg("out"), nb::arg("lse").none(), nb::arg("workspace"), nb::arg("lse_base2"),
        nb::arg("stream"), nb::arg("num_threads"));
  m.def("merge_state", &merge_state, nb::arg("v_a"), nb::arg("s_a"), nb::arg("v_b"), nb::arg("s_b"), nb::arg("out"),
        nb::arg("lse_out"), nb::arg("base2"), nb::arg("stream"));
  m.def("copy_pages", &copy_pages, nb::arg("k"), nb::arg("v").none(), nb::arg("hnd"), nb::arg("copies"),
        nb::arg("stream"));
  m.def("tensor_parallel_slice", [](int num_qo_heads, int num_kv_heads, int tp_size, int rank) {
    const HeadSlice s = tensor_parallel_slice({num_qo_heads, num_kv_heads, 0, 0.f}, tp_size, rank);
    return std::make_tuple(s.heads.num_qo_heads, s.heads.num_kv_heads, s.qo_begin, s.kv_begin);
  }, nb::arg("num_qo_heads"), nb::arg("num_kv_heads"), nb::arg("tp_size"), nb::arg("rank"));
  m.def("derive_forest", &derive, nb::arg("indptr"), nb::arg("indices"), nb::arg("last_page_len"),
        nb::arg("page_size"));

  nb::class_<ForestManager>(m, "ForestManager")
      .def(nb::init<int, std::int64_t>(), nb::arg("page_size"), nb::arg("num_pages"))
      .def("insert",
           [](ForestManager& f, const HostInts& tokens) {
             KvEffects e;
             const int id = f.insert({tokens.data(), tokens.size()}, &e);
             return std::tuple_cat(std::tuple<int>(id), effects_of(std::move(e)));
           },
           nb::arg("tokens"))
      .def("fork", &ForestManager::fork, nb::arg("request"))
      .def("append",
           [](ForestManager& f, int id, std::int32_t token) {
             KvEffects e;
             f.append(id, token, &e);
             return effects_of(std::move(e));
           },
           nb::arg("request"), nb::arg("token"))
      .def("release", &ForestManager::release, nb::arg("request"))
      .def("alive", &ForestManager::alive, nb::arg("request"))
      .def("pages", [](const ForestManager& f, int id) {
             const auto p = f.pages(id);
             return numpy_of(std::vector<std::int32_t>(p.begin(), p.end()));
           }, nb::arg("request"))
      .def("tokens", [](const ForestManager& f, int id) {
             const auto t = f.tokens(id);
             return numpy_of(std::vector<std::int32_t>(t.begin(), t.end()));
           }, nb::arg("request"))
      .def("live_requests", &ForestManager::live_requests)
      .def("ref_count", &ForestManager::ref_count, nb::arg("page"))
      .def_prop_ro("page_size", &ForestManager::page_size)
      .def_prop_ro("num_pages", &ForestManager::num_pages)
      .def_prop_ro("free_pages", &ForestManager::free_pages)
      .def("page_tables",
           [](const ForestManager& f) {
             ForestManager::Tables t = f.page_tables();
             return std::make_tuple(numpy_of(std::move(t.ids)), numpy_of(std::move(t.indptr)),
                                    numpy_of(std::move(t.indices)), numpy_of(std::move(t.last_page_len)));
           })
      .def("forest", [](const ForestManager& f) { return forest_dict(f.forest()); });
}
