"""ROS parameters from a config dataclass: descriptors, range checks and unknown-name errors.

A node's config dataclass (field metadata: ``doc``, optional ``range``, ``choices``,
``runtime``) is the one schema. Parameters are read-only unless a field says ``runtime: True``
(and its node applies changes through a set-parameters callback): a node reads its
configuration once, so `ros2 param set` on anything else is refused instead of succeeding and
changing nothing. ``declare_config`` declares every field with a descriptor and
returns a validated instance; a parameter given on the command line or in a YAML that the node
does not know is an error that names the known parameters, instead of being silently ignored.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, TypeVar

from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                ParameterType, SetParametersResult)

C = TypeVar('C')

# Parameters every rclpy node may carry without declaring them in its config.
_ALWAYS_ALLOWED_PREFIXES = ('use_sim_time', 'qos_overrides.', 'start_type_description_service')


class ParameterError(ValueError):
    """A parameter value or name is not acceptable; the message names the fix."""


_TYPES = {
    bool: ParameterType.PARAMETER_BOOL,
    int: ParameterType.PARAMETER_INTEGER,
    float: ParameterType.PARAMETER_DOUBLE,
    str: ParameterType.PARAMETER_STRING,
}
_ARRAY_TYPES = {
    bool: ParameterType.PARAMETER_BOOL_ARRAY,
    int: ParameterType.PARAMETER_INTEGER_ARRAY,
    float: ParameterType.PARAMETER_DOUBLE_ARRAY,
    str: ParameterType.PARAMETER_STRING_ARRAY,
}


def _ros_type(annotation: Any) -> tuple[int, Any]:
    """ROS parameter type and the Python element type for a dataclass field annotation."""
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        elem = typing.get_args(annotation)[0]
        return _ARRAY_TYPES[elem], elem
    return _TYPES[annotation], annotation


def describe(cls: type) -> list[dict[str, Any]]:
    """Rows (name, type, default, doc) for documentation tables."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        hint = hints[f.name]
        rows.append({'name': f.name, 'type': getattr(hint, '__name__', str(hint)),
                     'default': default, 'doc': f.metadata.get('doc', '')})
    return rows


def config_defaults(cls: type) -> dict[str, Any]:
    """Each parameter's default: what a node uses where its params file says nothing."""
    return {row['name']: row['default'] for row in describe(cls)}


def declare_config(node: Any, cls: type[C], *, prefix: str = '') -> C:
    """Declare every field of ``cls`` on ``node`` and return the validated config.

    Raises:
        ParameterError: an unknown parameter was given, or a value breaks a field's rule.
    """
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata
        ros_type, elem = _ros_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        desc = ParameterDescriptor(name=prefix + f.name, type=ros_type,
                                   description=meta.get('doc', ''),
                                   read_only=not meta.get('runtime', False))
        if 'choices' in meta:
            desc.additional_constraints = f"one of {list(meta['choices'])}"
        if 'range' in meta:  # rclpy then rejects out-of-range values itself
            lo, hi = meta['range']
            if elem is float:
                desc.floating_point_range = [FloatingPointRange(from_value=float(lo),
                                                                to_value=float(hi))]
            elif elem is int:
                desc.integer_range = [IntegerRange(from_value=int(lo), to_value=int(hi), step=1)]
        if isinstance(default, tuple):
            default = list(default)
        try:
            value = node.declare_parameter(prefix + f.name, default, desc).value
        except Exception as exc:  # rclpy raises several types for bad overrides
            raise ParameterError(f'parameter {prefix + f.name!r} of node {node.get_name()!r}: '
                                 f'{exc}') from exc
        if elem is float and isinstance(value, list):
            value = [float(v) for v in value]
        elif elem is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if 'choices' in meta and value not in meta['choices']:
            raise ParameterError(f'parameter {prefix + f.name!r} is {value!r}; valid choices: '
                                 f"{list(meta['choices'])}")
        if isinstance(f.default, tuple) or typing.get_origin(hints[f.name]) is tuple:
            value = tuple(value or ())  # an empty array given as `[]` arrives untyped, None
        values[f.name] = value
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f'invalid parameters for node {node.get_name()!r}: {exc}') from exc


# Parameters a node no longer has, with where the setting lives now.
RETIRED = {
    'ctrl_hz': 'the control rate belongs to the chunk executor (sim_bridge or so101_driver '
               'ctrl_hz); other nodes read it from runtime_status (control_period_s)',
}


def reject_unknown_parameters(node: Any) -> None:
    """Refuse overrides the node never declared: a typo would otherwise be silently ignored.

    Call after every ``declare_config`` of the node.
    """
    overrides = getattr(node, '_parameter_overrides', {}) or {}
    unknown = sorted(name for name in overrides
                     if not name.startswith(_ALWAYS_ALLOWED_PREFIXES)
                     and not node.has_parameter(name))
    if unknown:
        known = sorted(name for name in node._parameters
                       if not name.startswith(_ALWAYS_ALLOWED_PREFIXES))
        moved = ''.join(f' {name!r}: {RETIRED[name]}.' for name in unknown if name in RETIRED)
        raise ParameterError(f'unknown parameter(s) {unknown} for node {node.get_name()!r}; '
                             f'known parameters: {known}. Fix the name in the YAML or the '
                             f'--ros-args -p option.{moved}')


def watch_runtime_parameters(node: Any, cls: type, apply: Any) -> None:
    """Route `ros2 param set` on the ``runtime`` fields of ``cls`` to ``apply``.

    ``apply(changes: dict[name, value]) -> str`` applies every change or none and returns ''
    or the reason for refusing (sent back to the caller). rclpy has already checked type and
    range; every other field is read-only. Register after ``declare_config``.
    """
    names = {f.name for f in dataclasses.fields(cls) if f.metadata.get('runtime')}

    def on_set(params: list) -> SetParametersResult:
        changes = {p.name: p.value for p in params if p.name in names}
        reason = apply(changes) if changes else ''
        return SetParametersResult(successful=not reason, reason=reason or '')

    node.add_on_set_parameters_callback(on_set)
