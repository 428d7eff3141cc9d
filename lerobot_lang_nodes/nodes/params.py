"""ROS parameters from a config dataclass: descriptors, range checks and unknown-name errors.

A node's config dataclass (field metadata: ``doc``, optional ``range``, ``choices``,
``runtime``) is the one schema. Parameters are read-only unless a field says ``runtime: True``
(and its node applies changes through a set-parameters callback): a node reads its
configuration once, so `ros2 param set` on anything else is refused instead of succeeding and
changing nothing. ``declare_config`` declares every field with a descriptor and
returns a validated instance; a parameter given on the command line or in a YAML that the node
does not know is an error that names the known parameters, instead of being silently ignored.

A field whose type is itself a config dataclass is a parameter group: its fields are declared
under ``<field>.`` (``transformers.image_size``; in a params file, a nested mapping under the
group's name). A backend owns its group's dataclass, so its parameters have one owner.
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


def is_group(annotation: Any) -> bool:
    """A field annotated with a config dataclass: a parameter group (``group.name``)."""
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def describe(cls: type, prefix: str = '') -> list[dict[str, Any]]:
    """Rows (name, type, hint, default, doc, meta) for documentation tables, every group's
    parameters under their dotted names."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if is_group(hint):
            rows += describe(hint, f'{prefix}{f.name}.')
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        rows.append({'name': prefix + f.name, 'type': getattr(hint, '__name__', str(hint)),
                     'hint': hint, 'default': default, 'doc': f.metadata.get('doc', ''),
                     'meta': f.metadata})
    return rows


def with_values(config: C, values: dict[str, Any]) -> C:
    """``config`` with parameters replaced by their ROS names (``transformers.image_size``
    replaces a field of the ``transformers`` group). Raises ParameterError for a name the
    config does not have."""
    hints = typing.get_type_hints(type(config))
    top: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        head, dot, rest = name.partition('.')
        if head not in hints or bool(dot) != is_group(hints[head]):
            known = [row['name'] for row in describe(type(config))]
            raise ParameterError(f'no parameter {name!r}; known: {known}')
        if dot:
            groups.setdefault(head, {})[rest] = value
        else:
            top[name] = value
    for head, group_values in groups.items():
        top[head] = with_values(getattr(config, head), group_values)
    return dataclasses.replace(config, **top)


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
        if is_group(hints[f.name]):
            values[f.name] = declare_config(node, hints[f.name], prefix=f'{prefix}{f.name}.')
            continue
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
    **{name: f'the planner\'s is transformers.{name} now (the transformers backend\'s group; '
             f'in a params file `transformers: {{{name}: ...}}`)'
       for name in ('model_kind', 'gguf_file', 'image_cameras', 'image_size',
                    'generation_timeout_s', 'candidates', 'candidates_file')},
    **{name: f'the policy\'s is lerobot.{name} now (the LeRobot checkpoints\' group; in a '
             f'params file `lerobot: {{{name}: ...}}`)'
       for name in ('camera_map', 'state_units', 'state_names', 'action_names', 'robot_type',
                    'calibration_id', 'calibration_path', 'rtc', 'rtc_execution_horizon',
                    'rtc_max_guidance_weight', 'rtc_schedule')},
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
