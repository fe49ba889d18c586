// interpose/capi_export.h: the one definition of PF_EXPORT, for the C API
// (interpose/pagefast.h) and the driver's entry points (doors.cpp): the
// library is built with hidden visibility, and only these names, listed in
// interpose/exports.map, leave it.
#pragma once

#define PF_EXPORT extern "C" __attribute__((visibility("default")))
