// Fuzz target: the workload file reader (`codec bench/plan --workload FILE`).
// Any input is refused with codec::Error or accepted; an accepted workload is
// valid, its JSON form reads back as the same workload, and, when small, its
// page tables give a forest whose requests hold exactly the workload's tokens.
#include <cstdint>
#include <string>

#include "codec/core/error.hpp"
#include "codec/forest/forest.hpp"
#include "workload/workload.hpp"
#include "fuzz_check.hpp"

namespace codec::fuzz {
namespace {

bool same(const Workload& a, const Workload& b) {
  if (a.name != b.name || a.seed != b.seed || a.model != b.model || a.page_size != b.page_size ||
      a.dtype != b.dtype || a.requests != b.requests || a.nodes.size() != b.nodes.size())
    return false;
  if (a.heads.num_qo_heads != b.heads.num_qo_heads || a.heads.num_kv_heads != b.heads.num_kv_heads ||
      a.heads.head_dim != b.heads.head_dim || a.heads.scale() != b.heads.scale())
    return false;
  for (std::size_t i = 0; i < a.nodes.size(); ++i)
    if (a.nodes[i].id != b.nodes[i].id || a.nodes[i].parent != b.nodes[i].parent ||
        a.nodes[i].tokens != b.nodes[i].tokens)
      return false;
  return true;
}

// Small enough to build page tables for at thousands of inputs a second.
constexpr double kTableBytes = 1 << 20;

void check(const std::string& text) {
  Workload w;
  try {
    w = parse_workload_json(text, "fuzz.json");
  } catch (const Error&) {
    return;  // refused with a message: what a bad file should get
  }
  w.validate();  // throws, a crash here, if the reader let an invalid workload through
  FUZZ_CHECK(same(w, parse_workload_json(workload_to_json(w), "again.json")));
  if (w.footprint().tables_bytes > kTableBytes) return;
  const WorkloadTables tables = workload_page_tables(w);
  const Forest forest = derive_forest(tables.view());
  forest.validate();
  FUZZ_CHECK(forest.num_requests() == int(w.requests.size()));
  for (int r = 0; r < forest.num_requests(); ++r) FUZZ_CHECK(forest.request_tokens(r) == w.request_tokens(r));
}

}  // namespace
}  // namespace codec::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  codec::fuzz::check(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
