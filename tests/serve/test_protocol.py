"""Open Inference Protocol v2 requests and responses, no JVM: checks name the tensor and the expected
shape; responses are read back by tritonclient's own parser (an independent reader)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pyd4j.serve.protocol import HEADER_LENGTH, ProtocolError, TensorSpec, infer_response, parse_infer_request

IN = [TensorSpec("input", "FP32", (-1, 4))]
OUT = [TensorSpec("output", "FP32", (-1, 3))]


def _body(**tensor) -> bytes:
    t = {"name": "input", "shape": [2, 4], "datatype": "FP32", "data": list(range(8))}
    t.update(tensor)
    return json.dumps({"inputs": [t]}).encode()


def test_json_tensor_flat_and_nested_read_row_major():
    flat = parse_infer_request(_body(), None, IN, OUT, 32)
    nested = parse_infer_request(_body(data=[[0, 1, 2, 3], [4, 5, 6, 7]]), None, IN, OUT, 32)
    want = np.arange(8, dtype=np.float32).reshape(2, 4)
    for req in (flat, nested):
        assert req.rows == 2
        np.testing.assert_array_equal(req.inputs[0], want)
        assert req.inputs[0].dtype == np.float32


def test_binary_tensor_extension_as_tritonclient_sends_it():
    from tritonclient.http import InferInput, InferRequestedOutput
    from tritonclient.http._utils import _get_inference_request

    x = np.random.default_rng(0).random((3, 4), dtype=np.float32)
    inp = InferInput("input", [3, 4], "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    body, json_size = _get_inference_request([inp], "req-7", [InferRequestedOutput("output", binary_data=True)],
                                             0, False, False, 0, None, None)
    req = parse_infer_request(body, str(json_size), IN, OUT, 32)
    np.testing.assert_array_equal(req.inputs[0], x)
    assert req.id == "req-7" and req.binary_outputs == {"output"}


@pytest.mark.parametrize("binary", [False, True])
def test_response_read_by_tritonclient(binary):
    from tritonclient.http import InferResult

    req = parse_infer_request(_body(), None, IN, OUT, 32)
    if binary:
        req.binary_outputs = {"output"}
    y = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    content, headers = infer_response("m", req, OUT, [y])
    result = InferResult.from_response_body(content, header_length=int(headers[HEADER_LENGTH]) if binary else None)
    np.testing.assert_array_equal(result.as_numpy("output"), y)
    assert result.get_response()["model_name"] == "m"


@pytest.mark.parametrize("body, words", [
    (_body(datatype="FP64"), ["'input'", "FP64", "[-1, 4]", "FP32"]),
    (_body(shape=[2, 5], data=list(range(10))), ["'input'", "[2, 5]", "[-1, 4]"]),
    (_body(shape=[8]), ["'input'", "[8]", "[-1, 4]"]),
    (_body(data=list(range(7))), ["'input'", "7 values", "takes 8"]),
    (_body(data=["a"] * 8), ["'input'", "FP32"]),
    (_body(data=[[0, 1], [2]]), ["'input'"]),
    (_body(name="x"), ["'x'", "unknown", "'input' FP32 [-1, 4]"]),
    (b"{not json", ["not JSON"]),
    (b"[1, 2]", ["list"]),
    (json.dumps({"inputs": []}).encode(), ["no \"inputs\"", "input FP32 [-1, 4]"]),
    (_body(shape=[40, 4], data=[0] * 160), ["40", "at most 32"]),
    (_body(data=[0.5, float("nan")] + [0.0] * 6), ["NaN", "JSON", "binary_data_size"]),
    (_body(data=[float("inf")] * 8), ["Infinity", "JSON"]),
    (json.dumps({"inputs": [json.loads(_body())["inputs"][0]] * 2}).encode(), ["'input'", "twice"]),
    (_body(shape=[-1, 4]), ["input 'input'", "shape[0]", "greater than or equal to 0", "[-1, 4]"]),
])
def test_bad_request_is_400_naming_tensor_and_expected_shape(body, words):
    with pytest.raises(ProtocolError) as err:
        parse_infer_request(body, None, IN, OUT, 32)
    assert err.value.status == 400
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_binary_size_that_does_not_match_the_shape_is_400():
    head = json.dumps({"inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 16}}]}).encode()
    with pytest.raises(ProtocolError, match="binary_data_size 16.*takes 32 bytes"):
        parse_infer_request(head + bytes(16), str(len(head)), IN, OUT, 32)
    with pytest.raises(ProtocolError, match="outside the body"):
        parse_infer_request(head, str(len(head) + 5), IN, OUT, 32)
    with pytest.raises(ProtocolError, match=f"first 10 bytes \\(its {HEADER_LENGTH}\\) is not JSON"):
        parse_infer_request(head + bytes(32), "10", IN, OUT, 32)
