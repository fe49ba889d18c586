// policy/pool_stats.cpp: the JSON form of PoolStats.
#include "policy/pool_stats.h"

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

}  // namespace pagefast::policy
