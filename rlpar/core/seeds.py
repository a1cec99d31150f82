"""Many trainings in one compiled program: ``jax.vmap`` over seeds and over members with hyperparameters of their own.

A *slot* is one independent training run. With ``num_seeds = N`` and a sweep ``lr=[a, b]`` there are ``2 N`` slots:
slot ``i`` uses seed index ``i % N`` and member ``i // N``. A member is one setting of the swept and searched fields:
the grid of ``--sweep``'s fields, times the grid of ``--search`` (several fields, each a list) or ``--population``
draws from it (lists, uniform and log-uniform ranges). Every leaf of the per-device state and every metric gains a
leading slot axis ``[S, ...]``; device collectives still reduce over devices only, slot by slot.

Sweepable fields are the ones an agent's config declares so (``rlpar.agent.config_field(..., sweepable=True)``): the
per-device program uses them only inside traced math (learning rate, coefficients, discount), so each member's values
are leaves of its training state (``rlpar.core.population.Members``), handed to the agent inside the traced update: one
compile serves every value, and population-based training can change them during the run.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rlpar.core import population
from rlpar.core.agent import sweepable_fields
from rlpar.core.collectives import MemberGroups

SEARCH_STREAM = int.from_bytes(b"srch", "big")  # the host's draws of a random search: default_rng([seed, this])


class Space(NamedTuple):
    """Where one field's values come from: a list (``gamma=0.95,0.99``), a uniform range (``ent_coef=0..0.05``) or
    a log-uniform range (``lr=log:1e-4..1e-2``). ``low``/``high`` bound it (a list: its smallest and largest)."""

    kind: str  # "list", "uniform" or "log"
    values: tuple[float, ...]  # the list's values, or (low, high) of a range

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def draw(self, rng) -> float:
        """One value drawn on the host with ``rng`` (a ``numpy.random.Generator``)."""
        if self.kind == "list":
            return float(self.values[rng.integers(len(self.values))])
        if self.kind == "log":
            return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return float(rng.uniform(self.low, self.high))


class Slots(NamedTuple):
    """What each slot trains with: ``seed_index[i]``, and ``hparams[field][i]`` for each searched or swept field.
    A *member* is one setting of the fields; the ``num_seeds`` slots ``m * num_seeds ...`` share member ``m``."""

    seed_index: tuple[int, ...]
    hparams: dict[str, tuple[float, ...]]  # field -> its value in each slot
    spaces: dict[str, Space] = {}  # field -> where its values come from (PBT's explore resamples and clips to it)

    @property
    def count(self) -> int:
        return len(self.seed_index)

    def describe(self) -> list[dict]:
        """One dict per slot, for config.json and metrics readers."""
        return [{"slot": i, "seed_index": seed, **{f: v[i] for f, v in self.hparams.items()}}
                for i, seed in enumerate(self.seed_index)]


def _field_name(name: str, text: str, option: str, sweepable: tuple[str, ...] | None, example: str) -> str:
    name = name.strip().replace("-", "_")
    if not name or (sweepable is not None and name not in sweepable):
        fields = ", ".join(sweepable) if sweepable else "a field its config declares sweepable"
        raise ValueError(f"{option}={text!r}: expected {example} with FIELD one of {fields}")
    return name


def _numbers(values: str, text: str, option: str, example: str) -> tuple[float, ...]:
    try:
        parsed = tuple(float(v) for v in values.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{option}={text!r}: the values must be numbers, e.g. {example}") from None
    if not parsed or not all(math.isfinite(v) for v in parsed):
        raise ValueError(f"{option}={text!r}: give at least one finite number after '=', e.g. {example}")
    return parsed


def parse_sweep(text: str, sweepable: tuple[str, ...] | None = None) -> dict[str, tuple[float, ...]]:
    """``"lr=1e-4,3e-4 gamma=0.9,0.99"`` (fields separated by spaces or ``;``, as ``--sweep`` given twice joins them)
    -> ``{"lr": (1e-4, 3e-4), "gamma": (0.9, 0.99)}``, in the order given; ``""`` -> ``{}``. ``ValueError`` naming
    the problem. ``sweepable``: the fields the agent's config declares sweepable (``None``: check the syntax only)."""
    fields: dict[str, tuple[float, ...]] = {}
    for item in text.replace(";", " ").split():
        name, sep, values = item.partition("=")
        name = _field_name(name if sep else "", text, "sweep", sweepable, "FIELD=V1,V2,...")
        if name in fields:
            raise ValueError(f"sweep={text!r}: {name} is given twice; give each field once")
        if ".." in values:
            raise ValueError(f"sweep={text!r}: {name} is a range; --sweep takes lists of values (FIELD=V1,V2,...), "
                             "--search FIELD=LOW..HIGH with --population draws from a range")
        fields[name] = _numbers(values, text, "sweep", "lr=1e-4,3e-4,1e-3")
    return fields


