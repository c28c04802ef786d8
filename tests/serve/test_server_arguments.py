"""ModelServer from Python refuses bad arguments before any JVM starts, naming the value and the fix
(the CLI's own checks are in test_cli)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyd4j.inputs import InputError

pytest.importorskip("starlette")

MODELS = {"m": "examples/networks/mlp.json"}


@pytest.mark.parametrize("models, kw, words", [
    ({"m": 123}, {}, ["123", "dict of name -> path"]),
    ("m=x.json", {}, ["'m=x.json'", "NAME=PATH"]),
    (MODELS, {"max_batch": True}, ["max batch True", "whole number"]),
    (MODELS, {"slice_rows": True}, ["slice rows True", "'auto'"]),
    (MODELS, {"slice_rows": 64}, ["64", "max batch 32"]),
    (MODELS, {"port": -1}, ["port -1", "65535"]),
    (MODELS, {"port": "80"}, ["port '80'"]),
    (MODELS, {"host": ""}, ["host ''", "127.0.0.1"]),
    (MODELS, {"max_wait_ms": float("nan")}, ["nan", "finite"]),
    (MODELS, {"timeout_s": 0}, ["timeout 0", "more than 0"]),
    (MODELS, {"max_body_bytes": 0}, ["max body", "0"]),
    (MODELS, {"idle_before_evict_s": "5"}, ["'5'", "not a number"]),
    # names: the check the CLI's --model uses (pyd4j.inputs.model_name)
    ({"..": "m.json"}, {}, ["'..'", "starts with '.'"]),
    ({"": "m.json"}, {}, ["empty"]),
    ({"a/b": "m.json"}, {}, ["'/'", "letters, digits"]),
    ({"x" * 300: "m.json"}, {}, ["300 characters", "more than 64"]),
    ({5: "m.json"}, {}, ["5", "text name"]),
    # inputs: a dict of served model -> readable spec
    (MODELS, {"inputs": ["m=ff:784"]}, ["['m=ff:784']", "dict of model name -> input type"]),
    (MODELS, {"inputs": {"other": "ff:784"}}, ["['other']", "not served"]),
    (MODELS, {"inputs": {"m": "cube:3"}}, ["cube:3", "ff:SIZE"]),
    (MODELS, {"spill_dir": "/nonexistent/spill"}, ["'/nonexistent/spill'", "not a directory"]),
])
def test_bad_server_arguments_are_refused_naming_the_value(models, kw, words):
    from pyd4j.serve import ModelServer

    with pytest.raises(InputError) as err:
        ModelServer(models, **kw)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


@given(st.text(min_size=0, max_size=300))
@settings(max_examples=300, deadline=None)
def test_a_name_is_refused_or_keeps_in_every_url_and_file_name(name):
    """Any text: refused with InputError, or a name that URL quoting, URL normalising and a file
    name of 255 bytes all keep as it is."""
    import posixpath
    import urllib.parse

    from pyd4j.inputs import model_name

    try:
        got = model_name(name)
    except InputError as err:
        assert str(err)
        return
    assert got == name and urllib.parse.quote(name, safe="") == name
    assert posixpath.normpath(f"/v2/models/{name}/infer") == f"/v2/models/{name}/infer"
    assert len(f"pyd4j-serve-{name}-12345678.params".encode()) <= 255
