// tests/package/compat_test.cpp: the replacements in compat/ (glibc 2.28
// baseline, docs/PACKAGING.md) behave as glibc's own. Linked like the tools:
// compat/glibc_start.c runs this program's constructors, the C++ runtime is
// static, and the libc symbols below bind to compat/'s definitions.
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <string>

extern "C" uint32_t arc4random(void);

static int failures = 0;
#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                             \
    }                                                                         \
  } while (0)

// Counted by a constructor: the program's .init_array must have run once,
// not twice (glibc's own start code and compat/glibc_start.c's both).
static int g_constructed = 0;
struct Constructed {
  Constructed() { ++g_constructed; }
} g_constructed_object;
static std::string g_global_string("made before main");

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_once_count = 0;
static void once_body() { ++g_once_count; }
static void* thread_body(void* arg) { return static_cast<char*>(arg) + 1; }

static void check_find_object(const char* what, void* address) {
#ifdef DLFO_STRUCT_HAS_EH_DBASE
  using FindFn = int (*)(void*, dl_find_object*);
  auto real = reinterpret_cast<FindFn>(dlvsym(RTLD_DEFAULT, "_dl_find_object", "GLIBC_2.35"));
  dl_find_object ours{}, theirs{};
  int rc_ours = _dl_find_object(address, &ours);
  if (!real) {
    std::printf("%s: glibc has no _dl_find_object; ours rc %d\n", what, rc_ours);
    return;
  }
  int rc_theirs = real(address, &theirs);
  std::printf("%s: rc %d/%d eh_frame %p/%p\n", what, rc_ours, rc_theirs, ours.dlfo_eh_frame, theirs.dlfo_eh_frame);
  CHECK(rc_ours == rc_theirs);
  if (rc_ours == 0 && rc_theirs == 0) {
    CHECK(ours.dlfo_eh_frame == theirs.dlfo_eh_frame);
    CHECK(ours.dlfo_map_start <= address && address < ours.dlfo_map_end);
  }
#else
  (void)what;
  (void)address;
#endif
}

int main(int argc, char** argv) {
  (void)argc;
  CHECK(g_constructed == 1);
  CHECK(g_global_string == "made before main");

  // Exceptions: in this program, and inside a library built like libpagefast.so.
  int caught = 0;
  try {
    throw std::runtime_error("x");
  } catch (const std::runtime_error&) {
    caught = 1;
  }
  CHECK(caught == 1);
  std::string lib = std::string(argv[1]);
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  CHECK(handle != nullptr);
  if (!handle) std::fprintf(stderr, "dlopen: %s\n", dlerror());
  if (handle) {
    auto fn = reinterpret_cast<int (*)(int)>(dlsym(handle, "compat_thrower_catch"));
    CHECK(fn != nullptr);
    if (fn) CHECK(fn(41) == 42);
    check_find_object("library", reinterpret_cast<void*>(fn));
  }
  CHECK(dlopen("/nonexistent/libnothing.so", RTLD_NOW) == nullptr);
  CHECK(dlerror() != nullptr);
  CHECK(dlvsym(RTLD_DEFAULT, "malloc", "GLIBC_2.2.5") != nullptr || dlvsym(RTLD_DEFAULT, "malloc", "GLIBC_2.17"));
  check_find_object("program", reinterpret_cast<void*>(&main));
  check_find_object("libc", dlsym(RTLD_DEFAULT, "printf"));
  int on_stack = 0;
  check_find_object("stack", &on_stack);

  // Random numbers: arc4random and std::random_device (which uses it).
  std::set<uint32_t> seen;
  for (int i = 0; i < 64; ++i) seen.insert(arc4random());
  CHECK(seen.size() > 60);
  std::random_device device;
  std::set<unsigned> seen_device;
  for (int i = 0; i < 64; ++i) seen_device.insert(device());
  CHECK(seen_device.size() > 60);

  // stat64 family against a file and a link this test makes.
  char dir[] = "/tmp/pf-compat-XXXXXX";
  CHECK(mkdtemp(dir) != nullptr);
  std::string file = std::string(dir) + "/f", link = std::string(dir) + "/l";
  int fd = open(file.c_str(), O_CREAT | O_WRONLY, 0600);
  CHECK(fd >= 0 && write(fd, "12345", 5) == 5);
  CHECK(symlink(file.c_str(), link.c_str()) == 0);
  struct stat64 by_path {
  }, by_fd{}, by_link{};
  CHECK(stat64(file.c_str(), &by_path) == 0 && by_path.st_size == 5);
  CHECK(fstat64(fd, &by_fd) == 0 && by_fd.st_ino == by_path.st_ino);
  CHECK(lstat64(link.c_str(), &by_link) == 0 && S_ISLNK(by_link.st_mode));
  CHECK(stat64("/nonexistent/x", &by_path) == -1);
  close(fd);
  unlink(link.c_str());
  unlink(file.c_str());
  rmdir(dir);

  // Threads and thread-specific data.
  pthread_t thread;
  char token[2];
  void* result = nullptr;
  CHECK(pthread_create(&thread, nullptr, thread_body, token) == 0);
  CHECK(pthread_join(thread, &result) == 0 && result == token + 1);
  CHECK(pthread_once(&g_once, once_body) == 0 && pthread_once(&g_once, once_body) == 0 && g_once_count == 1);
  pthread_key_t key;
  CHECK(pthread_key_create(&key, nullptr) == 0);
  CHECK(pthread_setspecific(key, token) == 0 && pthread_getspecific(key) == token);
  CHECK(pthread_key_delete(key) == 0);

  std::printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
