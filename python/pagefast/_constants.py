"""What the library defines and this package needs, stated once: the flags
and answers of its C API (interpose/pagefast.h) and a tag's limits
(policy/tags.h). tests/tools/test_python_constants.py checks every name
here against the library's own headers."""
import re

# Flags of pagefast_sleep and pagefast_sleep_tag.
SLEEP_KEEP = 1  # PAGEFAST_SLEEP_KEEP
SLEEP_FAIL = 2  # PAGEFAST_SLEEP_FAIL: allocations of sleeping memory fail instead of waiting
SLEEP_DISCARD = 4  # PAGEFAST_SLEEP_DISCARD
# Flags of pagefast_region_begin.
REGION_KEEP = 1  # PAGEFAST_REGION_KEEP
REGION_POOL_ONLY = 2  # PAGEFAST_REGION_POOL_ONLY: the program's own cuMemCreate memory stays untagged
REGION_KEEP_DISK = 8  # PAGEFAST_REGION_KEEP_DISK: kept in files
REGION_HOST_RELEASE = 16  # PAGEFAST_REGION_HOST_RELEASE: kept in host memory given back at wake
# The tagged calls' answer for a tag no region ever had.
UNKNOWN_TAG = -2

# A tag's limits (policy/tags.h).
TAG_MAX_CHARS = 63  # PAGEFAST_TAG_MAX_CHARS
MAX_TAGS = 31  # PAGEFAST_MAX_TAGS: (tag, policy) pairs in a process at once
MAX_DEPTH = 8  # PAGEFAST_MAX_DEPTH: regions open on one thread
TAG_RULE = "1 to 63 characters of A-Z a-z 0-9 _ . : -"  # PAGEFAST_TAG_RULE

TAG = re.compile(r"[A-Za-z0-9_.:-]{1,%d}\Z" % TAG_MAX_CHARS)
