"""Slow, plainly written references for the leak guard (``engine.kernels.leak``,
``engine.passes.leak``): Python dicts and sets, one row at a time."""

U64 = (1 << 64) - 1


def one_to_one(a, b) -> bool:
    """Whether the values of ``a`` and ``b`` (equal-length sequences; None is a value)
    correspond one-to-one: each value of a with one of b, and each of b with one of a."""
    ab, ba = {}, {}
    for x, y in zip(a, b):
        if ab.setdefault(x, y) != y or ba.setdefault(y, x) != x:
            return False
    return True


def pair_reference(kc, kq, max_slots: int):
    """The kernel's test of one pair on the keys ``kc``, ``kq`` (ints), as its docstring
    says it: two dicts (c -> q, q -> c); before each row a dict holding ``max_slots // 2``
    keys halves its limit (keeps the keys at or below it) until it holds fewer; a key above
    its dict's limit is skipped; a key met with another partner ends it (dead); with the
    same partner, a repeat. Returns ``(dead, repeat_c, repeat_q, limits)``."""
    max_used = max_slots // 2
    limits = [U64, U64]
    tabs = [{}, {}]
    repeat = [False, False]
    for c, q in zip(kc, kq):
        c, q = int(c), int(q)
        for d in (0, 1):
            while len(tabs[d]) >= max_used:
                limits[d] >>= 1
                tabs[d] = {k: v for k, v in tabs[d].items() if k <= limits[d]}
        for d, (key, partner) in enumerate(((c, q), (q, c))):
            if key > limits[d]:
                continue
            if key not in tabs[d]:
                tabs[d][key] = partner
            elif tabs[d][key] == partner:
                repeat[d] = True
            else:
                return True, repeat[0], repeat[1], limits
    return False, repeat[0], repeat[1], limits
