"""Resolve the dotted paths of settings.yaml into classes, checked at load time."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from pathlib import Path
from typing import Any, TypeVar

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


def importable_beside(settings_file: Path) -> None:
    """Let dotted paths name modules beside ``settings_file`` or in the working directory,
    as Scrapy does for a project's folder: ``manager: mytask.TitleManager`` finds the
    ``mytask.py`` next to ``settings.yaml`` with no PYTHONPATH to set. The folders go
    last on the path, so a file there never hides an installed package."""
    for folder in (Path.cwd(), settings_file.resolve().parent):
        entry = str(folder)
        if entry not in sys.path:
            sys.path.append(entry)  # after the installed packages: never shadow them


def lazy_names(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` that import each public name on first
    use, from the module ``homes`` names for it: a process that needs a few modules (a
    task's worker process) does not load the whole package.

    Usage, in ``__init__.py``: ``__getattr__, __dir__ = lazy_names(__name__, HOMES)``.
    """
    namespace = sys.modules[package].__dict__

    def get(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(home), name)
        namespace[name] = value
        return value

    def names() -> list[str]:
        return sorted({*namespace, *homes})

    return get, names
