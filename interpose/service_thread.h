// interpose/service_thread.h: the one way pagefast starts a thread of its
// own (the trace writer, the live-stats publisher, the IPC exporter, the
// trim thread): every signal blocked, so that the program's handlers only
// ever run on its own threads; a small stack; named, from the creating
// thread too, so that the thread is visible under its name as soon as the
// call returns (tools and tests look for it by name).
#pragma once

#include <pthread.h>

namespace pagefast {

// Starts `main(arg)`. `thread` may be NULL for a detached thread; else the
// thread is joinable and stored there. Returns 0 or pthread_create's error.
int start_service_thread(pthread_t* thread, void* (*main)(void*), void* arg, const char* name);

}  // namespace pagefast
