"""Drop-in for ``pyhf.events``, pyhf's callbacks on backend changes: nextstat's models follow
``set_backend`` without them, so callbacks can be registered and triggered but nothing of
nextstat's listens."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

__all__ = ["subscribe", "trigger", "register", "noop"]

_callbacks: Dict[str, List[Callable[..., Any]]] = {}


def noop(*args: Any, **kwargs: Any) -> None:
    """A callback that does nothing."""


def subscribe(event: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: call the function whenever ``event`` is triggered."""

    def add(function: Callable[..., Any]) -> Callable[..., Any]:
        _callbacks.setdefault(event, []).append(function)
        return function

    return add


def trigger(event: str) -> Callable[..., None]:
    """The function that calls every callback of ``event``."""

    def call(*args: Any, **kwargs: Any) -> None:
        for function in list(_callbacks.get(event, [])):
            function(*args, **kwargs)

    return call


def register(event: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: the function, then the callbacks of ``event``, on each call."""

    def wrap(function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            trigger(event)()
            return result

        return wrapped

    return wrap
