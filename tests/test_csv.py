"""CSV fidelity (issue 14, defects 1, 2 and parts of 9).

* Pass-through (non-QI) columns of a CSV input reach a CSV output as the very same
  text, field by field; a Parquet output types them from the whole file.
* Types are never guessed from the first rows: QIs are read as Float64 (a value that
  is not a number: one line naming the column and the row), the rest as text.
* ``--separator``, ``--null-values``, ``--encoding`` and ``.csv.gz`` inputs, for
  anonymize, verify, risk and profile (CLI and API); refused for a Parquet input.
* A duplicate header is refused; ``verify`` and the self-check count -0.0 apart from
  0.0; ``verify --original`` works with a column named ""; maxent's published sets
  escape ``|``.
"""

import csv
import gzip
import io
import os
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine.cli import main

DEFECT1 = "x,y,zip,v,flag\n1,2,01000,1e3,True\n3,4,02134,2.50,False\n5,6,00501,4.10,True\n"


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def _fields(path, columns, **kw):
    """The named columns of a CSV file as lists of raw field texts (Python's csv module)."""
    delimiter = kw.pop("delimiter", ",")
    with open(path, newline="", **kw) as fh:
        rows = list(csv.reader(fh, delimiter=delimiter))
    header = rows[0]
    return {c: [r[header.index(c)] for r in rows[1:]] for c in columns}


def _one_error(err):
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("microagg: error: "), err
    return lines[0]


def _no_temporaries(*folders):
    for folder in folders:
        assert [p.name for p in Path(folder).rglob("*") if "microagg" in p.name] == []


# --- defect 1: pass-through text ------------------------------------------------------


def test_defect1_example_keeps_text(tmp_path, capsys):
    """The issue's example, through the CLI: zip, v and flag come out as the same bytes."""
    src = tmp_path / "r.csv"
    src.write_text(DEFECT1)
    out = tmp_path / "o.csv"
    code, _, err = _run(["anonymize", str(src), str(out), "--qi", "x,y", "--k", "2", "--quiet", "--no-progress"],
                        capsys)
    assert code == 0, err
    got = _fields(out, ["zip", "v", "flag"])
    assert got == _fields(src, ["zip", "v", "flag"])
    assert got == {"zip": ["01000", "02134", "00501"], "v": ["1e3", "2.50", "4.10"], "flag": ["True", "False", "True"]}
    # byte for byte: the pass-through part of every line is the input's
    tail = [line.split(",", 2)[2] for line in src.read_text().splitlines()]
    assert [line.split(",", 2)[2] for line in out.read_text().splitlines()] == tail
    # and verify agrees
    code, _, err = _run(["verify", str(out), "--qi", "x,y", "--k", "2", "--original", str(src)], capsys)
    assert code == 0, err


def test_passthrough_text_edge_cases(tmp_path, capsys):
    """Big integers, quoting, empty field (null) vs "" (empty text), spaces, odd numbers."""
    big = [str(2**53 + 1), str(2**63 + 5), "-" + str(2**70), "00", "1_000", " 7 "]
    text = ['"a,b"', "", '""', '"say ""hi"""', "é ü", "x"]
    # (tail repeats: a column one-to-one with the QI would be refused by the leak guard)
    lines = ["q,big,text,tail"] + [f"{i},{b},{t},{i % 3}.10" for i, (b, t) in enumerate(zip(big, text))]
    src = tmp_path / "in.csv"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.csv"
    code, _, err = _run(["anonymize", str(src), str(out), "--qi", "q", "--k", "2", "--quiet", "--no-progress"],
                        capsys)
    assert code == 0, err
    assert _fields(out, ["big", "text", "tail"]) == _fields(src, ["big", "text", "tail"])
    # null and the empty text stay apart: an empty field, and a quoted empty field
    rows = out.read_text().splitlines()
    assert rows[2].split(",")[2] == "" and rows[3].split(",")[2] == '""'
    assert rows[1].split(",", 2)[2] == '"a,b",0.10'
    frame = pl.read_csv(out, infer_schema=False)
    assert frame["text"].to_list()[:3] == ["a,b", None, ""]


