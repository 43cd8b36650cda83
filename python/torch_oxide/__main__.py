"""``python -m torch_oxide``: print an environment report."""

import os
import platform

import torch

import torch_oxide
from torch_oxide import oxide


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def main() -> None:
    print(f"torch-oxide {torch_oxide.__version__}")
    print(f"torch {torch.__version__} (C++ ABI cxx11={torch._C._GLIBCXX_USE_CXX11_ABI})")
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"accelerator: {torch.accelerator.current_accelerator()}")
    print(f"available: {oxide.is_available()}, devices: {oxide.device_count()}")
    for i in range(oxide.device_count()):
        free, total = oxide.mem_get_info(i)
        print(
            f"  oxide:{i}: capacity {_gib(total)}, allocated {_gib(oxide.memory_allocated(i))}, "
            f"reserved {_gib(oxide.memory_reserved(i))}, free {_gib(free)}"
        )
    print(f"fallback mode: {oxide.get_fallback_mode()} (OXIDE_FALLBACK)")
    stats = oxide.fallback_stats()
    print(f"fallback calls so far: {sum(stats.values())} over {len(stats)} operators")


if __name__ == "__main__":
    main()
