"""Actions and configurations as plain JSON values, so runs can be stored, shipped and replayed.

An action is ``{"action": "<ClassName>", <field>: <value>, ...}``; a configuration is the object of
its fields (frozensets as sorted lists). Decoding validates names and fields and raises
``ValueError`` naming what was wrong.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from rmqspec.spec import actions as act
from rmqspec.spec.config import Config

ACTION_TYPES: dict[str, type] = {cls.__name__: cls for cls in typing.get_args(act.Action)}


def action_to_json(action: act.Action) -> dict[str, Any]:
    """A field left at its default (``BrokerReceive.overtakes`` 0) is omitted, so traces written before
    the field existed and those written now agree."""
    out: dict[str, Any] = {"action": type(action).__name__}
    for f in dataclasses.fields(action):
        value = getattr(action, f.name)
        if f.default is dataclasses.MISSING or value != f.default:
            out[f.name] = value
    return out


def action_from_json(value: Any, where: str = "action") -> act.Action:
    if not isinstance(value, dict) or not isinstance(value.get("action"), str):
        raise ValueError(f"{where}: expected an object with an 'action' name, got {value!r}")
    name = value["action"]
    cls = ACTION_TYPES.get(name)
    if cls is None:
        raise ValueError(f"{where}: unknown action {name!r}; known: {', '.join(sorted(ACTION_TYPES))}")
    names = {f.name for f in dataclasses.fields(cls)}
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
    given = set(value) - {"action"}
    if not required <= given <= names:  # a field with a default may be omitted (BrokerReceive.overtakes)
        raise ValueError(f"{where}: {name} takes fields {sorted(names)}, got {sorted(given)}")
    args = {f.name: value.get(f.name, f.default) for f in dataclasses.fields(cls)}
    for f in dataclasses.fields(cls):
        expected: type = bool if f.type in ("bool", bool) else int if f.type in ("int", int) else str
        value_ = args[f.name]
        # bool is an int subclass: an int field refuses true/false, a bool field refuses 0/1
        if not isinstance(value_, expected) or (expected is int and isinstance(value_, bool)):
            raise ValueError(f"{where}: {name}.{f.name} must be {expected.__name__}, got {value_!r}")
    action: act.Action = cls(**args)
    return action


def config_to_json(config: Config) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, frozenset):
            value = sorted(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def config_from_json(value: Any, where: str = "config") -> Config:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object of Config fields, got {type(value).__name__}")
    return Config.from_mapping(value, where)
