"""Object storage (issue 31, part 3): ``s3://`` URLs as INPUT (an object, a prefix, a
glob; CSV and Parquet), OUTPUT, ``--report``, ``--html``, ``--json``, and the inputs of
``verify`` and ``risk``, through the CLI and the API, against moto's S3 server on
127.0.0.1 (no other network). The outputs are the bytes of a local run; a failed commit
leaves no key at the destination and no temporary key; a missing key or an unreachable
endpoint is one line and exit 2, within seconds."""

import json
import logging
import socket
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine.cli import main

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

QI = "a,b,c"
ANON = ["--qi", QI, "--k", "3"]


@pytest.fixture(scope="module")
def endpoint():
    logging.getLogger("werkzeug").disabled = True  # (the server's request lines: not the run's stderr)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(endpoint, monkeypatch, request, tmp_path):
    """A fresh bucket on the server, the standard AWS variables pointing at it, and the
    system's temporary folder moved to a folder of this test (to see what is left there)."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    temp = tmp_path / "systemp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    bucket = "t-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    client.create_bucket(Bucket=bucket)
    client.bucket, client.temp = bucket, temp
    return client


def _keys(s3):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=s3.bucket).get("Contents", []))


def _get(s3, key) -> bytes:
    return s3.get_object(Bucket=s3.bucket, Key=key)["Body"].read()


def _put(s3, key, path):
    s3.put_object(Bucket=s3.bucket, Key=key, Body=Path(path).read_bytes())


def _url(s3, key) -> str:
    return f"s3://{s3.bucket}/{key}"


def _run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err.strip()


def _one_line(code, err, *words):
    assert code == 2, err
    assert err.startswith("microagg: error: ") and len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, (w, err)


def _frame(n=240, seed=3):
    rng = np.random.default_rng(seed)
    return pl.DataFrame({"a": rng.normal(size=n).round(3), "b": rng.normal(size=n).round(3),
                         "c": rng.integers(0, 40, n), "s": rng.choice(["u", "v", "w"], n)})


def _no_temporaries(s3):
    """No temporary key left, nor any temporary file or folder of ours in the system's
    temporary folder (a CSV object's local copy, an output's local file)."""
    assert not [k for k in _keys(s3) if "microagg-tmp" in k], _keys(s3)
    ours = [p.name for p in s3.temp.iterdir() if "microagg" in p.name]
    assert not ours, ours


def test_cli_parquet_object_report_html_equal_to_local(s3, tmp_path, capsys):
    src = tmp_path / "in.parquet"
    _frame().write_parquet(src)
    _put(s3, "in/data.parquet", src)
    local = tmp_path / "out.parquet"
    assert _run(["anonymize", src, local, *ANON, "--report", tmp_path / "r.json"], capsys)[0] == 0
    code, _, err = _run(["anonymize", _url(s3, "in/data.parquet"), _url(s3, "out/anon.parquet"), *ANON,
                         "--report", _url(s3, "out/report.json"), "--html", _url(s3, "out/report.html")], capsys)
    assert code == 0, err
    assert _get(s3, "out/anon.parquet") == local.read_bytes()
    report = json.loads(_get(s3, "out/report.json"))
    assert report["input"] == _url(s3, "in/data.parquet") and report["rows"] == 240
    assert _get(s3, "out/report.html").lstrip().lower().startswith(b"<!doctype html")
    assert _keys(s3) == ["in/data.parquet", "out/anon.parquet", "out/report.html", "out/report.json"]
    _no_temporaries(s3)


def test_api_prefix_of_csv_parts_equal_to_local_folder(s3, tmp_path):
    parts = tmp_path / "parts"
    parts.mkdir()
    frame = _frame()
    for i, piece in enumerate((frame.slice(0, 100), frame.slice(100))):
        piece.write_csv(parts / f"part-{i}.csv")
        _put(s3, f"in/part-{i}.csv", parts / f"part-{i}.csv")
    _put(s3, "in/_SUCCESS", parts / "part-0.csv")  # (no table suffix: not read)
    local = tmp_path / "out.csv"
    engine.anonymize(str(parts), local, QI, 3)
    rep = engine.anonymize(_url(s3, "in/"), _url(s3, "out.csv"), QI, 3)
    assert rep.rows == 240
    assert _get(s3, "out.csv") == local.read_bytes()
    _no_temporaries(s3)  # (the CSV parts' local copies removed)


def test_glob_of_parquet_parts_and_gzip_csv(s3, tmp_path, capsys):
    frame = _frame()
    for i, piece in enumerate((frame.slice(0, 120), frame.slice(120))):
        piece.write_parquet(tmp_path / f"p-{i}.parquet")
        _put(s3, f"in/p-{i}.parquet", tmp_path / f"p-{i}.parquet")
    _put(s3, "in/q-0.parquet", tmp_path / "p-0.parquet")  # (not matched)
    local = tmp_path / "out.parquet"
    assert _run(["anonymize", tmp_path / "p-*.parquet", local, *ANON], capsys)[0] == 0
    code, _, err = _run(["anonymize", _url(s3, "in/p-*.parquet"), _url(s3, "out.parquet"), *ANON], capsys)
    assert code == 0, err
    assert _get(s3, "out.parquet") == local.read_bytes()

    import gzip
    gz = tmp_path / "in.csv.gz"
    gz.write_bytes(gzip.compress(frame.write_csv().encode()))
    _put(s3, "in.csv.gz", gz)
    assert _run(["anonymize", gz, tmp_path / "gz.csv", *ANON], capsys)[0] == 0
    code, _, err = _run(["anonymize", _url(s3, "in.csv.gz"), _url(s3, "gz.csv"), *ANON], capsys)
    assert code == 0, err
    assert _get(s3, "gz.csv") == (tmp_path / "gz.csv").read_bytes()
    _no_temporaries(s3)


def test_verify_and_risk_read_the_store(s3, tmp_path, capsys):
    src = tmp_path / "in.csv"
    _frame().write_csv(src)
    _put(s3, "in.csv", src)
    out = _url(s3, "release.csv")
    assert _run(["anonymize", _url(s3, "in.csv"), out, *ANON], capsys)[0] == 0
    code, text, err = _run(["verify", out, *ANON, "--original", _url(s3, "in.csv"), "--json", _url(s3, "v.json")],
                           capsys)
    assert code == 0, err + text
    assert json.loads(_get(s3, "v.json"))["ok"] is True
    (tmp_path / "release.csv").write_bytes(_get(s3, "release.csv"))
    far = engine.disclosure_risk(_url(s3, "in.csv"), out, QI).to_dict()
    near = engine.disclosure_risk(src, tmp_path / "release.csv", QI).to_dict()
    for key in ("original", "masked", "wall_seconds"):
        far.pop(key), near.pop(key)
    assert far == near
    code, text, err = _run(["risk", _url(s3, "in.csv"), out, "--qi", QI], capsys)
    assert code == 0 and "DBRL" in text, err
    broken = _frame().with_columns(pl.lit(1.0).alias("a"))  # one class of 240: k holds, but the values moved
    broken.write_parquet(tmp_path / "broken.parquet")
    _put(s3, "broken.parquet", tmp_path / "broken.parquet")
    res = engine.verify_release(_url(s3, "broken.parquet"), QI, 3, original=_url(s3, "in.csv"))
    assert not res.ok and res.output == _url(s3, "broken.parquet")
    _no_temporaries(s3)


def test_failed_commit_leaves_nothing(s3, tmp_path, monkeypatch):
    """A run that fails after its output was written: interrupted while uploading the
    report (the output's temporary key is already there), then failing to move the
    report after the output was moved onto a previous object: no key at a new
    destination, the previous objects back, no temporary key, no local temporary."""
    from engine.io import remote

    src = tmp_path / "in.parquet"
    _frame().write_parquet(src)
    out, report = _url(s3, "out.parquet"), _url(s3, "report.json")
    real_stage, real_publish = remote.RemoteOutput.stage, remote.RemoteOutput.publish
    calls = []

    def stage(self):
        calls.append(self.url)
        if self.url == report:
            assert any("microagg-tmp" in k for k in _keys(s3))  # the output's temporary key
            raise KeyboardInterrupt
        real_stage(self)

    monkeypatch.setattr(remote.RemoteOutput, "stage", stage)
    with pytest.raises(KeyboardInterrupt):
        engine.anonymize(src, out, QI, 3, report=report)
    assert calls == [out, report]
    assert _keys(s3) == []
    _no_temporaries(s3)

    monkeypatch.setattr(remote.RemoteOutput, "stage", real_stage)
    s3.put_object(Bucket=s3.bucket, Key="out.parquet", Body=b"previous output")
    s3.put_object(Bucket=s3.bucket, Key="report.json", Body=b"previous report")

    def publish(self, keep_previous):
        if self.url == report:
            assert _get(s3, "out.parquet") != b"previous output"  # the output was moved already
            raise OSError("the store went away")
        real_publish(self, keep_previous)

    monkeypatch.setattr(remote.RemoteOutput, "publish", publish)
    with pytest.raises(OSError):
        engine.anonymize(src, out, QI, 3, report=report)
    assert _get(s3, "out.parquet") == b"previous output" and _get(s3, "report.json") == b"previous report"
    assert _keys(s3) == ["out.parquet", "report.json"]
    _no_temporaries(s3)


def test_missing_key_bucket_and_folder_output(s3, tmp_path, capsys):
    src = tmp_path / "in.parquet"
    _frame().write_parquet(src)
    code, _, err = _run(["anonymize", _url(s3, "nope/in.parquet"), _url(s3, "out.parquet"), *ANON], capsys)
    _one_line(code, err, f"input not found: {_url(s3, 'nope/in.parquet')}")
    code, _, err = _run(["anonymize", _url(s3, "nope/*.parquet"), _url(s3, "out.parquet"), *ANON], capsys)
    _one_line(code, err, "input glob matches no files")
    code, _, err = _run(["anonymize", src, "s3://no-such-bucket-here/out.parquet", *ANON], capsys)
    _one_line(code, err, "output bucket does not exist: s3://no-such-bucket-here")
    code, _, err = _run(["verify", _url(s3, "missing.parquet"), *ANON], capsys)
    _one_line(code, err, "input not found")
    _put(s3, "in.parquet", src)
    code, _, err = _run(["anonymize", _url(s3, "in.parquet"), _url(s3, "in.parquet"), *ANON], capsys)
    _one_line(code, err, "output is the input file")
    assert _keys(s3) == ["in.parquet"]


def test_unreachable_endpoint_is_one_line_quickly(s3, tmp_path, monkeypatch, capsys):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    src = tmp_path / "in.parquet"
    _frame().write_parquet(src)
    for argv, what in ((["anonymize", "s3://bkt/in.parquet", tmp_path / "o.parquet", *ANON], "cannot read"),
                       (["anonymize", src, "s3://bkt/out.parquet", *ANON], "cannot use output"),
                       (["risk", src, "s3://bkt/out.parquet", "--qi", QI], "cannot read")):
        t = time.perf_counter()
        code, _, err = _run(argv, capsys)
        assert time.perf_counter() - t < 30
        _one_line(code, err, what, f"cannot connect to http://127.0.0.1:{port}")
    assert not (tmp_path / "o.parquet").exists()


def test_scheduler_local_reads_and_writes_the_store(s3, tmp_path):
    """``--scheduler local`` (Dask): the workers read the Parquet object themselves, the
    folder output's part files are uploaded at the commit; the values of a local run."""
    pytest.importorskip("distributed")
    src = tmp_path / "in.parquet"
    _frame(600).write_parquet(src)
    _put(s3, "in/data.parquet", src)
    local = tmp_path / "out.parquet"
    engine.anonymize(src, local, QI, 3)
    work = tmp_path / "work"
    work.mkdir()
    engine.anonymize(_url(s3, "in/data.parquet"), _url(s3, "out/"), QI, 3, scheduler="local", tmp_dir=work)
    parts = [k for k in _keys(s3) if k.startswith("out/")]
    assert parts and all(k.endswith(".parquet") for k in parts), parts
    for k in parts:
        (tmp_path / k.replace("/", "-")).write_bytes(_get(s3, k))
    got = pl.concat([pl.read_parquet(tmp_path / k.replace("/", "-")) for k in parts])
    assert got.equals(pl.read_parquet(local))
    _no_temporaries(s3)
