"""Published figures: MDAV on Census and Tarragona (Rawat & Borah (IV-MDAV) Table 1, PROVENANCE.md).

All 13 columns as quasi-identifiers, z-scores with the population standard
deviation, IL = 100 * SSE / SST, through the public API.
"""

import pytest

import engine

MDAV_IL = {
    "census": {3: 5.6922, 4: 7.4947, 5: 9.0884, 10: 14.1559},
    "tarragona": {3: 16.9326, 4: 19.5460, 5: 22.4619, 10: 33.1929},
}
# Rawat & Borah (IV-MDAV) Table 1, MDAV-single-group: all eight reproduced
MDAV_SINGLE_IL = {
    "census": {3: 5.6536, 4: 7.4414, 5: 8.8840, 10: 14.0066},
    "tarragona": {3: 16.9661, 4: 19.7303, 5: 22.8186, 10: 33.2154},
}
# Rawat & Borah (IV-MDAV) Table 1, IV-MDAV (gamma 1.16): seven of eight reproduced; Census k=4
# prints 7.4034 and we get 7.4055 (see engine/kernels/mdav/indexed.py)
IVMDAV_IL = {
    "census": {3: 5.6354, 5: 8.8757, 10: 13.9961},
    "tarragona": {3: 16.9662, 4: 19.7303, 5: 22.8186, 10: 33.2154},
}


def _il(frame, k, method):
    res = engine.microaggregate(frame, qi=frame.columns, k=k, method=method)
    return res.report.information_loss_percent


@pytest.mark.parametrize("name", ["census", "tarragona"])
@pytest.mark.parametrize("k", [3, 4, 5, 10])
def test_mdav_published_il(name, k, request):
    frame = request.getfixturevalue(name)
    assert round(_il(frame, k, "mdav"), 4) == MDAV_IL[name][k]


@pytest.mark.parametrize("name", ["census", "tarragona"])
@pytest.mark.parametrize("k", [3, 4, 5, 10])
def test_mdav_single_table1(name, k, request):
    frame = request.getfixturevalue(name)
    assert round(_il(frame, k, "mdav-single"), 4) == MDAV_SINGLE_IL[name][k]


@pytest.mark.parametrize("name,k", [(n, k) for n in IVMDAV_IL for k in IVMDAV_IL[n]])
def test_ivmdav_table1(name, k, request):
    frame = request.getfixturevalue(name)
    assert round(_il(frame, k, "ivmdav"), 4) == IVMDAV_IL[name][k]


def test_report_matches_reference_il(census):
    import numpy as np

    import reference as ref

    res = engine.microaggregate(census, qi=census.columns, k=3)
    Z = ref.standardize(census.to_numpy().astype(float))
    il, sse, sst = ref.information_loss(Z, res.labels)
    assert res.report.sse == pytest.approx(sse, rel=1e-9)
    assert res.report.sst == pytest.approx(sst, rel=1e-9)
    assert res.report.information_loss_percent == pytest.approx(il, rel=1e-9)
    assert res.report.groups == len(np.unique(res.labels)) == 360
