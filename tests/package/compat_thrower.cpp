// tests/package/compat_thrower.cpp: a shared library linked the way
// libpagefast.so is (C++ runtime static and hidden, compat/ inside) that
// throws and catches within itself: the unwinder finds its frames through
// compat/'s _dl_find_object.
#include <stdexcept>
#include <string>

extern "C" __attribute__((visibility("default"))) int compat_thrower_catch(int value) {
  try {
    if (value >= 0) throw std::runtime_error(std::to_string(value));
  } catch (const std::exception& e) {
    return std::stoi(e.what()) + 1;
  }
  return -1;
}
