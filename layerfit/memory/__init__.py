"""THE memory model: how much VRAM and RAM a layout needs, and llama.cpp's layer-split rules.

Every engine and the checker go through this module; nothing else computes claims.

llama.cpp semantics followed here:

* Devices are ordered RPC servers first, then the main worker's GPUs; ``-ts`` indexes that order.
* With ``OUTPUT_FIRST`` (llama.cpp since December 2025) ``-ngl k`` offloads the output layer and
  the last ``k-1`` blocks; with ``OUTPUT_LAST`` (older builds) the last ``k`` blocks, and the
  output layer only when ``k`` exceeds the block count.
* Offloaded layers are contiguous per device in device order; the output layer is the last one.
* Per device: role fixed cost + its blocks' weights and KV + output layer if it holds it + the
  role's compute buffer (the partial-offload size when any layer stays on the host, the
  multi-device size when a full offload spans several devices) + the logits buffer on the device
  holding the output layer + the input copies on the first device of a multi-device offload.
* Host RAM of the main worker: fixed + kept blocks (host weight size and KV) + token embedding +
  output layer if kept + host compute buffer + the KV cache kept on the host whatever the layout
  (``-nkvo``). Each rpc-server costs its worker a fixed amount.
* MoE: a GPU-resident block whose experts stay on the host (``Layout.host_expert_blocks``) costs
  its device the block less its expert tensors, and the main worker's RAM those tensors (host
  expert size, per the mmap policy). Such a layout runs with tensor overrides, which switch off
  llama.cpp's pipeline parallelism and leave weights on the host: it is priced with the
  partial-offload compute buffers.
"""

from layerfit.memory.kinds import keeps_scan, kinds_entry, range_kinds
from layerfit.memory.layout_claims import claims
from layerfit.memory.pieces import (
    MainHostOverhead,
    block_prefix_bytes,
    device_compute_bytes,
    device_overhead_bytes,
    host_expert_bytes,
    host_prefix_bytes,
    is_partial,
    main_host_overhead,
    main_host_overhead_bytes,
)
from layerfit.memory.splits import (
    device_blocks,
    gpu_layers_flag,
    layer_devices,
    layout_from_flags,
    make_layout,
    output_offloaded_for,
    split_layers,
    tensor_split_counts,
    used_device_blocks,
)

__all__ = [
    "MainHostOverhead",
    "block_prefix_bytes",
    "claims",
    "device_blocks",
    "device_compute_bytes",
    "device_overhead_bytes",
    "gpu_layers_flag",
    "host_expert_bytes",
    "host_prefix_bytes",
    "is_partial",
    "keeps_scan",
    "kinds_entry",
    "layer_devices",
    "layout_from_flags",
    "main_host_overhead",
    "main_host_overhead_bytes",
    "make_layout",
    "output_offloaded_for",
    "range_kinds",
    "split_layers",
    "tensor_split_counts",
    "used_device_blocks",
]
