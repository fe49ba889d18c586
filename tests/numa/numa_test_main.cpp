// tests/numa/numa_test_main.cpp: Catch2's main for the numa test programs.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