def test_verify_catches_changed_csv_text(tmp_path, capsys):
    """verify --original compares CSV pass-through columns as text: 01000 -> 1000 fails."""
    src = tmp_path / "r.csv"
    src.write_text(DEFECT1)
    out = tmp_path / "o.csv"
    assert _run(["anonymize", str(src), str(out), "--qi", "x,y", "--k", "2", "--quiet"], capsys)[0] == 0
    for old, new in (("01000", "1000"), ("2.50", "2.5"), ("True", "true")):
        bad = tmp_path / "bad.csv"
        bad.write_text(out.read_text().replace(old, new, 1))
        code, stdout, err = _run(["verify", str(bad), "--qi", "x,y", "--k", "2", "--original", str(src)], capsys)
        assert code == 1, stdout
        assert re.search(r"\[FAIL\] other columns: 1 changed \((zip|v|flag)\); first: column '(zip|v|flag)' at row",
                         stdout), stdout


def _late_rows(n=12_500):
    """A CSV whose column ``code`` turns from digits to text, and whose QI ``b`` turns
    from integers to 2.5, after row 12,000."""
    lines = ["a,b,code,big"]
    for i in range(n):
        code = f"{i:05d}" if i < 12_000 else f"A{i}"
        b = str(i % 7) if i < 12_000 else "2.5"
        lines.append(f"{i % 97},{b},{code},{i}")
    return "\n".join(lines) + "\n"


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_defect2_types_change_after_row_12000(tmp_path, capsys, fmt):
    src = tmp_path / "late.csv"
    src.write_text(_late_rows())
    out = tmp_path / f"o.{fmt}"
    code, _, err = _run(["anonymize", str(src), str(out), "--qi", "a,b", "--k", "3", "--quiet", "--no-progress",
                         "--chunk-rows", "1000"], capsys)
    assert code == 0, err
    if fmt == "csv":
        assert _fields(out, ["code", "big"]) == _fields(src, ["code", "big"])
    else:
        res = pl.read_parquet(out)
        assert res.schema["code"] == pl.String and res.schema["big"] == pl.Int64  # typed from the whole file
        orig = pl.read_csv(src, infer_schema=False)
        assert res["code"].to_list() == orig["code"].to_list()
        assert res["big"].to_list() == list(range(12_500))
        assert res.schema["b"] == pl.Float64
    code, stdout, err = _run(["verify", str(out), "--qi", "a,b", "--k", "3", "--original", str(src)], capsys)
    assert code == 0, stdout + err


def test_parquet_output_keeps_wide_integers_exact(tmp_path, capsys):
    """An integer column wider than Int64 (Polars infers Int128, which Parquet cannot
    hold) stays text in a Parquet output: no digit changes."""
    src = tmp_path / "w.csv"
    src.write_text("a,w\n" + "".join(f"{i},{2**64 + i % 3}\n" for i in range(6)))  # (w repeats: no leak)
    out = tmp_path / "o.parquet"
    code, _, err = _run(["anonymize", str(src), str(out), "--qi", "a", "--k", "2", "--quiet"], capsys)
    assert code == 0, err
    assert pl.read_parquet(out)["w"].to_list() == [str(2**64 + i % 3) for i in range(6)]


def test_defect2_qi_not_a_number_names_column_and_row(tmp_path, capsys):
    lines = ["a,b"] + [f"{i},{i % 5}" for i in range(12_344)] + ["oops,1"] + [f"{i},2" for i in range(20)]
    src = tmp_path / "bad.csv"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.csv"
    for fmt in ("csv", "parquet"):
        out = tmp_path / f"o.{fmt}"
        code, _, err = _run(["anonymize", str(src), str(out), "--qi", "a,b", "--k", "3", "--quiet",
                             "--chunk-rows", "1000"], capsys)
        assert code == 2, err
        line = _one_error(err)
        assert "column 'a'" in line and "at row 12345 (rows counted from 1)" in line and "'oops'" in line, line
        assert not out.exists()
    _no_temporaries(tmp_path)


