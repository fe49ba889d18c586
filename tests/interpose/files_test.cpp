// tests/interpose/files_test.cpp: interpose/files.h on its own: path
// expansion, the local rank, the safe open against every kind of target
// (symbolic link, FIFO with and without a reader, directory, another
// user's file, a missing parent), the writers, and the secure-execution
// rule with the auxv value injected.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "interpose/files.h"

using namespace pagefast;
using namespace pagefast::files;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/pagefast-files-XXXXXX";
    REQUIRE(mkdtemp(name) != nullptr);
    path = name;
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void put(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

mode_t mode_of(const std::string& path) {
  struct stat st;
  REQUIRE(lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

int entries(const std::string& dir) {
  int n = 0;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d))
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
  closedir(d);
  return n;
}

const char* map_lookup(const char* name, void* user) {
  auto* vars = static_cast<std::map<std::string, std::string>*>(user);
  auto it = vars->find(name);
  return it == vars->end() ? nullptr : it->second.c_str();
}

}  // namespace

TEST_CASE("expand_path replaces %p, %r, %h and %%, and keeps any other %") {
  const PathValues v{"1234", "3", "node7"};
  CHECK(expand_path("/tmp/s-%p.json", v) == "/tmp/s-1234.json");
  CHECK(expand_path("s-%r-%p-%h", v) == "s-3-1234-node7");
  CHECK(expand_path("%%p%p", v) == "%p1234");
  CHECK(expand_path("a%xb%", v) == "a%xb%");
  CHECK(expand_path("%%%r", v) == "%3");
  CHECK(expand_path("", v) == "");
  const PathValues here = current_values();
  CHECK(here.pid == std::to_string(getpid()));
  CHECK(!here.host.empty());
  CHECK(here.host.find('/') == std::string::npos);
}

TEST_CASE("local_rank: the first launcher variable set, decimal only") {
  std::map<std::string, std::string> vars;
  CHECK(local_rank(&map_lookup, &vars) == "");
  vars["MPI_LOCALRANKID"] = "5";
  CHECK(local_rank(&map_lookup, &vars) == "5");
  vars["SLURM_LOCALID"] = "2";
  CHECK(local_rank(&map_lookup, &vars) == "2");
  vars["LOCAL_RANK"] = "";  // empty counts as unset
  CHECK(local_rank(&map_lookup, &vars) == "2");
  vars["LOCAL_RANK"] = "1";
  CHECK(local_rank(&map_lookup, &vars) == "1");
  vars["LOCAL_RANK"] = "../../etc";  // it goes into file names
  CHECK(local_rank(&map_lookup, &vars) == "");
}

TEST_CASE("open_private creates a 0600 file whatever the umask") {
  TempDir d;
  for (mode_t mask : {mode_t(0), mode_t(0777)}) {
    const mode_t old = umask(mask);
    std::string why;
    const std::string path = d / ("new" + std::to_string(mask));
    const int fd = open_private(path, OpenMode::Truncate, &why);
    umask(old);
    REQUIRE(fd >= 0);
    CHECK(mode_of(path) == 0600);
    CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);  // cleared once the file is known regular
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    close(fd);
  }
}

TEST_CASE("open_private truncates or appends an own file, and narrows its mode") {
  TempDir d;
  const std::string path = d / "own";
  put(path, "old");
  chmod(path.c_str(), 0644);
  std::string why;
  int fd = open_private(path, OpenMode::Append, &why);
  REQUIRE(fd >= 0);
  CHECK(write_all(fd, "+new", 4));
  close(fd);
  CHECK(slurp(path) == "old+new");
  CHECK(mode_of(path) == 0600);
  fd = open_private(path, OpenMode::Truncate, &why);
  REQUIRE(fd >= 0);
  close(fd);
  CHECK(slurp(path).empty());
}

