"""transformers' device spec for oxide: its own model tests run on oxide with it.

transformers' test suite (tests/ of its repository, not in its wheel) picks the device
from this file when `TRANSFORMERS_TEST_DEVICE_SPEC` names it. transformers imports the
file by its name, so name it relative to the directory pytest runs in:

    cp tests/huggingface/transformers_device_spec.py <transformers checkout>/
    cd <transformers checkout>
    TRANSFORMERS_TEST_DEVICE_SPEC=transformers_device_spec.py python -m pytest tests/models/gpt2

Tests then create their tensors and models on `torch_device == "oxide"` and reach the
device's seed, cache and count through the functions below (transformers'
`backend_manual_seed`, `backend_empty_cache`, `backend_device_count`).
"""

import torch

import torch_oxide  # noqa: F401  (torch's autoload loads it too; explicit for older set-ups)

DEVICE_NAME = "oxide"

MANUAL_SEED_FN = torch.oxide.manual_seed
EMPTY_CACHE_FN = torch.oxide.empty_cache
DEVICE_COUNT_FN = torch.oxide.device_count
