#pragma once
// A copy of KV between pages of one pool: what the forest manager asks of a
// caller's pool when branches part mid-page (copy-on-write), and what the
// engines' copy_pages carry out.
#include <cstdint>

namespace codec {

// Copy the first num_tokens token slots of page src to page dst (all kv heads).
struct PageCopy {
  std::int32_t src;
  std::int32_t dst;
  std::int32_t num_tokens;
};

}  // namespace codec
