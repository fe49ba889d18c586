// policy/suggest.cpp: the nearest word (suggest.h).
#include "policy/suggest.h"

#include <algorithm>
#include <vector>

namespace pagefast {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string nearest_word(const std::string& word, const char* const* words, int count) {
  std::string folded = word;
  for (char& c : folded) c = char(c >= 'A' && c <= 'Z' ? c + 32 : c);
  std::string best;
  size_t best_distance = ~size_t(0);
  for (int i = 0; i < count; ++i) {
    const size_t d = edit_distance(folded, words[i]);
    if (d < best_distance) {
      best_distance = d;
      best = words[i];
    }
  }
  const size_t near = std::max<size_t>(2, word.size() / 3);
  return best_distance <= near ? best : std::string();
}

}  // namespace pagefast
