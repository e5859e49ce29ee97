// voltad's exit codes, named; docs/OPERATIONS.md lists them. Values follow
// sysexits(3) where one fits, so systemd and operators read them the same way.
#pragma once

namespace voltad {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,        // an error not covered below
  kExitUsage = 64,         // bad command line
  kExitModelData = 65,     // the model file is invalid, unsupported or unreadable
  kExitTopologyData = 65,  // --print-placement: hwloc cannot read the --topology-xml file
  kExitNoModel = 66,       // no regular file at the model's path
  kExitNoTopology = 66,    // --print-placement: the --topology-xml file cannot be read
  kExitUnavailable = 69,   // no usable GPU (no driver, no device, too old)
  kExitInternal = 70,      // a bug or an unusable CUDA context
  kExitCantCreate = 73,    // the socket could not be created (path in use, permissions)
  kExitPlacement = 74,     // the config names a device this machine lacks, or placement.strict
                           // and the placement could not be applied
  kExitVramBudget = 75,    // the memory plan does not fit the card's budget (or the cpu
                           // backend's KV cache the machine's memory)
  kExitConfig = 78,        // the config file is invalid
};

}  // namespace voltad
