"""moto's patches as objects: applied and undone as a group, checked against the moto they were written for
(chatstream_local.moto.patch, chatstream_local.moto.fixes)."""

from __future__ import annotations

import importlib.metadata
import inspect
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import moto
import pytest

from chatstream_local.moto.fixes import FIXES, MOTO_VERSION
from chatstream_local.moto.patch import Patch, PatchError, Patches, PatchTargetMoved, sha256_of_source
from tests.support import REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Callable


class Greeter:
    """A throwaway target."""

    def greet(self, name: str) -> str:
        return f"hello {name}"


class Polite(Greeter):
    pass


def _shout(greet: Callable[[Greeter, str], str], self: Greeter, name: str) -> str:
    return greet(self, name).upper()


def _patch(owner: Any = Greeter, name: str = "greet", **checks: Any) -> Patch:
    return Patch(owner, name, _shout, pass_original=True, why="test", measured="none", **checks)


def test_a_patch_wraps_its_target_until_undone() -> None:
    # GIVEN a patch that wraps Greeter.greet
    original = Greeter.greet
    patch = _patch(parameters=("self", "name"), source_sha256=sha256_of_source(Greeter.greet)[:16])
    # WHEN it is applied THEN the replacement runs, with the original passed to it
    patch.apply()
    try:
        assert patch.is_applied and patch.original is original
        assert Greeter().greet("you") == "HELLO YOU"
    finally:
        patch.undo()
    # THEN undo puts back the very function it replaced
    assert not patch.is_applied
    assert Greeter.greet is original and Greeter().greet("you") == "hello you"


def test_undoing_a_patch_of_an_inherited_attribute_inherits_it_again() -> None:
    with Patch(Polite, "greet", lambda self, name: "hi", why="test", measured="none"):
        assert Polite().greet("you") == "hi" and Greeter().greet("you") == "hello you"
    assert "greet" not in vars(Polite) and Polite().greet("you") == "hello you"


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (lambda: _patch(name="salute"), r"\.Greeter\.salute: no such attribute"),
        (
            lambda: _patch(parameters=("self", "who")),
            r"\.Greeter\.greet: parameters \('self', 'name'\), the patch expects \('self', 'who'\)",
        ),
        (lambda: _patch(source_sha256="0123456789abcdef"), r"\.Greeter\.greet: its source changed"),
        (lambda: _patch(uses=("farewell",)), r"\.Greeter\.greet: .*Greeter has no farewell"),
    ],
    ids=["renamed", "parameter renamed", "body changed", "helper gone"],
)
def test_a_patch_whose_target_moved_fails_loudly_naming_it(patch: Callable[[], Patch], message: str) -> None:
    # GIVEN a patch written against a target that is no longer what it expects
    moved = patch()
    # WHEN it is applied THEN it says which target moved, and how, and changes nothing
    with pytest.raises(PatchTargetMoved, match=rf"^tests\.unit\.test_moto_patches{message}"):
        moved.apply()
    assert not moved.is_applied and Greeter().greet("you") == "hello you"


def test_a_registry_with_a_moved_target_applies_nothing_and_names_both_versions() -> None:
    # GIVEN a registry written for another moto, one of whose targets moved
    fits, moved = _patch(), _patch(name="salute")
    patches = Patches([fits, moved], package="moto", written_for="0.0.1")
    # WHEN it is applied THEN it fails, naming the moto it was written for, the installed one and the moved target
    installed = importlib.metadata.version("moto")
    expected = f"chatstream's moto patches were written for moto 0.0.1; installed {installed}: "
    with pytest.raises(PatchTargetMoved, match=re.escape(expected) + r".*Greeter\.salute: no such attribute"):
        patches.apply()
    # THEN the patch that fitted was taken off again
    assert not fits.is_applied and Greeter().greet("you") == "hello you"


def test_a_registry_for_another_version_whose_targets_fit_warns_and_applies() -> None:
    patches = Patches([_patch(parameters=("self", "name"))], package="moto", written_for="0.0.1")
    with pytest.warns(UserWarning, match=r"written for moto 0\.0\.1; installed .*: every target is in place"):
        patches.apply()
    try:
        assert patches.is_applied and Greeter().greet("you") == "HELLO YOU"
    finally:
        patches.undo()
    assert Greeter().greet("you") == "hello you"


