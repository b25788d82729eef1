"""rmqspec: an executable model of Apache RocketMQ consumer offset management.

Subpackages: ``rmqspec.spec`` (the pure model), ``rmqspec.reference`` (the reference
implementation with real file I/O) and ``rmqspec.properties`` (Hypothesis state machines and
settings profiles). ``rmqspec.cli`` is the ``rmqspec`` command.
"""

__version__ = "0.1.0"

import logging as _logging

# A library stays silent unless the application configures logging (the reference implementation
# logs RocketMQ's warnings, e.g. failed sends while the broker is down).
_logging.getLogger("rmqspec").addHandler(_logging.NullHandler())