def _parse_space(item: str, text: str) -> Space:
    """``"0.95,0.99"``, ``"0..0.05"`` or ``"log:1e-4..1e-2"`` (the part after ``FIELD=``) -> ``Space``."""
    log = item.startswith("log:")
    body = item[len("log:"):] if log else item
    if ".." not in body:
        if log:
            raise ValueError(f"search={text!r}: log: takes a range, e.g. lr=log:1e-4..1e-2")
        return Space("list", _numbers(body, text, "search", "gamma=0.95,0.99"))
    low, _, high = body.partition("..")
    try:
        low, high = float(low), float(high)
    except ValueError:
        raise ValueError(f"search={text!r}: a range is LOW..HIGH with two numbers, e.g. ent_coef=0..0.05") from None
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise ValueError(f"search={text!r}: a range LOW..HIGH needs finite LOW < HIGH, e.g. ent_coef=0..0.05")
    if log and low <= 0:
        raise ValueError(f"search={text!r}: a log range needs 0 < LOW < HIGH, e.g. lr=log:1e-4..1e-2")
    return Space("log" if log else "uniform", (low, high))


def parse_search(text: str, sweepable: tuple[str, ...] | None = None) -> dict[str, Space]:
    """``"gamma=0.95,0.99 ent_coef=0..0.05 lr=log:1e-4..1e-2"`` (fields separated by spaces or ``;``) -> one
    ``Space`` per field, in the order given. ``ValueError`` naming the problem; ``sweepable`` as in ``parse_sweep``."""
    spaces: dict[str, Space] = {}
    for item in text.replace(";", " ").split():
        name, sep, body = item.partition("=")
        name = _field_name(name if sep else "", text, "search", sweepable,
                           "FIELD=V1,V2 | FIELD=LOW..HIGH | FIELD=log:LOW..HIGH, separated by spaces")
        if name in spaces:
            raise ValueError(f"search={text!r}: {name} is given twice; give each field once")
        spaces[name] = _parse_space(body, text)
    return spaces


