"""Find the handler named by ``_HANDLER`` ("module.function") under ``LAMBDA_TASK_ROOT``.

Errors carry the managed runtime's types and messages (awslambdaric's ``_get_handler``), which we
cannot import without its bootstrap module (logging setup and the C client).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

from awslambdaric.lambda_runtime_exception import FaultException

if TYPE_CHECKING:
    from collections.abc import Callable


def load_handler(spec: str, task_root: str | None) -> Callable[[object, object], object]:
    """Import the handler's module with ``task_root`` first on the import path, as Lambda does."""
    module_name, sep, function_name = spec.rpartition(".")
    if not sep or not module_name or not function_name:
        raise FaultException(
            FaultException.MALFORMED_HANDLER_NAME,
            f"Bad handler '{spec}': not enough values to unpack (expected 2, got 1)",
        )
    if task_root and (not sys.path or sys.path[0] != task_root):
        sys.path.insert(0, task_root)
    module_name = module_name.replace("/", ".")
    if module_name.split(".")[0] in sys.builtin_module_names:
        raise FaultException(
            FaultException.BUILT_IN_MODULE_CONFLICT,
            f"Cannot use built-in module {module_name} as a handler module",
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise FaultException(
            FaultException.IMPORT_MODULE_ERROR, f"Unable to import module '{module_name}': {err}"
        ) from err
    except SyntaxError as err:
        trace = [f'  File "{err.filename}" Line {err.lineno}\n    {err.text}']
        raise FaultException(
            FaultException.USER_CODE_SYNTAX_ERROR, f"Syntax error in module '{module_name}': {err}", trace
        ) from err
    handler = getattr(module, function_name, None)
    if handler is None:
        raise FaultException(
            FaultException.HANDLER_NOT_FOUND, f"Handler '{function_name}' missing on module '{module_name}'"
        )
    if not callable(handler):
        raise FaultException(
            FaultException.HANDLER_NOT_FOUND, f"Handler '{function_name}' on module '{module_name}' is not callable"
        )
    return handler
