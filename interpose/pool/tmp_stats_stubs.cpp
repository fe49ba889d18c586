// TEMPORARY (branch stats only, deleted before its last commit): the
// per-tag figures until interpose/pool implements pool::tag_figures. Names
// and policies from the region registry; every figure 0.
#include "interpose/pool/region.h"
#include "interpose/pool_api.h"

namespace pagefast::pool {

int tag_figures(TagFigures* out, int max) {
  int count = 0;
  for (int slot = 1; slot < region::slot_count(); ++slot) {
    const char* name = nullptr;
    bool keep = false;
    if (!region::slot_info(slot, &name, &keep)) continue;
    if (count < max) {
      out[count] = TagFigures{};
      out[count].name = name;
      out[count].keep = keep;
      out[count].slot = slot;
    }
    ++count;
  }
  return count;
}

}  // namespace pagefast::pool
