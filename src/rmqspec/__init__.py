"""rmqspec: an executable model of Apache RocketMQ consumer offset management.

Subpackages: ``rmqspec.spec`` (the pure model), ``rmqspec.reference`` (the reference
implementation with real file I/O) and ``rmqspec.properties`` (Hypothesis state machines and
settings profiles). ``rmqspec.cli`` is the ``rmqspec`` command.
"""

__version__ = "0.1.0"
