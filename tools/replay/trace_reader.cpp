// tools/replay/trace_reader.cpp: the one reader of trace files, strict:
// anything but a whole header and whole, known records is an error that
// names the byte offset where the file stops making sense.
#include "tools/replay/trace_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace pagefast::replay {
namespace tf = trace_format;

namespace {

bool fail(std::string* error, const std::string& path, uint64_t offset, const std::string& what) {
  *error = path + ": byte offset " + std::to_string(offset) + ": " + what;
  return false;
}

}  // namespace

const char* op_name(uint8_t op) {
  switch (tf::Op(op)) {
    case tf::Op::Alloc: return "alloc";
    case tf::Op::Free: return "free";
    case tf::Op::Lost: return "lost";
  }
  return "?";
}

bool read_trace(const std::string& path, Trace* out, std::string* error) {
  try {
    // O_NONBLOCK: a FIFO must not hang the reader; only a regular file is
    // read (then in blocking mode).
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      *error = path + ": cannot open: " + std::strerror(errno);
      return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      return fail(error, path, 0, "not a regular file");
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    std::FILE* f = fdopen(fd, "rb");
    if (!f) {
      *error = path + ": cannot open: " + std::strerror(errno);
      close(fd);
      return false;
    }
    std::vector<unsigned char> bytes;
    unsigned char chunk[1 << 16];
    size_t n;
    while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) bytes.insert(bytes.end(), chunk, chunk + n);
    const bool read_error = std::ferror(f);
    std::fclose(f);
    if (read_error) {
      *error = path + ": read error at byte offset " + std::to_string(bytes.size());
      return false;
    }
    const uint64_t size = bytes.size();
    if (size == 0) return fail(error, path, 0, "empty file, not a pagefast trace (no header)");
    const size_t magic_bytes = size < sizeof tf::kMagic ? size_t(size) : sizeof tf::kMagic;
    if (std::memcmp(bytes.data(), tf::kMagic, magic_bytes) != 0)
      return fail(error, path, 0, "bad magic: not a pagefast trace (expected \"PFTRACE1\")");
    if (size < tf::kHeaderBytes)
      return fail(error, path, size,
                  "truncated header: the file ends after " + std::to_string(size) + " of " +
                      std::to_string(tf::kHeaderBytes) + " header bytes");
    tf::Header& h = out->header;
    std::memcpy(&h, bytes.data(), sizeof h);
    if (h.version != tf::kVersion)
      return fail(error, path, offsetof(tf::Header, version),
                  "unsupported version " + std::to_string(h.version) + " (this reader knows " +
                      std::to_string(tf::kVersion) + ")");
    if (h.header_bytes != tf::kHeaderBytes)
      return fail(error, path, offsetof(tf::Header, header_bytes),
                  "wrong header size " + std::to_string(h.header_bytes) + " (expected " +
                      std::to_string(tf::kHeaderBytes) + ")");
    if (h.record_bytes != tf::kRecordBytes)
      return fail(error, path, offsetof(tf::Header, record_bytes),
                  "wrong record size " + std::to_string(h.record_bytes) + " (expected " +
                      std::to_string(tf::kRecordBytes) + ")");
    const uint64_t body = size - tf::kHeaderBytes;
    const uint64_t whole = body / tf::kRecordBytes;
    if (body % tf::kRecordBytes)
      return fail(error, path, tf::kHeaderBytes + whole * tf::kRecordBytes,
                  "truncated record " + std::to_string(whole) + ": the file ends after " +
                      std::to_string(body % tf::kRecordBytes) + " of " + std::to_string(tf::kRecordBytes) + " bytes");
    out->records.resize(size_t(whole));
    if (whole) std::memcpy(out->records.data(), bytes.data() + tf::kHeaderBytes, size_t(body));
    for (uint64_t i = 0; i < whole; ++i) {
      const tf::Record& r = out->records[size_t(i)];
      if (r.op == 0 || r.op > tf::kMaxOp)
        return fail(error, path, tf::kHeaderBytes + i * tf::kRecordBytes + offsetof(tf::Record, op),
                    "unknown op " + std::to_string(r.op) + " in record " + std::to_string(i));
    }
    return true;
  } catch (const std::exception& e) {
    *error = path + ": " + e.what();
    return false;
  }
}

}  // namespace pagefast::replay
