// tests/fakecuda/config.cpp: parsing of the FAKECUDA_* options (config.h).
#include "config.h"

#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fake {

void warn(const char* format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  vsnprintf(line, sizeof line, format, args);
  va_end(args);
  fprintf(stderr, "fakecuda: %s\n", line);
}

bool parse_bytes(const char* text, uint64_t* bytes) {
  if (!text || !isdigit(static_cast<unsigned char>(*text))) return false;
  uint64_t value = 0;
  const char* p = text;
  for (; isdigit(static_cast<unsigned char>(*p)); ++p) {
    const uint64_t digit = uint64_t(*p - '0');
    if (value > (UINT64_MAX - digit) / 10) return false;
    value = value * 10 + digit;
  }
  unsigned shift = 0;
  switch (toupper(static_cast<unsigned char>(*p))) {
    case 'K':
      shift = 10;
      ++p;
      break;
    case 'M':
      shift = 20;
      ++p;
      break;
    case 'G':
      shift = 30;
      ++p;
      break;
    case 'T':
      shift = 40;
      ++p;
      break;
    default: break;
  }
  if (shift != 0 && (*p == 'i' || *p == 'I')) ++p;
  if (*p == 'B' || *p == 'b') ++p;
  if (*p != '\0' || value == 0) return false;
  if (shift != 0 && value > (UINT64_MAX >> shift)) return false;
  *bytes = value << shift;
  return true;
}

bool parse_pci(const char* text, size_t length, PciAddress* out) {
  char buffer[32];
  if (length == 0 || length >= sizeof buffer) return false;
  memcpy(buffer, text, length);
  buffer[length] = '\0';
  PciAddress pci;
  int consumed = 0;
  if (sscanf(buffer, "%x:%x:%x.%x%n", &pci.domain, &pci.bus, &pci.device, &pci.function,
             &consumed) == 4 &&
      size_t(consumed) == length) {
  } else if (sscanf(buffer, "%x:%x.%x%n", &pci.bus, &pci.device, &pci.function, &consumed) == 3 &&
             size_t(consumed) == length) {
    pci.domain = 0;
  } else {
    return false;
  }
  if (pci.domain > 0xffff || pci.bus > 0xff || pci.device > 0x1f || pci.function > 7) return false;
  *out = pci;
  return true;
}

Config read_config() {
  Config config;
  if (const char* text = getenv("FAKECUDA_DEVICES")) {
    char* end = nullptr;
    const long value = strtol(text, &end, 10);
    if (*text && end && *end == '\0' && value >= 0 && value <= kMaxDevices) {
      config.devices = int(value);
    } else {
      warn("FAKECUDA_DEVICES=\"%s\" is not a number in 0..%d; using %d", text, kMaxDevices,
           config.devices);
    }
  }
  if (const char* text = getenv("FAKECUDA_TOTAL_MEM")) {
    uint64_t bytes = 0;
    if (parse_bytes(text, &bytes)) {
      config.total_bytes = bytes;
    } else {
      warn("FAKECUDA_TOTAL_MEM=\"%s\" is not a byte count (e.g. 16G); using %llu", text,
           static_cast<unsigned long long>(config.total_bytes));
    }
  }
  if (const char* text = getenv("FAKECUDA_MODULE_MEM")) {
    uint64_t bytes = 0;
    if (parse_bytes(text, &bytes)) {
      config.module_bytes = bytes;
    } else {
      warn("FAKECUDA_MODULE_MEM=\"%s\" is not a byte count (e.g. 8M); using %llu", text,
           static_cast<unsigned long long>(config.module_bytes));
    }
  }
  config.pci.resize(size_t(config.devices));
  for (int i = 0; i < config.devices; ++i) config.pci[size_t(i)].bus = unsigned(0x06 + i) & 0xff;
  if (const char* text = getenv("FAKECUDA_PCI_BUS_IDS")) {
    const char* p = text;
    for (int i = 0; *p; ++i) {
      const char* comma = strchr(p, ',');
      const size_t length = comma ? size_t(comma - p) : strlen(p);
      PciAddress pci;
      if (!parse_pci(p, length, &pci)) {
        warn("FAKECUDA_PCI_BUS_IDS entry %d (\"%.*s\") is not dddd:bb:dd.f; using the default", i,
             int(length), p);
      } else if (i < config.devices) {
        config.pci[size_t(i)] = pci;
      }
      if (!comma) break;
      p = comma + 1;
    }
  }
  if (const char* text = getenv("FAKECUDA_NO_POSIX_FD")) {
    if (strcmp(text, "1") == 0) {
      config.posix_fd = false;
    } else if (strcmp(text, "0") != 0) {
      warn("FAKECUDA_NO_POSIX_FD=\"%s\" is not 0 or 1; using 0", text);
    }
  }
  if (const char* text = getenv("FAKECUDA_SHARED_MEM")) config.shared_mem = text;
  return config;
}

}  // namespace fake
