#!/usr/bin/env python3
"""Writes the seed corpora of the collector's fuzz targets (corpus/collector_*; not committed).

The requests come from the collector's test vectors: the valid span of collector-plugin/tests/bad_input.rs,
its wrongly typed `dei.*` attributes, and indexes from docs/wire-format.md's vectors (valid, preliminary and
malformed), in spans that carry every attribute and event that span extraction reads. Each request is
written as OTLP/JSON for `collector_decode_json` and as protobuf for `collector_decode_lite` and
`collector_attributes`. Needs the Python `opentelemetry-proto` package (with the packages of
.ci/requirements.txt). Run from fuzz/: `python3 seeds.py`.
"""

import base64
import copy
import json
import pathlib

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

TRACE = "0102030405060708090a0b0c0d0e0f10"


def s(v):
    return {"stringValue": v}


def i(v):
    return {"intValue": str(v)}


def b(v):
    return {"boolValue": v}


def arr(*vs):
    return {"arrayValue": {"values": list(vs)}}


def kv(key, value):
    return {"key": key, "value": value}


def span(span_id, attributes, parent=None, events=(), status=None, kind=3, name="x"):
    sp = {
        "traceId": TRACE,
        "spanId": span_id,
        "name": name,
        "kind": kind,
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "attributes": attributes,
    }
    if parent:
        sp["parentSpanId"] = parent
    if events:
        sp["events"] = list(events)
    if status:
        sp["status"] = status
    return sp


def request(*spans, service="svc", resource_attributes=()):
    attrs = [kv("service.name", s(service))] + list(resource_attributes)
    return {"resourceSpans": [{"resource": {"attributes": attrs}, "scopeSpans": [{"spans": list(spans)}]}]}


# tests/bad_input.rs: GOOD and the wrongly typed attributes of
# wrong_attribute_types_skip_the_spans_dei_data_or_are_rejected_in_strict_mode
GOOD = request(span("0102030405060708", [kv("dei.index", s("1.AQEBAQEBAQE1"))]))
WRONG_TYPES = request(
    span(
        "0102030405060708",
        [
            kv("dei.index", s("1.AQEBAQEBAQE1")),
            kv("dei.count", s("three")),
            kv("dei.payload.digest", s("XYZ")),
            kv("dei.ambiguous", i(1)),
            kv("dei.stack", arr(i(3))),
            kv("dei.fault", s("g99")),
        ],
    )
)

# docs/wire-format.md: valid indexes, a preliminary one, malformed ones
INDEXES = [
    "1.chSN83lZIds1",
    "1.chSN83lZIds1.a9sGaFyue1Q2",
    "1.chSN83lZIds1.Yesb-x4gAio12",
    "1.AQEBAQEBAQE1.AgICAgICAgI12",
    "1.__________84294967295",
    "2.chSN83lZIds1",
    "1.chSN83lZIds0",
    "1.chSN83lZIds01",
    "1.chSN83lZIdt1",
    "1.chSN83lZId=1",
]
PRELIMINARY = "1.vcBjbh_t67Y3~"
DIGEST = "72148df3795921db"


def full_span(span_id, index, parent=None):
    """A client span with every attribute and event that span extraction reads."""
    attributes = [
        kv("dei.index", s(index)),
        kv("dei.depth", i(index.count("."))),
        kv("dei.signature", s("B/echo")),
        kv("dei.payload", s("Hello")),
        kv("dei.payload.digest", s(DIGEST)),
        kv("dei.stack", arr(s("src/a.rs:8:17"), s("src/main.rs:3:13"))),
        kv("dei.stack.digest", s(DIGEST)),
        kv("dei.count", i(1)),
        kv("dei.instantiation", s("cinema-10")),
        kv("dei.preliminary", b(False)),
        kv("dei.ambiguous", b(False)),
        kv("dei.fault", s("g14")),
        kv("rpc.grpc.status_code", i(14)),
        kv("http.response.status_code", s("503")),
        kv("server.address", s("users")),
        kv("peer.service", s("users")),
        kv("db.system", s("postgresql")),
    ]
    events = [
        {
            "name": "dei.stream.message",
            "timeUnixNano": "3",
            "attributes": [
                kv("dei.preliminary_index", s(PRELIMINARY)),
                kv("dei.index", s("1.vcBjbh_t67Y4")),
                kv("dei.message", i(1)),
                kv("dei.fault", s("c")),
            ],
        },
        {"name": "other", "timeUnixNano": "4", "attributes": [kv("k", s("v"))]},
    ]
    status = {"code": 2, "message": "unavailable"}
    return span(span_id, attributes, parent=parent, events=events, status=status)


def requests():
    yield "good", GOOD
    yield "wrong_types", WRONG_TYPES
    for n, index in enumerate(INDEXES):
        yield f"index_{n}", request(span("0102030405060708", [kv("dei.index", s(index))]))
    yield "full", request(
        full_span("0102030405060708", "1.chSN83lZIds1"),
        full_span("1112131415161718", "1.chSN83lZIds1.a9sGaFyue1Q2", parent="0102030405060708"),
    )
    stream = request(
        span(
            "0102030405060708",
            [kv("dei.index", s(PRELIMINARY)), kv("dei.preliminary", b(True))],
            events=[
                {
                    "name": "dei.stream.message",
                    "timeUnixNano": "3",
                    "attributes": [kv("dei.preliminary_index", s(PRELIMINARY)), kv("dei.index", s("1.vcBjbh_t67Y4"))],
                }
            ],
        )
    )
    yield "stream", stream
    nested = s("leaf")
    for _ in range(33):
        nested = arr(nested)
    yield "nested", request(span("0102030405060708", [kv("dei.stack", nested), kv("x", {"kvlistValue": {"values": [kv("a", i(1))]}})]))
    yield "two_resources", {
        "resourceSpans": GOOD["resourceSpans"] + request(span("2122232425262728", []), service="other")["resourceSpans"]
    }


def to_protobuf(doc):
    """OTLP/JSON's hex ids become protobuf JSON's base64 before the standard JSON mapping."""
    doc = copy.deepcopy(doc)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in sp:
                        sp[key] = base64.b64encode(bytes.fromhex(sp[key])).decode()
    return json_format.Parse(json.dumps(doc), ExportTraceServiceRequest()).SerializeToString()


def main():
    root = pathlib.Path(__file__).resolve().parent / "corpus"
    dirs = {t: root / t for t in ("collector_decode_json", "collector_decode_lite", "collector_attributes")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    count = 0
    for name, doc in requests():
        (dirs["collector_decode_json"] / f"{name}.json").write_text(json.dumps(doc))
        pb = to_protobuf(doc)
        (dirs["collector_decode_lite"] / f"{name}.pb").write_bytes(pb)
        (dirs["collector_attributes"] / f"{name}.pb").write_bytes(pb)
        count += 1
    print(f"{count} requests in each of {', '.join(str(d) for d in dirs.values())}")


if __name__ == "__main__":
    main()
