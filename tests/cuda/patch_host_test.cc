#include <gtest/gtest.h>
#include "cuda/patch_apply.h"
TEST(X, Y) {}
