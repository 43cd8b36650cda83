"""torch-oxide: the ``oxide`` PyTorch device, a PrivateUse1 backend with a Rust runtime.

Importing this package (or just ``import torch``, through the ``torch.backends``
entry point) renames PrivateUse1 to ``oxide``, registers the device module as
``torch.oxide`` and adds the ``Tensor.oxide()`` / ``Module.oxide()`` /
``Storage.oxide()`` / ``PackedSequence.oxide()`` family of methods.
"""


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: importing this package did the work.

    Defined before ``import torch``: when a program imports ``torch_oxide`` first,
    torch's own autoload looks this function up on the partially imported package.
    """


import torch  # noqa: E402  first: the extension resolves c10 and torch_cpu from the loaded torch

from . import _C  # noqa: E402
from . import oxide  # noqa: E402

__version__ = _C.__version__
__all__ = ["oxide", "__version__"]

_BACKEND = "oxide"


def _register() -> None:
    if torch._C._get_privateuse1_backend_name() != _BACKEND:
        torch.utils.rename_privateuse1_backend(_BACKEND)
    torch._register_device_module(_BACKEND, oxide)
    if not hasattr(torch.Tensor, _BACKEND):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )


if not hasattr(torch, _BACKEND):
    _register()


def __getattr__(name: str):
    # `torch_oxide.coverage` on first use: importing it eagerly would make
    # `python -m torch_oxide.coverage` warn that the module was already imported.
    if name == "coverage":
        import importlib

        return importlib.import_module(".coverage", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