# --- CSV options ----------------------------------------------------------------------


def _semicolon_latin1(tmp_path):
    text = "a;b;name;note\n" + "".join(
        f"{i % 9};{'NA' if i == 4 else i % 4};{'Zoë' if i % 2 else 'André'};{'NA' if i == 3 else f'n{i:03d}'}\n"
        for i in range(30))
    src = tmp_path / "semi.csv"
    src.write_bytes(text.encode("latin-1"))
    return src


def test_separator_null_values_encoding_cli(tmp_path, capsys):
    src = _semicolon_latin1(tmp_path)
    opts = ["--separator", ";", "--null-values", "NA", "--encoding", "latin-1"]
    out = tmp_path / "o.csv"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # without the options: a one-line error, nothing written
    code, _, err = _run(["anonymize", str(src), str(out), "--qi", "a,b", "--k", "3", "--quiet"], capsys)
    assert code == 2 and not out.exists()
    _one_error(err)
    code, _, err = _run(["anonymize", str(src), str(out), "--qi", "a", "--k", "3", "--quiet",
                         "--tmp-dir", str(tmp), *opts], capsys)
    assert code == 0, err
    # the output is UTF-8, comma-separated; the text columns as in the file (NA kept as text)
    want = _fields(src, ["b", "name", "note"], encoding="latin-1", delimiter=";")
    assert _fields(out, ["b", "name", "note"], encoding="utf-8") == want
    assert want["note"][3] == "NA"
    # a null value in a QI is a missing value, which the release publishes as a value
    # (its group's mean, or missing: tests/test_missing.py)
    code, _, err = _run(["anonymize", str(src), str(tmp_path / "o2.csv"), "--qi", "a,b", "--k", "3", "--quiet",
                         *opts], capsys)
    assert code == 0, err
    # verify, risk and profile read the original with the same options
    code, stdout, err = _run(["verify", str(out), "--qi", "a", "--k", "3", "--original", str(src), *opts], capsys)
    assert code == 0, stdout + err
    code, stdout, err = _run(["risk", str(src), str(out), "--qi", "a", *opts], capsys)
    assert code == 0 and "DBRL" in stdout, err
    code, stdout, err = _run(["profile", str(src), "--columns", "a,b,name", *opts], capsys)
    assert code == 0 and "mi-distance" in stdout, err
    _no_temporaries(tmp_path, tmp)
    # a Parquet output: the null values are nulls, the types inferred from the whole file
    pq = tmp_path / "o.parquet"
    assert _run(["anonymize", str(src), str(pq), "--qi", "a", "--k", "3", "--quiet", *opts], capsys)[0] == 0
    res = pl.read_parquet(pq)
    assert res.schema["b"] == pl.Int64 and res["b"][4] is None and res["note"][3] is None
    assert res["name"][1] == "Zoë"


def test_gzip_input(tmp_path, capsys):
    src = tmp_path / "r.csv.gz"
    with gzip.open(src, "wt") as fh:
        fh.write(DEFECT1)
    out = tmp_path / "o.csv"
    tmp = tmp_path / "t"
    tmp.mkdir()
    code, _, err = _run(["anonymize", str(src), str(out), "--qi", "x,y", "--k", "2", "--quiet", "--tmp-dir", str(tmp),
                         "--risk"], capsys)
    assert code == 0, err
    assert _fields(out, ["zip", "v", "flag"]) == {"zip": ["01000", "02134", "00501"], "v": ["1e3", "2.50", "4.10"],
                                                  "flag": ["True", "False", "True"]}
    code, stdout, err = _run(["verify", str(out), "--qi", "x,y", "--k", "2", "--original", str(src)], capsys)
    assert code == 0, stdout + err
    _no_temporaries(tmp_path)
    # a corrupt .gz: one line, nothing written, no temporary left
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(gzip.compress(DEFECT1.encode())[:30])
    code, _, err = _run(["anonymize", str(bad), str(tmp_path / "b.csv"), "--qi", "x,y", "--k", "2", "--quiet"],
                        capsys)
    assert code == 2 and "bad.csv.gz" in _one_error(err)
    assert not (tmp_path / "b.csv").exists()
    _no_temporaries(tmp_path)


