// tests/policy/test_node_recycler.cpp: NodeRecycler and RecyclingAllocator
// (policy/node_recycler.h): maps whose nodes come from a recycler hold
// what a plain std::map holds through many inserts and erases, nodes are
// distinct and aligned, given-back nodes are taken again before a new
// batch, and a container that held N elements makes no new batch while it
// holds at most N again.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "policy/node_recycler.h"

using namespace pagefast::policy;

namespace {

template <typename K, typename V>
using RecycledMap = std::map<K, V, std::less<K>, RecyclingAllocator<std::pair<const K, V>>>;

}  // namespace

TEST_CASE("a recycled map holds what a std::map holds through random inserts and erases", "[recycler]") {
  NodeRecycler recycler;
  size_t most = 0;
  {
    RecycledMap<uint64_t, std::string> map{RecyclingAllocator<std::pair<const uint64_t, std::string>>(&recycler)};
    std::map<uint64_t, std::string> expected;
    std::mt19937_64 random(7);
    for (int step = 0; step < 20000; ++step) {
      const uint64_t key = random() % 600;
      switch (random() % 3) {
        case 0:
        case 1: {
          // A value long enough to live on the heap: the node owns it.
          const std::string value(40 + key % 7, char('a' + key % 26));
          const bool inserted = map.emplace_hint(map.lower_bound(key), key, value)->second == value;
          expected.emplace(key, value);
          CHECK(inserted);
          break;
        }
        default: CHECK(map.erase(key) == expected.erase(key));
      }
      most = std::max(most, expected.size());
      if (step % 1000 == 0) REQUIRE(std::equal(map.begin(), map.end(), expected.begin(), expected.end()));
    }
    REQUIRE(std::equal(map.begin(), map.end(), expected.begin(), expected.end()));
    // Never more batches than the most nodes held at once needed.
    CHECK(recycler.batches() == (most + NodeRecycler::kBatch - 1) / NodeRecycler::kBatch);
    CHECK(recycler.free_nodes() + map.size() <= most);
  }
  // The map gone, every node it took is back: a new node was carved only
  // when none was free, so as many as it held at most.
  CHECK(recycler.free_nodes() == most);
}

TEST_CASE("a map that held N elements makes no new batch while it holds at most N", "[recycler]") {
  NodeRecycler recycler;
  RecycledMap<uint64_t, uint64_t> map{RecyclingAllocator<std::pair<const uint64_t, uint64_t>>(&recycler)};
  for (uint64_t k = 0; k < 100; ++k) map.emplace(k, k);
  const size_t batches = recycler.batches();
  CHECK(batches == 4);  // 100 nodes, 32 a batch
  uint64_t next = 100;
  for (int round = 0; round < 1000; ++round) {
    // Ten out (the oldest), ten in: never more than 100 held.
    for (int i = 0; i < 10; ++i) map.erase(map.begin());
    for (int i = 0; i < 10; ++i, ++next) map.emplace_hint(map.end(), next, next);
    REQUIRE(recycler.batches() == batches);
  }
  CHECK(map.size() == 100);
  CHECK(map.begin()->first == next - 100);
  CHECK(recycler.free_nodes() == 0);  // 100 carved, 100 held
  map.clear();
  CHECK(recycler.free_nodes() == 100);
}

TEST_CASE("nodes are distinct, aligned, and a node given back is taken next", "[recycler]") {
  NodeRecycler recycler;
  std::set<void*> nodes;
  for (size_t i = 0; i < 3 * NodeRecycler::kBatch; ++i) {
    void* node = recycler.take(40, 8);
    CHECK(reinterpret_cast<uintptr_t>(node) % alignof(std::max_align_t) == 0);
    CHECK(nodes.insert(node).second);
  }
  CHECK(recycler.batches() == 3);
  CHECK(recycler.node_bytes() == 48);  // 40 rounded up to the alignment
  // The nodes do not overlap: each can be written whole.
  for (void* node : nodes) std::memset(node, 0x5a, 40);
  void* given = *nodes.begin();
  recycler.give(given, 40, 8);
  CHECK(recycler.free_nodes() == 1);
  CHECK(recycler.take(40, 8) == given);
  CHECK(recycler.free_nodes() == 0);
  CHECK(recycler.batches() == 3);
  for (void* node : nodes) recycler.give(node, 40, 8);
  CHECK(recycler.free_nodes() == 3 * NodeRecycler::kBatch);
}

TEST_CASE("a node larger than the first, or an array, is the heap's", "[recycler]") {
  NodeRecycler recycler;
  void* small = recycler.take(24, 8);
  void* large = recycler.take(200, 8);  // not from a batch: freed by give (the sanitizers check)
  CHECK(recycler.batches() == 1);
  std::memset(large, 1, 200);
  recycler.give(large, 200, 8);
  CHECK(recycler.free_nodes() == 0);
  void* smaller = recycler.take(16, 8);  // fits the node size: recycled
  recycler.give(smaller, 16, 8);
  recycler.give(small, 24, 8);
  CHECK(recycler.free_nodes() == 2);
  RecyclingAllocator<uint64_t> allocator(&recycler);
  uint64_t* array = allocator.allocate(64);
  for (int i = 0; i < 64; ++i) array[i] = uint64_t(i);
  allocator.deallocate(array, 64);
  CHECK(recycler.batches() == 1);
  CHECK(recycler.free_nodes() == 2);
}

TEST_CASE("allocators of one recycler compare equal, also rebound", "[recycler]") {
  NodeRecycler a, b;
  RecyclingAllocator<int> x(&a), y(&a), z(&b);
  RecyclingAllocator<double> rebound(x);
  CHECK(x == y);
  CHECK(x != z);
  CHECK(rebound == x);
  CHECK(rebound.recycler() == &a);
  // Two maps of one recycler swap their nodes.
  RecycledMap<int, int> m1{RecyclingAllocator<std::pair<const int, int>>(&a)};
  RecycledMap<int, int> m2{RecyclingAllocator<std::pair<const int, int>>(&a)};
  for (int i = 0; i < 50; ++i) m1.emplace(i, i);
  m2.emplace(1000, 1);
  m1.swap(m2);
  CHECK(m1.size() == 1);
  CHECK(m2.size() == 50);
  m2.clear();
  CHECK(a.free_nodes() == 50);  // m1 holds the one node m2 had
}
