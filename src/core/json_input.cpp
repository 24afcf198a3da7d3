#include "core/json_input.hpp"

#include "codec/core/error.hpp"

namespace codec {

namespace {

using nlohmann::json;

// Thrown from the parser's callback, which has no way to stop the parse but an exception.
struct TooDeep {
  int level;
};

// Appends `value` to `out` until `out` reaches `limit` characters; false once cut.
bool preview(const json& value, std::string& out, std::size_t limit) {
  if (out.size() >= limit) return false;
  if (value.is_string()) {
    // Quote a prefix of the string, escaped as dump() escapes it.
    const std::string& s = value.get_ref<const std::string&>();
    const std::size_t kept = utf8_prefix(s, limit - out.size());
    out += json(s.substr(0, kept)).dump();
    return kept == s.size();
  }
  if (!value.is_structured()) {  // numbers, booleans, null: a few characters each
    out += value.dump();
    return true;
  }
  const bool object = value.is_object();
  out += object ? '{' : '[';
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!first) out += ',';
    first = false;
    if (object) {
      if (!preview(json(it.key()), out, limit)) return false;
      out += ':';
    }
    if (!preview(it.value(), out, limit)) return false;
    if (out.size() >= limit) return false;
  }
  out += object ? '}' : ']';
  return true;
}

}  // namespace

json parse_json_input(std::string_view text, const std::string& source) {
  // `depth` counts the arrays and objects around the one that starts.
  const json::parser_callback_t limit_depth = [](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw TooDeep{depth + 1};
    return true;
  };
  try {
    return json::parse(text, limit_depth);
  } catch (const json::parse_error& e) {
    CODEC_FAIL(source, ": invalid JSON at byte ", e.byte, ": ", e.what());
  } catch (const json::exception& e) {  // a number beyond a double's range
    CODEC_FAIL(source, ": invalid JSON: ", e.what());
  } catch (const TooDeep& e) {
    CODEC_FAIL(source, ": arrays and objects nested ", e.level, " levels deep, past the limit of ", kMaxJsonDepth,
               " (a workload or cost table needs at most 4)");
  }
}

std::string json_preview(const json& value, std::size_t limit) {
  std::string out;
  if (!preview(value, out, limit)) out += "...";
  return out;
}

}  // namespace codec
