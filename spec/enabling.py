"""What a transition raises when its enabling condition does not hold: ``ActionNotEnabled``.

A leaf module (it imports nothing of the model), so that every concern module may raise it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action


class ActionNotEnabled(Exception):
    """``step`` was given an action whose enabling condition does not hold in the state."""

    def __init__(self, action: Action, reason: str) -> None:
        super().__init__(f"{action!r} is not enabled: {reason}")
        self.action = action
        self.reason = reason
