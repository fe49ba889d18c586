/* compat/glibc_base.h: the oldest symbol version of this architecture's
 * glibc, which every glibc since names (docs/PACKAGING.md). The compat/
 * forwarders bind to it, and interpose/loader.cpp looks the real dlsym up
 * by it first. */
#ifndef PAGEFAST_COMPAT_GLIBC_BASE_H
#define PAGEFAST_COMPAT_GLIBC_BASE_H

#if defined(__x86_64__)
#define PF_GLIBC_BASE "GLIBC_2.2.5"
#define PF_GLIBC_2_3_3 "GLIBC_2.3.3"
#define PF_GLIBC_2_12 "GLIBC_2.12"
#elif defined(__aarch64__)
/* aarch64 began at 2.17: every older version is 2.17 there. */
#define PF_GLIBC_BASE "GLIBC_2.17"
#define PF_GLIBC_2_3_3 PF_GLIBC_BASE
#define PF_GLIBC_2_12 PF_GLIBC_BASE
#endif

#endif
