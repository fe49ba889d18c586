// numa/cpu_set.cpp: the bitmap behind CpuSet and the list-format parser.
#include "numa/cpu_set.h"

#include <algorithm>
#include <cctype>

namespace pagefast::numa {
namespace {

constexpr int kBitsPerWord = 64;

bool parse_id(const std::string& text, size_t* pos, int* id) {
  size_t p = *pos;
  long value = 0;
  if (p >= text.size() || !std::isdigit(static_cast<unsigned char>(text[p]))) return false;
  while (p < text.size() && std::isdigit(static_cast<unsigned char>(text[p]))) {
    value = value * 10 + (text[p] - '0');
    if (value > kMaxCpuId) return false;  // also stops overflow on long runs of digits
    ++p;
  }
  *pos = p;
  *id = static_cast<int>(value);
  return true;
}

}  // namespace

CpuSet::CpuSet(std::initializer_list<int> cpus) {
  for (int cpu : cpus) add(cpu);
}

void CpuSet::add(int cpu) {
  if (cpu < 0 || cpu > kMaxCpuId) return;
  size_t word = static_cast<size_t>(cpu) / kBitsPerWord;
  if (words_.size() <= word) words_.resize(word + 1, 0);
  words_[word] |= uint64_t{1} << (cpu % kBitsPerWord);
}

void CpuSet::add_range(int first, int last) {
  for (int cpu = first; cpu <= last; ++cpu) add(cpu);
}

bool CpuSet::contains(int cpu) const {
  if (cpu < 0) return false;
  size_t word = static_cast<size_t>(cpu) / kBitsPerWord;
  return word < words_.size() && (words_[word] >> (cpu % kBitsPerWord)) & 1;
}

bool CpuSet::empty() const {
  for (uint64_t w : words_)
    if (w) return false;
  return true;
}

int CpuSet::count() const {
  int n = 0;
  for (uint64_t w : words_) n += __builtin_popcountll(w);
  return n;
}

int CpuSet::last() const {
  for (size_t i = words_.size(); i-- > 0;)
    if (words_[i]) return static_cast<int>(i) * kBitsPerWord + 63 - __builtin_clzll(words_[i]);
  return -1;
}

CpuSet CpuSet::intersect(const CpuSet& other) const {
  CpuSet out;
  size_t n = std::min(words_.size(), other.words_.size());
  out.words_.resize(n);
  for (size_t i = 0; i < n; ++i) out.words_[i] = words_[i] & other.words_[i];
  return out;
}

CpuSet CpuSet::unite(const CpuSet& other) const {
  CpuSet out = words_.size() >= other.words_.size() ? *this : other;
  const CpuSet& small = words_.size() >= other.words_.size() ? other : *this;
  for (size_t i = 0; i < small.words_.size(); ++i) out.words_[i] |= small.words_[i];
  return out;
}

bool CpuSet::subset_of(const CpuSet& other) const {
  for (size_t i = 0; i < words_.size(); ++i) {
    uint64_t theirs = i < other.words_.size() ? other.words_[i] : 0;
    if (words_[i] & ~theirs) return false;
  }
  return true;
}

bool CpuSet::operator==(const CpuSet& other) const { return subset_of(other) && other.subset_of(*this); }

std::vector<int> CpuSet::members() const {
  std::vector<int> out;
  for (size_t i = 0; i < words_.size(); ++i)
    for (int b = 0; b < kBitsPerWord; ++b)
      if ((words_[i] >> b) & 1) out.push_back(static_cast<int>(i) * kBitsPerWord + b);
  return out;
}

std::string CpuSet::to_list() const {
  std::string out;
  std::vector<int> ids = members();
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ids[i]);
    if (j > i) out += '-' + std::to_string(ids[j]);
    i = j + 1;
  }
  return out;
}

bool parse_cpulist(const std::string& text, CpuSet* cpus) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  const std::string body = text.substr(begin, end - begin);
  CpuSet parsed;
  size_t pos = 0;
  while (pos < body.size()) {
    int first = 0, last = 0;
    if (!parse_id(body, &pos, &first)) return false;
    last = first;
    if (pos < body.size() && body[pos] == '-') {
      ++pos;
      if (!parse_id(body, &pos, &last) || last < first) return false;
    }
    parsed.add_range(first, last);
    if (pos == body.size()) break;
    if (body[pos] != ',' || pos + 1 == body.size()) return false;
    ++pos;
  }
  *cpus = parsed;
  return true;
}

}  // namespace pagefast::numa
