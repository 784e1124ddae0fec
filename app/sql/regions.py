"""Regions of the domain as unions of boxes, and their inclusion–exclusion terms.

A box is a conjunction of per-attribute code sets — exactly the `where` of one factored
query (Private-PGM appendix B: one indicator factor per attribute). A WHERE clause is a
region: a union of boxes (its disjunctive form). Code sets are Python integers used as
bit masks (bit c set: code c is in the set); an attribute a box does not name is
unrestricted, and the box with no attribute is the whole domain.

The count of a union is the signed sum of the counts of the intersections of its
boxes (inclusion–exclusion), and an intersection of boxes is a box, so a disjunction
is answered exactly by a few factored queries. Empty intersections are dropped, with
every larger intersection containing them; equal boxes are merged and their signs
added. `MAX_TERMS` bounds the work: a region needing more terms is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.sql.errors import TooManyTerms

Box = tuple[tuple[str, int], ...]  # (attribute, mask) sorted by attribute, masks not full
Region = tuple[Box, ...]  # a union; () is empty, ((),) the whole domain

# A WHERE clause compiles to at most this many inclusion–exclusion terms (each one
# factored query per aggregated attribute, and one for the counts).
MAX_TERMS = 256
# …and its disjunctive form to at most this many boxes.
MAX_BOXES = 64
# Intersecting two unions pairs every box of one with every box of the other.
MAX_PAIRS = 512

EVERYTHING: Region = ((),)
NOTHING: Region = ()


def _too_many(what: str, limit: int) -> TooManyTerms:
    return TooManyTerms(
        f"query: the WHERE clause needs more than {limit} {what} to answer exactly by "
        "inclusion–exclusion over factored queries; split it into several queries or "
        "simplify its disjunctions",
        parameter="query",
        max_terms=MAX_TERMS,
    )


def box_of(attribute: str, mask: int, full: int) -> Region:
    """The region where one attribute's code is in `mask`."""
    mask &= full
    if mask == 0:
        return NOTHING
    if mask == full:
        return EVERYTHING
    return (((attribute, mask),),)


def intersect_boxes(first: Box, second: Box) -> Box | None:
    """The intersection of two boxes; None when it is empty."""
    masks = dict(first)
    for attribute, mask in second:
        joined = masks.get(attribute, mask) & mask
        if joined == 0:
            return None
        masks[attribute] = joined
    return tuple(sorted(masks.items()))


def _contains(outer: Box, inner: Box) -> bool:
    """Every cell of `inner` is in `outer`."""
    inner_masks = dict(inner)
    for attribute, mask in outer:
        inner_mask = inner_masks.get(attribute)
        if inner_mask is None or inner_mask & ~mask:
            return False
    return True


def _merge_pass(boxes: list[Box], full: Mapping[str, int]) -> list[Box]:
    """Boxes equal but on one attribute, replaced by one box: the union on that attribute."""
    groups: dict[tuple[str, Box], list[int]] = {}
    for index, box in enumerate(boxes):
        for name, _ in box:
            rest = tuple(item for item in box if item[0] != name)
            groups.setdefault((name, rest), []).append(index)
    used: set[int] = set()
    merged: list[Box] = []
    for (name, rest), members in groups.items():
        free = [i for i in members if i not in used]
        if len(free) < 2:
            continue
        mask = 0
        for i in free:
            mask |= dict(boxes[i])[name]
        used.update(free)
        masks = dict(rest)
        if mask != full[name]:
            masks[name] = mask
        merged.append(tuple(sorted(masks.items())))
    return merged + [box for index, box in enumerate(boxes) if index not in used]


def simplify(boxes: Sequence[Box], full: Mapping[str, int]) -> Region:
    """The same union with fewer boxes: duplicates, boxes inside another and mergeable
    ones (equal but on one attribute) removed."""
    current = list(dict.fromkeys(boxes))
    while True:
        if () in current:
            return EVERYTHING
        kept = [
            box
            for i, box in enumerate(current)
            if not any(j != i and _contains(other, box) for j, other in enumerate(current))
        ]
        merged = list(dict.fromkeys(_merge_pass(kept, full)))
        if len(merged) == len(current):
            break
        current = merged
    if len(current) > MAX_BOXES:
        raise _too_many("boxes (conjunctions)", MAX_BOXES)
    return tuple(current)


def union(regions: Sequence[Region], full: Mapping[str, int]) -> Region:
    return simplify([box for region in regions for box in region], full)


def intersection(regions: Sequence[Region], full: Mapping[str, int]) -> Region:
    result: Region = EVERYTHING
    for region in regions:
        if len(result) * len(region) > MAX_PAIRS:
            raise _too_many("pairs of conjunctions", MAX_PAIRS)
        pairs = [intersect_boxes(a, b) for a in result for b in region]
        result = simplify([box for box in pairs if box is not None], full)
        if not result:
            return NOTHING
    return result


def inclusion_exclusion(region: Region) -> tuple[tuple[int, Box], ...]:
    """Signed boxes whose counts add up to the region's: Σ over non-empty subsets S of
    the boxes of (−1)^(|S|+1) · count(∩S), with empty intersections (and every subset
    containing one) left out and equal intersections merged."""
    coefficients: dict[Box, int] = {}
    visited = 0
    # Depth-first over subsets in index order: (next index, intersection, subset size).
    stack: list[tuple[int, Box, int]] = [
        (index + 1, box, 1) for index, box in reversed(list(enumerate(region)))
    ]
    while stack:
        start, box, size = stack.pop()
        visited += 1
        if visited > MAX_TERMS:
            raise _too_many("terms", MAX_TERMS)
        sign = 1 if size % 2 == 1 else -1
        coefficients[box] = coefficients.get(box, 0) + sign
        for index in range(len(region) - 1, start - 1, -1):
            joined = intersect_boxes(box, region[index])
            if joined is not None:
                stack.append((index + 1, joined, size + 1))
    return tuple((c, box) for box, c in coefficients.items() if c != 0)
