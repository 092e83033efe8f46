"""The functions' logger: Powertools' JSON ``Logger``, shared with chatstream's own modules.

The layer's modules log through the standard library (``logging.getLogger(__name__)``: ``chatstream.generation``,
``chatstream.relay.service`` …), so they run anywhere. On Lambda such a record goes to the runtime's root handler,
whose text format (``[LEVEL] time request-id message``, awslambdaric's ``bootstrap._setup_logging``) drops every
``extra`` field: the Bedrock error of "the model refused this deployment", the session and turn of "invoking the proxy
failed". So the package's logger gets the function Logger's handler, JSON format, level (``LogLevel``) and keys
(``service``, the request's), through Powertools' own ``copy_config_to_registered_loggers``. That helper only looks at
top-level logger names, so it is given the package's name, and every ``chatstream.*`` logger reaches it by
propagation.
"""

from __future__ import annotations

import logging

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

PACKAGE = "chatstream"


def function_logger() -> Logger:
    """The function's Logger, its format and level also the package's loggers' (the module docstring says why)."""
    # Every line names its logger (`name`: the module, or the function's service for the handler's own lines). Given
    # here, the key is the Logger's own: Powertools' helper adds it with append_keys, which clear_state=True wipes.
    logger = Logger(name="%(name)s")
    logging.getLogger(PACKAGE)  # registered, so the helper below finds it
    copy_config_to_registered_loggers(source_logger=logger, include={PACKAGE})
    return logger