def test_stacked_patches_come_off_in_the_reverse_order() -> None:
    # GIVEN two patches on one attribute, applied as a group
    inner = _patch()
    outer = Patch(
        Greeter, "greet", lambda greet, self, name: greet(self, name) + "!", pass_original=True, why="", measured=""
    )
    patches = Patches([inner, outer], package="moto", written_for=importlib.metadata.version("moto"))
    patches.apply()
    try:
        assert Greeter().greet("you") == "HELLO YOU!"
        # WHEN the one underneath is undone first THEN it refuses, naming the target
        with pytest.raises(PatchError, match=r"Greeter\.greet was replaced again after this patch"):
            inner.undo()
    finally:
        patches.undo()
    # THEN the group's undo took both off
    assert Greeter().greet("you") == "hello you"


def test_the_session_runs_with_every_fix_applied() -> None:
    assert FIXES.is_applied


def test_undo_restores_motos_own_functions() -> None:
    # GIVEN the session's patches, applied
    patched = {id(patch): getattr(patch.owner, patch.name) for patch in FIXES}
    originals = {id(patch): patch.original for patch in FIXES}
    moto_package = Path(moto.__file__).parent
    # WHEN they are undone
    FIXES.undo()
    try:
        # THEN each target is the function moto defines, and none of ours
        for patch in FIXES:
            restored = getattr(patch.owner, patch.name)
            assert not patch.is_applied
            assert restored is not patched[id(patch)]
            assert Path(inspect.unwrap(restored).__code__.co_filename).is_relative_to(moto_package), patch.target
            assert not hasattr(restored, "__wrapped__"), patch.target
        # (the first patch on each attribute found moto's own function there)
        assert all(originals[id(patch)] is getattr(patch.owner, patch.name) for patch in _first_on_each_attribute())
    finally:
        FIXES.apply()
    assert FIXES.is_applied


def _first_on_each_attribute() -> list[Patch]:
    first: dict[tuple[int, str], Patch] = {}
    for patch in FIXES:
        first.setdefault((id(patch.owner), patch.name), patch)
    return list(first.values())


def test_the_patches_are_written_for_the_moto_the_requirements_pin() -> None:
    pins = (REPO_ROOT / "requirements" / "dev.txt").read_text(encoding="utf-8").splitlines()
    assert f"moto=={MOTO_VERSION}" in pins
    assert FIXES.written_for == MOTO_VERSION == importlib.metadata.version("moto")


def test_every_patch_says_why_and_what_was_measured_and_the_docs_list_it() -> None:
    docs = (REPO_ROOT / "docs" / "LOCAL_STACK.md").read_text(encoding="utf-8")
    section = docs.split("## moto and its patches", 1)[1]
    for patch in FIXES:
        assert patch.why and patch.measured, patch.target
        assert f"`{patch.target}`" in section, f"docs/LOCAL_STACK.md does not list {patch.target}"


def test_the_moto_server_refuses_to_start_with_one_line_when_a_target_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.kinesis.models import Shard

    from chatstream_local.moto import server

    # GIVEN a moto whose shard lost a method a patch replaces
    FIXES.undo()
    try:
        monkeypatch.delattr(Shard, "get_max_sequence_number")
        # WHEN the local stack's moto server starts THEN it exits with one line naming the target and the versions
        expected = (
            f"moto server: chatstream's moto patches were written for moto {MOTO_VERSION}; installed "
            f"{importlib.metadata.version('moto')}: moto.kinesis.models.Shard.get_max_sequence_number: "
            "no such attribute"
        )
        with pytest.raises(SystemExit, match=f"^{re.escape(expected)}$"):
            server.main(["-H", "127.0.0.1", "-p", "0"])
        # THEN no patch was left applied
        assert not any(patch.is_applied for patch in FIXES)
    finally:
        monkeypatch.undo()
        FIXES.apply()
