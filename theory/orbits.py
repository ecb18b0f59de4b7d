"""Orbits of matrix entries under the relabelling group, enumerated from the index types.

Every index of a matrix entry has a *type* and carries *attributes* the relabelling group acts on:

| type | meaning | attributes |
|---|---|---|
| ``query`` | the query token q | none |
| ``distinct`` | a distinct token of a class | class kappa in [K], within-class index iota in [D] |
| ``common`` | a common token | gamma in [N] |
| ``label`` | the label token of a class | class kappa |
| ``cinner`` | a class-aligned inner index of a factorisation | class kappa |
| ``rinner`` | a rank-r inner index | rho in [r] |
| ``hinner`` | a hidden unit of the coupling MLP f (paper B) | eta in [h] |
| ``unit`` | the single index of a scalar (the coupling's step dt) | none |

The group is S_K on classes (acting on every class attribute at once), S_D on each class's distinct
tokens (independently per class: the wreath product), S_N on commons, S_r on rank indices and S_h on hidden units. Two
index tuples of the same types lie in one orbit iff they have the same *equality pattern*: which
class attributes are equal, which within-class indices are equal among distinct tokens of one class,
which commons are equal, which rank indices are equal. With token weights the within-class
relabelling is broken: iota is then a fixed label in 0..D-1 (D concrete) and belongs to the pattern.

The size of an orbit is a product of falling factorials x^(p) = x (x-1) ... (x-p+1):

    |O| = K^(p_class) * prod_{class blocks} D^(p_within in the block) * N^(p_common) * r^(p_rank) * h^(p_hidden)

(no D factor with fixed iota). A product W_1 W_2 ... W_L evaluated on the symmetric subspace is a
sum over the inner indices; grouping the summands by the orbit P of the whole tuple (row, i_1, ...,
i_{L-1}, col), every entry (row, col) of orbit O gets

    (W_1 ... W_L)[row, col] = sum_{P restricting to O} (|P| / |O|) prod_j x_{factor j}(P restricted to (i_{j-1}, i_j))

(:func:`contract`): the counts are symbolic in K, D, N. Nothing about a particular circuit is typed
in: :mod:`qkdyn.theory.specflow` calls these for the index types of each factor.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools

import sympy as sp

ATTRIBUTES = {"query": (), "distinct": ("class", "within"), "common": ("common",), "label": ("class",),
              "cinner": ("class",), "rinner": ("rank",), "hinner": ("hidden",), "unit": ()}


@dataclasses.dataclass(frozen=True)
class Orbit:
    """One orbit: the index types and the equality pattern of each attribute kind (restricted growth
    strings over the positions carrying it; ``within`` holds fixed labels when iota is fixed)."""

    types: tuple[str, ...]
    classes: tuple[int, ...]
    within: tuple[int, ...]
    commons: tuple[int, ...]
    ranks: tuple[int, ...]
    hiddens: tuple[int, ...] = ()

    def positions(self, attribute: str) -> list[int]:
        """Positions carrying ``attribute`` ("class", "within", "common", "rank" or "hidden")."""
        return [i for i, t in enumerate(self.types) if attribute in ATTRIBUTES[t]]

    def class_of(self) -> dict[int, int]:
        return dict(zip(self.positions("class"), self.classes, strict=True))


def growth_strings(length: int) -> list[tuple[int, ...]]:
    """Every set partition of ``length`` positions as a restricted growth string."""
    out: list[tuple[int, ...]] = [()]
    for _ in range(length):
        out = [s + (b,) for s in out for b in range(max(s, default=-1) + 2)]
    return out


def canonical(labels) -> tuple[int, ...]:
    """The restricted growth string of a labelling (first occurrences numbered 0, 1, ...)."""
    seen: dict = {}
    return tuple(seen.setdefault(x, len(seen)) for x in labels)


def falling(x, p: int):
    return sp.Mul(*[x - j for j in range(p)])


@functools.cache
def enumerate_orbits(types: tuple[str, ...], fixed_within: int | None, rank: int | None,
                     hidden: int | None = None) -> tuple[Orbit, ...]:
    """Every orbit of index tuples of ``types`` (fixed_within: D when iota is a fixed label; rank: r;
    hidden: h), leaving out orbits that are empty because r or h is too small."""
    template = Orbit(types, (), (), (), ())
    cpos, dpos = template.positions("class"), template.positions("within")
    out = []
    for classes in growth_strings(len(cpos)):
        class_of = dict(zip(cpos, classes, strict=True))
        if fixed_within is None:
            withins = [w for w in growth_strings(len(dpos))
                       if all(class_of[a] == class_of[b] for (a, wa), (b, wb) in itertools.combinations(zip(dpos, w, strict=True), 2)
                              if wa == wb)]
        else:
            withins = list(itertools.product(range(fixed_within), repeat=len(dpos)))
        for within in withins:
            for commons in growth_strings(len(template.positions("common"))):
                for ranks, hiddens in itertools.product(growth_strings(len(template.positions("rank"))),
                                                        growth_strings(len(template.positions("hidden")))):
                    if (rank is not None and len(set(ranks)) > rank) or (hidden is not None and len(set(hiddens)) > hidden):
                        continue
                    out.append(Orbit(types, classes, tuple(within), commons, ranks, hiddens))
    return tuple(out)


def size(orbit: Orbit, K, D, N, rank, fixed_within: bool, hidden=None):
    """|O| (module docstring), symbolic in K, D, N."""
    total = falling(K, len(set(orbit.classes))) * falling(N, len(set(orbit.commons)))
    total *= falling(rank, len(set(orbit.ranks))) if orbit.ranks else 1
    total *= falling(hidden, len(set(orbit.hiddens))) if orbit.hiddens else 1
    if not fixed_within:
        class_of = orbit.class_of()
        dpos = orbit.positions("within")
        for block in set(orbit.classes):
            inside = {w for p, w in zip(dpos, orbit.within, strict=True) if class_of[p] == block}
            total *= falling(D, len(inside))
    return total


def restrict(orbit: Orbit, keep: tuple[int, ...], fixed_within: bool) -> Orbit:
    """The orbit of the sub-tuple at positions ``keep`` (uniform iota: the within string numbers token
    identities among distinct positions, so its restriction is again a growth string)."""
    def sub(attribute, values, canon=True):
        positions = dict(zip(orbit.positions(attribute), values, strict=True))
        kept = [positions[i] for i in keep if i in positions]
        return canonical(kept) if canon else tuple(kept)

    return Orbit(tuple(orbit.types[i] for i in keep), sub("class", orbit.classes),
                 sub("within", orbit.within, canon=not fixed_within), sub("common", orbit.commons),
                 sub("rank", orbit.ranks), sub("hidden", orbit.hiddens))


def contract(target: Orbit, inner: tuple[str, ...], variable, K, D, N, rank, fixed_within: int | None):
    """(W_1 ... W_L)[row, col] on orbit ``target`` of (row, col) (module docstring).

    inner: the types of the L - 1 inner positions; variable(j, orbit) -> the symbol of factor j on the
    orbit of its (i_{j-1}, i_j) pair, or 0 where that factor has no such entry."""
    types = (target.types[0],) + tuple(inner) + (target.types[1],)
    last, fixed = len(types) - 1, fixed_within is not None
    total = sp.S(0)
    target_size = size(target, K, D, N, rank, fixed)
    for full in enumerate_orbits(types, fixed_within, rank):
        if restrict(full, (0, last), fixed) != target:
            continue
        count = sp.cancel(size(full, K, D, N, rank, fixed) / target_size)
        total += count * sp.Mul(*[variable(j, restrict(full, (j, j + 1), fixed)) for j in range(last)])
    return sp.expand(total)


def orbit_of(types: tuple[str, ...], values: tuple[tuple, ...], fixed_within: bool) -> Orbit:
    """The orbit of one concrete index tuple: ``values[i]`` holds the attributes of position i in the
    order of :data:`ATTRIBUTES` (distinct: (class, within); common: (gamma,); label, cinner: (class,);
    rinner: (rho,); hinner: (eta,); query, unit: ()). With uniform iota the within string numbers token identities (class,
    iota); with fixed iota it holds iota itself."""
    def of(attribute):
        return [(i, v) for i, (t, v) in enumerate(zip(types, values, strict=True)) if attribute in ATTRIBUTES[t]]

    classes = canonical(v[0] for _, v in of("class"))
    within = (tuple(v[1] for _, v in of("within")) if fixed_within
              else canonical((v[0], v[1]) for _, v in of("within")))
    return Orbit(tuple(types), classes, within,
                 canonical(v[0] for _, v in of("common")), canonical(v[0] for _, v in of("rank")),
                 canonical(v[0] for _, v in of("hidden")))
