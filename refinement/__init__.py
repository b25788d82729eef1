"""The refinement check's machinery: the reference implementation driven by the model's actions and read back
into the model's state, so that a lockstep run can compare the two at every step.

``reference_system`` holds ``ReferenceSystem``: ``apply(action)`` (the driver) and ``abstract()`` (the
abstraction function). ``faults`` holds the fault injectors the driver sets on the reference's hooks for one
action; ``allocation`` builds each consumer's allocation strategy from a model ``Config``.

This package may import ``rmqspec.reference`` and ``rmqspec.spec``; neither of them imports it.
"""
