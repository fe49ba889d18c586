// policy/pool_stats.cpp: the JSON form of PoolStats and of TagStats.
#include "policy/pool_stats.h"

#include "policy/json.h"

namespace pagefast::policy {

std::string stats_json_object(const PoolStats& stats, bool json_fields) {
  std::string text = "{";
  bool first = true;
#define PF_STATS_JSON(name, meaning)                       \
  text += first ? "\"" #name "\": " : ", \"" #name "\": "; \
  text += std::to_string(stats.name);                      \
  first = false;
  PAGEFAST_POOL_STATS_FIELDS(PF_STATS_JSON)
  if (json_fields) {
    PAGEFAST_POOL_STATS_JSON_FIELDS(PF_STATS_JSON)
  }
#undef PF_STATS_JSON
  text += "}";
  return text;
}

std::string tag_json_object(const TagStats& tag) {
  std::string text = "{\"name\": ";
  append_json_string(text, tag.name);
  text += ", \"slot\": " + std::to_string(tag.slot);
  text += tag.keep ? ", \"policy\": \"keep\"" : ", \"policy\": \"discard\"";
  text += tag.asleep ? ", \"state\": \"asleep\"" : ", \"state\": \"awake\"";
#define PF_TAG_JSON(name, meaning) text += ", \"" #name "\": " + std::to_string(tag.name);
  PAGEFAST_TAG_FIELDS(PF_TAG_JSON)
#undef PF_TAG_JSON
  return text + "}";
}

std::string tags_json_array(const std::vector<TagStats>& tags) {
  std::string text = "[";
  for (size_t i = 0; i < tags.size(); ++i) text += (i ? ", " : "") + tag_json_object(tags[i]);
  return text + "]";
}

}  // namespace pagefast::policy
