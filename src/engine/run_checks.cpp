#include "engine/run_checks.hpp"

#include <algorithm>
#include <utility>

#include "codec/core/error.hpp"

namespace codec {

namespace {

// Whether a tensor of the given extents and element strides (any order) maps
// distinct indices to distinct elements: sorted by stride, each dimension must
// step past everything the smaller ones span.
bool disjoint(std::initializer_list<std::pair<std::int64_t, std::int64_t>> dims) {  // (extent, stride)
  std::vector<std::pair<std::int64_t, std::int64_t>> d;
  for (const auto& [n, s] : dims)
    if (n > 1) d.push_back({s, n});
  std::sort(d.begin(), d.end());
  std::int64_t span = 1;  // elements the smaller dimensions cover
  for (const auto& [stride, n] : d) {
    if (stride < span) return false;
    span = stride * (n - 1) + span;
  }
  return true;
}

}  // namespace

void check_plan_and_kv(const Plan& plan, const PagedKV& kv, const char* engine) {
  CODEC_CHECK(!plan.bytes().empty(), engine, ": the plan is empty (default-constructed); make one with make_plan");
  const HeadConfig& h = plan.heads();
  CODEC_CHECK(kv.dtype == plan.dtype(), engine, ": kv.dtype ", to_string(kv.dtype), " but the plan was made for ",
              to_string(plan.dtype()));
  CODEC_CHECK(kv.num_kv_heads == h.num_kv_heads, engine, ": kv.num_kv_heads ", kv.num_kv_heads,
              " but the plan was made for ", h.num_kv_heads);
  CODEC_CHECK(kv.head_dim == h.head_dim, engine, ": kv.head_dim ", kv.head_dim, " but the plan was made for ",
              h.head_dim);
  CODEC_CHECK(kv.page_size == plan.page_size(), engine, ": kv.page_size ", kv.page_size,
              " but the plan was made for ", plan.page_size());
  kv.validate();  // after the comparisons with the plan, whose messages say more
  const PlanExtent& e = plan.extent();
  if (e.max_page >= e.min_page)
    CODEC_CHECK(e.min_page >= 0 && e.max_page < kv.num_pages, engine, ": plan pages span [", e.min_page, ", ",
                e.max_page, "], outside the KV pool of ", kv.num_pages, " pages");
}

void check_io(const Plan& plan, const AttentionIO& io, bool out_f32, const char* engine) {
  const HeadConfig& h = plan.heads();
  const int batch = plan.num_requests(), covered = plan.view().num_requests;
  CODEC_CHECK(io.q.data != nullptr, engine, ": q must not be null");
  CODEC_CHECK(io.out.data != nullptr, engine, ": out must not be null");
  // q in the KV's dtype, or under an fp8 cache fp16 or bf16 (or on the CPU fp32); out in q's (or on the CPU fp32)
  const DType kv = plan.dtype();
  if (is_fp8(kv))
    CODEC_CHECK(io.q.dtype == DType::f16 || io.q.dtype == DType::bf16 || (out_f32 && io.q.dtype == DType::f32), engine,
                ": q.dtype ", to_string(io.q.dtype), " under the plan's ", to_string(kv), " cache: q is fp16 or bf16",
                out_f32 ? " (or fp32)" : "");
  else
    CODEC_CHECK(io.q.dtype == kv, engine, ": q.dtype ", to_string(io.q.dtype), " but the plan was made for ",
                to_string(kv));
  CODEC_CHECK(io.out.dtype == io.q.dtype || (out_f32 && io.out.dtype == DType::f32), engine, ": out.dtype ",
              to_string(io.out.dtype), " but q is ", to_string(io.q.dtype), out_f32 ? " (fp32 is accepted too)" : "");
  auto check_rows = [&](const char* name, const auto& t) {
    CODEC_CHECK(t.heads == h.num_qo_heads, engine, ": ", name, ".heads ", t.heads, " but the plan was made for ",
                h.num_qo_heads, " qo heads");
    CODEC_CHECK(t.dim == h.head_dim, engine, ": ", name, ".dim ", t.dim, " but the plan was made for head_dim ",
                h.head_dim);
    CODEC_CHECK(t.stride_batch >= 0 && t.stride_head >= 0, engine, ": ", name, " strides (", t.stride_batch, ", ",
                t.stride_head, ") must be >= 0");
  };
  check_rows("q", io.q);
  check_rows("out", io.out);
  if (covered == batch)
    CODEC_CHECK(io.out.batch == batch, engine, ": out.batch ", io.out.batch, " but the plan was made for a batch of ",
                batch);
  else
    CODEC_CHECK(io.out.batch >= batch && io.out.batch <= covered, engine, ": out.batch ", io.out.batch,
                " is outside [", batch, ", ", covered, "]: the plan's batch up to its capacity");
  CODEC_CHECK(io.q.batch == io.out.batch, engine, ": q.batch ", io.q.batch, " differs from out.batch ",
              io.out.batch);
  CODEC_CHECK(disjoint({{io.out.batch, io.out.stride_batch}, {io.out.heads, io.out.stride_head}, {io.out.dim, 1}}),
              engine, ": out rows overlap (strides ", io.out.stride_batch, ", ", io.out.stride_head, ", 1 for ",
              io.out.batch, " x ", io.out.heads, " x ", io.out.dim, ")");
  if (io.lse.data != nullptr) {
    CODEC_CHECK(io.lse.batch == io.out.batch && io.lse.heads == h.num_qo_heads, engine, ": lse is ", io.lse.batch,
                " x ", io.lse.heads, ", expected ", io.out.batch, " x ", h.num_qo_heads);
    CODEC_CHECK(io.lse.stride_batch >= 0 && io.lse.stride_head >= 0 &&
                    disjoint({{io.lse.batch, io.lse.stride_batch}, {io.lse.heads, io.lse.stride_head}}),
                engine, ": lse strides (", io.lse.stride_batch, ", ", io.lse.stride_head,
                ") must be >= 0 and keep its elements apart");
  }
}

void check_merge_states(const QueryRows& o_a, const LseRows& lse_a, const QueryRows& o_b, const LseRows& lse_b,
                        const OutputRows& out, const LseRows& lse_out) {
  CODEC_CHECK(o_a.data != nullptr && o_b.data != nullptr && out.data != nullptr,
              "merge_states: o_a, o_b and out must not be null");
  auto same = [&](const char* name, DType dtype, int n, int h, int d) {
    CODEC_CHECK(n == o_a.batch && h == o_a.heads && d == o_a.dim, "merge_states: ", name, " is ", n, " x ", h, " x ",
                d, ", o_a is ", o_a.batch, " x ", o_a.heads, " x ", o_a.dim);
    CODEC_CHECK(dtype == o_a.dtype, "merge_states: ", name, ".dtype ", to_string(dtype), " differs from o_a's ",
                to_string(o_a.dtype));
  };
  same("o_b", o_b.dtype, o_b.batch, o_b.heads, o_b.dim);
  same("out", out.dtype, out.batch, out.heads, out.dim);
  const std::pair<const char*, const LseRows*> lses[] = {{"lse_a", &lse_a}, {"lse_b", &lse_b}, {"lse_out", &lse_out}};
  for (const auto& [name, l] : lses)
    CODEC_CHECK(l->data != nullptr && l->batch == o_a.batch && l->heads == o_a.heads, "merge_states: ", name,
                " is ", l->batch, " x ", l->heads, ", expected ", o_a.batch, " x ", o_a.heads);
}

void check_page_copies(const PagedKV& kv, std::span<const PageCopy> copies) {
  kv.validate();
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const PageCopy& c = copies[i];
    CODEC_CHECK(c.src >= 0 && c.src < kv.num_pages && c.dst >= 0 && c.dst < kv.num_pages && c.num_tokens >= 0 &&
                    c.num_tokens <= kv.page_size,
                "copy_pages: copies[", i, "] = {src ", c.src, ", dst ", c.dst, ", num_tokens ", c.num_tokens,
                "} is outside the pool of ", kv.num_pages, " pages of ", kv.page_size, " tokens");
  }
}

}  // namespace codec
