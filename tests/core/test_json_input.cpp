// JSON a user was handed: the nesting limit is enforced while parsing, and
// messages quote a bounded preview of a value, never the whole of it.
#include <gtest/gtest.h>

#include <string>

#include "core/json_input.hpp"
#include "support/throws_with.hpp"

namespace codec {
namespace {

using nlohmann::json;
using test::throws_with;

// `levels` arrays (or objects, with open = R"({"a": )") around `inner`.
std::string nested(int levels, const std::string& open = "[", const std::string& close = "]",
                   const std::string& inner = "") {
  std::string text;
  for (int i = 0; i < levels; ++i) text += open;
  text += inner;
  for (int i = 0; i < levels; ++i) text += close;
  return text;
}

TEST(JsonInput, AcceptsNestingUpToTheLimit) {
  const json doc = parse_json_input(nested(kMaxJsonDepth), "ok.json");
  int depth = 0;
  for (const json* v = &doc; v->is_array(); v = &v->front()) {
    ++depth;
    if (v->empty()) break;
  }
  EXPECT_EQ(depth, kMaxJsonDepth);
  // Objects count as arrays do.
  EXPECT_NO_THROW(parse_json_input(nested(kMaxJsonDepth, R"({"a": )", "}", "1"), "ok.json"));
  EXPECT_TRUE(throws_with([] { parse_json_input(nested(kMaxJsonDepth + 1, R"({"a": )", "}", "1"), "o.json"); },
                          "o.json: arrays and objects nested"));
}

TEST(JsonInput, RefusesNestingPastTheLimitNamingSourceDepthAndLimit) {
  const std::string limit = std::to_string(kMaxJsonDepth);
  const std::string past = std::to_string(kMaxJsonDepth + 1);
  EXPECT_TRUE(throws_with([&] { parse_json_input(nested(kMaxJsonDepth + 1), "deep.json"); },
                          "deep.json: arrays and objects nested " + past + " levels deep, past the limit of " + limit));
  // Deeper than recursion survives on an 8 MB stack (120,000 levels, 240 KB).
  EXPECT_TRUE(throws_with([&] { parse_json_input(nested(120000), "deep.json"); }, "past the limit of " + limit));
  EXPECT_TRUE(throws_with([&] { parse_json_input(R"({"model": )" + nested(120000) + "}", "deep.json"); },
                          "deep.json: arrays and objects nested " + past));
  // Objects inside arrays inside objects count alike.
  std::string mixed;
  for (int i = 0; i <= kMaxJsonDepth; ++i) mixed += i % 2 ? R"({"k": )" : "[";
  for (int i = kMaxJsonDepth; i >= 0; --i) mixed += i % 2 ? "}" : "]";
  EXPECT_TRUE(throws_with([&] { parse_json_input(mixed, "mixed.json"); }, "nested " + past + " levels deep"));
}

TEST(JsonInput, InvalidJsonNamesSourceAndByte) {
  EXPECT_TRUE(throws_with([] { parse_json_input("[1, 2", "t.json"); }, "t.json: invalid JSON at byte 6: "));
  // The depth check does not hide a syntax error before the limit.
  EXPECT_TRUE(throws_with([] { parse_json_input("[[}", "t.json"); }, "t.json: invalid JSON at byte 3"));
  // Numbers past a double's range are the parser's other error.
  EXPECT_TRUE(throws_with([] { parse_json_input("[1e400]", "t.json"); },
                          "t.json: invalid JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'"));
}

TEST(JsonInput, PreviewIsTheWholeValueWhenShort) {
  for (const char* text : {R"([1,2,3])", R"({"a":[true,null],"b":"x"})", R"("text")", "2.5", "null", "[]", "{}"})
    EXPECT_EQ(json_preview(json::parse(text)), json::parse(text).dump()) << text;
}

TEST(JsonInput, PreviewOfALargeValueIsABoundedPrefix) {
  json many = json::array();
  for (int i = 0; i < 100000; ++i) many.push_back(i);
  const std::string full = many.dump();
  const std::string shown = json_preview(many);
  EXPECT_LE(shown.size(), 80u) << shown;
  EXPECT_EQ(shown.substr(shown.size() - 3), "...");
  EXPECT_EQ(full.compare(0, shown.size() - 3, shown, 0, shown.size() - 3), 0) << shown;  // a prefix of dump()
  const std::string text(1000000, 'x');
  const std::string quoted = json_preview(json(text));
  EXPECT_LE(quoted.size(), 80u);
  EXPECT_EQ(quoted.substr(0, 4), "\"xxx");
  // Cuts fall between UTF-8 characters: the preview stays valid JSON text
  // (a cut inside one made nlohmann's dump throw; found by the fuzz targets).
  std::string euros;
  for (int i = 0; i < 40; ++i) euros += "\xE2\x82\xAC";  // U+20AC, three bytes each
  for (std::size_t limit = 1; limit < 70; ++limit) {
    const std::string shown_euros = json_preview(json(euros), limit);
    EXPECT_NO_THROW(json::parse(shown_euros.substr(0, shown_euros.rfind('"') + 1))) << limit << ": " << shown_euros;
    const std::string clipped = clip(euros, limit);
    EXPECT_EQ((clipped.size() - 3) % 3, 0u) << limit;  // whole characters, then "..."
  }
  // Keys of objects are bounded too.
  const std::string key_shown = json_preview(json{{text, 1}});
  EXPECT_LE(key_shown.size(), 80u) << key_shown;
}

}  // namespace
}  // namespace codec