TEST_CASE("open_private refuses what is not a regular file of this user") {
  TempDir d;
  std::string why;
  SECTION("a symbolic link is not followed") {
    put(d / "victim", "keep");
    REQUIRE(symlink((d / "victim").c_str(), (d / "link").c_str()) == 0);
    CHECK(open_private(d / "link", OpenMode::Truncate, &why) == -1);
    CHECK(why.find("symbolic link") != std::string::npos);
    CHECK(slurp(d / "victim") == "keep");
  }
  SECTION("a FIFO without a reader: refused at once, not waited on") {
    REQUIRE(mkfifo((d / "fifo").c_str(), 0600) == 0);
    CHECK(open_private(d / "fifo", OpenMode::Truncate, &why) == -1);
    CHECK(why.find("FIFO") != std::string::npos);
  }
  SECTION("a FIFO with a reader: opened, then refused by fstat") {
    REQUIRE(mkfifo((d / "fifo").c_str(), 0600) == 0);
    const int reader = open((d / "fifo").c_str(), O_RDONLY | O_NONBLOCK);
    REQUIRE(reader >= 0);
    CHECK(open_private(d / "fifo", OpenMode::Append, &why) == -1);
    CHECK(why.find("not a regular file of this user") != std::string::npos);
    char byte;
    CHECK(::read(reader, &byte, 1) == 0);  // nothing was written into it
    close(reader);
  }
  SECTION("a directory") {
    CHECK(open_private(d.path, OpenMode::Append, &why) == -1);
    CHECK(why.find(d.path) != std::string::npos);
  }
  SECTION("a missing parent directory is not made") {
    CHECK(open_private(d / "missing/log.txt", OpenMode::Append, &why) == -1);
    CHECK(entries(d.path) == 0);
  }
  SECTION("another user's file is neither truncated nor written") {
    if (geteuid() != 0) {
      WARN("not root: cannot make a file of another user; skipped");
      return;
    }
    const std::string path = d / "theirs";
    put(path, "their data");
    REQUIRE(chown(path.c_str(), 65534, 65534) == 0);
    chmod(path.c_str(), 0666);
    CHECK(open_private(path, OpenMode::Truncate, &why) == -1);
    CHECK(why.find("not a regular file of this user") != std::string::npos);
    CHECK(slurp(path) == "their data");
    CHECK(mode_of(path) == 0666);
  }
}

TEST_CASE("write_text: stderr or an expanded path, replaced whole") {
  TempDir d;
  std::string why;
  put(d / ("s-" + std::to_string(getpid())), "a much longer old text");
  REQUIRE(write_text(d / "s-%p", "new", &why));
  CHECK(slurp(d / ("s-" + std::to_string(getpid()))) == "new");
  CHECK_FALSE(write_text(d / "missing/s", "x", &why));
  CHECK(why.find("cannot open") != std::string::npos);
}

TEST_CASE("write_atomic: whole file or none, 0600, no temporary left") {
  TempDir d;
  std::string why;
  put(d / "metrics", "old");
  chmod((d / "metrics").c_str(), 0644);
  REQUIRE(write_atomic(d / "metrics", "new text", &why));
  CHECK(slurp(d / "metrics") == "new text");
  CHECK(mode_of(d / "metrics") == 0600);
  CHECK(entries(d.path) == 1);
  // A directory in the way: the rename fails and the temporary is removed.
  REQUIRE(mkdir((d / "dir").c_str(), 0700) == 0);
  put(d / "dir/inside", "x");
  CHECK_FALSE(write_atomic(d / "dir", "text", &why));
  CHECK(why.find("cannot replace") != std::string::npos);
  CHECK(entries(d.path) == 2);
}

TEST_CASE("secure execution hides every path variable, and only those") {
  const char* paths[] = {"PAGEFAST_STATS", "PAGEFAST_REPORT",   "PAGEFAST_LOG_FILE",
                         "PAGEFAST_TRACE", "PAGEFAST_LIVE_DIR", "PAGEFAST_SYSROOT"};
  const char* others[] = {"PAGEFAST", "PAGEFAST_CONF", "PAGEFAST_LOG", "LOCAL_RANK", "HOME"};
  for (const char* name : paths) {
    CHECK(is_path_variable(name));
    CHECK_FALSE(ignored_in_secure_execution(name, 0));
    CHECK(ignored_in_secure_execution(name, 1));
    CHECK(ignored_in_secure_execution(name, 2));
  }
  for (const char* name : others) {
    CHECK_FALSE(is_path_variable(name));
    CHECK_FALSE(ignored_in_secure_execution(name, 1));
  }
}

TEST_CASE("folder_writable and directory_writable: what a file written at exit needs, checked at load") {
  std::string why;
  CHECK(directory_writable("/tmp", &why));
  CHECK(folder_writable("/tmp/pagefast-check-x.json", &why));
  CHECK_FALSE(folder_writable("/nonexistent/x.json", &why));
  CHECK(why == "folder '/nonexistent' does not exist (for '/nonexistent/x.json')");
  CHECK_FALSE(directory_writable("/etc/passwd", &why));
  CHECK(why == "'/etc/passwd' is not a folder");
  CHECK_FALSE(folder_writable("/etc/passwd/x", &why));
  CHECK(folder_writable("in-the-working-folder.json", &why) == directory_writable(".", &why));
}