def make_slots(num_seeds: int, sweep: str, config_cls: type | None = None, *, search: str = "", population: int = 0,
               seed: int = 0) -> Slots:
    """The slots of a run: ``num_seeds`` seeds for every member. Members are the grid of ``sweep``'s fields, times
    those of ``search``: its grid (every field a list, ``population`` 0) or ``population`` draws from
    it, seeded by ``seed`` (each field independently: a list's values uniformly, a range uniformly, a log range
    log-uniformly). With ``config_cls`` every field must be one it declares sweepable."""
    if not isinstance(num_seeds, int) or isinstance(num_seeds, bool) or num_seeds <= 0:
        raise ValueError(f"num_seeds={num_seeds!r}: must be a positive integer")
    if not isinstance(population, int) or isinstance(population, bool) or population < 0:
        raise ValueError(f"population={population!r}: must be a positive integer, or 0 for the grid of --search")
    sweepable = sweepable_fields(config_cls) if config_cls is not None else None
    swept = parse_sweep(sweep, sweepable)
    spaces = parse_search(search, sweepable)
    both = [name for name in swept if name in spaces]
    if both:
        raise ValueError(f"sweep={sweep!r} and search={search!r} both set {both[0]}: give it in one of them")
    if population and not spaces:
        raise ValueError(f"population={population} draws members from --search: give --search too, e.g. "
                         "--search 'lr=log:1e-4..1e-2 ent_coef=0..0.05'")
    ranges = [name for name, space in spaces.items() if space.kind != "list"]
    if ranges and not population:
        raise ValueError(f"search={search!r}: {ranges[0]} is a range, so members are drawn from it: give "
                         "--population N (or list the values, FIELD=V1,V2, for a grid)")
    if population:
        rng = np.random.default_rng([seed, SEARCH_STREAM])
        members = [tuple(space.draw(rng) for space in spaces.values()) for _ in range(population)]
    else:
        members = list(itertools.product(*(space.values for space in spaces.values())))
    if swept:  # the sweep's grid, each point with every member of the search; the sweep's first field slowest
        spaces = {**{name: Space("list", values) for name, values in swept.items()}, **spaces}
        members = [(*point, *m) for point in itertools.product(*swept.values()) for m in members]
    count = len(members) * num_seeds
    hparams = {name: tuple(float(members[i // num_seeds][j]) for i in range(count)) for j, name in enumerate(spaces)}
    return Slots(tuple(i % num_seeds for i in range(count)), hparams, spaces)


def validate_slots(config, slots: Slots, num_devices: int) -> None:
    """Each slot's config must be valid on its own (a ``gamma`` in [0, 1]), and so must every field's space at its
    ends (PBT's explore may take a value anywhere in it): a ``ValueError`` naming the field and the value."""
    checked = set()
    for name, space in slots.spaces.items():
        for value in (space.low, space.high, *space.values):
            if (name, value) not in checked:
                checked.add((name, value))
                _validate_with(config, {name: value}, num_devices)
    for i in range(slots.count):
        _validate_with(config, {name: values[i] for name, values in slots.hparams.items()}, num_devices)


def _validate_with(config, changes: dict, num_devices: int) -> None:
    try:
        config.replace(**changes).validate(num_devices)
    except ValueError as err:
        setting = ", ".join(f"{k}={v:g}" for k, v in changes.items())
        raise ValueError(f"{setting} (from --sweep/--search) is refused: {err}") from None


def vmap_slots(make_program: Callable[[Any], Any], config, slots: Slots, axis_name: str | None = None,
               pbt: population.PBT | None = None, layout: MemberGroups = MemberGroups()) -> Any:
    """``make_program(config) -> Program(init, update, evaluate)`` (one slot's per-device program) turned into one
    whose functions run every slot at once: slot ``i`` draws its keys from seed index ``slots.seed_index[i]`` and
    trains with the hyperparameters in its state (``state.population.hparams``, from ``slots.hparams`` at the start),
    which are handed to ``make_program`` inside the traced update: one compile serves every value, and a value may
    change between updates. With ``pbt``, a PBT round follows each update when due (``population.make_round``).
    ``evaluate`` scores each slot's own policy. State leaves and metrics gain a leading ``[S]`` axis; the members'
    values and PBT's lineage are metrics too (``population.METRIC_PREFIX``), reduced over ``axis_name``.

    With ``layout.groups`` > 1 (``rlpar.core.collectives.MemberGroups``) each device group holds its own share of the
    slots: the state has ``[S / groups]`` of them, each slot's constants are picked by ``layout.own``, and the metrics
    and the evaluation come back for all ``S`` slots (``layout.gather``), the same on every device, as with one
    group."""
    from rlpar.core.program import Program

    seed_index = np.asarray(slots.seed_index, np.uint32)  # numpy: constants of the traced programs
    start = {name: np.asarray(values, np.float32) for name, values in slots.hparams.items()}

    def build(hparams):
        return make_program(config.replace(**hparams))

    if slots.count % layout.groups:
        raise ValueError(f"{slots.count} slots do not split into {layout.groups} equal device groups")

    def init(key_params, key_device):
        def one(seed, hparams):
            return build(hparams).init(jax.random.fold_in(key_params, seed), jax.random.fold_in(key_device, seed))

        own_seeds, own_start = layout.own((seed_index, start))
        # lax.map (a loop), not vmap: with JAX 0.10.2 on CPU a batched QR (flax's orthogonal initialiser) inside
        # pmap never returns (seen here); init runs once, so the loop costs nothing that matters.
        state = jax.lax.map(lambda args: one(*args), (own_seeds, own_start))
        return state.replace(population=population.start(own_start, key_params, slots.count // layout.groups))

    def evaluate_own(state, key):  # each slot its own policy; slots of one seed index evaluate on the same episodes
        def one(s, key_slot, hparams):
            return build(hparams).evaluate(s, key_slot)

        agents = state.replace(population=None)
        if len(set(slots.seed_index)) == 1:
            # One seed index for every slot (a sweep or a population with one seed): fold it in once and hand every
            # slot the same key. Folded in under vmap, the slots' equal seed indices are a constant XLA rewrites as
            # a broadcast, and on XLA:CPU its algebraic simplifier then rewrites the unrolled threefry of each of the
            # evaluation's draws one step at a time until it gives up after 50 passes, logging an error line
            # ("likely stuck in a circular simplification loop") on every compile.
            key_seed = layout.in_group(jax.random.fold_in(key, slots.seed_index[0]))
            return jax.vmap(one, in_axes=(0, None, 0))(agents, key_seed, state.population.hparams)
        keys = jax.vmap(lambda seed: jax.random.fold_in(key, seed))(layout.own(seed_index))
        return jax.vmap(one)(agents, keys, state.population.hparams)

    def evaluate(state, key):
        return layout.gather_same(evaluate_own(state, key))

    has_evaluate = make_program(config).evaluate is not None
    pbt_round = (population.make_round(pbt, slots.spaces, evaluate if has_evaluate else None, layout)
                 if pbt else None)

    def update(state):
        own_members = state.population
        state, metrics = jax.vmap(lambda s, hparams: build(hparams).update(s))(state.replace(population=None),
                                                                                own_members.hparams)
        state = state.replace(population=population.count_episodes(own_members, metrics))
        own = {}
        if pbt_round is not None:
            state, own = pbt_round(state)
        everyone = state.population.replace(hparams=layout.gather(state.population.hparams))
        own.update(population.value_metrics(everyone))
        return state, {**layout.gather_same(metrics), **same_on_every_device(own, layout.axes(axis_name))}

    return Program(init, update, evaluate if has_evaluate else None)


def same_on_every_device(metrics: dict, axis_name: str | tuple[str, ...] | None) -> dict:
    """Metrics computed from the state that every device holds alike (the members' values, PBT's lineage), marked
    as such for ``shard_map`` by a max over the devices (``axis_name``: one mesh axis or several), which leaves
    equal values exact (booleans as int32)."""
    if axis_name is None:
        return metrics
    out = {}
    for name, value in metrics.items():
        if value.dtype == jnp.bool_:
            out[name] = jax.lax.pmax(value.astype(jnp.int32), axis_name).astype(jnp.bool_)
        else:
            out[name] = jax.lax.pmax(value, axis_name)
    return out
