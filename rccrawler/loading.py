"""Resolve the dotted paths of settings.yaml into classes, checked at load time."""

from __future__ import annotations

from importlib import import_module
from typing import TypeVar

from rccrawler.exceptions import ConfigError

T = TypeVar("T")


def load_class(key: str, path: str, base: type[T]) -> type[T]:
    """Import ``package.module.Name`` and check that it subclasses ``base``.

    Args:
        key: the settings key that named it, for the error message.
        path: the dotted path.
        base: the class it must extend.
    """
    if not isinstance(path, str):
        raise ConfigError(key, f"must be a dotted path string, not {type(path).__name__}")
    module_name, _, name = path.rpartition(".")
    # Every part a Python name: ".....x.Y" (a relative import) or "a..b" never imports.
    if not module_name or not all(part.isidentifier() for part in path.split(".")):
        raise ConfigError(key, f"{path!r} is not a dotted path like package.module.Class")
    try:
        obj = getattr(import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(key, f"cannot import {path!r} ({exc})") from exc
    except Exception as exc:  # the module itself failed while importing
        raise ConfigError(key, f"cannot import {path!r} ({type(exc).__name__}: {exc})") from exc
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise ConfigError(key, f"{path!r} is not a {base.__name__} subclass")
    return obj


def dotted_path(cls: type) -> str:
    """The dotted path that load_class() would resolve back to ``cls``."""
    return f"{cls.__module__}.{cls.__qualname__}"
