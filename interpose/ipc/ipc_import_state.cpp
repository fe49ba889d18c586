// interpose/ipc/ipc_import_state.cpp: the importer's state (ipc_import.h):
// its links to the exporters, who talks on each, and the imports with
// their index, all under the importer's mutex, which no request to an
// exporter and no driver call is made under.
#include <unistd.h>

#include <condition_variable>
#include <map>
#include <mutex>

#include "interpose/ipc/ipc_import.h"
#include "interpose/ipc/ipc_internal.h"

namespace pagefast::ipc::detail {

struct ExportKey {
  ExporterKey exporter;
  uint64_t export_id;
  bool operator<(const ExportKey& o) const {
    if (export_id != o.export_id) return export_id < o.export_id;
    return exporter < o.exporter;
  }
};

namespace {

// Links kept after their last import closed (the exporter told that this
// process holds nothing of it): the next open of that exporter's blocks
// needs no new connection, which costs a connect and the check of who
// answers on both sides. The exporter closes a link idle for 30 s; the
// next request then makes a new one.
constexpr size_t kIdleLinks = 8;

// The links and imports (ipc_state.h State::Imports).
State::Imports& imp() { return ipc_state().imports; }

// Whether a link is unused: no thread holds it, nothing is open or being
// opened through it.
bool idle(const Link& link) { return link.users == 0 && !link.busy && link.imports == 0 && link.pending == 0; }

// REQUIRES imp().mutex. Closes the idle link used least recently while
// more than kIdleLinks are idle.
void trim_idle_links() {
  size_t count = 0;
  auto oldest = imp().links->end();
  for (auto it = imp().links->begin(); it != imp().links->end(); ++it) {
    if (!idle(it->second)) continue;
    ++count;
    if (oldest == imp().links->end() || it->second.last_use < oldest->second.last_use) oldest = it;
  }
  if (count <= kIdleLinks) return;
  if (oldest->second.fd >= 0) ::close(oldest->second.fd);
  imp().links->erase(oldest);
}

// REQUIRES imp().mutex. A link nothing is done with any more: kept idle
// for the next open when its exporter was told that this process holds
// nothing of it (`told`: that also ended any hold an open given up on
// took, so their late answers are only read and dropped); else it ends.
void rest_link(const ExporterKey& key, Link* link, bool told) {
  if (!idle(*link)) return;
  if (link->fd >= 0 && told) {
    link->abandoned.clear();
    link->last_use = ++imp().link_clock;
    trim_idle_links();
    return;
  }
  if (link->fd >= 0) ::close(link->fd);
  imp().links->erase(key);
}

}  // namespace

std::mutex& import_mutex() { return imp().mutex; }
std::condition_variable& import_cv() { return *imp().cv; }

void own_state() {
  if (!imp().links) {
    auto* cv = new std::condition_variable();
    auto* by_export = new std::map<ExportKey, CUdeviceptr>();
    auto* imports = new std::map<CUdeviceptr, Import>();
    imp().links = new std::map<ExporterKey, Link>();
    imp().imports = imports;
    imp().by_export = by_export;
    imp().cv = cv;
  }
  // A forked child inherits its parent's links, whose connections say the
  // parent (SO_PEERCRED is fixed at connect), and its imports: it must
  // never speak for the parent, so it starts with none. (The parent's
  // other threads are not in the child: nothing of theirs is waited for.)
  // The fork handler cleared `owned` (ipc_common.cpp after_fork_child).
  if (imp().owned) return;
  for (auto& link : *imp().links)
    if (link.second.fd >= 0) ::close(link.second.fd);
  imp().links->clear();
  imp().imports->clear();
  imp().by_export->clear();
  chunks_forget();
  imp().owned = true;
}

Link* use_link(const ExporterKey& key) {
  auto it = imp().links->find(key);
  if (it == imp().links->end())
    it = imp().links->emplace(key, Link()).first;  // may throw: the link of an import is there
  Link* link = &it->second;
  link->last_use = ++imp().link_clock;
  ++link->users;
  return link;
}

void own_link(std::unique_lock<std::mutex>& lock, Link* link) {
  while (link->busy) imp().cv->wait(lock);
  link->busy = true;
}

void free_link(Link* link) {
  link->busy = false;
  imp().cv->notify_all();
}

void leave_link(std::unique_lock<std::mutex>& lock, const ExporterKey& key, Link* link, uint64_t export_id,
                bool owned) {
  if (!owned) own_link(lock, link);
  // Decided while this thread owns the link: an open that counts itself
  // after this goes out after this request, on the same connection, so a
  // release-all never ends a hold an open here took.
  const bool nothing = link->imports == 0 && link->pending == 0;
  bool told = false;
  if (nothing || export_id) {
    lock.unlock();
    told = send_with_reconnect(*link, key, nothing ? wire::kOpReleaseAll : wire::kOpClose, export_id);
    lock.lock();
  }
  free_link(link);
  --link->users;
  rest_link(key, link, nothing && told);
}

bool open_again_or_claim(std::unique_lock<std::mutex>& lock, const ExporterKey& key, uint64_t export_id,
                         CUdeviceptr* pdptr) {
  const ExportKey ek{key, export_id};
  for (;;) {
    auto it = imp().by_export->find(ek);
    if (it == imp().by_export->end()) break;
    auto open = it->second != 0 ? imp().imports->find(it->second) : imp().imports->end();
    if (open != imp().imports->end()) {
      // Opened here already: the same pointer, one more reference, as the
      // driver answers.
      ++open->second.refs;
      *pdptr = open->first;
      return true;
    }
    imp().cv->wait(lock);  // another thread opens it now
  }
  imp().by_export->emplace(ek, 0);
  return false;
}

bool claim_done(const ExporterKey& key, uint64_t export_id, CUdeviceptr ptr, const Import* import) {
  const ExportKey ek{key, export_id};
  imp().cv->notify_all();
  if (import) {
    try {
      imp().imports->emplace(ptr, *import);
      (*imp().by_export)[ek] = ptr;  // the claim's entry: no allocation
      return true;
    } catch (...) {
      imp().imports->erase(ptr);
    }
  }
  imp().by_export->erase(ek);
  return false;
}

bool drop_import(CUdeviceptr ptr, bool* last, Import* out) {
  if (!imp().imports) return false;
  own_state();
  auto it = imp().imports->find(ptr);
  if (it == imp().imports->end()) return false;
  *last = --it->second.refs == 0;
  if (!*last) return true;
  *out = it->second;
  imp().by_export->erase(ExportKey{out->key, out->export_id});
  imp().imports->erase(it);
  return true;
}

void import_totals(uint64_t* count, uint64_t* bytes) {
  *count = *bytes = 0;
  if (!imp().imports || !imp().owned) return;
  for (const auto& entry : *imp().imports) {
    ++*count;
    *bytes += entry.second.map_bytes;
  }
}

}  // namespace pagefast::ipc::detail
