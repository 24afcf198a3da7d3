#include "codec/engine/reference.hpp"

#include <cmath>
#include <limits>
#include <sstream>

#include "codec/core/error.hpp"

namespace codec {
namespace {

// Where token t of request r, KV head kvh, starts in the pool. A function, not
// a lambda in the OpenMP loop: clang refuses a nested lambda's reference to
// the enclosing function's parameters there.
std::int64_t token_offset(const PageTable& table, const PagedKV& kv, int r, std::int64_t t, int kvh) {
  return kv.offset(table.indices[table.indptr[r] + t / table.page_size], int(t % table.page_size), kvh);
}

}  // namespace

ReferenceResult reference_attention(const PageTable& table, const PagedKV& kv, const HeadConfig& heads,
                                    const void* q, const QueryBatch& queries, std::optional<DType> q_dtype,
                                    std::span<const float> sinks) {
  table.validate();
  kv.validate();
  check_host_scales(kv);
  heads.validate();
  const DType qd_type = q_dtype.value_or(kv.dtype);
  CODEC_CHECK(!is_fp8(qd_type), "reference: q of ", to_string(qd_type),
              " (an fp8 cache's queries are fp16, bf16 or fp32: give q_dtype)");
  CODEC_CHECK(kv.num_kv_heads == heads.num_kv_heads && kv.head_dim == heads.head_dim,
              "reference: paged KV heads ", kv.num_kv_heads, "x", kv.head_dim, " do not match ",
              heads.num_kv_heads, "x", heads.head_dim);
  CODEC_CHECK(kv.page_size == table.page_size, "reference: paged KV page_size ", kv.page_size,
              " differs from the page table's ", table.page_size);
  CODEC_CHECK(table.num_pages <= kv.num_pages, "reference: page table addresses ", table.num_pages,
              " pages but the KV pool has ", kv.num_pages);
  const int B = table.num_requests(), Hq = heads.num_qo_heads, D = heads.head_dim, G = heads.group();
  CODEC_CHECK(sinks.empty() || int(sinks.size()) == Hq, "reference: ", sinks.size(), " sinks for ", Hq, " qo heads");
  const double cap = heads.logits_soft_cap;
  std::vector<std::int64_t> kv_len(static_cast<std::size_t>(B));
  for (int r = 0; r < B; ++r) kv_len[std::size_t(r)] = table.request_tokens(r);
  queries.validate(kv_len);
  const std::vector<std::int64_t> mask_byte = mask_byte_offsets(kv_len, queries);
  const int rows = queries.num_queries(B);
  std::vector<int> request_of(static_cast<std::size_t>(rows));  // each row's request, and its token index there
  std::vector<int> token_of(static_cast<std::size_t>(rows));
  for (int r = 0, row = 0; r < B; ++r)
    for (int i = 0; i < queries.q_len(r); ++i, ++row) request_of[std::size_t(row)] = r, token_of[std::size_t(row)] = i;
  const double scale = heads.scale(), inf = std::numeric_limits<double>::infinity();
  ReferenceResult res;
  res.out.assign(std::size_t(rows) * Hq * D, 0.0);
  res.lse.assign(std::size_t(rows) * Hq, -inf);

  auto attend = [&](auto q_tag, auto kv_tag) {
    using T = decltype(kv_tag);
    const T* K = static_cast<const T*>(kv.k);
    const T* V = static_cast<const T*>(kv.v);
    const auto* Q = static_cast<const decltype(q_tag)*>(q);
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t rh = 0; rh < std::int64_t(rows) * Hq; ++rh) {
      const int row = int(rh / Hq), h = int(rh % Hq), kvh = h / G;
      const int r = request_of[std::size_t(row)], i = token_of[std::size_t(row)];
      const std::int64_t n = kv_len[std::size_t(r)];
      const double k_scale = kv.k_scale.at(kvh), v_scale = kv.v_scale.at(kvh);
      std::vector<double> qd(D), s(n);
      for (int d = 0; d < D; ++d) qd[d] = to_float(Q[rh * D + d]);
      double m = -inf;
      for (std::int64_t t = 0; t < n; ++t) {
        s[t] = -inf;
        if (!queries.sees(r, i, t, n, mask_byte[std::size_t(r)])) continue;
        const std::int64_t off = token_offset(table, kv, r, t, kvh);
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += qd[d] * (to_float(K[off + d]) * k_scale);
        s[t] = cap > 0 ? cap * std::tanh(dot * scale / cap) : dot * scale;
        m = std::max(m, s[t]);
      }
      const double sink = sinks.empty() ? -inf : double(sinks[std::size_t(h)]);
      if (m == -inf) {  // no key seen: the empty state, or the sink alone (o = 0)
        res.lse[rh] = sink;
        continue;
      }
      double l = 0;
      double* out = &res.out[rh * D];
      for (std::int64_t t = 0; t < n; ++t) {
        if (s[t] == -inf) continue;
        const double p = std::exp(s[t] - m);
        l += p;
        const std::int64_t off = token_offset(table, kv, r, t, kvh);
        for (int d = 0; d < D; ++d) out[d] += p * (to_float(V[off + d]) * v_scale);
      }
      if (sink > -inf) l += std::exp(sink - m);  // the sink: in the denominator, no value
      for (int d = 0; d < D; ++d) out[d] /= l;
      res.lse[rh] = m + std::log(l);
    }
  };
  dispatch_kv_dtype(kv.dtype, [&](auto kv_tag) { dispatch_dtype(qd_type, [&](auto q_tag) { attend(q_tag, kv_tag); }); });
  return res;
}

ErrorStats compare(const float* out, const std::vector<double>& ref) {
  ErrorStats e;
  double diff2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double x = out[i];
    if (std::isinf(ref[i]) && x == ref[i]) continue;  // an empty row's lse, −inf on both sides
    if (std::isnan(x) || std::isinf(x)) {
      e.has_nan = true;
      if (e.worst_index < 0) e.worst_index = std::int64_t(i);
      continue;
    }
    const double d = std::abs(x - ref[i]);
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
    if (d > e.max_abs) e.max_abs = d, e.worst_index = std::int64_t(i);
  }
  e.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  if (e.has_nan) e.rel_l2 = std::numeric_limits<double>::infinity();
  return e;
}

std::string ErrorStats::describe() const {
  std::ostringstream os;
  os << "rel_l2 " << rel_l2 << ", max_abs " << max_abs << " at element " << worst_index
     << (has_nan ? ", NaN/inf present" : "");
  return os.str();
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::bf16:
    case DType::e4m3:  // against the reference of the dequantised values: bf16's
    case DType::e5m2: return 1e-2;
    case DType::f16: return 3e-3;
    case DType::f32: break;
  }
  return 1e-5;
}

}  // namespace codec
