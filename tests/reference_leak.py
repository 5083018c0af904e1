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


def fd_rate_reference(cells, strata, q):
    """The dependency test's figures, plainly (``engine.passes.dependence.fd_stats``): among
    the rows whose cell holds 2 rows or more, the share whose ``q`` is the cell's most
    frequent value, and the same share for cells keyed by the stratum alone over those rows.
    Returns ``(rows in repeated cells, rate, baseline)``."""
    from collections import Counter, defaultdict

    by_cell = defaultdict(list)
    for i, c in enumerate(cells):
        by_cell[c].append(i)
    rows = [i for ix in by_cell.values() if len(ix) >= 2 for i in ix]
    if not rows:
        return 0, 0.0, 0.0
    hits = sum(Counter(q[i] for i in ix).most_common(1)[0][1] for ix in by_cell.values() if len(ix) >= 2)
    by_stratum = defaultdict(list)
    for i in rows:
        by_stratum[strata[i]].append(q[i])
    base = sum(Counter(v).most_common(1)[0][1] for v in by_stratum.values())
    return len(rows), hits / len(rows), base / len(rows)


def spearman_reference(x, y) -> float:
    """Spearman's rho: Pearson's correlation of the average ranks (ties share their mean rank)."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for t in range(i, j + 1):
                r[order[t]] = (i + j) / 2 + 1
            i = j + 1
        return r
    a, b = ranks(list(x)), ranks(list(y))
    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    cov = sum((u - ma) * (w - mb) for u, w in zip(a, b))
    va = sum((u - ma) ** 2 for u in a) ** 0.5
    vb = sum((w - mb) ** 2 for w in b) ** 0.5
    return cov / (va * vb)


def fd_table_reference(cells, strata, q, keep: int):
    """The dependency test's table, plainly (``engine.kernels.leak.fd_rows``): the rows of
    the cells at most a limit (at first 2^64 - 1) counted by (cell, stratum, QI key); after
    each row, while more than ``keep`` triples are held, the limit halved and the triples
    of the cells above it dropped. Returns ``({(c, s, q): rows}, limit)``."""
    limit, tab = U64, {}
    for c, s, v in zip(cells, strata, q):
        c, s, v = int(c), int(s), int(v)
        if c > limit:
            continue
        tab[(c, s, v)] = tab.get((c, s, v), 0) + 1
        while len(tab) > keep:
            limit >>= 1
            tab = {k: n for k, n in tab.items() if k[0] <= limit}
    return tab, limit
