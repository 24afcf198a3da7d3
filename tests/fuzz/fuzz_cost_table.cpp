// Fuzz target: the cost-table reader (`--cost-table FILE`, the Python
// wrapper's cost_table). Any input is refused with codec::Error or accepted;
// an accepted table's model prices every task, merge, busy count and wide
// task finite and non-negative, on its grid and off it.
#include <cmath>
#include <cstdint>
#include <string>

#include "codec/core/error.hpp"
#include "codec/cost/cost_model.hpp"
#include "fuzz_check.hpp"

namespace codec::fuzz {
namespace {

bool price(double us) { return std::isfinite(us) && us >= 0; }

void check(const std::string& text) {
  CostTable table;
  try {
    table = CostTable::parse(text, "fuzz.json");
  } catch (const Error&) {
    return;
  }
  table.validate();
  const TableCostModel model(table);
  // The grid's points, between them, and past both ends of each axis.
  for (const int rows : {1, table.rows.front(), table.rows.back(), table.rows.back() + 7, 1 << 20}) {
    for (const long kv : {1L, table.kv_len.front(), table.kv_len.back(), table.kv_len.back() * 3 + 1, 1L << 40}) {
      FUZZ_CHECK(price(model.cost_us(rows, kv)));
      for (const int span : {1, 2, 4}) FUZZ_CHECK(price(model.wide_cost_us(rows, kv, span)));
      for (const int busy : {1, 2, table.blocks / 2 + 1, table.blocks, table.blocks + 5})
        if (busy >= 1) FUZZ_CHECK(price(model.cost_busy_us(rows, kv, busy)));
    }
    for (const int partials : {2, 3, 64, 1 << 16}) FUZZ_CHECK(price(model.merge_us(rows, partials)));
  }
}

}  // namespace
}  // namespace codec::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  codec::fuzz::check(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
