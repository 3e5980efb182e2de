// The Catch2 main of every CPU test executable.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
