#include "codec/forest/page_table.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "codec/core/error.hpp"

namespace codec {

void PageTable::validate() const {
  CODEC_CHECK(page_size >= 1, "page_size ", page_size, " must be >= 1");
  CODEC_CHECK(num_pages >= 1, "num_pages ", num_pages, " must be >= 1");
  CODEC_CHECK(indptr.size() >= 2, "kv_indptr has ", indptr.size(), " entries; a batch needs at least one request");
  const int batch = num_requests();
  CODEC_CHECK(last_page_len.size() == std::size_t(batch), "kv_last_page_len has ", last_page_len.size(),
              " entries, expected ", batch, " (one per request)");
  CODEC_CHECK(indptr[0] == 0, "kv_indptr[0] = ", indptr[0], " must be 0");
  CODEC_CHECK(std::size_t(indptr[batch]) == indices.size(), "kv_indptr[", batch, "] = ", indptr[batch],
              " does not match the ", indices.size(), " entries of kv_indices");
  for (int r = 0; r < batch; ++r) {
    CODEC_CHECK(indptr[r + 1] > indptr[r], "request ", r, " has no pages (kv_indptr[", r, "] = ", indptr[r],
                ", kv_indptr[", r + 1, "] = ", indptr[r + 1], ")");
    CODEC_CHECK(last_page_len[r] >= 1 && last_page_len[r] <= page_size, "kv_last_page_len[", r, "] = ",
                last_page_len[r], " is outside [1, page_size = ", page_size, "]");
    CODEC_CHECK(request_tokens(r) <= std::numeric_limits<std::int32_t>::max(), "request ", r, " has ",
                request_tokens(r), " KV tokens, more than ", std::numeric_limits<std::int32_t>::max());
  }
  // One vectorisable pass over all page ids; only a failure looks for the culprit.
  // (A negative id is a large unsigned one.)
  const auto limit = std::uint32_t(std::min<std::int64_t>(num_pages, std::int64_t(1) << 31));
  std::uint32_t largest = 0;
  for (const std::int32_t page : indices) largest = std::max(largest, std::uint32_t(page));
  if (largest < limit) return;
  for (int r = 0; r < batch; ++r)
    for (std::int32_t i = indptr[r]; i < indptr[r + 1]; ++i)
      CODEC_CHECK(indices[i] >= 0 && indices[i] < num_pages, "page index ", indices[i], " at kv_indices[", i,
                  "] (request ", r, ") is outside [0, num_pages = ", num_pages, ")");
}

PageTableArrays page_table_from_block_table(const BlockTable& t, int page_size, std::int64_t num_pages) {
  PageTableArrays a;
  page_table_from_block_table(t, page_size, num_pages, a);
  return a;
}

void page_table_from_block_table(const BlockTable& t, int page_size, std::int64_t num_pages, PageTableArrays& a) {
  CODEC_CHECK(page_size >= 1, "page_size ", page_size, " must be >= 1");
  CODEC_CHECK(t.rows >= 0 && t.cols >= 0, "block table of ", t.rows, " x ", t.cols, " entries");
  CODEC_CHECK(t.rows == 0 || (t.blocks != nullptr && t.seq_lens != nullptr), "block table: blocks and seq_lens must not be null");
  CODEC_CHECK(t.row_stride >= t.cols, "block table: row_stride ", t.row_stride, " is less than its ", t.cols, " columns");
  a.indptr.assign(1, 0);
  a.indices.clear();
  a.last_page_len.clear();
  a.page_size = page_size;
  a.num_pages = num_pages;
  auto length = [&](int r) -> std::int64_t {
    return t.cumulative ? std::int64_t(t.seq_lens[r + 1]) - t.seq_lens[r] : t.seq_lens[r];
  };
  int batch = 0;
  while (batch < t.rows && length(batch) > 0) ++batch;
  for (int r = batch; r < t.rows; ++r) {
    CODEC_CHECK(length(r) >= 0, "block table row ", r, " has ", length(r), " KV tokens; lengths must be >= 0");
    CODEC_CHECK(length(r) == 0, "block table row ", r, " has ", length(r), " KV tokens after row ", batch,
                " with none: rows without tokens must come last");
  }
  a.indptr.reserve(batch + 1);
  a.last_page_len.reserve(batch);
  std::int64_t entries = 0;
  for (int r = 0; r < batch; ++r) entries += std::min<std::int64_t>((length(r) + page_size - 1) / page_size, t.cols);
  a.indices.reserve(std::size_t(entries));  // one allocation of the whole list
  for (int r = 0; r < batch; ++r) {
    const std::int64_t tokens = length(r), pages = (tokens + page_size - 1) / page_size;
    // (cumulative lengths differ by up to 2^32)
    CODEC_CHECK(tokens <= std::numeric_limits<std::int32_t>::max(), "block table row ", r, " has ", tokens,
                " KV tokens, more than ", std::numeric_limits<std::int32_t>::max());
    CODEC_CHECK(pages <= t.cols, "block table row ", r, " has ", tokens, " KV tokens: ", pages,
                " pages, more than its ", t.cols, " columns");
    const std::int32_t* row = t.blocks + r * t.row_stride;
    std::int32_t lo = 0, hi = 0;  // the row's range first (a loop the compiler vectorises), the culprit only if it fails
    if (pages > 0) lo = hi = row[0];
    for (std::int64_t j = 1; j < pages; ++j) lo = std::min(lo, row[j]), hi = std::max(hi, row[j]);
    if (lo < 0 || hi >= num_pages)
      for (std::int64_t j = 0; j < pages; ++j)
        CODEC_CHECK(row[j] >= 0 && row[j] < num_pages, "block table row ", r, " column ", j, " holds page ", row[j],
                    ", outside [0, num_pages = ", num_pages, ")");
    a.indices.insert(a.indices.end(), row, row + pages);
    a.indptr.push_back(std::int32_t(a.indices.size()));
    a.last_page_len.push_back(std::int32_t(tokens - (pages - 1) * page_size));
  }
}

PagedKV PagedKV::nhd(const void* k, const void* v, DType dtype, std::int64_t num_pages, int page_size,
                     int num_kv_heads, int head_dim) {
  const std::int64_t head = head_dim, token = std::int64_t(num_kv_heads) * head_dim;
  return {k, v, dtype, num_pages, page_size, num_kv_heads, head_dim, token * page_size, token, head, {}, {}};
}

PagedKV PagedKV::hnd(const void* k, const void* v, DType dtype, std::int64_t num_pages, int page_size,
                     int num_kv_heads, int head_dim) {
  const std::int64_t token = head_dim, head = std::int64_t(page_size) * head_dim;
  return {k, v, dtype, num_pages, page_size, num_kv_heads, head_dim, head * num_kv_heads, token, head, {}, {}};
}

PagedKV PagedKV::interleaved_nhd(const void* kv, DType dtype, std::int64_t num_pages, int page_size,
                                 int num_kv_heads, int head_dim) {
  const std::int64_t head = head_dim, token = std::int64_t(num_kv_heads) * head_dim;
  const std::int64_t half = token * page_size;  // K part of a page, in elements
  const void* v = static_cast<const std::byte*>(kv) + half * std::int64_t(dtype_size(dtype));
  return {kv, v, dtype, num_pages, page_size, num_kv_heads, head_dim, 2 * half, token, head, {}, {}};
}

void PagedKV::validate() const {
  CODEC_CHECK(k != nullptr && v != nullptr, "paged KV: k and v must not be null");
  CODEC_CHECK(page_size >= 1, "page_size ", page_size, " must be >= 1");
  CODEC_CHECK(num_pages >= 1, "num_pages ", num_pages, " must be >= 1");
  CODEC_CHECK(num_kv_heads >= 1, "num_kv_heads ", num_kv_heads, " must be >= 1");
  CODEC_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256, "unsupported head_dim ", head_dim,
              " (supported: 64, 128, 256)");
  CODEC_CHECK(stride_page >= 0 && stride_token >= 0 && stride_head >= 0, "paged KV strides must be >= 0 (page ",
              stride_page, ", token ", stride_token, ", head ", stride_head, ")");
  for (const auto& [name, scale] : {std::pair{"k_scale", k_scale}, std::pair{"v_scale", v_scale}})
    CODEC_CHECK((scale.count == 0 && scale.data == nullptr) ||
                    ((scale.count == 1 || scale.count == num_kv_heads) && scale.data != nullptr),
                name, " has ", scale.count, " values", scale.data ? "" : " and no data",
                ": expected none, one, or one per kv head (", num_kv_heads, ")");
}

void check_host_scales(const PagedKV& kv) {
  for (const auto& [name, scale] : {std::pair{"k_scale", kv.k_scale}, std::pair{"v_scale", kv.v_scale}})
    for (int i = 0; i < scale.count; ++i)
      CODEC_CHECK(std::isfinite(scale.data[i]), name, "[", i, "] = ", scale.data[i], " is not finite");
}

}  // namespace codec
