"""/v1/embeddings through the official openai client against the real daemon and SmolLM2:
one unit vector per input, base64 and dimensions, similarity that means something, token-id
inputs, usage, and 400s for bad input."""
import base64
import math
import struct

import openai
import pytest

from conftest import MODEL_ID

N_EMBD = 576  # SmolLM2-135M's width


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / (norm(a) * norm(b))


def test_list_gives_one_unit_vector_each(client):
    texts = ["The cat sat on the mat.", "A cat was sitting on the mat.",
             "Quantum chromodynamics describes the strong nuclear force."]
    r = client.embeddings.create(model=MODEL_ID, input=texts)
    assert r.object == "list"
    assert r.model == MODEL_ID
    assert [d.index for d in r.data] == [0, 1, 2]
    for d in r.data:
        assert d.object == "embedding"
        assert len(d.embedding) == N_EMBD
        assert abs(norm(d.embedding) - 1) < 1e-5
    assert r.usage.prompt_tokens > 10
    assert r.usage.total_tokens == r.usage.prompt_tokens
    a, b, c = (d.embedding for d in r.data)
    # Two sentences about a cat on a mat are closer than either is to physics.
    assert cos(a, b) > cos(a, c) + 0.1
    assert cos(a, b) > cos(b, c) + 0.1


def test_identical_inputs_identical_vectors(client):
    r = client.embeddings.create(model=MODEL_ID, input=["same words here", "same words here"])
    assert r.data[0].embedding == r.data[1].embedding
    one = client.embeddings.create(model=MODEL_ID, input="same words here")
    assert max(abs(x - y) for x, y in zip(one.data[0].embedding, r.data[0].embedding)) < 1e-6
    assert one.usage.prompt_tokens * 2 == r.usage.prompt_tokens


def test_base64_and_dimensions(client, server):
    # The client asks for base64 by default and decodes it itself; the raw bytes are checked
    # here against the float form of the same request.
    text = "Embeddings for code search"
    floats = client.embeddings.create(model=MODEL_ID, input=text, encoding_format="float")
    status, body = server.json("POST", "/v1/embeddings",
                               {"model": MODEL_ID, "input": text, "encoding_format": "base64"})
    assert status == 200
    raw = base64.b64decode(body["data"][0]["embedding"])
    assert len(raw) == 4 * N_EMBD
    vec = struct.unpack(f"<{N_EMBD}f", raw)
    assert max(abs(x - y) for x, y in zip(vec, floats.data[0].embedding)) < 1e-6
    # dimensions: the first 64 components, renormalised.
    short = client.embeddings.create(model=MODEL_ID, input=text, dimensions=64)
    v = short.data[0].embedding
    assert len(v) == 64 and abs(norm(v) - 1) < 1e-5
    full = floats.data[0].embedding[:64]
    assert cos(v, full) > 0.99999


def test_token_id_inputs(client):
    r = client.embeddings.create(model=MODEL_ID, input=[[28120, 905], [28120, 905, 17]])
    assert len(r.data) == 2
    assert r.usage.prompt_tokens == 5
    one = client.embeddings.create(model=MODEL_ID, input=[28120, 905])
    assert len(one.data) == 1
    assert max(abs(x - y) for x, y in zip(one.data[0].embedding, r.data[0].embedding)) < 1e-6


@pytest.mark.parametrize("body,param", [
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": ["ok", ""]}, "input"),
    ({"input": [[1, 2], [-1]]}, "input"),
    ({"input": [1, 99999999]}, "input"),
    ({"input": {"text": "x"}}, "input"),
    ({}, "input"),
    ({"input": "x", "dimensions": 0}, "dimensions"),
    ({"input": "x", "dimensions": N_EMBD + 1}, "dimensions"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"input": ["x"] * 2049}, "input"),
])
def test_bad_input_is_400(server, body, param):
    status, r = server.json("POST", "/v1/embeddings", body)
    assert status == 400, r
    assert r["error"]["type"] == "invalid_request_error"
    assert r["error"]["param"] == param


def test_too_long_for_context_names_limit(make_server):
    s = make_server("--ctx", "64")
    status, r = s.json("POST", "/v1/embeddings", {"input": ["ok", [17] * 65]})
    assert status == 400
    assert "64" in r["error"]["message"] and "'input'[1]" in r["error"]["message"]
    assert r["error"]["code"] == "context_length_exceeded"
    status, r = s.json("POST", "/v1/embeddings", {"input": [[17] * 64, [18] * 64]})
    assert status == 200, r
    assert r["usage"]["prompt_tokens"] == 128


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no-such-model", input="x")


def test_embeddings_alongside_generation(client):
    """An embedding job shares the engine with a running generation (a slot each)."""
    import threading
    out = {}

    def gen():
        out["chat"] = client.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "Count to five."}],
            max_tokens=24, temperature=0)

    t = threading.Thread(target=gen)
    t.start()
    r = client.embeddings.create(model=MODEL_ID, input=["while generating"] * 4)
    t.join()
    assert len(r.data) == 4
    assert out["chat"].choices[0].message.content


def test_token_ids_outside_the_vocabulary_are_named(server, client):
    """Token ids are checked against the loaded model's vocabulary (SmolLM2: 49152 tokens): the
    400 names the first id outside it and where it is, and says what to do. LangChain's
    OpenAIEmbeddings sends tiktoken's cl100k ids by default (100257 is cl100k's <|endoftext|>);
    docs/API.md explains check_embedding_ctx_length=False."""
    with pytest.raises(openai.BadRequestError) as ei:
        client.embeddings.create(model=MODEL_ID, input=[[9906, 1917], [9906, 60000, 100257, 7]])
    err = ei.value.body
    assert err["param"] == "input"
    assert "token id 60000" in err["message"], err
    assert "'input'[1][1]" in err["message"]
    assert "100257" not in err["message"]  # the first one only
    assert "vocabulary" in err["message"] and "check_embedding_ctx_length" in err["message"]
    # The largest id the vocabulary has is fine, one more is not.
    n_vocab = 49152
    client.embeddings.create(model=MODEL_ID, input=[n_vocab - 1])
    status, body = server.json("POST", "/v1/embeddings", {"input": [n_vocab]})
    assert status == 400 and f"token id {n_vocab} " in body["error"]["message"]
    status, body = server.json("POST", "/v1/embeddings", {"input": [[1, "2"]]})
    assert status == 400 and "'input'[0][1] is not a token id" in body["error"]["message"]
