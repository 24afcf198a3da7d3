// Ops: what touches a device or the tensors of a step. Attention of a plan
// (run, run_fields), the merge of two states, the forest manager's page
// copies, and the planner's device side: a plan's upload and the stream
// planner (plans made in stream order, for CUDA graphs whose batch changes).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <cstring>

#include "bindings/plans.hpp"
#include "codec/core/error.hpp"
#include "codec/engine/cpu_engine.hpp"

namespace codec::bindings {

namespace {

constexpr std::size_t kCudaAlign = 256, kCpuAlign = 16;  // workspace alignment each engine needs

} // namespace

void Planner::upload(const PyPlan& p, const Writable& workspace_array, std::uintptr_t stream) {
  const Tensor workspace = tensor_of(workspace_array, "workspace_buffer");
  if (!engine_.cuda) return;
  check_device(workspace, engine_, "workspace_buffer");
  const DeviceScope scope(engine_);
  staging_->upload(p.plan, workspace_of(workspace, kCudaAlign), reinterpret_cast<CudaStream>(stream));
}

void Planner::stream_plan(const Array& block_table_array, const Array& seq_lens_array, bool cumulative,
                          std::int64_t num_pages, const Writable& workspace_array, std::uintptr_t stream_handle,
                          const std::optional<Array>& qo_indptr_array, int window_left, const std::string& mask,
                          const std::optional<Array>& mask_bits_array) {
  const Tensor table = tensor_of(block_table_array, "block_table");
  const Tensor lens = tensor_of(seq_lens_array, "seq_lens");
  const Tensor workspace = tensor_of(workspace_array, "workspace_buffer");
  CODEC_CHECK(engine_.cuda && setup_.options.capacity, "stream_plan needs a CUDA-graph wrapper (use_cuda_graph=True): "
              "its plans are packed at one capacity");
  check_device(table, engine_, "block_table");
  check_device(lens, engine_, "seq_lens");
  check_device(workspace, engine_, "workspace_buffer");
  DeviceQueries queries;  // several query tokens a request, where qo_indptr is given
  queries.window_left = window_left;
  queries.mask = query_mask(mask);
  CODEC_CHECK(qo_indptr_array || queries.mask == QueryMask::causal, "mask '", mask, "' needs qo_indptr");
  const bool bits = queries.mask == QueryMask::custom || queries.mask == QueryMask::draft;
  CODEC_CHECK(bits == mask_bits_array.has_value(), bits ? "a " + mask + " mask needs its packed bits (mask_bits)"
                                                        : "mask_bits given without a custom or draft mask");
  if (mask_bits_array) {
    const Tensor m = tensor_of(*mask_bits_array, "mask_bits");
    check_device(m, engine_, "mask_bits");
    CODEC_CHECK(m.dtype() == nb::dtype<std::uint8_t>(), "mask_bits has dtype ", dlpack_name(m.dtype()),
                "; expected uint8 (packed bits)");
    check_ndim(m, 1, "mask_bits", "(bytes,)");
    const std::int64_t bytes = m.shape(0), most = setup_.workspace.max_mask_bytes;
    CODEC_CHECK(bytes >= 1 && bytes <= most && (bytes == 1 || m.stride(0) == 1), "mask_bits is ", shape_of(m),
                "; expected a contiguous (bytes,) of 1 to the wrapper's max_mask_bytes = ", most, " bytes");
    queries.mask_bits = static_cast<const std::uint8_t*>(m.data());
    queries.mask_bytes = bytes;
  }
  if (qo_indptr_array) {
    const Tensor qo = tensor_of(*qo_indptr_array, "qo_indptr");
    check_device(qo, engine_, "qo_indptr");
    CODEC_CHECK(qo.dtype() == nb::dtype<std::int32_t>(), "qo_indptr has dtype ", dlpack_name(qo.dtype()),
                "; expected int32");
    check_ndim(qo, 1, "qo_indptr", "(batch + 1,)");
    CODEC_CHECK(qo.shape(0) == table.shape(0) + 1 && (qo.shape(0) <= 1 || qo.stride(0) == 1), "qo_indptr is ",
                shape_of(qo), "; expected a contiguous (", table.shape(0) + 1, ",) for the ", table.shape(0),
                " rows of block_table");
    queries.qo_indptr = static_cast<const std::int32_t*>(qo.data());
  }
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
  const DeviceScope scope(engine_);
  const auto stream = reinterpret_cast<CudaStream>(stream_handle);
  if (!stream_)  // an engine may first call this while capturing its step's graph, which the planner allows
    stream_ = std::make_unique<CudaStreamPlanner>(setup_.heads(), setup_.kv_dtype(), setup_.shape.page_size,
                                                  setup_.cost, setup_.options, setup_.workspace.max_batch_size,
                                                  int(cols), setup_.workspace.max_mask_bytes);
  const BlockTable device{static_cast<const std::int32_t*>(table.data()), int(rows), int(cols),
                          std::int64_t(rows > 1 ? table.stride(0) : cols),  // a column view keeps its rows' stride
                          static_cast<const std::int32_t*>(lens.data()), cumulative};
  stream_->enqueue(device, num_pages, workspace_of(workspace, kCudaAlign), stream, queries);
}

std::unique_ptr<PyPlan> Planner::capacity_plan() const {
  CODEC_CHECK(stream_ != nullptr, "capacity_plan: no stream_plan yet");
  return std::make_unique<PyPlan>(PyPlan{stream_->capacity_plan(), engine_, setup_.shape.q_dtype});
}

std::optional<std::string> Planner::take_stream_error() {
  return stream_ ? stream_->take_error() : std::nullopt;
}

nb::dict Planner::stream_stats() const {
  CODEC_CHECK(stream_ != nullptr, "stream_stats: no stream_plan yet");
  nb::dict d = stats_of(stream_->last_stats());
  const CudaStreamPlanner::Totals t = stream_->totals();
  d["plans"] = t.plans;
  d["searches"] = t.searches;
  d["plan_ms_total"] = t.plan_ms;
  d["plan_ms_max"] = t.max_plan_ms;
  return d;
}

namespace {

// A scale of the KV cache (FlashInfer's k_scale / v_scale): float32, one
// value (0-d or 1-D) or one a kv head, in the engine's memory.
KvScale scale_of(const std::optional<Tensor>& t, const Engine& e, const char* name) {
  if (!t) return {};
  check_device(*t, e, name);
  if (t->dtype() != nb::dtype<float>()) type_error(std::string(name) + " has dtype " + dlpack_name(t->dtype()) + "; expected float32");
  CODEC_CHECK(t->ndim() <= 1 && (t->ndim() == 0 || t->shape(0) <= 1 || t->stride(0) == 1), name, " is ", shape_of(*t),
              "; expected a float32 scalar or a contiguous (num_kv_heads,)");
  return {static_cast<const float*>(t->data()), t->ndim() == 0 ? 1 : int(t->shape(0))};
}

void run(const PyPlan& p, const Tensor& q, const Tensor& k, const std::optional<Tensor>& v, bool hnd, const Tensor& out,
         const std::optional<Tensor>& lse, const Tensor& workspace, bool lse_base2, std::uintptr_t stream,
         int num_threads, const std::optional<Tensor>& k_scale, const std::optional<Tensor>& v_scale,
         const std::optional<Tensor>& sinks) {
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
  const DType v_dtype = v ? dtype_of(*v, dtype, "v_cache") : kv_dtype;
  const DType q_dtype = dtype_of(q, p.q_dtype, "q");
  const DType out_dtype = dtype_of(out, p.q_dtype, "out");
  auto wrong = [&](const char* name, DType got, DType want) {
    type_error(std::string(name) + " is " + dtype_name(got) + " but the plan was made for " + dtype_name(want));
  };
  if (kv_dtype != dtype) wrong(v ? "k_cache" : "paged_kv_cache", kv_dtype, dtype);
  if (v_dtype != dtype) wrong("v_cache", v_dtype, dtype);
  if (q_dtype != p.q_dtype) wrong("q", q_dtype, p.q_dtype);
  if (out_dtype != p.q_dtype && !(out_dtype == DType::f32 && !e.cuda)) wrong("out", out_dtype, p.q_dtype);
  PagedKV kv = paged_kv(k, v, hnd, dtype);
  kv.k_scale = scale_of(k_scale, e, "k_scale");
  kv.v_scale = scale_of(v_scale, e, "v_scale");
  AttentionIO io{rows_of<QueryRows>(q, q_dtype, "q"), rows_of<OutputRows>(out, out_dtype, "out"), lse_of(lse, "lse"),
                 lse_base2 ? LseBase::two : LseBase::e};
  if (sinks) {  // one float32 logit a qo head
    check_device(*sinks, e, "sinks");
    if (sinks->dtype() != nb::dtype<float>()) type_error("sinks has dtype " + dlpack_name(sinks->dtype()) + "; expected float32");
    const int hq = plan.heads().num_qo_heads;
    CODEC_CHECK(sinks->ndim() == 1 && sinks->shape(0) == std::size_t(hq) && (hq == 1 || sinks->stride(0) == 1),
                "sinks is ", shape_of(*sinks), "; expected a contiguous (", hq, ",): one a qo head");
    io.sinks = static_cast<const float*>(sinks->data());
  }
  if (e.cuda) {
    const DeviceScope scope(e);
    run_cuda(plan, kv, io, workspace_of(workspace, kCudaAlign), reinterpret_cast<CudaStream>(stream));
  } else {
    const std::span<std::byte> ws = workspace_of(workspace, kCpuAlign);
    nb::gil_scoped_release release;
    run_cpu(plan, kv, io, ws, {num_threads});
  }
}

// run on ndarrays (every framework, through DLPack or the buffer protocol).
void run_arrays(const PyPlan& p, const Array& q, const Array& k, const std::optional<Array>& v, bool hnd,
                const Writable& out, const std::optional<Writable>& lse, const Writable& workspace, bool lse_base2,
                std::uintptr_t stream, int num_threads, const std::optional<Array>& k_scale,
                const std::optional<Array>& v_scale, const std::optional<Array>& sinks) {
  const char* k_name = v ? "k_cache" : "paged_kv_cache";
  run(p, tensor_of(q, "q"), tensor_of(k, k_name), optional_of(v, "v_cache", tensor_of<Array>), hnd,
      tensor_of(out, "out"), optional_of(lse, "lse", tensor_of<Writable>), tensor_of(workspace, "workspace_buffer"),
      lse_base2, stream, num_threads, optional_of(k_scale, "k_scale", tensor_of<Array>),
      optional_of(v_scale, "v_scale", tensor_of<Array>), optional_of(sinks, "sinks", tensor_of<Array>));
}

// run on torch tensors' fields (tensor_of_fields).
void run_fields(const PyPlan& p, nb::handle q, nb::handle k, const std::optional<nb::handle>& v, bool hnd,
                nb::handle out, const std::optional<nb::handle>& lse, nb::handle workspace, bool lse_base2,
                std::uintptr_t stream, int num_threads, const std::optional<nb::handle>& k_scale,
                const std::optional<nb::handle>& v_scale, const std::optional<nb::handle>& sinks) {
  const char* k_name = v ? "k_cache" : "paged_kv_cache";
  run(p, tensor_of_fields(q, "q"), tensor_of_fields(k, k_name), optional_of(v, "v_cache", tensor_of_fields), hnd,
      tensor_of_fields(out, "out"), optional_of(lse, "lse", tensor_of_fields),
      tensor_of_fields(workspace, "workspace_buffer"), lse_base2, stream, num_threads,
      optional_of(k_scale, "k_scale", tensor_of_fields), optional_of(v_scale, "v_scale", tensor_of_fields),
      optional_of(sinks, "sinks", tensor_of_fields));
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
    const DeviceScope scope(e);
    cuda_merge_states(a, la, b, lb, o, lo, base, reinterpret_cast<CudaStream>(stream));
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
  // Copies move bytes: a one-byte cache (torch's float8, or numpy's uint8 bits) is an fp8 one of either format.
  const bool bytes = k.dtype().bits == 8 && k.dtype().lanes == 1 &&
                     (k.dtype().code == kDlFloat8E4m3fn || k.dtype().code == kDlFloat8E5m2 ||
                      k.dtype().code == std::uint8_t(nb::dlpack::dtype_code::UInt));
  const DType d = bytes ? DType::e4m3 : dtype_of(k, DType::bf16, v ? "k_cache" : "paged_kv_cache");
  CODEC_CHECK(!v || (v->dtype().bits == k.dtype().bits && v->dtype().lanes == k.dtype().lanes), "v_cache has dtype ",
              v ? dlpack_name(v->dtype()) : "", " but k_cache ", dlpack_name(k.dtype()), ": copies need one element size");
  const PagedKV kv = paged_kv(k, v, hnd, d);
  if (e.cuda) {
    const DeviceScope scope(e);
    cuda_copy_pages(kv, copies, reinterpret_cast<CudaStream>(stream));
  } else {
    copy_pages_cpu(kv, copies);
  }
}

}  // namespace

void bind_ops(nb::module_& m) {
  m.def("run", &run_arrays, nb::arg("plan"), nb::arg("q"), nb::arg("k"), nb::arg("v").none(), nb::arg("hnd"),
        nb::arg("out"), nb::arg("lse").none(), nb::arg("workspace"), nb::arg("lse_base2"), nb::arg("stream"),
        nb::arg("num_threads"), nb::arg("k_scale").none() = nb::none(), nb::arg("v_scale").none() = nb::none(),
        nb::arg("sinks").none() = nb::none());
  m.def("run_fields", &run_fields, nb::arg("plan"), nb::arg("q"), nb::arg("k"), nb::arg("v").none(),
        nb::arg("hnd"), nb::arg("out"), nb::arg("lse").none(), nb::arg("workspace"), nb::arg("lse_base2"),
        nb::arg("stream"), nb::arg("num_threads"), nb::arg("k_scale").none() = nb::none(),
        nb::arg("v_scale").none() = nb::none(), nb::arg("sinks").none() = nb::none());
  m.def("merge_state", &merge_state, nb::arg("v_a"), nb::arg("s_a"), nb::arg("v_b"), nb::arg("s_b"), nb::arg("out"),
        nb::arg("lse_out"), nb::arg("base2"), nb::arg("stream"));
  m.def("copy_pages", &copy_pages, nb::arg("k"), nb::arg("v").none(), nb::arg("hnd"), nb::arg("copies"),
        nb::arg("stream"));
}

}  // namespace codec::bindings
