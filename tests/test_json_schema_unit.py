"""JSON Schema documents to typed columns (spark_ext.schemas.jsonschema), without services."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from spark_ext.schemas.avro import SchemaError
from spark_ext.schemas.jsonschema import JsonReader

SCHEMA = {"type": "object", "properties": {
    "id": {"type": "integer"}, "name": {"type": ["null", "string"]},
    "tags": {"type": "array", "items": {"type": "string"}}, "inner": {"$ref": "#/definitions/In"},
    "maybe": {"oneOf": [{"type": "null"}, {"type": "number"}]}, "ok": {"type": "boolean"}},
    "definitions": {"In": {"type": "object", "properties": {"x": {"type": "number"}}}}}
HEAD = b"\0\0\0\0\1"


def test_documents_pretty_printed_or_not_with_refs_and_unknown_fields_read_into_the_readers_columns():
    r = JsonReader(json.dumps(SCHEMA))
    assert r.spark.simpleString() == ("struct<id:bigint,name:string,tags:array<string>,"
                                      "inner:struct<x:double>,maybe:double,ok:boolean>")
    docs = [{"id": 1, "name": "a\nb", "tags": ["x"], "inner": {"x": 1.5}, "ok": True, "extra": {"deep": 1}},
            {"id": 2, "maybe": 2.5}]
    values = [HEAD + json.dumps(docs[0], indent=2).encode(), HEAD + json.dumps(docs[1]).encode(), None,
              HEAD + b'{"id": 3}\r\n']
    col, bad = r.decode(pa.array(values, pa.binary()).slice(0), np.array([True, True, False, True]), 5)
    assert bad == {}
    assert col.to_pylist() == [
        {"id": 1, "name": "a\nb", "tags": ["x"], "inner": {"x": 1.5}, "maybe": None, "ok": True},
        {"id": 2, "name": None, "tags": None, "inner": None, "maybe": 2.5, "ok": None},
        None,
        {"id": 3, "name": None, "tags": None, "inner": None, "maybe": None, "ok": None}]


def test_a_document_of_the_wrong_shape_is_reported_by_row_and_the_rest_read():
    r = JsonReader(json.dumps(SCHEMA))
    values = pa.array([HEAD + b'{"id": 1}', HEAD + b'{"id": "one"}', HEAD + b'{"id": 3', HEAD + b'{"id": 4}'])
    col, bad = r.decode(values.slice(0), np.ones(4, bool), 5)
    assert sorted(bad) == [1, 2]
    assert "does not fit the reader schema" in bad[1]
    assert col.to_pylist()[0]["id"] == 1 and col.to_pylist()[3]["id"] == 4
    assert col.to_pylist()[1] is None and col.to_pylist()[2] is None


@pytest.mark.parametrize(("schema", "why"), [
    ({"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}},
     "oneOf of several types"),
    ({"type": "object", "properties": {"a": {"$ref": "#/definitions/A"}},
      "definitions": {"A": {"type": "object", "properties": {"a": {"$ref": "#/definitions/A"}}}}},
     "contains itself"),
    ({"type": "object", "properties": {"a": {"type": "object"}}}, "without 'properties'"),
    ({"type": "string"}, "not objects"),
])
def test_schemas_without_a_spark_column_type_are_refused_naming_why(schema, why):
    with pytest.raises(SchemaError, match=why):
        JsonReader(json.dumps(schema))


@pytest.mark.parametrize(("docs", "want_bad"), [
    ([b"null", b'{"id": 1}'], {0: "not a JSON object"}),  # Arrow's reader crashed on a first null
    ([b'{"id": 1}', b"", b'{"id": 3}{"id": 4}', b'{"id": 5}'], {1: "not a JSON object", 2: "several"}),
    ([b'{"id": 1}', b"   ", b'{"id": 3}'], {1: "not a JSON object"}),
    ([b'{"id": 1}', b"null", b"x"], {1: "not a JSON object", 2: "not a JSON object"}),
    ([], {}),
])
def test_values_that_are_not_one_object_are_unreadable_rows_and_the_others_stay_in_place(docs, want_bad):
    r = JsonReader(json.dumps(SCHEMA))
    col, bad = r.decode(pa.array([HEAD + d for d in docs], pa.binary()), np.ones(len(docs), bool), 5)
    assert sorted(bad) == sorted(want_bad) and all(want_bad[i] in bad[i] for i in bad)
    ids = [None if v is None else v["id"] for v in col.to_pylist()]
    assert ids == [None if i in bad else json.loads(d)["id"] for i, d in enumerate(docs)]
