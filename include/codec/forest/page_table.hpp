#pragma once
// The standard paged KV cache description used across the ecosystem (vLLM,
// SGLang, FlashInfer): per-request page lists in CSR form, plus the physical
// page pool addressed by pointer and strides.
#include <cstdint>
#include <span>
#include <vector>

#include "codec/core/dtype.hpp"
#include "codec/core/hd.hpp"

namespace codec {

// Request r owns pages indices[indptr[r] .. indptr[r+1]); every page is full
// (page_size tokens) except the last, which holds last_page_len[r] ∈ [1, page_size].
// Two requests whose lists hold the same page id share that page's KV.
struct PageTable {
  std::span<const std::int32_t> indptr;         // [B + 1], indptr[0] = 0, non-decreasing
  std::span<const std::int32_t> indices;        // [indptr[B]] page ids in [0, num_pages)
  std::span<const std::int32_t> last_page_len;  // [B]
  int page_size = 0;                            // tokens per page, ≥ 1
  std::int64_t num_pages = 0;                   // size of the page pool

  int num_requests() const { return indptr.empty() ? 0 : int(indptr.size()) - 1; }
  std::int64_t request_tokens(int r) const {
    const std::int64_t pages = indptr[r + 1] - indptr[r];
    return (pages - 1) * page_size + last_page_len[r];
  }
  // Throws codec::Error naming the request, the field and the value.
  void validate() const;
};

// The padded block table of vLLM and transformers: row r lists request r's
// page ids in its first ceil(seq_len(r) / page_size) columns (the others are
// not read), with row_stride elements between rows. seq_lens holds each row's
// KV tokens, or with `cumulative` the prefix sums [rows + 1] (FlashAttention's
// cu_seq_lens). Rows with no tokens are a padded batch's tail: they must come
// after every row with tokens.
struct BlockTable {
  const std::int32_t* blocks = nullptr;
  int rows = 0;
  int cols = 0;
  std::int64_t row_stride = 0;
  const std::int32_t* seq_lens = nullptr;
  bool cumulative = false;
};

// A PageTable that owns its arrays.
struct PageTableArrays {
  std::vector<std::int32_t> indptr{0}, indices, last_page_len;
  int page_size = 0;
  std::int64_t num_pages = 0;
  PageTable view() const { return {indptr, indices, last_page_len, page_size, num_pages}; }
};

// The page table of a block table's rows with tokens (its leading rows; none
// gives an empty batch, indptr = {0}). Throws codec::Error naming the row and
// value: a negative length, a row with tokens after an empty one, more pages
// than columns, a page id outside [0, num_pages).
PageTableArrays page_table_from_block_table(const BlockTable& table, int page_size, std::int64_t num_pages);
// The same into `out`, whose arrays keep their capacity: a caller that does
// this every step (an in-stream plan) allocates only as its batches grow.
// On an error `out` holds no valid table.
void page_table_from_block_table(const BlockTable& table, int page_size, std::int64_t num_pages,
                                 PageTableArrays& out);

// The dequantisation scale of a pool's K or V (fp8 caches; FlashInfer's and
// vLLM's k_scale / v_scale): the stored value times its scale is the real
// value. count 0: none (1.0); 1: one for every kv head; num_kv_heads: one
// each. In the memory of the engine that runs (host for the CPU's).
struct KvScale {
  const float* data = nullptr;
  int count = 0;
  CODEC_HD float at(int kv_head) const { return count == 0 ? 1.f : data[count == 1 ? 0 : kv_head]; }
};

// A page pool of K and V in any layout with a unit stride along head_dim:
// element (page p, token t, kv head h, dim d) of K is at
//   k + p·stride_page + t·stride_token + h·stride_head + d   (in elements of dtype)
// and likewise for V with the same strides; with scales, K's value is the
// stored one times k_scale.at(h), V's times v_scale.at(h).
struct PagedKV {
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::bf16;
  std::int64_t num_pages = 0;
  int page_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  std::int64_t stride_page = 0;
  std::int64_t stride_token = 0;
  std::int64_t stride_head = 0;
  KvScale k_scale;
  KvScale v_scale;

  // [pages, page_size, Hkv, D] for K and V separately.
  static PagedKV nhd(const void* k, const void* v, DType dtype, std::int64_t num_pages, int page_size,
                     int num_kv_heads, int head_dim);
  // [pages, Hkv, page_size, D] for K and V separately.
  static PagedKV hnd(const void* k, const void* v, DType dtype, std::int64_t num_pages, int page_size,
                     int num_kv_heads, int head_dim);
  // One buffer [pages, 2, page_size, Hkv, D]: K then V inside every page.
  static PagedKV interleaved_nhd(const void* kv, DType dtype, std::int64_t num_pages, int page_size,
                                 int num_kv_heads, int head_dim);

  std::int64_t offset(std::int64_t page, int token, int head) const {
    return page * stride_page + std::int64_t(token) * stride_token + std::int64_t(head) * stride_head;
  }
  void validate() const;
};

// Throws naming a scale that is not finite; reads the scales, so host ones only.
void check_host_scales(const PagedKV& kv);

}  // namespace codec
