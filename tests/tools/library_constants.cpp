// tests/tools/library_constants.cpp: prints, one `NAME VALUE` a line, the
// values python/pagefast/_constants.py states, as the library's headers
// define them (interpose/pagefast.h, policy/tags.h), for
// test_python_constants.py to compare.
#include <cstdio>

#include "interpose/pagefast.h"
#include "policy/tags.h"

int main() {
  std::printf("SLEEP_KEEP %u\n", PAGEFAST_SLEEP_KEEP);
  std::printf("SLEEP_FAIL %u\n", PAGEFAST_SLEEP_FAIL);
  std::printf("SLEEP_DISCARD %u\n", PAGEFAST_SLEEP_DISCARD);
  std::printf("REGION_KEEP %u\n", PAGEFAST_REGION_KEEP);
  std::printf("REGION_POOL_ONLY %u\n", PAGEFAST_REGION_POOL_ONLY);
  std::printf("REGION_KEEP_DISK %u\n", PAGEFAST_REGION_KEEP_DISK);
  std::printf("REGION_HOST_RELEASE %u\n", PAGEFAST_REGION_HOST_RELEASE);
  std::printf("UNKNOWN_TAG %d\n", pagefast::policy::kUnknownTag);
  std::printf("TAG_MAX_CHARS %d\n", pagefast::policy::kTagMaxChars);
  std::printf("MAX_TAGS %d\n", pagefast::policy::kMaxTags);
  std::printf("MAX_DEPTH %d\n", pagefast::policy::kMaxRegionDepth);
  std::printf("TAG_RULE %s\n", PAGEFAST_TAG_RULE);
  return 0;
}
