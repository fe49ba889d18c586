// numa/device_select.h: which GPU this process will use, decided as CUDA
// would, but without CUDA: the local rank (LOCAL_RANK, SLURM_LOCALID,
// OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID; the first one set wins)
// taken as an ordinal into the devices CUDA_VISIBLE_DEVICES leaves, or
// numa:gpu=<n> instead of the rank. Pure: the environment comes in as
// StartEnv, read once by read_start_env.
//
// Ordinals follow PCI bus order, whatever CUDA_DEVICE_ORDER says: without
// CUDA, "fastest first" cannot be known, and on the machines this is for
// (identical GPUs) CUDA's fastest-first order is PCI bus order too. The
// check after the first context (check_device) corrects a wrong guess.
#pragma once

#include <string>
#include <vector>

#include "numa/topology.h"
#include "policy/config.h"
#include "policy/options.h"

namespace pagefast::numa {

// In the order they are consulted. LOCAL_RANK: torchrun, DeepSpeed,
// Accelerate; SLURM_LOCALID: srun; OMPI_...: Open MPI; MPI_LOCALRANKID:
// MPICH and Intel MPI.
inline constexpr Opt kLocalRankVars[] = {Opt::LocalRank, Opt::SlurmLocalId, Opt::OmpiLocalRank, Opt::MpiLocalRankId};

struct StartEnv {
  std::string rank_var;   // the variable that gave the rank; "" when none is set
  std::string rank_text;  // its value as given
  bool visible_set = false;
  std::string visible_devices;  // CUDA_VISIBLE_DEVICES
  std::string device_order;     // CUDA_DEVICE_ORDER, for the report only
  std::string bound_cpus;       // PAGEFAST_NUMA_BOUND: the CPUs pagefast bound an ancestor to
};

// A variable set to the empty string counts as unset (launchers export
// empty variables more often than they mean "rank ''"), except
// CUDA_VISIBLE_DEVICES, where "" means "no GPU" to CUDA as well.
StartEnv read_start_env(EnvLookup lookup, void* user);

// One entry of CUDA_VISIBLE_DEVICES that named a device.
struct VisibleDevice {
  std::string token;  // as written
  int gpu = -1;       // index into Topology::gpus; -1: a MIG instance whose parent is unknown
};

struct VisibleDevices {
  std::vector<VisibleDevice> devices;  // ordinal i is devices[i]
  std::string stopped_at;              // the first entry that named nothing, "" if none did
};

// CUDA's rules: unset means every GPU in order; entries are indexes,
// "GPU-<uuid>" or a unique prefix of one, "MIG-GPU-<uuid>/<gi>/<ci>" (the
// old form, whose parent is in the name) or "MIG-<uuid>" (resolved through
// Topology::mig_parents, or trivially on a one-GPU machine); the list ends
// at the first entry that names nothing. When the UUIDs were not read
// (Topology::uuids_read, one-node machines), a UUID entry is treated like
// a MIG id whose parent is unknown. Our one addition: an entry naming
// a GPU already listed also ends it (two ordinals for one GPU is almost
// surely a typo, and it cannot change which node is nearest).
VisibleDevices resolve_visible(const StartEnv& env, const Topology& topo);

// Whether CUDA_VISIBLE_DEVICES has an entry that only a UUID resolves
// (GPU-..., MIG-GPU-...): then the start reads the information files.
bool visible_needs_uuids(const StartEnv& env);

// CUDA_VISIBLE_DEVICES split at commas, entries trimmed.
std::vector<std::string> split_visible(const std::string& text);

enum class ChoiceStatus {
  Chosen,
  NoGpu,          // nothing visible: nothing to bind, not an error
  ParentUnknown,  // a MIG instance whose GPU could not be found
  Invalid,        // a rank or numa:gpu value that makes no sense: warn
};

struct DeviceChoice {
  ChoiceStatus status = ChoiceStatus::NoGpu;
  std::string who;  // "rank 1", "numa:gpu=2": the start of the info line
  int rank = -1;
  int ordinal = -1;   // the CUDA device ordinal inside the process
  int gpu = -1;       // index into Topology::gpus when status is Chosen
  std::string label;  // the bus id, or the entry as written when unresolved
  std::string why;    // a clause explaining a non-obvious choice or a failure
};

// REQUIRES: gpu_override is NumaConfig::gpu (-1: choose from the rank).
// A rank past the visible devices uses the only one when there is one (one
// GPU per task, Slurm's --gpus-per-task style); with several, it wraps
// (rank % count), which is what launchers that hand out devices round-robin do.
DeviceChoice choose_device(const StartEnv& env, const Topology& topo, int gpu_override);

}  // namespace pagefast::numa
