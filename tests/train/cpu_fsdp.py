"""Run a script with accelerate's FSDP on CPU processes (gloo), under ``accelerate launch``:

    accelerate launch --config_file configs/accelerate/fsdp.yaml --num_processes 2 \
        tests/train/cpu_fsdp.py -m fathom grpo --config configs/tiny-cpu.toml ...   # or: cpu_fsdp.py SCRIPT ...

accelerate turns an FSDP launch into plain DDP when the processes are CPUs: ``AcceleratorState`` switches to
``DistributedType.FSDP`` only for multi-accelerator types (MULTI_GPU, MULTI_XPU, ...), never MULTI_CPU, so
``accelerate launch --config_file configs/accelerate/fsdp.yaml`` on a machine without GPUs silently trains with
DDP. PyTorch's FSDP2 (``fully_shard``) itself runs on gloo. This shim makes accelerate keep the FSDP plugin
it built from the launch config (``ACCELERATE_USE_FSDP`` and ``FSDP_*``) when the processes are CPUs, so the
real FSDP2 path — wrapping, sharded LoRA parameters, lockstep generation over collective forwards, sharded
checkpoints, the export — runs here on CPUs before a multi-GPU host is lent. Nothing else is changed.
"""

from __future__ import annotations

import functools
import os
import sys


def allow_fsdp_on_cpu() -> None:
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    original = AcceleratorState.__init__
    if getattr(original, "_fathom_cpu_fsdp", False):
        return

    @functools.wraps(original)
    def init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        plugin = kwargs.get("fsdp_plugin")
        if (
            plugin is not None
            and self.distributed_type == DistributedType.MULTI_CPU
            and os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
        ):
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = plugin
            # every later AcceleratorState() copies PartialState's fields over its own: change it there too
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    init._fathom_cpu_fsdp = True  # type: ignore[attr-defined]
    AcceleratorState.__init__ = init  # type: ignore[method-assign]


if __name__ == "__main__":
    import runpy

    allow_fsdp_on_cpu()
    if sys.argv[1:2] == ["-m"]:
        sys.argv = [sys.argv[2], *sys.argv[3:]]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    else:
        sys.argv = sys.argv[1:]
        sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
        runpy.run_path(sys.argv[0], run_name="__main__")