def test_transcoded_copy_removed_on_interrupt(tmp_path, monkeypatch):
    """Ctrl-C during the run: the decompressed copy goes with the other temporaries."""
    import engine.methods.centroids as centroids

    src = tmp_path / "r.csv.gz"
    with gzip.open(src, "wt") as fh:
        fh.write(DEFECT1)
    seen = []

    def interrupted(source, *a, **kw):
        seen.extend(p.name for p in tmp_path.iterdir() if p.name.endswith(".microagg-tmp"))
        raise KeyboardInterrupt

    monkeypatch.setattr(centroids, "profile_columns", interrupted)
    assert main(["anonymize", str(src), str(tmp_path / "o.csv"), "--qi", "x,y", "--k", "2", "--quiet"]) == 130
    assert len(seen) == 1  # the copy existed during the run, beside the output
    _no_temporaries(tmp_path)


def test_csv_options_api(tmp_path):
    from engine.select import profile

    src = _semicolon_latin1(tmp_path)
    kw = dict(separator=";", null_values=["NA"], encoding="latin-1")
    res = engine.microaggregate(str(src), ["a"], k=3, **kw)
    assert res.table["name"][1] == "Zoë" and res.table["note"][3] is None
    out = tmp_path / "o.csv"
    engine.anonymize(src, out, ["a"], 3, risk=True, **kw)
    assert engine.verify_release(out, ["a"], 3, original=src, **kw).ok
    assert engine.disclosure_risk(src, out, ["a"], **kw).rows == 30
    assert profile(src, ["a", "b", "name"], **kw).n_rows == 30
    # maxent / mnqia take them too
    sens = tmp_path / "s.csv"
    engine.anonymize(src, sens, ["a"], 3, method="mnqia", **kw)
    assert _fields(sens, ["note"])["note"] == _fields(src, ["note"], encoding="latin-1", delimiter=";")["note"]


@pytest.mark.parametrize("option", [["--separator", ";"], ["--null-values", "NA"], ["--encoding", "latin-1"],
                                    ["--separator", ","], ["--encoding", "utf8"]])
def test_csv_option_with_parquet_input_refused(tmp_path, capsys, option):
    pq = tmp_path / "in.parquet"
    pl.DataFrame({"a": [1.0, 2.0, 3.0], "b": ["x", "y", "z"]}).write_parquet(pq)
    out = tmp_path / "o.parquet"
    for argv in (["anonymize", str(pq), str(out), "--qi", "a", "--k", "2"],
                 ["profile", str(pq), "--columns", "a,b"],
                 ["risk", str(pq), str(pq), "--qi", "a"],
                 ["verify", str(pq), "--qi", "a", "--k", "1", "--original", str(pq)],
                 ["verify", str(pq), "--qi", "a", "--k", "1"]):
        code, _, err = _run(argv + option, capsys)
        assert code == 2, argv
        assert option[0] in _one_error(err)
    assert not out.exists()
    with pytest.raises(engine.EngineError, match="--separator"):
        engine.microaggregate(pl.DataFrame({"a": [1.0, 2.0]}), ["a"], k=2, separator=";")


@pytest.mark.parametrize("option, message", [
    (["--separator", ";;"], "separator"), (["--separator", '"'], "separator"),
    (["--encoding", "klingon"], "encoding"), (["--null-values", "NA,,x"], "null values")])
def test_bad_csv_option_values(tmp_path, capsys, option, message):
    src = tmp_path / "r.csv"
    src.write_text(DEFECT1)
    code, _, err = _run(["anonymize", str(src), str(tmp_path / "o.csv"), "--qi", "x", "--k", "2", *option], capsys)
    assert code == 2 and message in _one_error(err)


