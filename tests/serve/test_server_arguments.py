"""ModelServer from Python refuses bad arguments before any JVM starts, naming the value and the fix
(the CLI's own checks are in test_cli)."""

from __future__ import annotations

import pytest

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
])
def test_bad_server_arguments_are_refused_naming_the_value(models, kw, words):
    from pyd4j.serve import ModelServer

    with pytest.raises(InputError) as err:
        ModelServer(models, **kw)
    for w in words:
        assert w in str(err.value), (w, str(err.value))
