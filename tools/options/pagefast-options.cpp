// tools/options/pagefast-options.cpp: pagefast-options, the options table
// (policy/options.h) as text: docs/OPTIONS.md's tables and pagefast-run --help's
// list are generated from it here, and checked against it by the test
// `options docs`, so that no document can drift from what the code reads.
//
//   pagefast-options                  every row, one a line
//   pagefast-options --section NAME   one generated section: variables,
//                                     foreign, keys (markdown), help (bash)
//   pagefast-options --check FILE...  exit 1 unless every section marked in
//                                     FILE is what --section prints
//   pagefast-options --update FILE... rewrite the marked sections
//
// A section is marked by a line holding "begin options:NAME" and a line
// holding "end options:NAME"; the lines between them are the section.
// Not installed: a tool of the source tree (tools/options/update-docs).
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "policy/options.h"

namespace {

using pagefast::Opt;
using pagefast::OptionRow;
using pagefast::Scope;

std::vector<const OptionRow*> rows_of(Scope scope) {
  int count = 0;
  const OptionRow* rows = pagefast::option_rows(&count);
  std::vector<const OptionRow*> out;
  for (int i = 0; i < count; ++i)
    if (rows[i].scope == scope) out.push_back(&rows[i]);
  return out;
}

std::string full_meaning(const OptionRow& row) {
  return *row.notes ? std::string(row.meaning) + "; " + row.notes : std::string(row.meaning);
}

std::string readers(const OptionRow& row) {
  static const struct {
    uint8_t bit;
    const char* name;
  } kNames[] = {{pagefast::kReadByLibrary, "library"},
                {pagefast::kReadByLauncher, "pagefast-run"},
                {pagefast::kReadByStat, "pagefast-stat"},
                {pagefast::kReadByCtl, "pagefast-ctl"},
                {pagefast::kReadByGpuScripts, "GPU scripts"}};
  std::string s;
  for (const auto& n : kNames)
    if (row.readers & n.bit) s += (s.empty() ? "" : ", ") + std::string(n.name);
  return s;
}

const char* kind_name(pagefast::Kind kind) {
  switch (kind) {
    case pagefast::Kind::OnOff: return "on/off";
    case pagefast::Kind::Size: return "size";
    case pagefast::Kind::Time: return "time";
    case pagefast::Kind::Count: return "count";
    case pagefast::Kind::Choice: return "choice";
    case pagefast::Kind::Keys: return "keys";
    case pagefast::Kind::Path: return "path";
    case pagefast::Kind::Directory: return "directory";
    case pagefast::Kind::Text: return "text";
  }
  return "?";
}

// ---- markdown -----------------------------------------------------------

std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string code(const std::string& word) { return "`" + word + "`"; }

// "on|off" and "1, on, true" (lists of plain words) become `on`, `off`;
// any other phrase stays as written.
std::string accepts_cell(const std::string& accepts) {
  const bool bars = accepts.find('|') != std::string::npos;
  const std::string sep = bars ? "|" : ", ";
  std::vector<std::string> words;
  size_t pos = 0;
  while (true) {
    const size_t next = accepts.find(sep, pos);
    words.push_back(accepts.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  for (const std::string& w : words)
    if (w.empty() || w.find(' ') != std::string::npos) return cell(accepts);
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ", ") + code(w);
  return out;
}

std::string default_cell(const OptionRow& row) { return *row.default_value ? code(row.default_value) : "unset"; }

// A table between blank lines, so that it stands apart from the markers.
std::string markdown(const std::string& section) {
  std::string out = "\n";
  if (section == "variables") {
    out += "| variable | accepts | default | path | read by | meaning |\n";
    out += "| --- | --- | --- | --- | --- | --- |\n";
    for (const OptionRow* r : rows_of(Scope::Own))
      out += "| " + code(r->name) + " | " + accepts_cell(r->accepts) + " | " + default_cell(*r) + " | " +
             (r->path ? "yes" : "") + " | " + readers(*r) + " | " + cell(full_meaning(*r)) + " |\n";
  } else if (section == "foreign") {
    out += "| variable | read by | meaning |\n";
    out += "| --- | --- | --- |\n";
    for (const OptionRow* r : rows_of(Scope::Foreign))
      out += "| " + code(r->name) + " | " + readers(*r) + " | " + cell(full_meaning(*r)) + " |\n";
  } else if (section == "keys") {
    out += "| key | accepts | default | meaning |\n";
    out += "| --- | --- | --- | --- |\n";
    for (const OptionRow* r : rows_of(Scope::ConfKey))
      out += "| " + code(r->name) + " | " + accepts_cell(r->accepts) + " | " + default_cell(*r) + " | " +
             cell(full_meaning(*r)) + " |\n";
  }
  return out + "\n";
}

// ---- pagefast-run --help ------------------------------------------------

constexpr size_t kWidth = 79;
constexpr size_t kNameColumn = 22;
constexpr char kGlue = '\x01';  // a space that entry() does not break at

// " (default: X)", kept on one line.
std::string default_note(const char* value) {
  return std::string(" (default:") + kGlue + (*value ? value : "unset") + ")";
}

std::string plain(const std::string& text) {
  std::string out;
  for (char c : text)
    if (c != '`') out += c;
  return out;
}

// "  NAME<pad>TEXT", TEXT wrapped at kWidth under the text column.
std::string entry(const std::string& name, const std::string& text) {
  std::string out = "  " + name;
  out += name.size() + 3 <= kNameColumn ? std::string(kNameColumn - 2 - name.size(), ' ')
                                        : "\n" + std::string(kNameColumn, ' ');
  size_t column = kNameColumn;
  std::istringstream words(text);
  std::string word;
  bool first = true;
  while (words >> word) {
    if (!first && column + 1 + word.size() > kWidth) {
      out += "\n" + std::string(kNameColumn, ' ');
      column = kNameColumn;
      first = true;
    }
    if (!first) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    first = false;
  }
  for (char& c : out)
    if (c == kGlue) c = ' ';
  return out + "\n";
}

std::string wrapped(const std::string& text) {
  std::string out, line;
  std::istringstream words(text);
  std::string word;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > kWidth) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line + "\n";
}

std::string help_text() {
  std::string out = "environment (docs/OPTIONS.md says more):\n";
  for (const OptionRow* r : rows_of(Scope::Own)) {
    if (!(r->readers & ~pagefast::kReadByGpuScripts)) continue;  // not the launcher's or the library's
    out += entry(r->name, plain(r->meaning) + default_note(r->default_value));
  }
  std::string foreign = "also read, as launchers and CUDA set them:";
  for (const OptionRow* r : rows_of(Scope::Foreign)) foreign += std::string(" ") + r->name + ",";
  foreign.back() = '.';
  out += wrapped(foreign);
  out += "\n" + std::string(pagefast::option_name(Opt::Conf)) + " keys (sizes take K, M, G, T: binary units):\n";
  for (const OptionRow* r : rows_of(Scope::ConfKey)) out += entry(r->name, r->accepts + default_note(r->default_value));
  return out;
}

// The help section as it stands in tools/pagefast-run: a quoted here-document.
std::string help_section() { return "  cat <<'OPTIONS'\n" + help_text() + "OPTIONS\n"; }

bool section_text(const std::string& name, std::string* out) {
  if (name == "help") *out = help_section();
  else if (name == "variables" || name == "foreign" || name == "keys") *out = markdown(name);
  else return false;
  return true;
}

void list_rows() {
  int count = 0;
  const OptionRow* rows = pagefast::option_rows(&count);
  for (int i = 0; i < count; ++i) {
    const OptionRow& r = rows[i];
    const char* scope = r.scope == Scope::Own ? "variable" : r.scope == Scope::Foreign ? "foreign" : "conf key";
    std::printf("%-26s %-8s %-9s default=%-8s%s read by %s: %s\n", r.name, scope, kind_name(r.parser->kind),
                *r.default_value ? r.default_value : "(unset)", r.path ? " path," : "", readers(r).c_str(),
                plain(full_meaning(r)).c_str());
  }
}

// ---- --check and --update -----------------------------------------------

// The marked section a line opens or closes ("begin options:keys ..."),
// or "" when it does neither.
std::string marker(const std::string& line, const char* what) {
  const std::string tag = std::string(what) + " options:";
  const size_t at = line.find(tag);
  if (at == std::string::npos) return "";
  size_t end = at + tag.size();
  while (end < line.size() && (std::islower(static_cast<unsigned char>(line[end])) != 0)) ++end;
  return line.substr(at + tag.size(), end - at - tag.size());
}

// Rebuilds `text` with every marked section generated; false with a
// message for a malformed file. *differs: some section was not current.
// `quiet`: no word on a difference (--update mends it).
bool regenerate(const std::string& file, const std::string& text, bool quiet, std::string* out, bool* differs,
                int* sections) {
  std::istringstream in(text);
  std::string line, open, body;
  *differs = false;
  *sections = 0;
  while (std::getline(in, line)) {
    if (open.empty()) {
      *out += line + "\n";
      open = marker(line, "begin");
      body.clear();
      std::string known;
      if (!open.empty() && !section_text(open, &known)) {
        std::fprintf(stderr, "%s: unknown section options:%s\n", file.c_str(), open.c_str());
        return false;
      }
      continue;
    }
    if (marker(line, "end") == open) {
      std::string want;
      section_text(open, &want);
      if (body != want) *differs = true;
      if (body != want && !quiet) {
        std::fprintf(stderr, "%s: section options:%s is not what the options table gives\n", file.c_str(),
                     open.c_str());
        std::istringstream a(body), b(want);
        std::string la, lb;
        for (int n = 1;; ++n) {
          const bool ga = bool(std::getline(a, la)), gb = bool(std::getline(b, lb));
          if (!ga && !gb) break;
          if (ga && gb && la == lb) continue;
          std::fprintf(stderr, "  first difference, line %d of the section:\n  found: %s\n  table: %s\n", n,
                       ga ? la.c_str() : "(end)", gb ? lb.c_str() : "(end)");
          break;
        }
      }
      *out += want + line + "\n";
      ++*sections;
      open.clear();
      continue;
    }
    body += line + "\n";
  }
  if (!open.empty()) {
    std::fprintf(stderr, "%s: options:%s has no end marker\n", file.c_str(), open.c_str());
    return false;
  }
  if (*sections == 0) {
    std::fprintf(stderr, "%s: no section marked \"begin options:NAME\"\n", file.c_str());
    return false;
  }
  return true;
}

int check_or_update(int argc, char** argv, bool update) {
  int status = 0;
  for (int i = 0; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "%s: cannot read\n", argv[i]);
      status = 1;
      continue;
    }
    std::stringstream text;
    text << in.rdbuf();
    std::string out;
    bool differs = false;
    int sections = 0;
    if (!regenerate(argv[i], text.str(), update, &out, &differs, &sections)) {
      status = 1;
      continue;
    }
    if (update && differs) {
      std::ofstream o(argv[i], std::ios::binary | std::ios::trunc);
      o << out;
      if (!o) {
        std::fprintf(stderr, "%s: cannot write\n", argv[i]);
        status = 1;
        continue;
      }
      std::printf("%s: %d section(s), rewritten\n", argv[i], sections);
    } else if (differs) {
      status = 1;
    } else {
      std::printf("%s: %d section(s), current\n", argv[i], sections);
    }
  }
  if (status && !update) std::fprintf(stderr, "run tools/options/update-docs to regenerate them\n");
  return status;
}

int usage(FILE* to) {
  std::fprintf(to,
               "usage: pagefast-options [--section variables|foreign|keys|help]\n"
               "       pagefast-options --check FILE... | --update FILE...\n"
               "Prints pagefast's options table (every variable and PAGEFAST_CONF key), one\n"
               "generated section of docs/OPTIONS.md or pagefast-run, or checks/rewrites the sections\n"
               "marked \"begin options:NAME\" ... \"end options:NAME\" in FILE.\n");
  return to == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 1) {
    list_rows();
    return 0;
  }
  const std::string op = argv[1];
  if (op == "--help" || op == "-h") return usage(stdout);
  if (op == "--version") {
    std::printf("pagefast-options %s\n", PAGEFAST_VERSION);
    return 0;
  }
  if (op == "--section" && argc == 3) {
    std::string text;
    if (!section_text(argv[2], &text)) return usage(stderr);
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  if ((op == "--check" || op == "--update") && argc > 2) return check_or_update(argc - 2, argv + 2, op == "--update");
  return usage(stderr);
}