def test_invalid_bytes_named(tmp_path, capsys):
    src = tmp_path / "bad.csv"
    src.write_bytes("a,b\n1,Zo\xeb\n2,x\n".encode("latin-1"))
    code, _, err = _run(["anonymize", str(src), str(tmp_path / "o.csv"), "--qi", "a", "--k", "2"], capsys)
    assert code == 2 and "bad.csv" in _one_error(err)
    code, _, err = _run(["anonymize", str(src), str(tmp_path / "o.csv"), "--qi", "a", "--k", "2", "--encoding",
                         "utf-16"], capsys)
    assert code == 2 and "bad.csv" in _one_error(err)
    _no_temporaries(tmp_path)


def test_chunking_does_not_change_csv_output(tmp_path, capsys):
    src = tmp_path / "late.csv"
    src.write_text(_late_rows(3_000))
    outs = []
    for chunk in ("100000", "777"):
        out = tmp_path / f"o{chunk}.csv"
        assert _run(["anonymize", str(src), str(out), "--qi", "a,b", "--k", "3", "--chunk-rows", chunk, "--quiet"],
                    capsys)[0] == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


# --- defect 9 (parts) ----------------------------------------------------------------


def test_duplicate_header_refused(tmp_path, capsys):
    src = tmp_path / "dup.csv"
    src.write_text("a,b,a\n1,2,3\n4,5,6\n7,8,9\n")
    for argv in (["anonymize", str(src), str(tmp_path / "o.csv"), "--qi", "b", "--k", "2"],
                 ["profile", str(src), "--columns", "b"]):
        code, _, err = _run(argv, capsys)
        assert code == 2
        assert "column 'a' appears twice in the header of" in _one_error(err)
    assert not (tmp_path / "o.csv").exists()


def _selfcheck_classes(frame, qi):
    from engine.passes.selfcheck import ClassCounter

    cc = ClassCounter(qi, 4)
    cc.add(frame)
    return cc.check(1, frame.height)["classes"]


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_negative_zero_is_its_own_class(tmp_path, fmt):
    """-0.0 and 0.0 print apart: verify and the self-check both count two classes."""
    rel = pl.DataFrame({"x": [0.0, 0.0, -0.0, 1.0, 1.0, 1.0], "y": [2.0] * 6})
    path = tmp_path / f"rel.{fmt}"
    rel.write_parquet(path) if fmt == "parquet" else rel.write_csv(path)
    res = engine.verify_release(path, ["x", "y"], 2)
    assert not res.ok and res.classes == 3 and res.min_class_size == 1
    assert res.classes == _selfcheck_classes(rel, ["x", "y"])
    assert engine.verify_release(path, ["x", "y"], 1).ok


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_verify_original_with_empty_column_name(tmp_path, capsys, fmt):
    frame = pl.DataFrame({"": ["p", "q", "r", "s"], "a": [1.0, 2.0, 3.0, 4.0]})
    src = tmp_path / f"in.{fmt}"
    frame.write_parquet(src) if fmt == "parquet" else frame.write_csv(src)
    out = tmp_path / f"out.{fmt}"
    assert _run(["anonymize", str(src), str(out), "--qi", "a", "--k", "2", "--quiet"], capsys)[0] == 0
    code, stdout, err = _run(["verify", str(out), "--qi", "a", "--k", "2", "--original", str(src)], capsys)
    assert code == 0, stdout + err
    assert "[ok] other columns: 1 unchanged" in stdout


def test_category_sets_escape_separator(tmp_path):
    """maxent publishes a class's categories joined by |; a category holding | or \\ is
    escaped, and split_categories reads the set back."""
    from engine.methods.maxent import generalize, join_categories, split_categories
    from runs import anonymize_sensitive

    cats = ["a|b", "c", "d\\", "|", ""]
    for values in (cats, ["x"], ["a|b"], ["", ""]):
        assert split_categories(join_categories(values)) == values
    df = pl.DataFrame({"c": ["a|b", "c", "a|b", "c"], "v": [1, 2, 3, 4]})
    out = generalize(df, [0, 0, 1, 1], ["c"])
    assert out["c"].to_list() == ["a\\|b|c"] * 4
    assert split_categories(out["c"][0]) == ["a|b", "c"]
    # the streamed (block) path publishes the same text as the in-memory one
    n = 400
    rng = np.random.default_rng(1)
    frame = pl.DataFrame({"cat": rng.choice(["a|b", "b", "c\\d", "e"], n).tolist(),
                          "num": rng.integers(0, 50, n).tolist(),
                          "sa": rng.choice(["s1", "s2", "s3"], n).tolist()})
    t1, _, _ = anonymize_sensitive(frame, None, ["cat", "num"], "maxent", sa="sa", seed=3)
    t2, _, _ = anonymize_sensitive(frame, None, ["cat", "num"], "maxent", sa="sa", seed=3, _force_blocks=True)
    for t in (t1, t2):
        for text, orig in zip(t["cat"].to_list(), frame["cat"].to_list()):
            assert orig in split_categories(text)


