// tests/policy/test_main.cpp: the Catch2 main of the policy tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
