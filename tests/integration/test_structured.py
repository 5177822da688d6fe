"""Structured output against the real daemon with SmolLM2: response_format json_schema (checked
with the jsonschema package), json_object, llama.cpp's json_schema and grammar fields, streaming,
the openai SDK's parse helper, and bad schemas or grammars (400 naming the problem; the daemon
keeps serving)."""
import json
import re

import jsonschema
import openai
import pydantic
import pytest

from conftest import MODEL_ID

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer"},
        "city": {"enum": ["Paris", "Tokyo", "Lima"]},
        "pets": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 2},
        "email": {"type": ["string", "null"], "maxLength": 20},
    },
    "required": ["name", "age", "city", "pets"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Describe a person as JSON with name, age, city and pets."}]


def schema_format(schema, name="person"):
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


def test_json_schema_output_validates(client):
    r = client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=120,
                                       temperature=0, response_format=schema_format(PERSON))
    c = r.choices[0]
    assert c.finish_reason == "stop", c.message.content
    jsonschema.validate(json.loads(c.message.content), PERSON)


def test_json_schema_sampled_and_nested(client):
    schema = {
        "$defs": {"item": {"type": "object", "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
            "qty": {"type": "integer"},
            "when": {"type": "string", "format": "date"}},
            "required": ["sku", "qty", "when"], "additionalProperties": False}},
        "type": "object",
        "properties": {"order": {"type": "array", "items": {"$ref": "#/$defs/item"},
                                 "minItems": 1, "maxItems": 2},
                       "paid": {"type": "boolean"},
                       "note": {"anyOf": [{"type": "null"}, {"const": "urgent"}]}},
        "required": ["order", "paid", "note"], "additionalProperties": False}
    for seed in (1, 2):
        r = client.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "An order as JSON."}],
            max_tokens=150, temperature=0.8, seed=seed, response_format=schema_format(schema))
        c = r.choices[0]
        assert c.finish_reason == "stop", c.message.content
        doc = json.loads(c.message.content)
        jsonschema.validate(doc, schema, format_checker=jsonschema.FormatChecker())


def test_json_object(client):
    r = client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=150,
                                       temperature=0, response_format={"type": "json_object"})
    c = r.choices[0]
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict)
    else:  # cut by max_tokens: still a prefix of an object
        assert c.message.content.lstrip().startswith("{")


def test_json_schema_stream(client):
    stream = client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=120,
                                            temperature=0, stream=True,
                                            response_format=schema_format(PERSON))
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop"
    jsonschema.validate(json.loads(text), PERSON)


def test_sdk_parse_helper(client):
    class City(pydantic.BaseModel):
        name: str
        country: str
        population: int

    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    r = parse(model=MODEL_ID, messages=[{"role": "user", "content": "Describe Paris."}],
              max_tokens=100, temperature=0, response_format=City)
    city = r.choices[0].message.parsed
    assert isinstance(city, City)


def test_llamacpp_fields(client):
    # json_schema and grammar as llama.cpp's server takes them, on both routes
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    r = client.completions.create(model=MODEL_ID, prompt="Is water wet? JSON:", max_tokens=30,
                                  temperature=0, extra_body={"json_schema": schema})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].text), schema)
    grammar = 'root ::= "Answer: " ("yes" | "no") "." [ ]? [0-9]{2}'
    r = client.completions.create(model=MODEL_ID, prompt="Is the sky blue?", max_tokens=20,
                                  temperature=0, extra_body={"grammar": grammar})
    assert re.fullmatch(r"Answer: (yes|no)\. ?[0-9]{2}", r.choices[0].text), r.choices[0].text
    r = client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=20, temperature=0.7,
                                       extra_body={"grammar": 'root ::= [a-z]{3,5} "!"'})
    assert re.fullmatch(r"[a-z]{3,5}!", r.choices[0].message.content)


def test_bad_schemas_and_grammars(server, client):
    cases = [
        ({"response_format": schema_format({"type": "object", "properties": {
            "a": {"type": "string", "format": "email"}}})},
         "response_format.json_schema.schema.properties.a.format",
         "'format': 'email' is not supported at $.properties.a"),
        ({"response_format": schema_format({"type": "array", "uniqueItems": True})},
         "response_format.json_schema.schema.uniqueItems", "'uniqueItems'"),
        ({"response_format": schema_format({"$ref": "#/$defs/nope"})},
         "response_format.json_schema.schema.$ref", "does not resolve"),
        # issue 31: the documented bounds, and what only the grammar compiler used to see,
        # in the schema's terms
        ({"response_format": schema_format({"type": "object", "properties": {
            "x": {"type": "array", "minItems": 257}}})},
         "response_format.json_schema.schema.properties.x.minItems", "'minItems' above 256"),
        ({"response_format": schema_format({"$ref": "#"})}, "response_format.json_schema.schema",
         "refers to itself through '$ref'"),
        ({"response_format": schema_format({"type": "string", "pattern": "[z-a]"})},
         "response_format.json_schema.schema.pattern", "the range z-a in a class is out of order"),
        ({"response_format": schema_format({"type": "object", "properties": {
            f"p{i}": {"type": "string"} for i in range(10000)}})},
         "response_format.json_schema.schema", "the schema is too large"),
        ({"response_format": {"type": "json_schema"}}, "response_format", "json_schema"),
        ({"response_format": {"type": "yaml"}}, "response_format", "yaml"),
        ({"grammar": 'root ::= "a" | ( "b"'}, "grammar", "line 1"),
        ({"grammar": "root ::= root \"x\""}, "grammar", "left-recursive"),
        ({"grammar": "start ::= \"x\""}, "grammar", "no rule 'root'"),
        ({"json_schema": {"type": "strnig"}}, "json_schema.type", "unknown type"),
        ({"grammar": "root ::= \"a\"", "json_schema": {}}, None, "only one"),
    ]
    for extra, param, needle in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=5,
                                           extra_body=extra)
        body = e.value.body
        assert needle in body["message"], body
        if param:
            assert body["param"] == param, body
    # the daemon is unaffected and still serves constrained and plain requests
    r = client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=4, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")
    r = client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=10, temperature=0,
                                       extra_body={"grammar": 'root ::= "ok"'})
    assert r.choices[0].message.content == "ok"
    status, _, _ = server.request("GET", "/health")
    assert status == 200