def test_verify_reads_escaped_sets_back(tmp_path, capsys):
    """verify --original splits a published set (escapes undone) and checks that it holds
    the original category; a tampered set fails, naming the column and row."""
    n = 300
    rng = np.random.default_rng(7)
    frame = pl.DataFrame({"cat": rng.choice(["a|b", "b", "c\\d", "e|"], n).tolist(),
                          "num": rng.integers(0, 50, n).tolist(),
                          "sa": rng.choice(["s1", "s2", "s3", "s4"], n).tolist()})
    src = tmp_path / "m.csv"
    frame.write_csv(src)
    out = tmp_path / "o.csv"
    code, _, err = _run(["anonymize", str(src), str(out), "--qi", "cat,num", "--method", "maxent", "--sa", "sa",
                         "--epsilon", "1.0", "--quiet"], capsys)
    assert code == 0, err
    code, stdout, err = _run(["verify", str(out), "--qi", "cat,num", "--k", "1", "--original", str(src)], capsys)
    assert code == 0, stdout + err
    assert "[ok] generalization: every original value lies in its published range or set" in stdout
    published = pl.read_csv(out, infer_schema=False)
    assert any("\\|" in v for v in published["cat"].to_list())
    # row 10's set without its original category (unescaped, "a|b" would read as {a, b})
    others = sorted({"a|b", "b", "c\\d", "e|"} - {frame["cat"][9]})
    from engine.methods.maxent import join_categories

    bad = published.with_columns(pl.when(pl.int_range(pl.len()) == 9).then(pl.lit(join_categories(others)))
                                 .otherwise(pl.col("cat")).alias("cat"))
    tampered = tmp_path / "bad.csv"
    bad.write_csv(tampered)
    code, stdout, err = _run(["verify", str(tampered), "--qi", "cat,num", "--k", "1", "--original", str(src)], capsys)
    assert code == 1
    assert "[FAIL] generalization" in stdout and "first: column 'cat' at row 10" in stdout, stdout


def test_inference_rules_and_late_changes(tmp_path):
    """Types from every value (streamed in chunks), by the documented rules."""
    from engine.io.source import open_source

    n = 450_000  # several chunks of the streamed inference
    late = n - 3
    rows = ["i,f,late_text,late_float,b,wide,spaced,empty,plus"]
    for r in range(n):
        rows.append(",".join([str(r), "1e3" if r % 2 else "2.50", f"A{r}" if r == late else str(r),
                              "2.5" if r == late else "7", "True" if r % 3 else "false",
                              str(2**64) if r == late else "1", " 7" if r == late else "7", "", "+3"]))
    src = tmp_path / "rules.csv"
    src.write_text("\n".join(rows) + "\n")
    with open_source(src) as s:
        schema = s.schema
        assert dict(schema) == {"i": pl.Int64, "f": pl.Float64, "late_text": pl.String, "late_float": pl.Float64,
                                "b": pl.Boolean, "wide": pl.String, "spaced": pl.String, "empty": pl.String,
                                "plus": pl.Int64}
        tail = s.lazy.tail(3).collect()
    assert tail["late_text"].to_list() == [f"A{late}", str(late + 1), str(late + 2)]
    assert tail["wide"][0] == str(2**64) and tail["spaced"][0] == " 7" and tail["late_float"][0] == 2.5
    assert tail["b"].to_list() == [bool(r % 3) for r in range(late, n)]
