// tests/fakecuda/multicast.cpp: multicast objects, as bookkeeping only
// (no memory moves through them):
//
//   cuMulticastCreate     a new handle value for an object of prop->size bytes
//   cuMulticastAddDevice  a device of the fake joins it
//   cuMulticastBindMem    memory of a live handle (its value as the driver
//                         knows it) bound at an offset of the object
//   cuMulticastBindAddr   the same, by a mapped address
//   cuMulticastUnbind     what a device bound at an offset, unbound
//
// Each answers CUDA_ERROR_INVALID_VALUE for an object, a handle or an
// address it does not know, or a range past the end of either, so that a
// test sees a handle value that names nothing at the driver any more.
#include <map>

#include "api_list.h"
#include "state.h"

using namespace fake;

namespace {

// REQUIRES state().mu. Object handle -> its size in bytes.
std::map<CUmemGenericAllocationHandle, size_t>& objects() {
  static auto* known = new std::map<CUmemGenericAllocationHandle, size_t>();
  return *known;
}

// REQUIRES state().mu.
bool in_object(CUmemGenericAllocationHandle mc_handle, size_t offset, size_t size) {
  auto it = objects().find(mc_handle);
  return it != objects().end() && size != 0 && offset <= it->second && size <= it->second - offset;
}

}  // namespace

CUresult impl::cuMulticastCreate(CUmemGenericAllocationHandle* mc_handle,
                                 const CUmulticastObjectProp* prop) {
  FAKE_REQUIRE_INIT();
  if (!mc_handle || !prop || prop->size == 0 || prop->numDevices == 0)
    return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  *mc_handle = state().next_handle++;
  objects()[*mc_handle] = prop->size;
  return CUDA_SUCCESS;
}

CUresult impl::cuMulticastAddDevice(CUmemGenericAllocationHandle mc_handle, CUdevice dev) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!objects().count(mc_handle) || dev < 0 || size_t(dev) >= state().devices.size())
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult impl::cuMulticastBindMem(CUmemGenericAllocationHandle mc_handle, size_t mc_offset,
                                  CUmemGenericAllocationHandle mem_handle, size_t mem_offset,
                                  size_t size, unsigned long long flags) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  auto it = state().handles.find(mem_handle);
  if (flags != 0 || !in_object(mc_handle, mc_offset, size) || it == state().handles.end() ||
      mem_offset > it->second->bytes || size > it->second->bytes - mem_offset)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult impl::cuMulticastBindAddr(CUmemGenericAllocationHandle mc_handle, size_t mc_offset,
                                   CUdeviceptr memptr, size_t size, unsigned long long flags) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  const uintptr_t where = uintptr_t(memptr);
  if (flags != 0 || !in_object(mc_handle, mc_offset, size) ||
      !find_mapping(find_reservation(where), where))
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult impl::cuMulticastUnbind(CUmemGenericAllocationHandle mc_handle, CUdevice dev,
                                 size_t mc_offset, size_t size) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!in_object(mc_handle, mc_offset, size) || dev < 0 || size_t(dev) >= state().devices.size())
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
