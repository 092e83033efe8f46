"""Monkey-patches as objects you can see, check and undo, in the shape of LocalStack's ``localstack/utils/patch.py``.

A :class:`Patch` names its target (an object and one of its attributes), the replacement, why it is there and the
measurement that justified it. ``apply()`` installs the replacement and ``undo()`` puts back what was there. With
``pass_original`` the replacement is called with the original first (``new(original, *args, **kwargs)``), so a patch
can wrap what it replaces. :class:`Patches` is a registry: it applies its patches in order (patches stacked on one
attribute go on in that order) and undoes them in the reverse order.

A patch is written against one version of the code it patches. Before it installs anything, a patch checks that
its target is still what it was written against, and raises :class:`PatchTargetMoved`, naming the target, when it
is not:

- the attribute exists (and so does each attribute of the owner listed in ``uses``);
- ``parameters``: the target's parameter names, in order (:func:`inspect.signature`), where the patch calls the
  original or binds its arguments by name, or is called with the target's argument layout;
- ``source_sha256``: the start of the SHA-256 of the target's source (:func:`sha256_of_source`), where the patch
  depends on the target's body: it replaces it, or changes what the body does.

:class:`Patches` also names the version of the patched package its patches were written for: when a target has
moved, its error says which version is installed; when the installed version differs and every target is still in
place, it warns.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from types import TracebackType

_ABSENT = object()  # the owner had no attribute of its own by the patch's name (it inherited one)


class PatchError(Exception):
    """A patch cannot be applied or undone."""


class PatchTargetMoved(PatchError):
    """A patch's target is not there, or is not what the patch was written against."""


def sha256_of_source(target: Any) -> str:
    """The SHA-256 (hex) of ``target``'s source text, as :func:`inspect.getsource` reads it."""
    return hashlib.sha256(inspect.getsource(target).encode()).hexdigest()


def _qualified(owner: Any) -> str:
    if inspect.ismodule(owner):
        return owner.__name__
    if inspect.isclass(owner):
        return f"{owner.__module__}.{owner.__qualname__}"
    return f"{type(owner).__module__}.{type(owner).__qualname__} instance"


class Patch:
    """One replaced attribute: ``owner.name`` becomes ``new`` while the patch is applied."""

    def __init__(
        self,
        owner: Any,
        name: str,
        new: Callable[..., Any],
        *,
        why: str,
        measured: str,
        pass_original: bool = False,
        parameters: tuple[str, ...] | None = None,
        source_sha256: str | None = None,
        uses: tuple[str, ...] = (),
    ) -> None:
        self.owner = owner
        self.name = name
        self.new = new
        self.why = why  # what goes wrong without it, and what the replacement does instead
        self.measured = measured  # the measurement (or the test) that justified it
        self.pass_original = pass_original
        self.parameters = parameters
        self.source_sha256 = source_sha256
        self.uses = uses
        self.original: Any = None  # the target as apply() found it
        self._own: Any = _ABSENT  # the owner's own attribute as apply() found it, which undo() puts back
        self._installed: Any = None

    @property
    def target(self) -> str:
        """The patched attribute's full name, e.g. ``moto.kinesis.models.Shard.get_records``."""
        return f"{_qualified(self.owner)}.{self.name}"

    @property
    def is_applied(self) -> bool:
        return self._installed is not None

    def check(self) -> None:
        """Raise :class:`PatchTargetMoved` unless the target is what this patch was written against."""
        current = getattr(self.owner, self.name, _ABSENT)
        if current is _ABSENT:
            raise PatchTargetMoved(f"{self.target}: no such attribute")
        missing = [used for used in self.uses if not hasattr(self.owner, used)]
        if missing:
            raise PatchTargetMoved(f"{self.target}: {_qualified(self.owner)} has no {', '.join(missing)}")
        if self.parameters is not None:
            found = _parameter_names(current)
            if found != self.parameters:
                raise PatchTargetMoved(f"{self.target}: parameters {found}, the patch expects {self.parameters}")
        if self.source_sha256 is not None:
            try:
                digest = sha256_of_source(current)
            except (OSError, TypeError) as err:
                raise PatchTargetMoved(f"{self.target}: its source cannot be read ({err})") from err
            if not digest.startswith(self.source_sha256):
                raise PatchTargetMoved(
                    f"{self.target}: its source changed (sha256 {digest[: len(self.source_sha256)]}, "
                    f"the patch was written against {self.source_sha256})"
                )

    def apply(self) -> None:
        """Check the target and install the replacement; nothing to do when already applied."""
        if self.is_applied:
            return
        self.check()
        self._own = vars(self.owner).get(self.name, _ABSENT)
        self.original = getattr(self.owner, self.name)
        installed = self._wrap(self.original) if self.pass_original else self.new
        setattr(self.owner, self.name, installed)
        self._installed = installed

    def undo(self) -> None:
        """Put back what :meth:`apply` replaced; nothing to do when not applied."""
        if not self.is_applied:
            return
        if vars(self.owner).get(self.name, _ABSENT) is not self._installed:
            raise PatchError(f"{self.target} was replaced again after this patch: undo that first")
        if self._own is _ABSENT:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self._own)
        self._installed = None
        self.original = None

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        new = self.new

        @functools.wraps(original)  # the original's name and signature, so a patch stacked on this one can check it
        def patched(*args: Any, **kwargs: Any) -> Any:
            return new(original, *args, **kwargs)

        return patched

    def __enter__(self) -> Patch:
        self.apply()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.undo()

    def __str__(self) -> str:
        return f"Patch({self.target}, applied={self.is_applied})"


def _parameter_names(target: Any) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return ()


class Patches:
    """A registry of patches written for one version of one package, applied and undone as a group."""

    def __init__(self, patches: Iterable[Patch], *, package: str, written_for: str) -> None:
        self.patches = list(patches)
        self.package = package
        self.written_for = written_for

    def __iter__(self) -> Iterator[Patch]:
        return iter(self.patches)

    @property
    def is_applied(self) -> bool:
        return all(patch.is_applied for patch in self.patches)

    def installed_version(self) -> str:
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return "none"

    def apply(self) -> None:
        """Apply every patch, in order; when any target moved, apply none and raise :class:`PatchTargetMoved`
        naming every moved target and the two versions."""
        applied: list[Patch] = []
        moved: list[str] = []
        try:
            for patch in self.patches:
                if patch.is_applied:
                    continue
                try:
                    patch.apply()
                except PatchTargetMoved as err:
                    moved.append(str(err))
                    continue
                applied.append(patch)
            if moved:
                raise PatchTargetMoved(f"{self._versions(self.installed_version())}: {'; '.join(moved)}")
        except BaseException:
            for patch in reversed(applied):
                patch.undo()
            raise
        installed = self.installed_version()
        if installed != self.written_for:
            warnings.warn(
                f"{self._versions(installed)}: every target is in place, but check each patch against "
                f"{self.package} {installed} before relying on it",
                stacklevel=2,
            )

    def undo(self) -> None:
        """Undo every applied patch, in the reverse order."""
        for patch in reversed(self.patches):
            patch.undo()

    def _versions(self, installed: str) -> str:
        return (
            f"chatstream's {self.package} patches were written for {self.package} {self.written_for}; "
            f"installed {installed}"
        )
