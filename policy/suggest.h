// policy/suggest.h: the nearest word of a list to a misspelt one, for
// "did you mean" in the one message of a bad PAGEFAST_CONF key (config.cpp).
// The library and pagefast-run print that same message, so a typo reads
// alike under plain preload and under the launcher. Pure C++.
#pragma once

#include <string>

namespace pagefast {

// Edits (insert, delete, replace, swap two neighbours) from a to b.
size_t edit_distance(const std::string& a, const std::string& b);

// Of words[0..count), the one nearest to `word` (case aside), when it is
// near enough to be what was meant: at most max(2, a third of its length)
// edits; "" otherwise.
std::string nearest_word(const std::string& word, const char* const* words, int count);

}  // namespace pagefast
