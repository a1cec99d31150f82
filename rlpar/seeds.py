"""Many trainings in one compiled program: ``jax.vmap`` over seeds and, optionally, over a hyperparameter.

A *slot* is one independent training run. With ``num_seeds = N`` and a sweep ``lr=[a, b]`` there are ``2 N`` slots:
slot ``i`` uses seed index ``i % N`` and the sweep value ``i // N``. Every leaf of the per-device state and every
metric gains a leading slot axis ``[S, ...]``; device collectives still reduce over devices only, slot by slot.

Sweepable fields are the ones an agent's config declares so (``rlpar.agent.config_field(..., sweepable=True)``): the
per-device program uses them only inside traced math (learning rate, coefficients, discount), so their values are
passed into the vmapped program as arrays and one compile serves every value.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from rlpar.agent import sweepable_fields

class Slots(NamedTuple):
    """What each slot trains with: ``seed_index[i]`` and ``values[i]`` of the swept field (if any)."""

    seed_index: tuple[int, ...]
    field: str | None
    values: tuple[float, ...]

    @property
    def count(self) -> int:
        return len(self.seed_index)

    def describe(self) -> list[dict]:
        """One dict per slot, for config.json and metrics readers."""
        out = []
        for i, seed in enumerate(self.seed_index):
            slot = {"slot": i, "seed_index": seed}
            if self.field is not None:
                slot[self.field] = self.values[i]
            out.append(slot)
        return out


def parse_sweep(text: str, sweepable: tuple[str, ...] | None = None) -> tuple[str | None, tuple[float, ...]]:
    """``"lr=1e-4,3e-4"`` -> ``("lr", (1e-4, 3e-4))``; ``""`` -> ``(None, ())``. ``ValueError`` naming the problem.
    ``sweepable``: the fields the agent's config declares sweepable (``None``: check the syntax only)."""
    if not text:
        return None, ()
    name, sep, values = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not name or (sweepable is not None and name not in sweepable):
        fields = ", ".join(sweepable) if sweepable else "a field its config declares sweepable"
        raise ValueError(f"sweep={text!r}: expected FIELD=V1,V2,... with FIELD one of {fields}")
    try:
        parsed = tuple(float(v) for v in values.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"sweep={text!r}: the values must be numbers, e.g. lr=1e-4,3e-4,1e-3") from None
    if not parsed:
        raise ValueError(f"sweep={text!r}: give at least one value after '='")
    return name, parsed


def make_slots(num_seeds: int, sweep: str, config_cls: type | None = None) -> Slots:
    """The slots of ``num_seeds`` seeds times the values of ``sweep``; with ``config_cls`` the swept field must be
    one it declares sweepable."""
    if not isinstance(num_seeds, int) or isinstance(num_seeds, bool) or num_seeds <= 0:
        raise ValueError(f"num_seeds={num_seeds!r}: must be a positive integer")
    field, values = parse_sweep(sweep, sweepable_fields(config_cls) if config_cls is not None else None)
    if field is None:
        return Slots(tuple(range(num_seeds)), None, ())
    return Slots(tuple(i % num_seeds for i in range(num_seeds * len(values))), field,
                 tuple(v for v in values for _ in range(num_seeds)))


def validate_slots(config, slots: Slots, num_devices: int) -> None:
    """Each slot's config must be valid on its own (e.g. a swept ``gamma`` stays in [0, 1])."""
    for value in sorted(set(slots.values)):
        config.replace(**{slots.field: value}).validate(num_devices)


def vmap_slots(make_program: Callable[[Any], Any], config, slots: Slots) -> Callable[[], Any]:
    """``make_program(config) -> Program(init, update, evaluate)`` (one slot's per-device program) turned into one
    whose functions run every slot at once: slot ``i`` draws its keys from seed index ``slots.seed_index[i]`` and
    trains with ``slots.values[i]`` of the swept field; ``evaluate`` scores each slot's own policy. State leaves and
    metrics gain a leading ``[S]`` axis."""
    from rlpar.program import Program

    seed_index = jnp.asarray(slots.seed_index, jnp.uint32)
    values = jnp.asarray(slots.values if slots.field else [0.0] * slots.count, jnp.float32)

    def build(value):
        return make_program(config.replace(**{slots.field: value}) if slots.field else config)

    def init(key_params, key_device):
        def one(seed, value):
            return build(value).init(jax.random.fold_in(key_params, seed), jax.random.fold_in(key_device, seed))

        # lax.map (a loop), not vmap: with JAX 0.10.2 on CPU a batched QR (flax's orthogonal initialiser) inside
        # pmap never returns (seen here); init runs once, so the loop costs nothing that matters.
        return jax.lax.map(lambda args: one(*args), (seed_index, values))

    def update(state):
        return jax.vmap(lambda s, value: build(value).update(s))(state, values)

    def evaluate(state, key):  # each slot its own policy; slots of one seed index evaluate on the same episodes
        def one(s, seed, value):
            return build(value).evaluate(s, jax.random.fold_in(key, seed))

        return jax.vmap(one)(state, seed_index, values)

    return Program(init, update, evaluate if make_program(config).evaluate is not None else None)
