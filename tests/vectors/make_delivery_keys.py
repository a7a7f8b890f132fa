#!/usr/bin/env python3
"""Writes delivery_keys.json from the documented encoding (src/worker/delivery_key.rs),
independently of the Rust code. Run it only to add vectors; existing keys must never change."""
import hashlib, json, struct, pathlib

def canonical(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

def field(b):
    return struct.pack(">Q", len(b)) + b

def key(sync_id, fingerprint, page_cursor, position, record):
    h = hashlib.sha256(b"syncward.delivery-key.v1")
    h.update(field(sync_id.encode()))
    h.update(field(fingerprint.encode()))
    h.update(field(canonical(page_cursor).encode()))
    h.update(field(struct.pack(">Q", position)))
    h.update(field(canonical(record).encode()))
    return h.hexdigest()

cases = [
    ("acme-contacts", "postgres:1f2e", None, 0, {"id": 1, "email": "ann@example.com", "first_name": "Ann"}),
    ("acme-contacts", "postgres:1f2e", {"type": "bigint", "value": "500"}, 17, {"id": 518, "email": "bo@example.com", "first_name": None}),
    ("acme-contacts", "postgres:1f2e", {"type": "bigint", "value": "500"}, 18, {"id": 519, "email": "cé@example.com", "tags": ["a", "b"], "n": {"z": 1, "a": 2.5}}),
    ("shop_sync", "shopify:abc", {"value": "eyJsYXN0X2lkIjo0fQ=="}, 249, {"defaultEmailAddress": {"emailAddress": "x@y.z"}, "id": "gid://shopify/Customer/4"}),
    ("w", "", None, 1, {}),
    ("w", "http:q", {"type": "text", "value": "line\nbreak \"quoted\""}, 2, {"s": "tab\there", "b": True, "f": False}),
]
out = [dict(sync_id=s, fingerprint=f, page_cursor=c, position=p, record=r, key=key(s, f, c, p, r)) for s, f, c, p, r in cases]
path = pathlib.Path(__file__).with_name("delivery_keys.json")
path.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
print(f"wrote {len(out)} vectors to {path}")
