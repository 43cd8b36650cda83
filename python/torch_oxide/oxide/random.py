"""Random-number state of the oxide devices, shaped like ``torch.cuda.random``.

Each device has one default generator (created by the C++ hooks); these functions
seed and snapshot them. ``torch.manual_seed(s)`` reaches :func:`manual_seed_all`.
A generator state is a ``torch.uint8`` CPU tensor.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = [
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
    "get_rng_state",
    "get_rng_state_all",
    "set_rng_state",
    "set_rng_state_all",
]


def _default_generator(device: int | str | torch.device | None) -> torch.Generator:
    from . import _device_index, _lazy_init

    _lazy_init()
    return torch._C._accelerator_getDefaultGenerator(_device_index(device))


def _all_generators() -> list[torch.Generator]:
    from . import device_count

    return [_default_generator(i) for i in range(device_count())]


def manual_seed(seed: int) -> None:
    """Seed the current device's default generator."""
    _default_generator(None).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed the default generator of every oxide device."""
    for g in _all_generators():
        g.manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's default generator with a non-deterministic value."""
    _default_generator(None).seed()


def seed_all() -> None:
    """Seed every device with one non-deterministic value."""
    gens = _all_generators()
    if gens:
        s = gens[0].seed()
        for g in gens[1:]:
            g.manual_seed(s)


def initial_seed() -> int:
    """The seed of the current device's default generator."""
    return _default_generator(None).initial_seed()


def get_rng_state(device: int | str | torch.device = "oxide") -> torch.Tensor:
    """State of ``device``'s default generator as a uint8 CPU tensor."""
    return _default_generator(device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    """States of every device's default generator."""
    return [g.get_state() for g in _all_generators()]


def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device = "oxide") -> None:
    """Restore ``device``'s default generator from :func:`get_rng_state`."""
    _default_generator(device).set_state(new_state.clone(memory_format=torch.contiguous_format))


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    """Restore every device's default generator."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
