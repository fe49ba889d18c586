// interpose/service_thread.cpp: see service_thread.h.
#include "interpose/service_thread.h"

#include <signal.h>

namespace pagefast {

int start_service_thread(pthread_t* thread, void* (*main)(void*), void* arg, const char* name) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (!thread) pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t created;
  const int err = pthread_create(&created, &attr, main, arg);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (err != 0) return err;
  pthread_setname_np(created, name);
  if (thread) *thread = created;
  return 0;
}

}  // namespace pagefast
