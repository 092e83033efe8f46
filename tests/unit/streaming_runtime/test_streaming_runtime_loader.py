"""Loading the handler named by _HANDLER from LAMBDA_TASK_ROOT."""

from __future__ import annotations

import sys
import uuid
from typing import TYPE_CHECKING

import pytest
from awslambdaric.lambda_runtime_exception import FaultException

from streaming_runtime.loader import load_handler

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def task_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A task root; the import path and any module imported from it are restored afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if getattr(sys.modules[name], "__file__", None) and str(tmp_path) in str(sys.modules[name].__file__):
            del sys.modules[name]


def unique_module(task_root: Path, source: str) -> str:
    name = f"handler_{uuid.uuid4().hex}"
    (task_root / f"{name}.py").write_text(source)
    return name


def test_loads_a_handler_from_the_task_root(task_root: Path) -> None:
    # GIVEN a module in the task root
    name = unique_module(task_root, "def handler(event, context):\n    return {'ok': event}\n")
    # WHEN loaded by "module.function"
    handler = load_handler(f"{name}.handler", str(task_root))
    # THEN it is the function, and the task root is first on the import path, as on Lambda
    assert handler({"x": 1}, None) == {"ok": {"x": 1}}
    assert sys.path[0] == str(task_root)


def test_loads_a_handler_in_a_package(task_root: Path) -> None:
    # GIVEN a handler in a package, named with slashes or dots
    package = task_root / f"pkg_{uuid.uuid4().hex}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "app.py").write_text("def handler(event, context):\n    return 'pkg'\n")
    # WHEN loaded THEN both spellings work
    assert load_handler(f"{package.name}/app.handler", str(task_root))(None, None) == "pkg"
    assert load_handler(f"{package.name}.app.handler", str(task_root))(None, None) == "pkg"


@pytest.mark.parametrize(
    ("spec", "source", "error_type", "message"),
    [
        ("handler", None, "Runtime.MalformedHandlerName", "Bad handler 'handler'"),
        ("{module}.", None, "Runtime.MalformedHandlerName", "Bad handler"),
        ("missing_module_xyz.handler", None, "Runtime.ImportModuleError", "Unable to import module"),
        ("{module}.handler", "import no_such_dependency_xyz\n", "Runtime.ImportModuleError", "no_such_dependency"),
        ("{module}.handler", "def handler(:\n", "Runtime.UserCodeSyntaxError", "Syntax error in module"),
        ("{module}.nope", "def handler(e, c): pass\n", "Runtime.HandlerNotFound", "Handler 'nope' missing"),
        ("{module}.VALUE", "VALUE = 3\n", "Runtime.HandlerNotFound", "is not callable"),
        ("sys.handler", None, "Runtime.BuiltInModuleConflict", "Cannot use built-in module sys"),
    ],
)
def test_load_failures_have_the_managed_runtime_types(
    task_root: Path, spec: str, source: str | None, error_type: str, message: str
) -> None:
    # GIVEN a handler setting that cannot be loaded
    module = unique_module(task_root, source) if source is not None else "absent"
    # WHEN loaded
    with pytest.raises(FaultException) as raised:
        load_handler(spec.format(module=module), str(task_root))
    # THEN the error has the managed runtime's type and a message that says what is wrong
    assert raised.value.exception_type == error_type
    assert message in raised.value.msg


def test_other_import_time_exceptions_propagate(task_root: Path) -> None:
    # GIVEN a module that raises while being imported
    name = unique_module(task_root, "raise RuntimeError('CHATSTREAM_TABLE is not set')\n")
    # WHEN loaded THEN the exception itself reaches the caller (reported as an init error with its own type)
    with pytest.raises(RuntimeError, match="CHATSTREAM_TABLE"):
        load_handler(f"{name}.handler", str(task_root))
