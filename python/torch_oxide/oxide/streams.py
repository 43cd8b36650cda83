"""Streams and events of the oxide devices, shaped like ``torch.cuda``'s.

:class:`Stream` subclasses the generic ``torch.Stream`` and :func:`Event` makes
``torch.Event`` objects (both reach the C++ DeviceGuardImpl), with the CUDA-style
helpers. Work is enqueued on the current stream of the current device.
"""

from __future__ import annotations

import torch

__all__ = [
    "Stream",
    "Event",
    "StreamContext",
    "stream",
    "current_stream",
    "default_stream",
    "set_stream",
    "is_current_stream_capturing",
]

_DeviceLike = int | str | torch.device | None


def _index(device: _DeviceLike) -> int:
    """A valid device index for ``device`` (None or -1: the current device).

    Raises RuntimeError for an index outside ``0..device_count()-1``, as the
    ``torch.cuda`` stream functions do.
    """
    from . import _C, _device_index, _lazy_init, current_device

    _lazy_init()
    idx = _device_index(device)
    if idx == -1:
        return current_device()
    _C.check_device(idx)
    return idx


class Stream(torch.Stream):
    """An ordered queue of work on one oxide device.

    ``Stream(device=None, priority=0)`` creates a new stream on ``device`` (current
    device when None). Raises RuntimeError for an invalid device.
    """

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:  # wrapping an existing stream (see current_stream)
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("oxide", _index(device)), priority=priority)

    @property
    def oxide_stream(self) -> int:
        """The runtime's id of this stream (0 = the device's default stream)."""
        return self.stream_id

    def wait_event(self, event: torch.Event) -> None:
        """Make later work on this stream wait for ``event``."""
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Make later work on this stream wait for all work queued so far on ``stream``."""
        self.wait_event(stream.record_event())

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        """Record ``event`` (a new one when None) on this stream and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def __eq__(self, other) -> bool:
        return isinstance(other, torch.Stream) and (self.stream_id, self.device_index, self.device_type) == (
            other.stream_id,
            other.device_index,
            other.device_type,
        )

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_index, self.device_type))

    def __repr__(self) -> str:
        return f"<torch.oxide.Stream device=oxide:{self.device_index} oxide_stream={self.stream_id}>"


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
    """A marker in an oxide stream: a ``torch.Event`` on the oxide device.

    ``record(stream=None)`` and ``wait(stream=None)`` default to the current stream;
    ``elapsed_time(end)`` returns milliseconds and needs ``enable_timing=True`` on both
    events. (A factory rather than a subclass: ``torch.Event.elapsed_time`` accepts
    only exact ``torch.Event`` instances.)
    """
    return torch.Event(device="oxide", enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def current_stream(device: _DeviceLike = None) -> Stream:
    """The calling thread's current stream on ``device``."""
    return _wrap(torch.accelerator.current_stream(_index(device)))


def default_stream(device: _DeviceLike = None) -> Stream:
    """The default stream (id 0) of ``device``."""
    idx = _index(device)
    return Stream(stream_id=0, device_index=idx, device_type=torch.Stream(device="oxide").device_type)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` current on its device for the calling thread."""
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager selecting ``stream`` (and its device) and restoring both on exit.
    ``None`` makes it a no-op, as ``torch.cuda.StreamContext``."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream
        self._prev_stream: torch.Stream | None = None
        self._prev_device = -1

    def __enter__(self):
        if self.stream is None:
            return self
        from . import current_device, set_device

        self._prev_device = current_device()
        self._prev_stream = torch.accelerator.current_stream(self.stream.device_index)
        if self._prev_device != self.stream.device_index:
            set_device(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)
        return self

    def __exit__(self, *exc) -> bool:
        if self.stream is None:
            return False
        from . import set_device

        torch.accelerator.set_stream(self._prev_stream)
        set_device(self._prev_device)
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    """``with torch.oxide.stream(s):`` runs the block with ``s`` as the current stream."""
    return StreamContext(stream)


def is_current_stream_capturing() -> bool:
    """True while the current stream of the current device captures a graph
    (``torch.accelerator.Graph``), as ``torch.cuda.is_current_stream_capturing``."""
    return torch.accelerator.current_stream().is_capturing()
