// tests/fakecuda/config.h: the fake driver's environment options, read once
// at cuInit (never earlier: a preloaded library may call in before main).
//
//   FAKECUDA_DEVICES      number of emulated devices, 0..64 (default 1;
//                         0 makes cuInit answer CUDA_ERROR_NO_DEVICE)
//   FAKECUDA_TOTAL_MEM    bytes per device, K/M/G/T suffixes (default 16G)
//   FAKECUDA_PCI_BUS_IDS  "0000:41:00.0,0000:c1:00.0": bus id of device 0, 1..
//                         (default device i -> 0000:%02x:00.0, bus 0x06+i)
//   FAKECUDA_FAIL         "cuMemCreate:5,cuMemMap:2" (parsed in counters.cpp)
//   FAKECUDA_COUNTS       path of the call-count JSON written at exit
//                         (read in counters.cpp at exit)
//   FAKECUDA_NO_POSIX_FD  "1": the devices cannot share VMM memory through
//                         POSIX file descriptors (the attribute answers 0,
//                         cuMemCreate refuses that handle type); default 0
//   FAKECUDA_MODULE_MEM   device memory a loaded module takes, K/M/G suffixes
//                         (default 8M)
// A bad value prints one line to stderr, naming the option, and the default
// is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fake {

struct PciAddress {
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned device = 0;
  unsigned function = 0;
};

struct Config {
  int devices = 1;
  uint64_t total_bytes = uint64_t(16) << 30;
  std::vector<PciAddress> pci;                // one per device, defaults filled in
  bool posix_fd = true;                       // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR supported
  uint64_t module_bytes = uint64_t(8) << 20;  // device memory of one loaded module
  std::string shared_mem;  // FAKECUDA_SHARED_MEM: the file processes share devices through
};

constexpr int kMaxDevices = 64;

Config read_config();

// "16G", "512M", "1024", "3k" (binary multiples, optional trailing B/iB).
// Returns false on anything else, zero, or overflow.
bool parse_bytes(const char* text, uint64_t* bytes);

// "0000:41:00.0" (also without the domain, as cuDeviceGetByPCIBusId takes).
bool parse_pci(const char* text, size_t length, PciAddress* out);

// Prints "fakecuda: <message>" as one line on stderr.
void warn(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace fake
